"""Parallel-op identities on Graph: each rewrite keeps the graph's value (checked by the
interpreter) and leaves the expected ops."""

from __future__ import annotations

import pytest
from search_graphs import assert_same_outputs, t

from unityc.graph import Graph
from unityc.graph.simplify import fuse_collectives, simplify


def chain(*steps: tuple[str, dict[str, int]], shape: tuple[int, ...] = (8, 12)) -> Graph:
    """input x -> parallel ops -> relu (output)."""
    g = Graph()
    x = g.add_source("pcg.input", "x", t(*shape))
    for op, attrs in steps:
        (x,) = g.add(op, [x], **attrs)
    (y,) = g.add("pcg.relu", [x])
    g.outputs = (y,)
    return g


def parallel_ops(g: Graph) -> list[tuple[str, tuple]]:
    return [
        (g.nodes[n].op, g.nodes[n].attrs) for n in g.topological() if g.nodes[n].op.startswith("parallel.")
    ]


P, C = "parallel.partition", "parallel.combine"


@pytest.mark.parametrize(
    ("steps", "left"),
    [
        ([(P, {"dim": 0, "degree": 4}), (C, {"dim": 0, "degree": 4})], []),
        ([(P, {"dim": 0, "degree": 4}), (C, {"dim": 0, "degree": 2})], [(P, (("dim", 0), ("degree", 2)))]),
        (
            [(P, {"dim": 1, "degree": 2}), (P, {"dim": 0, "degree": 4}), (C, {"dim": 0, "degree": 4})],
            [(P, (("dim", 1), ("degree", 2)))],
        ),
        (
            [(P, {"dim": 1, "degree": 6}), (C, {"dim": 1, "degree": 6}), (P, {"dim": 1, "degree": 3})],
            [(P, (("dim", 1), ("degree", 3)))],
        ),
        ([(P, {"dim": 0, "degree": 2}), (P, {"dim": 0, "degree": 2})], [(P, (("dim", 0), ("degree", 4)))]),
        ([(P, {"dim": 0, "degree": 2}), (C, {"dim": 1, "degree": 1 + 1})], None),  # nothing applies
    ],
)
def test_inverse_pairs_cancel(steps: list[tuple[str, dict[str, int]]], left: list | None) -> None:
    try:
        g = chain(*steps)
    except Exception:  # combine on an unsharded dim: not a graph at all
        return
    before = g.copy()
    simplify(g, keep=[n for n in g.nodes if g.nodes[n].is_source])  # the input keeps its type
    if left is not None:
        assert parallel_ops(g) == left
    assert_same_outputs(before, g)


def test_what_is_left_of_a_pair_goes_into_the_source() -> None:
    """combine 2 after partition 4 leaves partition 2, which the input then takes on."""
    g = chain((P, {"dim": 0, "degree": 4}), (C, {"dim": 0, "degree": 2}))
    before = g.copy()
    simplify(g)
    assert parallel_ops(g) == []
    x = next(n for n in g.nodes if g.nodes[n].op == "pcg.input")
    assert g.nodes[x].types[0].shard == (2, 1)
    assert_same_outputs(before, g)


def test_sources_take_the_type_their_only_reader_wants() -> None:
    g = Graph()
    x = g.add_source("pcg.input", "x", t(8, 4))
    w = g.add_source("pcg.weight", "w", t(6, 4))
    (xs,) = g.add("parallel.partition", [x], dim=0, degree=2)
    (ws,) = g.add("parallel.replicate", [w], degree=2)
    (y,) = g.add("pcg.linear", [xs, ws, None])
    (z,) = g.add("parallel.combine", [y], dim=0, degree=2)
    g.outputs = (z,)
    before = g.copy()
    simplify(g, keep=(x[0],))
    weight = next(n for n in g.nodes.values() if n.op == "pcg.weight")
    assert weight.types[0].copy_degree == 2  # the replicate went into the weight
    assert g.op_counts().get("parallel.replicate") is None
    assert g.op_counts()["parallel.partition"] == 1  # x is kept, its partition stays
    assert_same_outputs(before, g)


def test_a_source_read_twice_keeps_its_type() -> None:
    g = Graph()
    w = g.add_source("pcg.weight", "w", t(4, 4))
    (a,) = g.add("parallel.replicate", [w], degree=2)
    (b,) = g.add("pcg.relu", [w])
    (c,) = g.add("pcg.relu", [a])
    g.outputs = (b, c)
    simplify(g)
    assert g.nodes[w[0]].types[0] == t(4, 4)  # still the same node, unsharded
    assert "parallel.replicate" in g.op_counts()


def test_equal_parallel_ops_are_one_and_a_tied_weight_is_held_in_copies() -> None:
    """BERT's tied embedding: two readers each replicate the weight; the replicates are one op,
    which then folds into the weight (held in copies, no broadcast per iteration)."""
    g = Graph()
    w = g.add_source("pcg.weight", "w", t(4, 4))
    (a,) = g.add("parallel.replicate", [w], degree=2)
    (b,) = g.add("parallel.replicate", [w], degree=2)
    (c,) = g.add("pcg.relu", [a])
    (d,) = g.add("pcg.sigmoid", [b])
    g.outputs = (c, d)
    before = g.copy()
    simplify(g)
    assert g.op_counts().get("parallel.replicate") is None
    (weight,) = [n for n in g.nodes.values() if n.op == "pcg.weight"]
    assert weight.types[0].copy_degree == 2
    assert_same_outputs(before, g)


RED, COMB = ("parallel.reduce", {"degree": 2}), ("parallel.combine", {"dim": 1, "degree": 2})
REP, PART = ("parallel.replicate", {"degree": 2}), ("parallel.partition", {"dim": 0, "degree": 2})


@pytest.mark.parametrize(
    ("first", "second", "fused"),
    [
        (RED, REP, "parallel.all_reduce"),
        (RED, PART, "parallel.reduce_scatter"),
        (COMB, REP, "parallel.all_gather"),
        (COMB, PART, "parallel.all_to_all"),
    ],
)
def test_collectives_fuse(first: tuple[str, dict], second: tuple[str, dict], fused: str) -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(8, 4))
    b = g.add_source("pcg.input", "b", t(4, 6))
    if first[0] == "parallel.reduce":  # partial sums: a k-sharded matmul
        (a,) = g.add("parallel.partition", [a], dim=1, degree=2)
        (b,) = g.add("parallel.partition", [b], dim=0, degree=2)
    else:
        (b,) = g.add("parallel.partition", [b], dim=1, degree=2)
        (a,) = g.add("parallel.replicate", [a], degree=2)
    (m,) = g.add("pcg.matmul", [a, b])
    (x,) = g.add(first[0], [m], **first[1])
    (y,) = g.add(second[0], [x], **second[1])
    (z,) = g.add("pcg.relu", [y])
    g.outputs = (z,)
    out = fuse_collectives(g)
    assert fused in out.op_counts() and first[0] not in out.op_counts()
    assert_same_outputs(g, out)
