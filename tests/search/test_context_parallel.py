"""Context parallelism in the search (issue 41): the Megatron layout of a `Layout(context=c)`
shards the token stream on the sequence from the lookup to the loss, splits every attention
over it by the ring, holds the weights in d x c copies, and computes what the unparallelized
graph does (the reference interpreter); `megatron-lm` takes a context degree only where it is
given or nothing fits without one; the degrees tried split the sequence and the devices."""

from __future__ import annotations

import sys
from pathlib import Path

from search_graphs import assert_same_outputs

from unityc.dialects.pcg.attention import AttentionOp
from unityc.machine.presets import preset
from unityc.search.layout import Layout
from unityc.search.megatron_lm import context_degrees, megatron_lm_plan
from unityc.search.plans import Pricing
from unityc.search.strategies import megatron_layouts

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from transformer_shapes import transformer


def test_context_layout_splits_the_sequence_and_computes_the_graph() -> None:
    graph = transformer(2, 32, 4, 64, 64, 16, 1, kv_heads=2, gated=True)  # one sample: a micro-batch's
    plan = megatron_layouts(graph, Layout(context=2, tensor=2, sequence=True))[0].graph
    attentions = [n for n in plan.nodes.values() if n.op == "pcg.attention"]
    assert len(attentions) == 2
    for node in attentions:
        types = [None if r is None else plan.type_of(r) for r in node.operands]
        assert AttentionOp.context_split(node.attrs, types) == ("ring", 2)
    weights = [n.types[0] for n in plan.nodes.values() if n.op == "pcg.weight"]
    assert all(t.copy_degree % 2 == 0 for t in weights), "every weight copied over the context group"
    norms = [n.types[0] for n in plan.nodes.values() if n.op == "pcg.layer_norm"]
    assert norms and all(t.shard[1] == 4 for t in norms), "norms on c x t sequence shards"
    loss = plan.nodes[plan.outputs[0][0]]
    assert all(plan.type_of(r).copy_degree < 4 for r in loss.operand_refs()), "no gathered logits"
    assert_same_outputs(graph, plan)


def test_megatron_lm_takes_context_where_asked_or_needed() -> None:
    graph = transformer(2, 64, 4, 128, 64, 2048, 1)
    machine, pricing = preset("cpu:4"), Pricing(optimizer="adam")
    assert context_degrees(graph, machine, 1) == [2, 4] and context_degrees(graph, machine, 4) == []
    asked = megatron_lm_plan(graph, machine, pricing, tensor=1, context=4)
    assert "x context 4" in asked.note and asked.estimate.fits
    chosen = megatron_lm_plan(graph, machine, pricing)
    assert chosen.estimate.fits and "context" not in chosen.note  # 2K tokens: no user sets it
