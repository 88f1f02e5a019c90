"""Iteration time: a list-scheduling simulation of one training iteration.

Each device has two timelines, a compute stream and a communication stream (as NCCL runs on its
own CUDA stream), so communication overlaps with computation on other data but never with the
communication it depends on. The graph is a list of `Step`s in topological order:

1. forward, in order: a step starts when its operands are ready; its communication (the
   collectives of a parallel op, or transfers of operand pieces that live on another device)
   occupies the communication streams of the devices involved, each collective starting when
   all of them are free; then each device runs its tasks on its compute stream as soon as the
   device is free. A step's results are ready when its last device finishes;
2. backward, in reverse order, for steps that have one: it starts when the gradients of its
   results are ready (the loss's gradient is ready when the loss is), computes, then sends the
   operands' gradients back (the dual collectives); an operand used several times has its
   gradient when the last use is done;
3. weight update, as the generated program does it (`unityc.runtime.grads`): after the backward,
   the gradients of weights held in copies are all-reduced across the copies (one collective
   per weight here; the runtime buckets them, so this errs high by a latency per weight), then
   the optimizer step of each piece runs on its device. Neither overlaps the backward, and
   where weights appear in the graph does not change the estimate.

Ops on disjoint devices therefore overlap; ops sharing a device serialize in program order.
Micro-batches (`parallel.pipeline` ... `parallel.batch`): a step runs once per micro-batch of
its values (its `multiplicity`); instance k reads instance k·m/M of an operand with m
micro-batches, so stages on different devices overlap as in GPipe (all forwards, then all
backwards). The iteration time is when the last thing ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Comm:
    """One collective or transfer: the devices it occupies, its duration, its buffer size."""

    devices: tuple[int, ...]
    seconds: float
    nbytes: float = 0


@dataclass(frozen=True)
class Step:
    """One op of the graph, reduced to what the schedule needs (values are integer ids)."""

    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    multiplicity: int = 1
    fwd_comm: tuple[Comm, ...] = ()
    fwd_compute: tuple[tuple[int, float], ...] = ()
    """(device, seconds) of one instance."""
    bwd_compute: tuple[tuple[int, float], ...] = ()
    bwd_gather: tuple[Comm, ...] = ()
    """Collectives its backward waits for before computing (ZeRO-3 weights gathered again)."""
    bwd_comm: tuple[Comm, ...] = ()
    has_backward: bool = False
    grad_operands: tuple[bool, ...] = ()
    """Which operands receive a gradient from this step's backward."""
    grad_sync: tuple[Comm, ...] = ()
    update: tuple[tuple[int, float], ...] = ()
    """(device, seconds) of the optimizer step of a weight."""


@dataclass
class Timeline:
    """Busy intervals of one device, per stream."""

    compute: list[tuple[float, float]] = field(default_factory=list)
    comm: list[tuple[float, float]] = field(default_factory=list)

    @property
    def compute_s(self) -> float:
        return sum(e - s for s, e in self.compute)

    @property
    def comm_s(self) -> float:
        return sum(e - s for s, e in self.comm)

    @property
    def busy_s(self) -> float:
        """Time during which the device does anything (the union of both streams)."""
        total, end = 0.0, float("-inf")
        for s, e in sorted(self.compute + self.comm):
            if e <= end:
                continue
            total += e - max(s, end)
            end = e
        return total


@dataclass(frozen=True)
class Schedule:
    iteration_s: float
    forward_s: float
    backward_s: float
    """When the last backward step ends (before the last updates)."""
    timelines: Mapping[int, Timeline]
    step_fwd_end: tuple[float, ...]


class _Simulator:
    def __init__(self, multiplicity: Mapping[int, int]):
        self.mult = multiplicity
        self.compute_free: dict[int, float] = {}
        self.comm_free: dict[int, float] = {}
        self.timelines: dict[int, Timeline] = {}

    def timeline(self, d: int) -> Timeline:
        return self.timelines.setdefault(d, Timeline())

    def communicate(self, comms: Sequence[Comm], ready: float) -> float:
        end = ready
        for c in comms:
            if c.seconds <= 0:
                continue
            start = max([ready, *(self.comm_free.get(d, 0.0) for d in c.devices)])
            finish = start + c.seconds
            for d in c.devices:
                self.comm_free[d] = finish
                self.timeline(d).comm.append((start, finish))
            end = max(end, finish)
        return end

    def compute(self, work: Sequence[tuple[int, float]], ready: float) -> float:
        end = ready
        for d, seconds in work:
            if seconds <= 0:
                continue
            start = max(ready, self.compute_free.get(d, 0.0))
            self.compute_free[d] = start + seconds
            self.timeline(d).compute.append((start, start + seconds))
            end = max(end, start + seconds)
        return end


def _instance(index: int, mult: int, of: int) -> int:
    """Which of a value's `of` instances instance `index` (of `mult`) of a step uses."""
    return index * of // mult


def simulate(steps: Sequence[Step], multiplicity: Mapping[int, int], loss: int | None) -> Schedule:
    """Simulate forward, backward and update; `multiplicity[v]` is value v's micro-batch count."""
    sim = _Simulator(multiplicity)
    mult = lambda v: multiplicity.get(v, 1)  # noqa: E731
    ready: dict[int, list[float]] = {}
    fwd_end: list[float] = []
    for step in steps:
        m = step.multiplicity
        ends = []
        for k in range(m):
            start = max(
                (ready[v][_instance(k, m, mult(v))] for v in step.operands if v in ready), default=0.0
            )
            after_comm = sim.communicate(step.fwd_comm, start)
            ends.append(sim.compute(step.fwd_compute, after_comm))
        for r in step.results:
            per = m // mult(r)
            ready[r] = [max(ends[j * per : (j + 1) * per]) for j in range(mult(r))]
        fwd_end.append(max(ends, default=0.0))
    forward_s = max(fwd_end, default=0.0)

    grad: dict[int, list[float | None]] = {v: [None] * mult(v) for v in ready}
    if loss is not None and loss in ready:
        grad[loss] = list(ready[loss])
    backward_s = forward_s
    update_end = forward_s
    weights: list[tuple[Step, float]] = []
    for step in reversed(steps):
        if step.update or step.grad_sync:
            done = [g for r in step.results for g in grad[r] if g is not None]
            if done:
                weights.append((step, max(done)))
            continue
        if not step.has_backward:
            continue
        m = step.multiplicity
        for k in range(m):
            seeds = [grad[r][_instance(k, m, mult(r))] for r in step.results]
            known = [g for g in seeds if g is not None]
            if not known:
                continue
            gathered = sim.communicate(step.bwd_gather, max(known))
            computed = sim.compute(step.bwd_compute, gathered)
            end = sim.communicate(step.bwd_comm, computed)
            backward_s = max(backward_s, end)
            for v, wants in zip(step.operands, step.grad_operands, strict=True):
                if not wants or v not in grad:
                    continue
                i = _instance(k, m, mult(v))
                previous = grad[v][i]
                grad[v][i] = end if previous is None else max(previous, end)
    # each rank syncs once its own backward is done (compute and communication streams)
    done_at = {d: max(sim.compute_free.get(d, 0.0), sim.comm_free.get(d, 0.0)) for d in sim.timelines}
    for step, grads_ready in weights:  # compute streams are past every backward step by now
        ranks = {d for c in step.grad_sync for d in c.devices}
        synced = sim.communicate(step.grad_sync, max([grads_ready, *(done_at.get(d, 0.0) for d in ranks)]))
        update_end = max(update_end, sim.compute(step.update, synced))
    iteration = max(backward_s, update_end, forward_s)
    return Schedule(iteration, forward_s, backward_s, dict(sim.timelines), tuple(fwd_end))
