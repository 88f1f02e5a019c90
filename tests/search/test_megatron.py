"""The `megatron` baseline is Megatron-LM's layout (Shoeybi et al. 2019), derived from the graph:
per transformer block one all-reduce after the attention and one after the MLP (the column-
parallel linears' sharding carried through the ops between them to the row-parallel one), a
vocabulary-parallel word embedding (one all-reduce of its partial sums), the output head column-
parallel into the vocabulary-parallel cross-entropy (its partial losses reduced once, the logits
never gathered), the blocks' weights sharded t ways; and the plan computes what the
unparallelized graph does."""

from __future__ import annotations

import math
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

# model -> (spec, layers, keys of the weights that must be sharded t ways, where the rest stops)
MODELS = {
    # the zoo BERT: fused attention (pcg.attention split by heads), linear MLP
    "bert": (ModelSpec("bert", "small", batch=4), 2, ("layers.",), {}),
    # GPT-2 (Conv1D projections: matmul + add, a tanh GELU spelled out): its attention is one
    # pcg.attention reading its packed QKV weight [E, 3E] as three parts (`c_attn.weight[:, 0:E]`
    # ..., each transposed), so each part is split by heads like a Linear weight
    "gpt2": (ModelSpec("hf:gpt2", "small", batch=4), 2, (".h.",), {}),
    # Llama: RMSNorm, rotary embeddings and the attention fused into one pcg.attention (split by
    # heads), SwiGLU (gate and up column-parallel, the product sharded)
    "llama": (ModelSpec(os.path.join(INPUTS, "llama_like.py:make"), "small", batch=4), 2, ("layers.",), {}),
    # grouped-query attention (4 query heads, 2 KV heads): the head split keeps whole KV groups
    "llama_gqa": (ModelSpec("hf:llama", "small", batch=4), 2, ("layers.",), {}),
}


@cache
def graph(model: str) -> Graph:
    return from_module(import_model(MODELS[model][0]))


def megatron_plans_of(model: str, d: int, t: int) -> list[PricedPlan]:
    """The layouts of data d x tensor t (one: the loss takes class-sharded logits)."""
    plans = megatron_plans(graph(model), load_machine(f"cpu:{d * t}"), Pricing(optimizer="adam"))
    return [p for p in plans if p.note.startswith(f"data {d} x tensor {t}")]


def weight_fraction(plan: PricedPlan, keys: tuple[str, ...]) -> float:
    """Per-device bytes of the weights whose key holds one of `keys`, over their whole size."""
    whole = held = 0
    for node in plan.graph.nodes.values():
        key = str(node.attr("key", ""))
        if node.op != "pcg.weight" or not any(k in key for k in keys):
            continue
        t = node.types[0]
        whole += math.prod(t.shape)
        held += math.prod(t.shape) // math.prod(t.shard)
    assert whole > 0
    return held / whole


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(("d", "t"), [(1, 2), (2, 2)])
def test_one_all_reduce_per_block_and_sharded_weights(model: str, d: int, t: int) -> None:
    _, layers, sharded, stops = MODELS[model]
    (plan,) = megatron_plans_of(model, d, t)
    per_layer = 2  # attention and MLP
    collectives = Counter(n.op for n in plan.graph.nodes.values() if n.op.startswith("parallel."))
    assert collectives["parallel.all_reduce"] == 1 + per_layer * layers, collectives
    assert collectives["parallel.reduce"] == 1, collectives  # the loss's partial sums
    assert set(collectives) == {"parallel.all_reduce", "parallel.reduce"}, collectives  # nothing gathered
    assert weight_fraction(plan, sharded) <= 1 / t + 0.05
    (loss,) = [n for n in plan.graph.nodes.values() if n.op == "pcg.cross_entropy"]
    logits = plan.graph.type_of(loss.operands[0])
    assert logits.shard == (d, t), logits  # rows data parallel, classes vocabulary parallel
    for op, n in stops.items():
        assert f"{op} x{n}" in plan.note, plan.note


@pytest.mark.parametrize("model", MODELS)
def test_megatron_plan_computes_the_same_values(model: str) -> None:
    for plan in megatron_plans_of(model, 2, 2):
        assert_same_outputs(graph(model), plan.graph)
