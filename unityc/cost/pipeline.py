"""Pipeline schedules, simulated event by event: GPipe, 1F1B (flush), interleaved 1F1B, 2BW.

A pipelined plan has S stages; stage k runs on rank group k mod G (G = S / v, v the virtual
stages per group: 1 except for the interleaved schedule). Each stage is reduced to a `StageCost`:
its forward and backward time for one micro-batch, the transfer of its output activation to the
next stage and of its input gradient to the previous one (on the link between the two groups,
one transfer at a time per direction), its gradient sync (stage replication: the all-reduce of
its weights' gradients over its group) and its optimizer step, and the activations one
micro-batch leaves saved on it.

Each rank group runs its tasks (F = forward, B = backward of one micro-batch on one stage) in
the schedule's order (`group_order`) on one compute stream; a task starts when the group is
free and its input has arrived: F(m, s) after F(m, s-1) and its transfer, B(m, s) after
B(m, s+1) and its transfer, B(m, S-1) after F(m, S-1). The simulation always runs next the
task that can start earliest, so transfers take the link in time order.

* `gpipe`: every forward, then every backward (micro-batches in order); M micro-batches in
  flight on every stage.
* `1f1b` (PipeDream-Flush): group k runs min(S-k-1, M) forwards, then alternates one forward
  and one backward, then the remaining backwards; min(S-k, M) micro-batches in flight on stage k.
* `interleaved-1f1b` (Megatron-LM): group g holds stages g, g+G, ...; forwards go through the
  chunks in rounds of G micro-batches, warm-up (G-g-1)*2 + (v-1)*G forwards; M must be a
  multiple of G.
* After its last backward a group syncs its stages' gradients and steps the optimizer: the
  iteration ends when the last group is done (a flush: gradients equal the un-pipelined plan's).
* `2bw` (PipeDream-2BW, an estimate option, not a schedule of the IR): the 1F1B order without a
  flush: micro-batches stream through back to back and the weights are double buffered, so the
  time per batch of M micro-batches is the steady-state period (measured over a simulated
  stream of 3M micro-batches), with the gradient sync overlapping the next batch's compute.
  Its weight semantics differ from the flush schedules: the gradient of batch t, computed with
  weights W(t-1), updates W(t): W(t+1) = W(t) - lr * grad f(W(t-1)) (one step of delay), and
  each stage holds two weight versions (an extra copy of its weights in memory).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "2bw")


@dataclass(frozen=True)
class StageCost:
    """One stage of a pipeline, per micro-batch (seconds, bytes)."""

    forward_s: float
    backward_s: float
    send_s: float = 0.0
    """Its output activation to the next stage (on the link between their groups)."""
    send_back_s: float = 0.0
    """Its input's gradient to the previous stage."""
    sync_s: float = 0.0
    """Gradient sync of its weights over its group, once per iteration."""
    update_s: float = 0.0
    """Optimizer step of its weights, once per iteration."""
    activation_bytes: float = 0.0
    """What one micro-batch leaves saved on its busiest device until its backward."""

    def __post_init__(self) -> None:
        for name in (
            "forward_s",
            "backward_s",
            "send_s",
            "send_back_s",
            "sync_s",
            "update_s",
            "activation_bytes",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"StageCost.{name} must be >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Task:
    kind: str
    """"F" or "B"."""
    microbatch: int
    stage: int


@dataclass(frozen=True)
class Event:
    """One interval of the simulated iteration (a task, a transfer, a sync or an update)."""

    what: str
    """"F", "B", "send", "send_back", "sync", "update"."""
    group: int
    stage: int
    microbatch: int
    start: float
    end: float


@dataclass(frozen=True)
class GroupRow:
    group: int
    stages: tuple[int, ...]
    busy_s: float
    """Forward and backward compute (its tasks)."""
    bubble: float
    """Idle fraction of the group before its last backward ends."""
    inflight: int
    """Most micro-batches (of any of its stages) whose forward ran and backward did not yet."""
    inflight_bytes: float
    """The most activation bytes those micro-batches hold at once (busiest device)."""


@dataclass(frozen=True)
class PipelineRun:
    schedule: str
    microbatches: int
    stages: int
    virtual: int
    iteration_s: float
    forward_s: float
    """When the last forward ends."""
    backward_s: float
    """When the last backward ends."""
    groups: tuple[GroupRow, ...]
    events: tuple[Event, ...]

    @property
    def bubble(self) -> float:
        """The pipeline's idle fraction: 1 - the groups' compute over groups x iteration time."""
        if self.iteration_s <= 0 or not self.groups:
            return 0.0
        return 1.0 - sum(g.busy_s for g in self.groups) / (len(self.groups) * self.iteration_s)


def check_schedule(schedule: str, stages: int, microbatches: int, virtual: int) -> None:
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule '{schedule}' (known: {', '.join(SCHEDULES)})")
    if stages < 1 or microbatches < 1 or virtual < 1:
        raise ValueError(
            f"stages, micro-batches and virtual stages must be >= 1, got {stages}, {microbatches}, {virtual}"
        )
    if stages % virtual:
        raise ValueError(f"{virtual} virtual stages per group do not divide {stages} stages")
    if schedule == "interleaved-1f1b":
        if virtual < 2:
            raise ValueError("interleaved-1f1b needs at least 2 virtual stages per group")
        groups = stages // virtual
        if microbatches % groups:
            raise ValueError(
                f"interleaved-1f1b runs micro-batches in rounds of {groups} (one per group): "
                f"{microbatches} is not a multiple"
            )
    elif virtual != 1:
        raise ValueError(f"virtual stages are for interleaved-1f1b only, not '{schedule}'")


def group_order(schedule: str, stages: int, microbatches: int, virtual: int, group: int) -> list[Task]:
    """The tasks rank group `group` runs, in order."""
    check_schedule(schedule, stages, microbatches, virtual)
    M, S = microbatches, stages
    if schedule == "gpipe":
        return [Task("F", m, group) for m in range(M)] + [Task("B", m, group) for m in range(M)]
    if schedule in ("1f1b", "2bw"):
        warmup = min(S - group - 1, M)
        order = [Task("F", m, group) for m in range(warmup)]
        for i in range(M - warmup):
            order += [Task("F", warmup + i, group), Task("B", i, group)]
        return order + [Task("B", m, group) for m in range(M - warmup, M)]
    G, v = S // virtual, virtual
    total = M * v

    def virtual_task(kind: str, i: int) -> Task:
        chunk = (i // G) % v
        if kind == "B":
            chunk = v - 1 - chunk
        return Task(kind, (i // (G * v)) * G + i % G, chunk * G + group)

    warmup = min((G - group - 1) * 2 + (v - 1) * G, total)
    order = [virtual_task("F", i) for i in range(warmup)]
    for i in range(total - warmup):
        order += [virtual_task("F", warmup + i), virtual_task("B", i)]
    return order + [virtual_task("B", i) for i in range(total - warmup, total)]


def simulate_pipeline(
    costs: Sequence[StageCost], schedule: str, microbatches: int, virtual: int = 1
) -> PipelineRun:
    """One iteration of the pipeline (see the module docstring)."""
    S = len(costs)
    check_schedule(schedule, S, microbatches, virtual)
    if schedule == "2bw":
        return _two_buffered(costs, microbatches)
    G = S // virtual
    orders = [group_order(schedule, S, microbatches, virtual, g) for g in range(G)]
    events, _ = _run(costs, orders, G)
    tasks = _task_events(events, G)
    groups = []
    end = 0.0
    for g in range(G):
        last = max((e.end for e in tasks[g]), default=0.0)
        t = last
        for s in range(g, S, G):
            if costs[s].sync_s > 0:
                events.append(Event("sync", g, s, -1, t, t + costs[s].sync_s))
                t += costs[s].sync_s
        update = sum(costs[s].update_s for s in range(g, S, G))
        if update > 0:
            events.append(Event("update", g, g, -1, t, t + update))
            t += update
        end = max(end, t)
        groups.append(_group_row(g, orders[g], costs, tasks[g], last, G))
    forward_s = max((e.end for e in events if e.what == "F"), default=0.0)
    backward_s = max((e.end for e in events if e.what == "B"), default=0.0)
    return PipelineRun(
        schedule, microbatches, S, virtual, end, forward_s, backward_s, tuple(groups), tuple(events)
    )


def _task_events(events: Sequence[Event], G: int) -> list[list[Event]]:
    """Each group's forward and backward events, in the order of `events` (one pass, so that
    the per-group sums cost what the events do, not groups x events)."""
    out: list[list[Event]] = [[] for _ in range(G)]
    for e in events:
        if e.what in ("F", "B"):
            out[e.group].append(e)
    return out


def _run(
    costs: Sequence[StageCost], orders: Sequence[Sequence[Task]], G: int
) -> tuple[list[Event], dict[tuple[str, int, int], float]]:
    """Runs each group's tasks in order, always the one that can start earliest next. A task's
    end makes ready at most the next task of its own group and the one its output goes to (the
    group of the target stage): only those two are queued again, so the simulation costs about
    its tasks x log, not tasks x groups (the heap's order is by (start, group) alone, so which
    groups are re-queued does not change which task runs next)."""
    S = len(costs)
    arrive: dict[tuple[str, int, int], float] = {}
    """(kind, micro-batch, stage) -> when its input is on the stage's group."""
    done: dict[tuple[str, int, int], float] = {}
    link_free: dict[tuple[int, int], float] = {}
    free = [0.0] * G
    nxt = [0] * G
    events: list[Event] = []

    def ready(task: Task) -> float | None:
        if task.kind == "F":
            return 0.0 if task.stage == 0 else arrive.get(("F", task.microbatch, task.stage))
        if task.stage == S - 1:
            return done.get(("F", task.microbatch, task.stage))
        return arrive.get(("B", task.microbatch, task.stage))

    heap: list[tuple[float, int]] = []

    def push(g: int) -> None:
        if nxt[g] < len(orders[g]):
            at = ready(orders[g][nxt[g]])
            if at is not None:
                heapq.heappush(heap, (max(at, free[g]), g))

    for g in range(G):
        push(g)
    while heap:
        start, g = heapq.heappop(heap)
        if nxt[g] >= len(orders[g]):  # stale entry
            continue
        task = orders[g][nxt[g]]
        at = ready(task)
        if at is None or max(at, free[g]) != start:  # stale entry
            continue
        c = costs[task.stage]
        seconds = c.forward_s if task.kind == "F" else c.backward_s
        end = start + seconds
        events.append(Event(task.kind, g, task.stage, task.microbatch, start, end))
        done[(task.kind, task.microbatch, task.stage)] = end
        free[g] = end
        nxt[g] += 1
        target = task.stage + 1 if task.kind == "F" else task.stage - 1
        if 0 <= target < S:
            send = c.send_s if task.kind == "F" else c.send_back_s
            if target % G == g:  # same group: no transfer
                arrive[(task.kind, task.microbatch, target)] = end
            else:
                link = (task.stage, target)
                t0 = max(end, link_free.get(link, 0.0))
                link_free[link] = t0 + send
                arrive[(task.kind, task.microbatch, target)] = t0 + send
                if send > 0:
                    what = "send" if task.kind == "F" else "send_back"
                    events.append(Event(what, g, task.stage, task.microbatch, t0, t0 + send))
            if target % G != g:
                push(target % G)
        push(g)
    stuck = [g for g in range(G) if nxt[g] < len(orders[g])]
    if stuck:
        raise ValueError(
            f"the schedule deadlocks: group {stuck[0]} waits at {orders[stuck[0]][nxt[stuck[0]]]}"
        )
    return events, done


def _group_row(
    g: int, order: Sequence[Task], costs: Sequence[StageCost], tasks: Sequence[Event], last: float, G: int
) -> GroupRow:
    """Group `g`'s row; `tasks`: its forward and backward events."""
    busy = sum(e.end - e.start for e in tasks)
    inflight = peak = 0
    held = peak_bytes = 0.0
    for task in order:
        step = 1 if task.kind == "F" else -1
        inflight += step
        held += step * costs[task.stage].activation_bytes
        peak = max(peak, inflight)
        peak_bytes = max(peak_bytes, held)
    stages = tuple(range(g, len(costs), G))
    return GroupRow(g, stages, busy, 1.0 - busy / last if last > 0 else 0.0, peak, peak_bytes)


STREAM = 3
"""2BW: batches simulated back to back to measure the steady-state period."""


def _two_buffered(costs: Sequence[StageCost], microbatches: int) -> PipelineRun:
    S, M = len(costs), microbatches
    orders = [group_order("1f1b", S, STREAM * M, 1, g) for g in range(S)]
    events, done = _run(costs, orders, S)
    first = max(done[("B", M - 1, s)] for s in range(S))
    last = max(done[("B", STREAM * M - 1, s)] for s in range(S))
    period = (last - first) / (STREAM - 1)
    update = max(c.update_s for c in costs)
    sync = max(c.sync_s for c in costs)
    iteration = max(period + update, sync)
    window = [e for e in events if (e.microbatch // M) == 1]  # the middle batch, in steady state
    shift = min((e.start for e in window), default=0.0)
    shown = tuple(
        Event(e.what, e.group, e.stage, e.microbatch - M, e.start - shift, e.end - shift) for e in window
    )
    groups = []
    tasks = _task_events(events, S)
    for g in range(S):
        row = _group_row(g, group_order("1f1b", S, M, 1, g), costs, tasks[g], period, S)
        busy = M * (costs[g].forward_s + costs[g].backward_s)
        groups.append(
            GroupRow(
                g,
                row.stages,
                busy,
                max(0.0, 1.0 - busy / iteration) if iteration > 0 else 0.0,
                row.inflight,
                row.inflight_bytes,
            )
        )
    fwd = max((e.end for e in shown if e.what == "F"), default=0.0)
    bwd = max((e.end for e in shown if e.what == "B"), default=0.0)
    return PipelineRun("2bw", M, S, 1, iteration, fwd, bwd, tuple(groups), shown)


def chrome_trace(run: PipelineRun, label: str = "pipeline") -> dict:
    """The simulated iteration as a Chrome trace (JSON object; open it in Perfetto or
    chrome://tracing): one process per rank group, a compute and a link thread each."""
    trace = []
    for g in run.groups:
        trace.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": g.group,
                "args": {
                    "name": f"group {g.group} (stage{'s' if len(g.stages) > 1 else ''} "
                    f"{','.join(map(str, g.stages))})"
                },
            }
        )
        for tid, name in ((0, "compute"), (1, "send"), (2, "sync")):
            trace.append(
                {"ph": "M", "name": "thread_name", "pid": g.group, "tid": tid, "args": {"name": name}}
            )
    tids = {"F": 0, "B": 0, "update": 0, "send": 1, "send_back": 1, "sync": 2}
    for e in run.events:
        name = e.what if e.microbatch < 0 else f"{e.what} mb{e.microbatch} s{e.stage}"
        trace.append(
            {
                "ph": "X",
                "name": name,
                "cat": e.what,
                "pid": e.group,
                "tid": tids[e.what],
                "ts": e.start * 1e6,
                "dur": (e.end - e.start) * 1e6,
                "args": {"stage": e.stage, "microbatch": e.microbatch},
            }
        )
    return {
        "traceEvents": trace,
        "displayTimeUnit": "ms",
        "otherData": {"label": label, "schedule": run.schedule},
    }


__all__ = [
    "SCHEDULES",
    "Event",
    "GroupRow",
    "PipelineRun",
    "StageCost",
    "Task",
    "check_schedule",
    "chrome_trace",
    "group_order",
    "simulate_pipeline",
]
