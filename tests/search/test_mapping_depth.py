"""The mapping DP on deep graphs: a chain whose nested series-parallel decomposition passes
`MAX_DEPTH` is decomposed flat (no greedy piece), while a shallow one keeps the nested
decomposition and its side-by-side choices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from search_graphs import machine, t
from xdsl.dialects.builtin import i64

from unityc.cost.estimate import roofline_model
from unityc.graph import Graph
from unityc.search import mapping
from unityc.search.mapping import Mapper
from unityc.search.opcost import Problem
from unityc.search.views import Block, View


def transposed_chain(layers: int, batch: int = 8, width: int = 8) -> Graph:
    """x -> (linear of a transposed weight, relu)* -> cross-entropy: each weight's transpose
    is an op of weights alone, which nests the decomposition about two levels a layer."""
    g = Graph()
    x = g.add_source("pcg.input", "x", t(batch, width))
    labels = g.add_source("pcg.input", "labels", t(batch, dtype=i64))
    for i in range(layers):
        w = g.add_source("pcg.weight", f"w{i}", t(width, width))
        (wt,) = g.add("pcg.transpose", [w], perm=(1, 0))
        (x,) = g.add("pcg.linear", [x, wt, None])
        (x,) = g.add("pcg.relu", [x])
    (loss,) = g.add("pcg.cross_entropy", [x, labels], reduction="mean")
    g.outputs = (loss,)
    return g


class _Recording(Mapper):
    """Records the deepest recursion of each decomposition and the greedy pieces mapped."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.deepest = {False: 0, True: 0}
        self.greedy = 0

    def _solve_split(self, p: Problem, ops: frozenset[int], ext: Mapping[int, View], block: Block) -> Any:
        self.deepest[self._flat] = max(self.deepest[self._flat], self._depth)
        return super()._solve_split(p, ops, ext, block)

    def _greedy(self, p: Problem, ops: frozenset[int], ext: Mapping[int, View], block: Block) -> Any:
        self.greedy += 1
        return super()._greedy(p, ops, ext, block)


def test_a_deep_transposed_chain_maps_flat_with_no_greedy_piece() -> None:
    mapper = _Recording(machine("cpu:4"), roofline_model())
    mapped = mapper.map(transposed_chain(60))
    assert mapped.feasible
    assert mapper.deepest[False] >= mapping.MAX_DEPTH - 1  # the nested attempt passed it
    assert 0 < mapper.deepest[True] < 5  # flat: one chain of the layers
    assert mapper.greedy == 0


def test_a_shallow_chain_keeps_the_nested_decomposition() -> None:
    mapper = _Recording(machine("cpu:4"), roofline_model())
    assert mapper.map(transposed_chain(20)).feasible
    assert mapper.deepest[True] == 0 and mapper.greedy == 0  # never decomposed flat


def test_a_shallow_chain_keeps_its_side_by_side_transpose(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 2 slow devices the second layer's transpose runs beside the first layer (a parallel
    component of the nested decomposition); flat, it joins its linear's piece and cannot."""
    graph = transposed_chain(2)
    transposes = [n for n, node in graph.nodes.items() if node.op == "pcg.transpose"]
    nested = Mapper(machine("slow"), roofline_model()).map(graph)
    assert [nested.views[n].start for n in transposes] == [0, 1]
    monkeypatch.setattr(mapping, "MAX_DEPTH", 1)  # as if the graph were deep: flat
    flat = _Recording(machine("slow"), roofline_model())
    mapped = flat.map(graph)
    assert flat.deepest[True] > 0 and flat.greedy == 0
    assert [mapped.views[n].start for n in transposes] == [0, 0]
    assert nested.objective < mapped.objective


def summed_branches(count: int, batch: int = 8, width: int = 8) -> Graph:
    """`count` linears of one input summed by a chain of adds: nested deep with no op of
    weights alone, so flat is no shallower."""
    g = Graph()
    x = g.add_source("pcg.input", "x", t(batch, width))
    labels = g.add_source("pcg.input", "labels", t(batch, dtype=i64))
    total = None
    for i in range(count):
        (b,) = g.add("pcg.linear", [x, g.add_source("pcg.weight", f"w{i}", t(width, width)), None])
        total = b if total is None else g.add("pcg.add", [total, b])[0]
    assert total is not None
    (loss,) = g.add("pcg.cross_entropy", [total, labels], reduction="mean")
    g.outputs = (loss,)
    return g


def test_a_graph_deep_even_flat_maps_its_deepest_pieces_greedily() -> None:
    mapper = _Recording(machine("cpu:4"), roofline_model())
    assert mapper.map(summed_branches(120)).feasible
    assert mapper.deepest[True] >= mapping.MAX_DEPTH - 1 and mapper.greedy > 0
