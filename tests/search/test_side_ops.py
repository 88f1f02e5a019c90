"""Side ops (computed from inputs and constants alone: Llama's attention mask, built from the
padding mask and read by every layer) count as sources for graph splitting and the mapping DP,
and the searched plan computes them once, with one node per constant."""

from __future__ import annotations

from functools import cache

from search_graphs import assert_same_outputs, machine

from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module, side_ops
from unityc.passes.unity_search import load_rules
from unityc.search.split import cut_points
from unityc.search.unity import UnityOptions, unity_search


@cache
def llama() -> Graph:
    """hf:llama (grouped-query attention) with 3 layers and an attention mask over padding."""
    return from_module(import_model(ModelSpec("hf:llama", "small", overrides=(("layers", "3"),))))


def test_side_ops_are_the_weightless_ops() -> None:
    g = llama()
    side = side_ops(g)
    readers_of_weights = {
        nid for nid, n in g.nodes.items() if any(g.nodes[r[0]].op == "pcg.weight" for r in n.operand_refs())
    }
    assert side and not side & readers_of_weights
    mask = {nid for nid in side if g.nodes[nid].op == "pcg.cast"}
    assert mask  # the padding mask's casts
    attention = [n for n in g.nodes.values() if n.op == "pcg.attention"]
    assert all(any(r[0] in side for r in n.operand_refs()) for n in attention)  # every layer reads it


def test_the_mask_no_longer_joins_every_layer() -> None:
    g = llama()
    order = g.topological()
    last = max(order.index(nid) for nid, n in g.nodes.items() if n.op == "pcg.attention")

    def before_last_layer(cuts: list[int]) -> int:
        return sum(order.index(c) < last for c in cuts)

    assert before_last_layer(cut_points(g)) == 0  # the mask's edges to every layer cross all ops
    assert before_last_layer(cut_points(g, side_ops(g))) >= 2  # between layers, at least


def test_searched_plan_computes_side_ops_and_constants_once() -> None:
    g = llama()
    options = UnityOptions(budget=2, split_size=4, whole_graph=False, pipelines=False)
    result = unity_search(g, machine("slow"), load_rules(""), options)
    assert result.source == "search" and result.report.segments > 3
    plan = result.plan
    for op in ("pcg.constant", "pcg.cast", "pcg.input"):
        assert sum(n.op == op for n in plan.nodes.values()) == sum(n.op == op for n in g.nodes.values()), op
    assert any(n.op.startswith("parallel.") for n in plan.nodes.values())
    assert_same_outputs(g, plan)
