"""Communication cost of each collective pattern on the two-node spec, computed by hand.

Devices 0, 1 are node 0 and 2, 3 node 1. Within a node: beta = 100 GB/s, alpha = 1 us;
between nodes: beta = 10 GB/s, alpha = 5 us.
"""

from __future__ import annotations

import pytest
from cost_graphs import two_nodes

from unityc.cost.communication import (
    DUAL,
    PARALLEL_PATTERN,
    PATTERNS,
    Group,
    collective_floor,
    collective_time,
    parallel_groups,
    price_group,
)

MB = 1e6
US = 1e-6

# (pattern, bytes, devices, seconds by hand)
CASES = [
    # alpha + S/beta
    ("p2p", MB, (0, 1), 1 * US + 10 * US),
    ("p2p", MB, (1, 2), 5 * US + 100 * US),
    # (n-1) alpha + S/beta, S = bytes leaving the root: 3 * 5 us + 1.5 MB / 10 GB/s
    ("scatter", 1.5 * MB, (0, 1, 2, 3), 15 * US + 150 * US),
    ("gather", 0.5 * MB, (2, 3), 1 * US + 5 * US),
    # broadcast over 3 devices across nodes: chain 2*5 us + 100 us = 110 us beats the tree
    # ceil(log2 3) * (5 us + 100 us) = 210 us
    ("broadcast", MB, (0, 1, 2), 10 * US + 100 * US),
    ("reduce", MB, (0, 2), 5 * US + 100 * US),
    # tiny buffer to 4 devices: tree 2 * (5 + 0.0001) us beats chain 3 * 5 us
    ("broadcast", 1, (0, 1, 2, 3), 2 * (5 * US + 1e-10)),
    # ring all-reduce over 4 across nodes: 2*3/4 * 1 MB / 10 GB/s + 2*3*5 us = 150 + 30 us
    # (tree: 2 * (2*5 us + 100 us) = 220 us)
    ("all_reduce", MB, (0, 1, 2, 3), 150 * US + 30 * US),
    # ring over 2 within a node: 1 MB / 100 GB/s + 2 us = 12 us
    ("all_reduce", MB, (0, 1), 12 * US),
    # small buffer over 4: tree 2 * (2*5 us + 100 B / 10 GB/s) = 20.02 us beats ring 30.015 us
    ("all_reduce", 100, (0, 1, 2, 3), 2 * (10 * US + 0.01 * US)),
    # (n-1)/n * S/beta + (n-1) alpha: 3/4 * 4 MB / 10 GB/s + 15 us
    ("reduce_scatter", 4 * MB, (0, 1, 2, 3), 300 * US + 15 * US),
    ("all_gather", 4 * MB, (0, 1, 2, 3), 300 * US + 15 * US),
    ("all_to_all", 4 * MB, (0, 1, 2, 3), 300 * US + 15 * US),
    ("all_gather", 2 * MB, (2, 3), 10 * US + 1 * US),
]


@pytest.mark.parametrize(("pattern", "nbytes", "devices", "seconds"), CASES, ids=[c[0] for c in CASES])
def test_collective_time(pattern: str, nbytes: float, devices: tuple[int, ...], seconds: float) -> None:
    assert collective_time(pattern, nbytes, devices, two_nodes()) == pytest.approx(seconds)


@pytest.mark.parametrize(("pattern", "nbytes", "devices", "seconds"), CASES, ids=[c[0] for c in CASES])
def test_collective_floor(pattern: str, nbytes: float, devices: tuple[int, ...], seconds: float) -> None:
    """The floor's parts sum to at most the collective's time; the bytes part adds up (a bucket
    of two tensors' bytes costs at least both parts); one latency part is paid whatever the
    bytes."""
    moved, latency = collective_floor(pattern, nbytes, devices, two_nodes())
    assert moved > 0 and latency > 0
    assert moved + latency <= seconds * (1 + 1e-12)
    assert collective_floor(pattern, 3 * nbytes, devices, two_nodes())[0] == pytest.approx(3 * moved)
    for double in (2 * nbytes, 1e-6 * nbytes):
        assert moved * double / nbytes + latency <= collective_time(pattern, double, devices, two_nodes()) * (
            1 + 1e-12
        )


@pytest.mark.parametrize("pattern", PATTERNS)
def test_nothing_to_move_costs_nothing(pattern: str) -> None:
    m = two_nodes()
    assert collective_time(pattern, MB, (2,), m) == 0
    assert collective_time(pattern, MB, (2, 2), m) == 0
    assert collective_time(pattern, 0, (0, 1), m) == 0


def test_unknown_pattern() -> None:
    with pytest.raises(ValueError, match="unknown communication pattern 'shuffle'"):
        collective_time("shuffle", 1, (0, 1), two_nodes())


def test_duals() -> None:
    assert all(DUAL[DUAL[p]] == p for p in PATTERNS)
    assert DUAL["broadcast"] == "reduce"  # replicate's backward: weight-gradient reduction
    assert DUAL["reduce_scatter"] == "all_gather"
    assert set(PARALLEL_PATTERN.values()) <= set(PATTERNS)


def test_groups_follow_the_index_convention() -> None:
    # partition dim 0 by 2 of a [2, 1]-sharded tensor: piece 1 becomes pieces 2 and 3
    groups = parallel_groups("parallel.partition", {"dim": 0, "degree": 2}, (2, 1, 1, 1))
    assert groups[1] == Group(((1, 0, 0, 0),), ((2, 0, 0, 0), (3, 0, 0, 0)))
    # all_reduce by 2 of sum 2: both partial sums -> both copies
    (g,) = parallel_groups("parallel.all_reduce", {"degree": 2}, (1, 2, 1))
    assert g == Group(((0, 0, 0), (0, 1, 0)), ((0, 0, 0), (0, 0, 1)))
    # all_to_all from dim 0 to dim 1 by 2
    (g,) = parallel_groups("parallel.all_to_all", {"src": 0, "dst": 1, "degree": 2}, (2, 1, 1, 1))
    assert g == Group(((0, 0, 0, 0), (1, 0, 0, 0)), ((0, 0, 0, 0), (0, 1, 0, 0)))
    # combine dim 1 by 2 of shard [1, 4]: two groups
    assert len(parallel_groups("parallel.combine", {"dim": 1, "degree": 2}, (1, 4, 1, 1))) == 2


def test_price_group() -> None:
    m = two_nodes()
    # replicate (broadcast) from device 0 to devices 0 and 2: one inter-node copy
    g = Group(((0, 0),), ((0, 0), (0, 1)))
    cost = price_group("broadcast", g, {(0, 0): 0}, {(0, 0): 0, (0, 1): 2}, int(MB), int(MB), m)
    assert cost.devices == (0, 2)
    assert cost.fwd_s == pytest.approx(105 * US)
    assert cost.bwd_s == pytest.approx(105 * US)  # the reduce of the copies' gradients
    # partition from device 3 into pieces on 0 and 1: 2 chunks of 0.5 MB leave the root
    g = Group(((0, 0),), ((0, 0), (1, 0)))
    cost = price_group("scatter", g, {(0, 0): 3}, {(0, 0): 0, (1, 0): 1}, int(MB), int(MB / 2), m)
    assert cost.nbytes == MB
    assert cost.fwd_s == pytest.approx(2 * 5 * US + 100 * US)
    # a piece staying put costs nothing
    cost = price_group("p2p", Group(((0,),), ((0,),)), {(0,): 1}, {(0,): 1}, 8, 8, m)
    assert (cost.fwd_s, cost.devices) == (0, ())
