"""Megatron's sequence parallelism (Korthikanti et al. 2022) in the Megatron layout
(`megatron_layouts` of a `Layout(sequence=True)`): in each tensor-parallel group the norms, dropout and
residual adds run sharded on the sequence (dim 1), each all-reduce after a row-parallel linear
becomes a reduce-scatter onto the sequence and each column-parallel input an all-gather from it.
The plan computes what the unparallelized graph does (the reference interpreter), moves the
all-reduce's volume (ring: reduce-scatter + all-gather = all-reduce), and holds those ops'
activations 1/t as large."""

from __future__ import annotations

import os
from collections import Counter
from functools import cache

import pytest
from search_graphs import INPUTS, assert_same_outputs

from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.search.plans import PricedPlan, Pricing, megatron_plans

pytest.importorskip("transformers")

LAYERS = 2
MODELS = {
    "bert": ModelSpec("bert", "small", batch=4),  # LayerNorm, a fused attention, a GELU MLP
    "llama": ModelSpec(os.path.join(INPUTS, "llama_like.py:make"), "small", batch=4),  # RMSNorm spelled out
    "llama_gqa": ModelSpec("hf:llama", "small", batch=4),  # grouped-query attention, SwiGLU
}
ODD_VOCABULARY = "gpt2_odd_vocabulary"
"""GPT-2 with 51 tokens, which no tensor degree divides and which padding to 52 would grow by 2 %
(more than `vocabulary.MOST`): unpadded, as GPT-3's 50,257 were before the padding, its
embedding and head run whole in the tensor group, its Conv1D projections on the (batch,
sequence) tokens; a sequence of 1,024, as many as its learned positions (GPT-3's 2,048 too)."""
PADDED_VOCABULARY = "gpt2_padded_vocabulary"
"""The same with 251 tokens, padded to 252 (`search/vocabulary.py`): table and head by rows."""
OTHER_MODELS = {
    ODD_VOCABULARY: ModelSpec("hf:gpt2", "small", batch=2, overrides=(("vocab", "51"), ("seq", "1024"))),
    PADDED_VOCABULARY: ModelSpec("hf:gpt2", "small", batch=2, overrides=(("vocab", "251"), ("seq", "1024"))),
}
RING = {"parallel.all_reduce": 2.0, "parallel.reduce_scatter": 1.0, "parallel.all_gather": 1.0}
"""Bytes a ring collective moves per device, in units of (n-1)/n of its buffer."""


@cache
def graph(model: str) -> Graph:
    return from_module(import_model({**MODELS, **OTHER_MODELS}[model]))


@cache
def plans(model: str, d: int, t: int) -> tuple[PricedPlan, PricedPlan]:
    """The Megatron plan of data d x tensor t without and with sequence parallelism."""
    found = megatron_plans(
        graph(model), load_machine(f"cpu:{d * t}"), Pricing(optimizer="adam"), (False, True)
    )
    mine = [p for p in found if p.note.startswith(f"data {d} x tensor {t}")]
    plain = [p for p in mine if "sequence parallel" not in p.note]
    along = [p for p in mine if "sequence parallel" in p.note]
    assert len(plain) == len(along) == 1, [p.note for p in found]
    return plain[0], along[0]


def collectives(plan: PricedPlan) -> Counter[str]:
    return Counter(n.op for n in plan.graph.nodes.values() if n.op in RING)


def ring_volume(plan: PricedPlan) -> float:
    """Per-device ring bytes of the activation collectives, forward (backward runs the duals)."""
    return sum(RING[r.kind] * r.comm_bytes * r.collectives for r in plan.estimate.rows if r.kind in RING)


def activation_bytes(plan: PricedPlan) -> float:
    """Saved activations over all devices."""
    return sum(
        r.memory for r in plan.estimate.rows if r.kind not in ("pcg.weight",) and r.kind.startswith("pcg.")
    )


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("d", "t"), [(2, 2)])
def test_each_all_reduce_becomes_a_reduce_scatter_and_an_all_gather(model: str, d: int, t: int) -> None:
    plain, along = plans(model, d, t)
    before, after = collectives(plain), collectives(along)
    blocks = 1 + 2 * LAYERS  # the embedding's partial sums, then the attention and the MLP of each layer
    assert before == {"parallel.all_reduce": blocks}, before
    assert after == {"parallel.reduce_scatter": blocks, "parallel.all_gather": blocks}, after
    assert ring_volume(along) == pytest.approx(ring_volume(plain))
    assert activation_bytes(along) < activation_bytes(plain)
    norms = [n for n in along.graph.nodes.values() if n.op in ("pcg.layer_norm", "pcg.add", "pcg.dropout")]
    assert norms and all(n.types[0].shard[1] == t for n in norms if n.types[0].rank == 3), [
        str(n.types[0]) for n in norms
    ]


@pytest.mark.parametrize("model", MODELS)
def test_sequence_parallel_plan_computes_the_same_values(model: str) -> None:
    assert_same_outputs(graph(model), plans(model, 2, 2)[1].graph)


def test_an_odd_vocabulary_keeps_the_residual_stream_on_the_sequence() -> None:
    """The embedding's column-parallel start breaks at the position add and runs replicated;
    the pass that broke it saw its region's whole activations beside the sequence-sharded ones
    and must not make those ops whole for good; nor may the position table, as many rows as the
    sequence, be sharded on its rows (the lookup would give partial sums beside the token
    embedding's shard). Either made every layer run whole in the group, all-reducing (at
    GPT-3-175B 64 sbh/t bytes a layer of fp32 norm inputs kept). Every
    row-parallel output is reduce-scattered onto the sequence, every column-parallel input and
    the head's all-gathered from it, and the plan computes what the graph does."""
    _, along = plans(ODD_VOCABULARY, 2, 2)
    found = collectives(along)
    assert found == {"parallel.reduce_scatter": 2 * LAYERS, "parallel.all_gather": 2 * LAYERS + 1}, found
    norms = [n for n in along.graph.nodes.values() if n.op in ("pcg.layer_norm", "pcg.dropout")]
    assert norms and all(n.types[0].shard[1] == 2 for n in norms if n.types[0].rank == 3)
    assert_same_outputs(graph(ODD_VOCABULARY), along.graph)


def test_a_padded_vocabulary_splits_table_and_head_with_the_sequence_parallel() -> None:
    """Padded to 252 rows, the table is looked up vocabulary-parallel (its partial sums
    reduce-scattered onto the sequence) and the head kept column-parallel into the
    vocabulary-parallel cross-entropy (the returned logits gathered); the plan computes what the
    unpadded graph does."""
    found = megatron_plans(
        graph(PADDED_VOCABULARY), load_machine("cpu:4"), Pricing(optimizer="adam"), (True,)
    )
    (along,) = [p for p in found if p.note.startswith("data 2 x tensor 2") and "gathered" in p.note]
    shards = {n.attr("key"): n.types[0].shard for n in along.graph.nodes.values() if n.op == "pcg.weight"}
    assert (
        shards["model.transformer.wte.weight[0:251+1, :]"]
        == shards["model.lm_head.weight[0:251+1, :]"]
        == (2, 1)
    )
    assert_same_outputs(graph(PADDED_VOCABULARY), along.graph)
