"""The Megatron layout splits by heads what an attention reads per head when it is computed
from weights (`search.strategies._head_chains`): a per-head mask (T5's relative position bias)
and the views of a packed projection weight (GPT-NeoX's interleaved query_key_value). Where such
a value is also read by anything else, it stays whole (no collective can drop a replicated
tensor's copies, so the attention then runs unsplit) and the plan is still exact: the
interpreter runs both plans against the unparallelized graph."""

from __future__ import annotations

from search_graphs import assert_same_outputs, t
from xdsl.dialects.builtin import i64

from unityc.graph import Graph, Ref
from unityc.search.strategies import _head_chains, megatron_graph

B, S, E, H, D = 2, 4, 8, 4, 2


def attention_graph(mask_read_elsewhere: bool = False, weight_read_elsewhere: bool = False) -> Graph:
    """x -> attention (a per-head mask [1, H, S, S] reshaped from a weight; wq, wk, wv views of
    one packed weight [H·3·D, E], head by head) -> linear -> cross-entropy; with the flags, the
    mask or the packed weight's [H, 3·D, E] view is also a graph output."""
    g = Graph()
    x = g.add_source("pcg.input", "x", t(B, S, E))
    labels = g.add_source("pcg.input", "labels", t(B * S, dtype=i64))
    table = g.add_source("pcg.weight", "bias_table", t(H, S, S))
    (mask,) = g.add("pcg.reshape", [table], shape=[1, H, S, S])
    packed = g.add_source("pcg.weight", "qkv", t(H * 3 * D, E))
    (grouped,) = g.add("pcg.reshape", [packed], shape=[H, 3 * D, E])
    parts = g.add("pcg.split", [grouped], dim=1, sizes=[D, D, D])
    wq, wk, wv = (g.add("pcg.reshape", [p], shape=[H * D, E])[0] for p in parts)
    wo = g.add_source("pcg.weight", "wo", t(E, E))
    biases: list[Ref | None] = [None] * 4  # bq, bk, bv, bo
    operands = [x, x, x, wq, wk, wv, wo, *biases, mask, None, None, None, None]
    (y,) = g.add("pcg.attention", operands, heads=H)
    head = g.add_source("pcg.weight", "head", t(E, E))
    (logits,) = g.add("pcg.linear", [y, head, None])
    (flat,) = g.add("pcg.reshape", [logits], shape=[B * S, E])
    (loss,) = g.add("pcg.cross_entropy", [flat, labels], reduction="mean")
    g.outputs = (loss,)
    if mask_read_elsewhere:
        g.outputs += g.add("pcg.reduce", [mask], kind="sum", dims=[1], keepdim=False)
    if weight_read_elsewhere:
        g.outputs += g.add("pcg.reduce", [grouped], kind="sum", dims=[1], keepdim=False)
    return g


def _attention_types(plan: Graph) -> tuple:
    (node,) = [n for n in plan.nodes.values() if n.op == "pcg.attention"]
    return tuple(None if r is None else plan.type_of(r) for r in node.operands)


def _weight(plan: Graph, key: str):  # type: ignore[no-untyped-def]
    (node,) = [n for n in plan.nodes.values() if n.op == "pcg.weight" and n.attr("key") == key]
    return node.types[0]


def test_mask_and_packed_weight_views_split_by_heads() -> None:
    graph = attention_graph()
    chains = {graph.nodes[nid].op for nid in _head_chains(graph)}
    assert chains == {"pcg.reshape", "pcg.split"}
    plan = megatron_graph(graph, 1, 2)
    types = _attention_types(plan)
    assert [types[i].shard[0] for i in (3, 4, 5)] == [2, 2, 2]  # wq, wk, wv by heads
    assert types[11].shard == (1, 2, 1, 1) and types[11].copy_degree == 1  # the mask's heads
    assert _weight(plan, "qkv").shard == (2, 1)  # the packed rows, head by head
    assert _weight(plan, "bias_table").shard == (2, 1, 1)
    assert_same_outputs(graph, plan)


def test_mask_read_elsewhere_stays_whole_and_exact() -> None:
    """The mask is also reduced into a second output: it and what computes it stay out of the
    chains (whole on both ranks), the attention runs unsplit, and the plan is exact; the packed
    weight's views, read by nothing else, are still split by heads."""
    graph = attention_graph(mask_read_elsewhere=True)
    table = next(nid for nid, n in graph.nodes.items() if n.attr("key") == "bias_table")
    assert not any(graph.nodes[nid].operands[0] == (table, 0) for nid in _head_chains(graph))
    plan = megatron_graph(graph, 1, 2)
    types = _attention_types(plan)
    assert types[11].shard == (1, 1, 1, 1) and types[11].copy_degree == 2  # whole on both ranks
    assert _weight(plan, "bias_table").shard == (1, 1, 1)
    assert_same_outputs(graph, plan)


def test_packed_weight_view_read_elsewhere_stays_whole_and_exact() -> None:
    """The packed weight's [H, 3·D, E] view is also reduced into an output: it stays out of the
    chains, so the packed weight is loaded whole and the attention runs unsplit (its q/k/v
    views cannot drop copies); the mask alone is still split by heads; the plan is exact."""
    graph = attention_graph(weight_read_elsewhere=True)
    packed = next(nid for nid, n in graph.nodes.items() if n.attr("key") == "qkv")
    assert not any(graph.nodes[nid].operands[0] == (packed, 0) for nid in _head_chains(graph))
    plan = megatron_graph(graph, 1, 2)
    assert _weight(plan, "qkv").shard == (1, 1)
    types = _attention_types(plan)
    assert [types[i].copy_degree for i in (3, 4, 5)] == [2, 2, 2]
    assert _weight(plan, "bias_table").shard == (2, 1, 1)
    assert_same_outputs(graph, plan)
