"""Memory levers on a mapped plan: a ZeRO stage per weight held in copies and recomputation per
op, chosen so that the plan fits every device at the least added time (Galvatron-BMW's levers,
priced by `estimate` like everything else).

0. A plan that fits is left as it is (levers trade time for memory; a larger batch is how a
   fitting plan uses them, see benchmarks/memory_levers.py).
1. ZeRO-2 on every weight held in copies costs about no time in the cost model (a
   reduce-scatter and an all-gather move the bytes of one all-reduce; the update shrinks
   n-fold) and divides its gradient and optimizer state by n.
2. If the plan still does not fit, the costly levers are ranked by bytes saved per device per
   second added: ZeRO-3 on a weight (saves (n-1)/n of it, costs an all-gather in forward and one
   in backward) and recomputation of an op (saves what it keeps for backward, costs its forward
   again); the shortest prefix of that ranking that fits is found by bisection (peak memory
   falls as levers are added), each step priced by `estimate`.
3. If even every lever does not fit, the plan with the smallest peak of the three tried (as it
   was, with ZeRO-2, with every lever) is returned (`fits` false): on a small plan the levers'
   own transient bytes (gathered weights, recomputed activations) can outweigh what they save.

Gradient accumulation is a lever too (`with_accumulation`): k micro-batches one after another
hold the activations of one, at the price of k smaller kernels and no overlap of the gradient
sync with the first k - 1 backward passes. The caller checks that the graph may run in
micro-batches (`unity.microbatchable`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from unityc.cost.estimate import Estimate, gradient_flags
from unityc.cost.pricing import copy_collectives, phase, piece, placement
from unityc.cost.units import format_bytes
from unityc.graph import Graph
from unityc.machine.spec import Machine


@dataclass(frozen=True)
class Lever:
    nid: int
    zero: int = 0
    recompute: bool = False
    ratio: float = 0.0
    """Bytes saved per device per second added."""


@dataclass
class Levered:
    graph: Graph
    estimate: Estimate
    note: str
    """What was applied ("" if nothing)."""


def applied(graph: Graph, levers: list[Lever]) -> Graph:
    out = graph.copy()
    for lever in levers:
        node = out.nodes[lever.nid]
        recompute = node.recompute or lever.recompute
        out.nodes[lever.nid] = node.with_plan(zero=max(node.zero, lever.zero), recompute=recompute)
    return out


def describe(graph: Graph) -> str:
    stages = [n.zero for n in graph.nodes.values() if n.zero]
    parts = [f"ZeRO-{s} on {stages.count(s)} weight(s)" for s in (1, 2, 3) if stages.count(s)]
    if graph.plan.accumulation > 1:
        parts.insert(0, f"{graph.plan.accumulation} accumulation steps")
    recomputed = sum(n.recompute for n in graph.nodes.values())
    if recomputed:
        parts.append(f"{recomputed} op(s) recomputed")
    return ", ".join(parts)


def free_levers(graph: Graph) -> list[Lever]:
    """ZeRO-2 on every weight held in copies that gets a gradient."""
    _, gets_grad = gradient_flags(graph, graph.topological())
    return [
        Lever(nid, zero=2)
        for nid, node in graph.nodes.items()
        if node.op == "pcg.weight" and node.types[0].copy_degree >= 2 and (nid, 0) in gets_grad
    ]


def costly_levers(graph: Graph, e: Estimate, machine: Machine) -> list[Lever]:
    """ZeRO-3 per weight held in copies and recomputation per op, best ratio first."""
    order = graph.topological()
    _, gets_grad = gradient_flags(graph, order)
    levers: list[Lever] = []
    for nid, row in zip(order, e.rows, strict=True):
        node = graph.nodes[nid]
        t = node.types[0]
        if node.op == "pcg.weight" and t.copy_degree >= 2 and (nid, 0) in gets_grad:
            nbytes = piece(t).nbytes  # type: ignore[union-attr]
            where = placement(t, node.view, machine)
            seconds = 2 * phase(copy_collectives(machine, "all_gather", where, nbytes))
            saved = nbytes * (1 - 1 / t.copy_degree)
            levers.append(Lever(nid, zero=3, ratio=saved / max(seconds, 1e-12)))
        elif node.op.startswith("pcg.") and not node.is_source and row.memory > 0:
            if not any((nid, i) in gets_grad for i in range(len(node.types))):
                continue
            saved = row.memory / max(row.device_count, 1)
            levers.append(Lever(nid, recompute=True, ratio=saved / max(row.fwd_compute_s, 1e-12)))
    return sorted(levers, key=lambda lever: -lever.ratio)


def with_memory_levers(
    graph: Graph, e: Estimate, machine: Machine, price: Callable[[Graph], Estimate]
) -> Levered:
    """The levered plan (see the module docstring); `e` is `graph`'s estimate, `price` prices
    a graph on `machine` as the caller does."""
    best = Levered(graph, e, "")
    if e.fits:
        return best
    free = free_levers(graph)
    if free:
        cheap = applied(graph, free)
        best = Levered(cheap, price(cheap), describe(cheap))
    if best.estimate.fits:
        return best
    base = best.graph
    ranked = costly_levers(base, best.estimate, machine)
    tried = [Levered(graph, e, ""), best]
    if ranked:
        everything = applied(base, ranked)
        full = price(everything)
        tried.append(Levered(everything, full, describe(everything)))
    fitting = tried[-1]
    if not fitting.estimate.fits:  # the smallest footprint seen: levers add transient bytes
        return min(tried, key=lambda lv: lv.estimate.peak_memory)
    lo, hi = 0, len(ranked)
    while hi - lo > 1:  # invariant: prefix hi fits, prefix lo does not
        mid = (lo + hi) // 2
        g = applied(base, ranked[:mid])
        m = price(g)
        if m.fits:
            hi, fitting = mid, Levered(g, m, describe(g))
        else:
            lo = mid
    return fitting


def next_lever(graph: Graph, e: Estimate, price: Callable[[Graph], Estimate]) -> str:
    """For a plan that does not fit (`e` its estimate, `price` prices a graph as the search
    did): the levers it has, where the memory of its fullest device goes, and the lever that
    would be next: ZeRO-3 or recomputation where the plan still has weights or ops without them
    and adding them lowers its peak, else more devices when the weights, gradients and
    optimizer state alone overflow a device, else a smaller batch."""
    have = describe(graph)
    held = "already with " + have if have else "with no weight held in copies to shard"
    device = max(e.devices, key=lambda d: d.memory.total)
    m = device.memory
    states = m.weights + m.gradients + m.optimizer
    where = (
        f"on device {device.device} its weights, gradients and optimizer state take {format_bytes(states)}, "
        f"its activations {format_bytes(m.activations)}"
    )
    rows = e.pipeline is None and len(e.rows) == len(graph.nodes)  # no levers in pipeline stages
    left = [lv for lv in costly_levers(graph, e, e.machine) if _unapplied(graph, lv)] if rows else []
    if left and price(applied(graph, left)).peak_memory >= e.peak_memory:
        left = []  # they would not lower the peak
    shard = sum(lv.zero == 3 for lv in left)
    recompute = len(left) - shard
    if shard or recompute:
        more = [f"ZeRO-3 on {shard} more weight(s)"] if shard else []
        more += [f"recomputing {recompute} more op(s)"] if recompute else []
        nxt = " and ".join(more)
    elif states + m.reserved >= device.capacity:
        nxt = (
            "more devices (or an optimizer with less state): the persistent state alone overflows the device"
        )
    else:
        nxt = "a smaller batch (or more devices): the activations overflow the device"
    return f"that plan is {held}; {where}; the next lever would be {nxt}"


def _unapplied(graph: Graph, lever: Lever) -> bool:
    node = graph.nodes[lever.nid]
    return node.zero < lever.zero if lever.zero else lever.recompute and not node.recompute


ACCUMULATION_STEPS = (2, 4, 8, 16, 32, 64)
"""The gradient accumulation steps tried, smallest first."""


def accumulation_steps(graph: Graph) -> list[int]:
    """The steps of `ACCUMULATION_STEPS` that divide the rows (dim 0) of every input's pieces."""
    rows = [n.types[0].shape[0] // n.types[0].shard[0] for n in graph.nodes.values() if n.op == "pcg.input"]
    if not rows or any(n.op == "pcg.input" and not n.types[0].rank for n in graph.nodes.values()):
        return []
    return [k for k in ACCUMULATION_STEPS if all(r % k == 0 for r in rows)]


def accumulated(graph: Graph, steps: int) -> Graph:
    """`graph` with `steps` gradient accumulation steps."""
    out = graph.copy()
    out.set_plan(replace(out.plan, accumulation=steps))
    return out


def with_accumulation(
    graph: Graph, e: Estimate, machine: Machine, price: Callable[[Graph], Estimate], levers: bool = True
) -> Levered | None:
    """For a plan (not pipelined, `e` its estimate) that does not fit: the fastest that fits of
    `graph` with k accumulation steps, for each k of `accumulation_steps` up to the first that
    fits as it is, each smaller one with memory levers as well (`levers`); None if none fits."""
    if e.fits or graph.plan.pipeline is not None:
        return None
    best: Levered | None = None
    for k in accumulation_steps(graph):
        g = accumulated(graph, k)
        try:
            m = price(g)
        except ValueError:  # a reshape of the batch that k does not divide
            return best
        lever = Levered(g, m, f"{k} accumulation steps")
        if not m.fits and levers:
            more = with_memory_levers(g, m, machine, price)
            lever = Levered(more.graph, more.estimate, more.note or lever.note)
        if lever.estimate.fits and (best is None or lever.estimate.iteration_s < best.estimate.iteration_s):
            best = lever
        if m.fits:
            break
    return best


__all__ = [
    "ACCUMULATION_STEPS",
    "Lever",
    "Levered",
    "accumulated",
    "accumulation_steps",
    "next_lever",
    "with_accumulation",
    "with_memory_levers",
]
