"""The parallel ops' identities and fusions (dialects/identities.py), the rules both the search's
Graph and the xDSL canonicalization / fuse-collectives apply."""

from __future__ import annotations

from unityc.dialects.identities import Identity, Kind, fusion, identity

P, C, R, S = "parallel.partition", "parallel.combine", "parallel.replicate", "parallel.reduce"


def test_inverse_pairs_cancel_or_leave_the_remaining_degree() -> None:
    assert identity(C, {"dim": 0, "degree": 2}, P, {"dim": 0, "degree": 2}) == Identity(Kind.CANCEL)
    assert identity(C, {"dim": 0, "degree": 2}, P, {"dim": 0, "degree": 4}) == Identity(
        Kind.SPLIT, P, {"dim": 0, "degree": 2}
    )
    assert identity(P, {"dim": 1, "degree": 6}, C, {"dim": 1, "degree": 2}) == Identity(
        Kind.SPLIT, P, {"dim": 1, "degree": 3}
    )
    assert identity(C, {"dim": 0, "degree": 2}, P, {"dim": 1, "degree": 2}) is None  # other dims
    assert identity(C, {"dim": 0, "degree": 2}, P, {"dim": 0, "degree": 3}) is None  # no divisor


def test_ops_of_one_kind_merge() -> None:
    assert identity(R, {"degree": 2}, R, {"degree": 3}) == Identity(Kind.MERGE, R, {"degree": 6})
    assert identity(S, {"degree": 2}, S, {"degree": 2}) == Identity(Kind.MERGE, S, {"degree": 4})


def test_an_op_of_another_dialect_or_without_degree_has_no_identity() -> None:
    assert identity(C, {"dim": 0, "degree": 2}, "pcg.relu", {}) is None
    assert identity(R, {"degree": 2}, "parallel.sum_concat", {"dim": 0}) is None


def test_fusions() -> None:
    assert fusion(S, {"degree": 2}, R, {"degree": 2}) == ("parallel.all_reduce", {"degree": 2})
    assert fusion(S, {"degree": 2}, P, {"dim": 1, "degree": 2}) == (
        "parallel.reduce_scatter",
        {"dim": 1, "degree": 2},
    )
    assert fusion(C, {"dim": 0, "degree": 2}, P, {"dim": 1, "degree": 2}) == (
        "parallel.all_to_all",
        {"src": 0, "dst": 1, "degree": 2},
    )
    assert fusion(C, {"dim": 0, "degree": 2}, P, {"dim": 0, "degree": 2}) is None  # same dim
    assert fusion(S, {"degree": 2}, R, {"degree": 4}) is None  # other degree
    assert fusion("pcg.relu", {}, R, {"degree": 2}) is None
