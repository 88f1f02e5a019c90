"""Graph splitting: cut points, cut choice, segment graphs and boundary conversions."""

from __future__ import annotations

from search_graphs import branches, mlp, rules, t

from unityc.graph import Graph
from unityc.search.split import (
    BOUNDARY_KEY,
    blocked_matches,
    choose_cuts,
    cut_points,
    partitionings,
    segment_graph,
    segments,
    shared_sources,
    with_boundary,
)


def ops_of(g: Graph, cuts: list[int]) -> list[str]:
    return [g.nodes[c].op for c in cuts]


def test_every_op_of_a_chain_but_the_loss_is_a_cut_point() -> None:
    g = mlp(layers=3)  # linear relu linear relu linear cross_entropy
    assert ops_of(g, cut_points(g)) == ["pcg.linear", "pcg.relu", "pcg.linear", "pcg.relu", "pcg.linear"]


def test_no_cut_inside_parallel_branches() -> None:
    g = branches()  # linear -> relu, and linear, joined by add
    # the one-op branch reads only sources: it may go with the segment after a cut
    assert ops_of(g, cut_points(g)) == ["pcg.linear", "pcg.relu", "pcg.add"]
    x = next(n for n in g.nodes if g.nodes[n].attr("key") == "x")
    (longer,) = g.add("pcg.relu", [(x, 0)])
    for _ in range(3):  # a branch of 4 ops is a parallel branch: nothing before the join is a cut
        (longer,) = g.add("pcg.relu", [longer])
    add = next(n for n in g.nodes if g.nodes[n].op == "pcg.add")
    (joined,) = g.add("pcg.add", [(add, 0), longer])
    loss = g.nodes[g.outputs[0][0]]
    g.nodes[g.outputs[0][0]] = type(loss)(loss.op, (joined, loss.operands[1]), loss.attrs, loss.types)
    assert ops_of(g, cut_points(g)) == ["pcg.add"]


def test_cuts_are_spaced_and_avoid_blocking_matches() -> None:
    g = mlp(layers=6)
    cuts = cut_points(g)
    blocked = blocked_matches(g, rules(), cuts)
    assert set(blocked) == set(cuts)
    chosen = choose_cuts(g, cuts, 4, blocked)
    sizes = [len(s) for s in segments(g, chosen)]
    assert sum(sizes) == 12 and all(2 <= n <= 6 for n in sizes)


def test_segment_graph_reads_its_boundary_through_combines() -> None:
    g = mlp(layers=2)
    parts = segments(g, [cut_points(g)[1]])  # after the first relu
    boundary = (parts[0][-1], 0)
    sharded = partitionings(g.type_of(boundary), (2, 4), 4)[2]  # dim 0 by 4
    seg = segment_graph(g, parts[1], boundary, sharded, shared_sources(g, parts), last=True)
    source = seg.graph.nodes[seg.boundary]
    assert source.attr("key") == BOUNDARY_KEY and source.types[0] == sharded
    assert seg.boundary in seg.keep
    assert seg.graph.op_counts()["parallel.combine"] == 1
    assert set(seg.keys.values()) == {"w1", "labels"}  # weights renamed by position


def test_partitionings_shard_one_dim_by_an_offered_degree() -> None:
    options = partitionings(t(8, 6), (2, 4), devices=4)
    assert [p.shard for p in options] == [(1, 1), (2, 1), (4, 1), (1, 2)]


def test_with_boundary_reduces_then_reshards() -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(8, 4))
    b = g.add_source("pcg.input", "b", t(4, 8))
    (a2,) = g.add("parallel.partition", [a], dim=1, degree=2)
    (b2,) = g.add("parallel.partition", [b], dim=0, degree=2)
    (m,) = g.add("pcg.matmul", [a2, b2])  # partial sums
    g.outputs = (m,)
    target = partitionings(t(8, 8), (2,), 2)[2]  # dim 1 by 2
    converted, last = with_boundary(g, target)  # type: ignore[misc]
    assert converted.type_of(converted.outputs[0]) == target
    assert converted.outputs[0][0] == last
    assert [converted.nodes[n].op for n in converted.topological()][-2:] == [
        "parallel.reduce",
        "parallel.partition",
    ]
    (copied,) = g.add("parallel.replicate", [m], degree=2)
    g.outputs = (copied,)
    assert with_boundary(g, target) is None  # copies cannot be dropped
