"""Communication cost: collectives priced with an alpha-beta model over the machine's topology.

`collective_time(pattern, nbytes, devices, machine)` prices one collective among `devices`
(distinct, the root first where there is one) over the slowest link class they use
(`Machine.slowest_link`: intra-socket, cross-socket or inter-node): a (alpha) is its latency,
b (beta) its bandwidth per direction, n the number of distinct devices, S = `nbytes`:

| pattern | S is | time |
|---|---|---|
| p2p | the message | a + S/b |
| scatter, gather | bytes leaving (arriving at) the root | (n-1) a + S/b |
| broadcast, reduce | the buffer | min(pipelined chain (n-1) a + S/b, tree ceil(log2 n) (a + S/b)) |
| all_reduce | each device's buffer | min(ring 2(n-1)/n S/b + 2(n-1) a, tree 2 (ceil(log2 n) a + S/b)) |
| reduce_scatter | each device's (full) input | (n-1)/n S/b + (n-1) a |
| all_gather | each device's (full) output | (n-1)/n S/b + (n-1) a |
| all_to_all | each device's buffer | (n-1)/n S/b + (n-1) a |

A kind whose ranks share their core with the collective library's threads adds its measured
`DeviceKind.collective_handoff` to every collective (the OS scheduler's hand-offs between those
threads: a CPU process per core; the kind of the first device). One device, or no bytes, costs
nothing. Backward runs the dual pattern (`DUAL`) over the same
devices with the same S: partition/combine are scatter/gather, replicate/reduce are
broadcast/reduce (weight-gradient synchronization of a replicated weight is this reduce),
all_reduce/all_reduce, reduce_scatter/all_gather, all_to_all/all_to_all, pipeline/batch p2p.

`parallel_groups` says, for a parallel op, which input pieces feed which output pieces (the
independent collectives it is made of), from degrees alone; `price_group` prices one group given
where each piece lives.

The patterns and their duals live in the runtime (`unityc.runtime.patterns`), which runs them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from unityc.machine.spec import Machine
from unityc.runtime.patterns import DUAL, PATTERNS

PARALLEL_PATTERN = {
    "parallel.partition": "scatter",
    "parallel.combine": "gather",
    "parallel.replicate": "broadcast",
    "parallel.reduce": "reduce",
    "parallel.pipeline": "p2p",
    "parallel.batch": "p2p",
    "parallel.all_reduce": "all_reduce",
    "parallel.reduce_scatter": "reduce_scatter",
    "parallel.all_gather": "all_gather",
    "parallel.all_to_all": "all_to_all",
}


def collective_time(pattern: str, nbytes: float, devices: Sequence[int], machine: Machine) -> float:
    """Seconds for one collective (see the module docstring for what `nbytes` means)."""
    terms = _terms(pattern, nbytes, devices, machine)
    if terms is None:
        return 0.0
    n, alpha, beta, handoff = terms
    return _alpha_beta(pattern, nbytes, n, alpha, beta) + handoff


def _terms(
    pattern: str, nbytes: float, devices: Sequence[int], machine: Machine
) -> tuple[int, float, float, float] | None:
    """(distinct devices n, alpha, beta, hand-off) of one collective, None where it costs nothing
    (one device, no bytes, no link). Beta is the slowest link's bandwidth over the kind's
    slowdown of `pattern` (`DeviceKind.collective_bytes`), the hand-off the kind's
    `collective_handoff`: the kind of the first device."""
    if pattern not in PATTERNS:
        raise ValueError(f"unknown communication pattern '{pattern}' (known: {', '.join(PATTERNS)})")
    distinct = devices if isinstance(devices, range) else list(dict.fromkeys(devices))
    n = len(distinct)
    link = machine.slowest_link(distinct)
    if n < 2 or nbytes <= 0 or link is None:
        return None
    kind = machine.kind_of(distinct[0])
    return n, link.latency, link.bandwidth / kind.collective_factor(pattern), kind.collective_handoff


def _alpha_beta(pattern: str, nbytes: float, n: int, alpha: float, beta: float) -> float:
    """The alpha-beta time of the module docstring's table."""
    steps = math.ceil(math.log2(n))
    match pattern:
        case "p2p":
            return alpha + nbytes / beta
        case "scatter" | "gather":
            return (n - 1) * alpha + nbytes / beta
        case "broadcast" | "reduce":
            return min((n - 1) * alpha + nbytes / beta, steps * (alpha + nbytes / beta))
        case "all_reduce":
            ring = 2 * (n - 1) / n * nbytes / beta + 2 * (n - 1) * alpha
            tree = 2 * (steps * alpha + nbytes / beta)
            return min(ring, tree)
    return (n - 1) / n * nbytes / beta + (n - 1) * alpha  # reduce_scatter, all_gather, all_to_all


def collective_floor(
    pattern: str, nbytes: float, devices: Sequence[int], machine: Machine
) -> tuple[float, float]:
    """Lower bounds of the two parts of `collective_time`, (what grows with the bytes, the
    latencies), whose sum is at most it: the bytes part adds up over tensors, so one collective
    of several tensors' bytes (a gradient bucket) takes at least the sum of theirs plus one
    latency part (with the kind's `collective_handoff`). All-reduce: the ring's bytes, the
    tree's latencies (the least of each)."""
    terms = _terms(pattern, nbytes, devices, machine)
    if terms is None:
        return 0.0, 0.0
    n, alpha, beta, handoff = terms
    match pattern:
        case "p2p":
            data, latency = nbytes / beta, alpha
        case "scatter" | "gather":
            data, latency = nbytes / beta, (n - 1) * alpha
        case "broadcast" | "reduce":
            data, latency = nbytes / beta, min(n - 1, math.ceil(math.log2(n))) * alpha
        case "all_reduce":
            data = 2 * (n - 1) / n * nbytes / beta
            latency = min(2 * (n - 1), 2 * math.ceil(math.log2(n))) * alpha
        case _:
            data, latency = (n - 1) / n * nbytes / beta, (n - 1) * alpha
    return data, latency + handoff


Coord = tuple[int, ...]


@dataclass(frozen=True)
class Group:
    """One independent collective of a parallel op: the input pieces it reads and the output
    pieces it writes, by coordinate (shard indices, sum index, copy index)."""

    inputs: tuple[Coord, ...]
    outputs: tuple[Coord, ...]


def parallel_axes(kind: str, attrs: Mapping[str, Any], rank: int) -> tuple[int | None, int | None]:
    """(axis whose degree the op divides, axis whose degree it multiplies); sum is axis `rank`,
    copy is axis `rank + 1`."""
    total, copies = rank, rank + 1
    match kind:
        case "parallel.partition":
            return None, attrs["dim"]
        case "parallel.combine":
            return attrs["dim"], None
        case "parallel.replicate":
            return None, copies
        case "parallel.reduce":
            return total, None
        case "parallel.all_reduce":
            return total, copies
        case "parallel.reduce_scatter":
            return total, attrs["dim"]
        case "parallel.all_gather":
            return attrs["dim"], copies
        case "parallel.all_to_all":
            return attrs["src"], attrs["dst"]
        case "parallel.pipeline" | "parallel.batch":
            return None, None
    raise ValueError(f"the cost model does not know the parallel op '{kind}'")


def _with(c: Coord, axis: int, value: int) -> Coord:
    return (*c[:axis], value, *c[axis + 1 :])


def parallel_groups(kind: str, attrs: Mapping[str, Any], in_degrees: Sequence[int]) -> list[Group]:
    """The groups of a parallel op whose input has task degrees `in_degrees` (shards, sum,
    copy), following the index convention: growing an axis by n sends piece i to pieces
    i*n .. i*n+n-1, shrinking it merges those back into i."""
    shrink, grow = parallel_axes(kind, attrs, len(in_degrees) - 2)
    n = attrs.get("degree") or 1
    return [
        _group_at(c, shrink, grow, n)
        for c in itertools.product(*(range(d) for d in in_degrees))
        if shrink is None or c[shrink] % n == 0
    ]


def groups_touching(
    kind: str,
    attrs: Mapping[str, Any],
    in_degrees: Sequence[int],
    in_coords: Iterable[Coord],
    out_coords: Iterable[Coord],
) -> list[Group]:
    """The groups of `parallel_groups` that read one of the input pieces `in_coords` or write
    one of the output pieces `out_coords`, each once (what the role estimate prices: the groups
    of the representative devices, without enumerating the others)."""
    shrink, grow = parallel_axes(kind, attrs, len(in_degrees) - 2)
    n = attrs.get("degree") or 1
    heads: dict[Coord, None] = {}
    for c in in_coords:
        heads[c if shrink is None else _with(c, shrink, c[shrink] - c[shrink] % n)] = None
    for o in out_coords:
        base = o if grow is None else _with(o, grow, o[grow] // n)
        heads[base if shrink is None else _with(base, shrink, base[shrink] * n)] = None
    return [_group_at(c, shrink, grow, n) for c in heads]


def _group_at(c: Coord, shrink: int | None, grow: int | None, n: int) -> Group:
    """The group whose first input piece is `c`."""
    inputs = [c] if shrink is None else [_with(c, shrink, c[shrink] + j) for j in range(n)]
    base = c if shrink is None else _with(c, shrink, c[shrink] // n)
    outputs = [base] if grow is None else [_with(base, grow, base[grow] * n + j) for j in range(n)]
    return Group(tuple(inputs), tuple(outputs))


@dataclass(frozen=True)
class GroupCost:
    pattern: str
    nbytes: float
    devices: tuple[int, ...]
    """Distinct devices taking part, the root first (empty when nothing leaves a device)."""
    fwd_s: float
    bwd_s: float


def price_group(
    pattern: str,
    group: Group,
    in_devices: Mapping[Coord, int],
    out_devices: Mapping[Coord, int],
    in_bytes: int,
    out_bytes: int,
    machine: Machine,
) -> GroupCost:
    """Price one group given the device of every input and output piece; pieces that stay on
    their device cost nothing."""
    ins = [in_devices[c] for c in group.inputs]
    outs = [out_devices[c] for c in group.outputs]
    nbytes: float
    match pattern:
        case "scatter":
            root = ins[0]
            devices = (root, *dict.fromkeys(d for d in outs if d != root))
            nbytes = out_bytes * sum(d != root for d in outs)
        case "gather":
            root = outs[0]
            devices = (root, *dict.fromkeys(d for d in ins if d != root))
            nbytes = in_bytes * sum(d != root for d in ins)
        case "broadcast":
            root = ins[0]
            devices = (root, *dict.fromkeys(d for d in outs if d != root))
            nbytes = in_bytes
        case "reduce":
            root = outs[0]
            devices = (root, *dict.fromkeys(d for d in ins if d != root))
            nbytes = in_bytes
        case "p2p":
            devices = (ins[0], outs[0]) if ins[0] != outs[0] else (ins[0],)
            nbytes = min(in_bytes, out_bytes)  # one micro-batch (pipeline: the result; batch: the input)
        case "all_gather":
            devices = tuple(dict.fromkeys((*ins, *outs)))
            nbytes = out_bytes
        case _:  # all_reduce, reduce_scatter, all_to_all: each device's buffer is an input piece
            devices = tuple(dict.fromkeys((*ins, *outs)))
            nbytes = in_bytes
    if len(devices) < 2:
        return GroupCost(pattern, 0, (), 0.0, 0.0)
    fwd = collective_time(pattern, nbytes, devices, machine)
    bwd = collective_time(DUAL[pattern], nbytes, devices, machine)
    return GroupCost(pattern, nbytes, devices, fwd, bwd)
