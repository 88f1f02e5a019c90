"""The machine-mapping DP: optimal over its view sets (checked against brute force), fixed views
kept, side-by-side branches never worse than serial, and its views valid for the estimate."""

from __future__ import annotations

import itertools

import pytest
from search_graphs import branches, machine, mlp, t

from unityc.cost.estimate import estimate_graph, roofline_model
from unityc.graph import Graph
from unityc.graph.simplify import fuse_collectives, reduce_loss, simplify
from unityc.search.mapping import Mapper, MappingOptions
from unityc.search.strategies import data_parallel_graph, megatron_graph
from unityc.search.views import Block, View, task_degrees, to_attr, views_in


def plans() -> list[tuple[str, Graph]]:
    return [
        ("mlp", simplify(mlp(layers=3))),
        ("mlp dp4", fuse_collectives(simplify(data_parallel_graph(mlp(layers=2), 4)))),
        ("mlp 2x2", fuse_collectives(simplify(megatron_graph(mlp(layers=3), 2, 2)))),
        ("branches dp2", fuse_collectives(simplify(data_parallel_graph(branches(), 2)))),
        ("branches 1x2", fuse_collectives(simplify(megatron_graph(branches(), 1, 2)))),
    ]


def brute_force(mapper: Mapper, graph: Graph) -> float:
    ops = [n for n in graph.topological() if not graph.nodes[n].is_source]
    choices = [
        views_in(task_degrees(graph.nodes[n].types[0]), Block(0, mapper.machine.num_devices), 2) for n in ops
    ]
    best = float("inf")
    for combo in itertools.product(*choices):
        best = min(best, mapper.cost_of(graph, dict(zip(ops, combo, strict=True))).time)
    return best


@pytest.mark.parametrize("name", ["two-nodes", "cpu:4"])
def test_dp_equals_brute_force(name: str) -> None:
    m = machine("slow") if name == "two-nodes" else machine(name)
    mapper = Mapper(m, roofline_model(), options=MappingOptions(side_by_side=False))
    for label, graph in plans():
        mapped = mapper.map(graph)
        assert mapped.feasible, label
        assert mapped.cost.time == pytest.approx(brute_force(mapper, graph), rel=1e-12), label
        assert mapper.cost_of(graph, mapped.views).time == pytest.approx(mapped.cost.time, rel=1e-12), label


def test_side_by_side_is_never_worse_than_serial() -> None:
    m = machine("slow")
    serial = Mapper(m, roofline_model(), options=MappingOptions(side_by_side=False))
    both = Mapper(m, roofline_model())
    for label, graph in plans():
        assert both.map(graph).cost.time <= serial.map(graph).cost.time * (1 + 1e-12), label
    g = simplify(branches())  # two independent linears on slow devices: side by side pays
    assert both.map(g).cost.time < serial.map(g).cost.time


def test_fixed_views_are_kept_and_priced() -> None:
    m = machine("cpu:4")
    mapper = Mapper(m, roofline_model())
    graph = fuse_collectives(reduce_loss(simplify(data_parallel_graph(mlp(), 4))))
    free = mapper.map(graph)
    last = graph.outputs[0][0]  # the reduce of the loss's partial sums: one task
    pinned = View(3, ())
    fixed = mapper.map(graph, {last: pinned})
    assert fixed.views[last] == pinned
    assert fixed.cost.time >= free.cost.time


def test_views_are_valid_and_cover_every_node() -> None:
    m = machine("slow")
    mapper = Mapper(m, roofline_model())
    for label, graph in plans():
        mapped = mapper.map(graph)
        assert set(mapped.views) == set(graph.nodes), label
        for nid, view in mapped.views.items():
            graph.with_view(nid, to_attr(view, m))
        estimate = estimate_graph(graph, m)  # raises if a view does not fit its op
        assert estimate.iteration_s > 0


def test_too_many_tasks_is_infeasible() -> None:
    mapper = Mapper(machine("cpu:2"), roofline_model())
    assert not mapper.map(simplify(data_parallel_graph(mlp(), 4))).feasible


def test_sum_concat_is_priced_by_where_its_pieces_sit() -> None:
    """Add as sum_concat + reduce: nothing moves when both addends sit where the partial sums
    do; the DP places them so, and the estimate agrees that only the reduce communicates."""
    g = Graph()
    a = g.add_source("pcg.input", "a", t(64, 64))
    b = g.add_source("pcg.input", "b", t(64, 64))
    (ra,) = g.add("pcg.relu", [a])
    (rb,) = g.add("pcg.relu", [b])
    (s,) = g.add("parallel.sum_concat", [ra, rb])
    (total,) = g.add("parallel.reduce", [s], degree=2)
    (y,) = g.add("pcg.relu", [total])
    g.outputs = (y,)
    m = machine("slow")
    mapped = Mapper(m, roofline_model()).map(g)
    for nid, view in mapped.views.items():
        g.with_view(nid, to_attr(view, m))
    estimate = estimate_graph(g, m)
    moved = {row.kind: row.collectives for row in estimate.rows if row.collectives}
    assert moved == {"parallel.reduce": 1}
