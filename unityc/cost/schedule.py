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
3. gradient sync, as the generated program does it (`unityc.runtime.grads`): the all-reduces of
   weights held in copies (`Step.grad_reduce`) are cut into the runtime's buckets (`buckets`:
   per copy group, the weights in reverse graph order, `patterns.gradient_buckets`), and a
   bucket starts as soon as the backward has produced all of its gradients and the bucket
   before it in its group has started; so it overlaps the rest of the backward, and only what
   is left after the backward ends lengthens the iteration. Other gradient collectives
   (`Step.grad_sync`: ZeRO-2/3 reduce-scatters, ZeRO-1/2 all-gathers) follow a rank's backward;
4. the optimizer step of each piece, on its device, once every bucket of that device is
   reduced (the program waits for all of them, then steps).

A device whose communication runs on its compute core (`DeviceKind.comm_shares_core`: a CPU
process per core, gloo's threads polling on the core the rank computes on) has one stream for
both: a collective waits for its compute and its compute for the collective, so a gradient
bucket does not hide under the backward there.

Ops on disjoint devices therefore overlap; ops sharing a device serialize in program order.
Micro-batches (`parallel.pipeline` ... `parallel.batch`): a step runs once per micro-batch of
its values (its `multiplicity`); instance k reads instance k·m/M of an operand with m
micro-batches, so stages on different devices overlap as in GPipe (all forwards, then all
backwards). The iteration time is when the last thing ends.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from unityc.runtime.patterns import BUCKET_BYTES, gradient_buckets


@dataclass(frozen=True)
class Comm:
    """One collective or transfer: the devices it occupies, its duration, its buffer size."""

    devices: tuple[int, ...] | range
    """A range where the members are evenly spaced (priced once, `Machine.slowest_link`)."""
    seconds: float
    nbytes: float = 0
    span: Sequence[int] = ()
    """Priced by roles (`cost/roles.py`): the real members, where `devices` are the
    representatives of their roles (a bucket of several gradients is priced over them)."""
    transfer: bool = field(default=False, repr=False)
    """A point-to-point transfer (`devices` = sender, receiver), not a collective: priced by
    roles, one between two devices of one role occupies their representative twice (it sends
    one such piece and receives one), where a collective of two occupies it once."""


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
    grad_reduce: tuple[Comm, ...] = ()
    """A weight's gradient all-reduced over its copies, one per copy group (bucketed)."""
    grad_dtype: str = "f32"
    """The element type of that gradient (a bucket holds one)."""
    grad_sync: tuple[Comm, ...] = ()
    """Other gradient collectives of a weight, after its rank's backward (not bucketed)."""
    update: tuple[tuple[int, float], ...] = ()
    """(device, seconds) of the optimizer step of a weight."""

    @property
    def after_backward(self) -> tuple[Comm, ...]:
        """Every gradient collective of a weight (a pipeline stage runs them after its schedule)."""
        return (*self.grad_reduce, *self.grad_sync)


@dataclass(frozen=True)
class Bucket:
    """Gradients all-reduced by one collective: `members` index the weight steps."""

    comm: Comm
    members: tuple[int, ...]


def buckets(
    steps: Sequence[Step], price: Callable[[Sequence[int], float], float], limit: int = BUCKET_BYTES
) -> tuple[Bucket, ...]:
    """The runtime's buckets (`unityc.runtime.grads`): per copy group (its devices), the
    all-reduces of `steps` in reverse order cut by `patterns.gradient_buckets`; `price` is the
    seconds of an all-reduce of that many bytes over those devices. Groups in order of first
    appearance, each group's buckets in the order they start."""
    groups: dict[tuple[tuple[int, ...], Sequence[int]], list[tuple[int, float, str]]] = {}
    for i, step in enumerate(steps):
        for c in step.grad_reduce:
            devices = tuple(sorted(c.devices))
            span = c.span if isinstance(c.span, range) else tuple(sorted(c.span)) or devices
            groups.setdefault((devices, span), []).append((i, c.nbytes, step.grad_dtype))
    out: list[Bucket] = []
    for (devices, members_span), members in groups.items():
        members.reverse()
        for cut in gradient_buckets([(int(nbytes), dtype) for _, nbytes, dtype in members], limit):
            nbytes = sum(members[j][1] for j in cut)
            comm = Comm(devices, price(members_span, nbytes), nbytes, members_span)
            out.append(Bucket(comm, tuple(members[j][0] for j in cut)))
    return tuple(out)


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
    buckets: int = 0
    """Gradient buckets all-reduced (started during the backward)."""
    sync_after_s: float = 0.0
    """Of the buckets' communication, how long it runs on after the backward ends."""


class _Simulator:
    def __init__(self, multiplicity: Mapping[int, int], shared: Collection[int] = frozenset()):
        self.mult = multiplicity
        self.shared = shared
        """Devices with one stream for compute and communication (`comm_shares_core`)."""
        self.compute_free: dict[int, float] = {}
        self.comm_free: dict[int, float] = {}
        self.timelines: dict[int, Timeline] = {}

    def timeline(self, d: int) -> Timeline:
        return self.timelines.setdefault(d, Timeline())

    def free(self, d: int, stream: dict[int, float]) -> float:
        """When device `d` can start on `stream`: on a shared core, when both streams are free."""
        if d in self.shared:
            return max(self.compute_free.get(d, 0.0), self.comm_free.get(d, 0.0))
        return stream.get(d, 0.0)

    def communicate(self, comms: Sequence[Comm], ready: float) -> float:
        end = ready
        for c in comms:
            if c.seconds <= 0:
                continue
            start = max([ready, *(self.free(d, self.comm_free) for d in c.devices)])
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
            start = max(ready, self.free(d, self.compute_free))
            self.compute_free[d] = start + seconds
            self.timeline(d).compute.append((start, start + seconds))
            end = max(end, start + seconds)
        return end


def _instance(index: int, mult: int, of: int) -> int:
    """Which of a value's `of` instances instance `index` (of `mult`) of a step uses."""
    return index * of // mult


def simulate(
    steps: Sequence[Step],
    multiplicity: Mapping[int, int],
    loss: int | None,
    grad_buckets: Sequence[Bucket] = (),
    shared: Collection[int] = frozenset(),
) -> Schedule:
    """Simulate forward, backward, gradient sync and update; `multiplicity[v]` is value v's
    micro-batch count, `grad_buckets` the buckets of the steps' `grad_reduce` (`buckets`),
    `shared` the devices whose communication runs on their compute core
    (`Machine.shared_cores`)."""
    sim = _Simulator(multiplicity, shared)
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
    queues = _Buckets(sim, grad_buckets)
    for index in reversed(range(len(steps))):
        step = steps[index]
        if step.update or step.grad_sync or step.grad_reduce:
            done = [g for r in step.results for g in grad[r] if g is not None]
            if done:
                weights.append((step, max(done)))
                queues.ready(index, max(done))
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
    # each rank finishes its sync once its own backward is done (compute and communication
    # streams): buckets not started yet (a weight without a gradient), then the other collectives
    done_at = {d: max(sim.compute_free.get(d, 0.0), sim.comm_free.get(d, 0.0)) for d in sim.timelines}
    reduced = queues.finish(done_at)
    for step, grads_ready in weights:  # compute streams are past every backward step by now
        ranks = {d for c in step.grad_sync for d in c.devices}
        synced = sim.communicate(step.grad_sync, max([grads_ready, *(done_at.get(d, 0.0) for d in ranks)]))
        waits = [reduced.get(d, 0.0) for d, _ in step.update]
        update_end = max(update_end, sim.compute(step.update, max([synced, *waits])))
    iteration = max(backward_s, update_end, forward_s)
    after = max(0.0, max(reduced.values(), default=0.0) - backward_s)
    return Schedule(
        iteration, forward_s, backward_s, dict(sim.timelines), tuple(fwd_end), len(grad_buckets), after
    )


class _Buckets:
    """The gradient buckets of one simulation: each starts once its members' gradients are
    ready and the bucket before it in its copy group has started (`unityc.runtime.grads`)."""

    def __init__(self, sim: _Simulator, buckets: Sequence[Bucket]):
        self.sim = sim
        self.queues: dict[tuple[Sequence[int], Sequence[int]], list[Bucket]] = {}
        for b in buckets:
            self.queues.setdefault((b.comm.devices, b.comm.span), []).append(b)
        self.of: dict[int, list[tuple[Sequence[int], Sequence[int]]]] = {}
        for b in buckets:
            for i in b.members:
                self.of.setdefault(i, []).append((b.comm.devices, b.comm.span))
        self.waiting = {id(b): set(b.members) for b in buckets}
        self.ready_at = {id(b): 0.0 for b in buckets}
        self.started = dict.fromkeys(self.queues, 0)
        self.last_start = dict.fromkeys(self.queues, 0.0)
        self.end: dict[int, float] = {}
        """Per device, when its last bucket is reduced."""

    def ready(self, step: int, at: float) -> None:
        """The gradient of weight step `step` is complete at `at`: start what can start."""
        for group in self.of.get(step, ()):
            for b in self.queues[group]:
                if step in b.members:
                    self.waiting[id(b)].discard(step)
                    self.ready_at[id(b)] = max(self.ready_at[id(b)], at)
            self._start(group, None)

    def finish(self, done_at: Mapping[int, float]) -> dict[int, float]:
        """Starts every bucket left once its ranks' backward is done; returns `end`."""
        for group in self.queues:
            self._start(group, max(done_at.get(d, 0.0) for d in group[0]))
        return self.end

    def _start(self, group: tuple[Sequence[int], Sequence[int]], at: float | None) -> None:
        queue = self.queues[group]
        while self.started[group] < len(queue):
            b = queue[self.started[group]]
            if self.waiting[id(b)] and at is None:
                return
            start = max(self.ready_at[id(b)], self.last_start[group], at or 0.0)
            self.last_start[group] = start
            finish = self.sim.communicate((b.comm,), start)
            for d in group[0]:
                self.end[d] = max(self.end.get(d, 0.0), finish)
            self.started[group] += 1
