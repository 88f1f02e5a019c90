"""A lower bound of what the machine-mapping DP charges for a candidate graph, without mapping it.

The DP's time is a sum over a series-parallel schedule (`mapping.py`): ops in series add, ops
side by side take the max. Whatever the views, an op costs at least one task's compute on the
fastest device kind (forward, and backward if a gradient flows through it), and a collective
(a parallel op that moves pieces between devices) at least one message's latency on the
machine's fastest link, forward and backward if its input gets a gradient (unless it reads a
source another op read first: the DP places a source for its first reader, and charges no other
reader for it). So the DP's time is
at least the longest path through the graph weighted that way; the objective (time plus a
non-negative memory charge) too. A chain of collectives counts one latency: the DP prices
candidates after `fuse_collectives`, which may make one collective of a chain.

The substitution search prices a candidate only if this bound is within alpha of the best
cost so far: a rewrite that adds a collective to a plan already at the best time is dropped
without running the DP.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any

from unityc.cost.communication import collective_floor
from unityc.cost.compute import SOURCES
from unityc.cost.estimate import Estimate, gradient_flags, node_attrs
from unityc.cost.pricing import (
    ComputeModel,
    Placed,
    Placement,
    copy_collectives,
    piece,
    placement,
    type_info,
    weight_parts,
)
from unityc.cost.roles import device_array
from unityc.cost.schedule import Comm
from unityc.dialects.parallel import BatchOp, ParallelOp, PipelineOp
from unityc.dialects.precision import BF16_MIXED
from unityc.graph import Graph, Ref, op_classes
from unityc.graph.precision import graph_precision, priced_graph
from unityc.machine.spec import Machine
from unityc.search.layout import FULL, Layout


def fastest_latency(machine: Machine) -> float:
    """The lowest latency of any link joining two distinct devices of `machine`."""
    latencies = []
    specs = dict.fromkeys(machine.nodes)  # nodes repeat a few specs: each once
    for node in specs:
        if any(len(socket) > 1 for socket in node.sockets):
            latencies.append(node.intra_socket.latency)
        if len(node.sockets) > 1:
            latencies.append(node.cross_socket.latency)
    if len(machine.nodes) > 1:
        latencies.append(min(node.inter_node.latency for node in specs))
    return min(latencies, default=0.0)


@cache
def _moves_data(op: str) -> bool:
    """Parallel ops whose pieces land on devices other than their input's (every one but the
    micro-batching pair, which splits and joins pieces in place)."""
    cls = op_classes().get(op)
    return cls is not None and issubclass(cls, ParallelOp) and not issubclass(cls, (PipelineOp, BatchOp))


class Bound:
    """Lower bounds of the DP's objective on one machine with one compute model; per-op
    compute times are cached across candidates."""

    def __init__(self, machine: Machine, compute: ComputeModel):
        self.machine = machine
        self.compute = compute
        self.latency = fastest_latency(machine)
        self._op: dict[Any, float] = {}

    def __call__(
        self, graph: Graph, requires: Iterable[Ref] = (), roots: Iterable[Ref] | None = None
    ) -> float:
        """A lower bound of `Mapper.map(graph, ..., requires, roots).objective`."""
        graph = priced_graph(graph)
        order = graph.topological()
        _, gets_grad = gradient_flags(graph, order, requires, roots)
        finish: dict[int, float] = {}
        moving: set[int] = set()
        placed: set[int] = set()
        longest = 0.0
        for nid in order:
            node = graph.nodes[nid]
            if node.is_source:
                continue
            producers = [r[0] for r in node.operand_refs()]
            start = max((finish[p] for p in producers if p in finish), default=0.0)
            # the DP places a source for its first reader and charges only that reader's edge
            first_reads = {p for p in producers if graph.nodes[p].is_source and p not in placed}
            placed |= first_reads
            charged = [p for p in producers if not graph.nodes[p].is_source or p in first_reads]
            if _moves_data(node.op):
                moving.add(nid)
                follows = any(p in moving for p in producers)
                grad = any(r in gets_grad for r in node.operand_refs())
                own = 0.0 if follows or not charged else self.latency * (2 if grad else 1)
            elif node.op.startswith("parallel."):
                own = 0.0
            else:
                own = self._compute(graph, nid, gets_grad)
            finish[nid] = start + own
            longest = max(longest, finish[nid])
        return longest

    def _compute(self, graph: Graph, nid: int, gets_grad: set[Ref]) -> float:
        """One task of op `nid` on the fastest device kind: forward, and backward if it runs."""
        node = graph.nodes[nid]
        operand_types = tuple(None if r is None else graph.type_of(r) for r in node.operands)
        grads = tuple(r is not None and r in gets_grad for r in node.operands)
        backward = node.op not in SOURCES and any((nid, i) in gets_grad for i in range(len(node.types)))
        types = tuple(None if t is None else type_info(t).key for t in operand_types)
        key = (node.op, node.attrs, types, tuple(type_info(t).key for t in node.types), grads, backward)
        hit = self._op.get(key)
        if hit is not None:
            return hit
        attrs = node_attrs(node)
        operands = [piece(t) for t in operand_types]
        results = [p for p in map(piece, node.types) if p is not None]
        best = float("inf")
        for kind in self.machine.kinds:
            cost = self.compute(node.op, attrs, operands, results, kind, list(grads))
            best = min(best, cost.fwd_s + (cost.bwd_s if backward else 0.0))
        seconds = best if best != float("inf") else 0.0
        self._op[key] = seconds
        return seconds


def three_d_bound(one_device: Estimate, machine: Machine, cost: str, layout: Layout) -> float:
    """A lower bound of the iteration time of any plan spreading the graph's compute over the
    machine's devices (tensor, pipeline and data parallel, any micro-batches), from its estimate
    on one device (`one_device`): a kernel over a share r of its operands takes at least r of
    its time on one device (roofline, see `pipeline_bound`), so the devices together spend at
    least the forward and backward compute, plus the forward again where every op is
    recomputed (`layout.recompute` full; its degrees may be any); the busiest device at least
    1 / D of that. 0 where none is had (a profile cost model, devices of several kinds)."""
    kinds = {machine.kind_of(d).name for d in range(machine.num_devices)}
    if cost != "roofline" or len(kinds) > 1:
        return 0.0
    forward = sum(row.fwd_compute_s for row in one_device.rows)
    backward = sum(row.bwd_compute_s for row in one_device.rows)
    return (forward * (2 if layout.recompute == FULL else 1) + backward) / machine.num_devices


def pipeline_bound(one_device: Estimate, machine: Machine, batch: int, cost: str) -> float:
    """A lower bound of the iteration time of any pipelined plan of a graph (two rank groups or
    more, data parallel stages, any partition, schedule and micro-batch count), from the graph's
    estimate on one device (`one_device`, the whole batch of `batch` rows); 0 where none is had
    (a profile cost model, devices of several kinds).

    Roofline kernels: an op's kernel takes latency + max(FLOPs / peak, bytes / bandwidth), and
    for a piece of r <= B rows its FLOPs and activation bytes shrink by r / B at most (weight
    bytes do not shrink), so t(r) >= lat + (r / B) (t(B) - lat) per kernel: the ops' forward and
    backward over a micro-batch of r rows take T(r) >= (r / B) T(B) + (1 - r / B) L on any
    device, L the latencies of the kernels. M micro-batches on G groups of w devices (r = B /
    (M w) rows a device, G <= D / w): micro-batch 0 runs forward through every stage, then
    backward (a chain: >= T(r)), and some group runs M x its stages' share (>= M T(r) / G). The
    bound is the least of max(T(r), M T(r) / G) over every M dividing the batch and every w
    dividing B / M (w <= D / 2): its cost follows the batch's divisors and the machine's
    distinct node specs, not its devices."""
    specs = dict.fromkeys(machine.nodes)  # nodes repeat a few specs: each once
    kinds = {name for node in specs for socket in node.sockets for name in socket}
    D = machine.num_devices
    if cost != "roofline" or len(kinds) > 1 or D < 2 or batch < 1:
        return 0.0
    latency = machine.kind_of(0).kernel_latency
    alpha = fastest_latency(machine)
    total = 0.0
    kernels = 0
    for row in one_device.rows:
        for t in (row.fwd_compute_s, row.bwd_compute_s):
            if t > 0:
                total += t
                kernels += 1
    L = kernels * latency
    best = math.inf
    divisors = _divisors(batch)
    for m in divisors:
        for w in divisors:
            if w > D // 2 or (batch // m) % w:
                continue
            rho = 1.0 / (m * w)
            t = rho * total + (1.0 - rho) * L
            best = min(best, max(t + 2 * alpha, m * t / (D // w), m * alpha))
    return 0.0 if best == math.inf else best


def _divisors(n: int) -> list[int]:
    """The divisors of `n`, ascending (a loop to its square root)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def levers_bound(
    plan: Graph, e: Estimate, machine: Machine, optimizer: str, zero: int | None = None
) -> float:
    """A lower bound of the iteration time `estimate` gives a mapped plan with memory levers
    added (`plan` without them, not pipelined, `e` its estimate): with `zero`, every weight held
    in copies at ZeRO stage `zero` and any ops recomputed (the `zero` plans); None: any ZeRO
    stage per weight and any ops recomputed (Galvatron's per-layer plans, the greedy levers).
    0 for a pipelined plan.

    The schedule (`cost/schedule.py`) runs one compute and one communication stream per
    device, each a task at a time. Levers add compute (recomputation) but take none away except
    the update (ZeRO shrinks it), so a device computes at least its forward and backward as in
    `plan`. Every collective on a device's stream ends before the iteration does. A weight held
    in copies that gets a gradient moves, whatever its stage, at least the bytes part of an
    all-reduce among them (`communication.collective_floor`: a ZeRO stage moves it by a
    reduce-scatter and an all-gather; plain copies in a gradient bucket, whose all-reduce takes
    at least its members' bytes parts and one latency part), and each group of copies pays at
    least an all-reduce's latency part once (a bucket, or two collectives per weight). With a
    known stage, its collectives' bytes parts are counted (the latency parts once per group, as
    the buckets the program moves them in pay at least one), and those run after the backward (ZeRO-1/2's
    all-gather of the updated shards, ZeRO-2/3's reduce-scatter) follow the device's forward and
    backward compute: the bound is the larger of the two streams' sums."""
    if e.pipeline is not None:
        return 0.0
    graph = priced_graph(plan)
    _, gets_grad = gradient_flags(graph, graph.topological())
    bf16_gathers = graph_precision(graph) == BF16_MIXED and zero in (1, 2)
    """Every weight priced as a bf16 piece, gathered in bf16 (`memory.is_bf16_piece`): no more
    bytes than the program moves, whichever weights are."""
    compute = {d.device: d.compute_s for d in e.devices}
    comm: dict[int, float] = defaultdict(float)
    after: dict[int, float] = defaultdict(float)
    groups: dict[Sequence[int], float] = {}
    """Groups of copies whose gradients move: (devices) -> a latency part they pay once."""
    roles = e.roles
    members = _members if roles is None else _rep_members(roles.reps)

    def bucketed(c: Comm) -> None:  # an all-reduce in a gradient bucket, or any stage's
        moved, latency = collective_floor("all_reduce", c.nbytes, c.devices, machine)
        for d in members(c.devices):
            comm[d] += moved
        groups[c.devices if isinstance(c.devices, range) else tuple(sorted(c.devices))] = latency

    trained = [nid for nid, node in graph.nodes.items() if node.op == "pcg.weight" and (nid, 0) in gets_grad]
    # ZeRO collectives move in buckets, each weight priced its share of its bucket's collective
    # (`pricing.copy_collectives`): priced in a bucket so large that its one latency vanishes,
    # a weight's collectives are their bytes parts, and each group pays a latency part once.
    pieces = [piece(graph.nodes[nid].types[0]) for nid in trained]
    everything = 2**30 * sum(p.nbytes for p in pieces if p is not None)
    for nid in trained:
        node = graph.nodes[nid]
        t = node.types[0]
        where: Placement = (
            placement(t, node.view, machine)
            if roles is None
            else Placed(device_array(t, node.view, machine), roles.rep_mask)
        )
        for d, seconds in weight_parts(machine, optimizer, t, where, True, node.zero).update:
            compute[d] = compute.get(d, 0.0) - seconds  # the update levers may shrink
        if t.copy_degree < 2:
            continue
        if zero is None:
            for c in copy_collectives(machine, "all_reduce", where, piece(t).nbytes):  # type: ignore[union-attr]
                bucketed(c)
            continue
        parts = weight_parts(machine, optimizer, t, where, True, zero, everything, bf16_gathers)
        for c in (*parts.gather, *parts.sync):
            for d in members(c.devices):
                comm[d] += c.seconds
            groups[c.devices if isinstance(c.devices, range) else tuple(sorted(c.devices))] = (
                collective_floor("all_reduce", c.nbytes, c.devices, machine)[1]
            )
        for c in parts.sync:
            for d in members(c.devices):
                after[d] += c.seconds
        for c in parts.reduce:
            bucketed(c)
    for group, latency in groups.items():
        for d in members(group):
            comm[d] += latency
    used = set(compute) | set(comm)
    bound = max((max(compute.get(d, 0.0) + after[d], comm[d]) for d in used), default=0.0)
    return bound * (1 - 1e-9)  # the schedule sums in another order


def _members(devices: Sequence[int]) -> Sequence[int]:
    return devices


def _rep_members(reps: Sequence[int]) -> Callable[[Sequence[int]], Sequence[int]]:
    """Priced by roles (`e.roles`): the members of a group that represent their roles (the
    others have the same sums), found without walking the group's members."""

    def members(devices: Sequence[int]) -> Sequence[int]:
        within = devices if isinstance(devices, range) else set(devices)
        return [r for r in reps if r in within]

    return members


__all__ = ["Bound", "fastest_latency", "levers_bound", "pipeline_bound"]
