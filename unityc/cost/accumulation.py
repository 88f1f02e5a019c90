"""Gradient accumulation in the plain estimate: k micro-batches run forward and backward one after
another, their gradients summed in place, one gradient sync and update after the last."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from unityc.cost.schedule import Comm, Schedule, Step, Timeline, simulate
from unityc.graph import Graph


def accumulation_note(graph: Graph, k: int, parts: int) -> str:
    """What an estimate of a plan with gradient accumulation says about it."""
    inputs = [n.types[0] for n in graph.nodes.values() if n.op == "pcg.input" and n.types[0].rank]
    rows = inputs[0].shape[0] // inputs[0].shard[0] // parts if inputs else 0
    return (
        f"gradient accumulation: {k} steps of {rows} row(s) per piece, gradients summed, "
        "one gradient sync and update"
    )


def accumulated(
    last: Schedule,
    graph: Graph,
    order: list[int],
    steps: list[Step],
    mult: Mapping[int, int],
    loss: int | None,
    k: int,
) -> Schedule:
    """The schedule of k accumulation steps, `last` the final one's (forward, backward, gradient
    sync, update): the k - 1 before it run forward and backward only, their gradients summed in
    place, as the program runs them (`no_sync`); a ZeRO-2/3 weight's gradient is reduce-scattered
    after each backward all the same (the program's hook does, so its shard is all it keeps), the
    all-gather of its updated shards and the update once."""
    deferred = [
        replace(step, grad_reduce=(), update=(), grad_sync=per_backward(step, graph.nodes[nid].zero))
        for nid, step in zip(order, steps, strict=True)
    ]
    before = simulate(deferred, mult, loss)
    period = before.iteration_s
    extra = (k - 1) * period
    timelines = {}
    for d in set(before.timelines) | set(last.timelines):
        runs = [(j * period, before.timelines.get(d)) for j in range(k - 1)]
        runs.append((extra, last.timelines.get(d)))
        timelines[d] = Timeline(
            [(s + t, e + t) for t, line in runs if line is not None for s, e in line.compute],
            [(s + t, e + t) for t, line in runs if line is not None for s, e in line.comm],
        )
    return replace(
        last,
        iteration_s=last.iteration_s + extra,
        forward_s=last.forward_s + extra,
        backward_s=last.backward_s + extra,
        timelines=timelines,
    )


def per_backward(step: Step, zero: int) -> tuple[Comm, ...]:
    """The gradient collectives of a weight's step that run after every backward: ZeRO-2/3's
    reduce-scatter (`pricing.weight_parts` lists it first, then ZeRO-2's all-gather of the updated
    shards, one per copy group each)."""
    if zero == 3:
        return step.grad_sync
    if zero == 2:
        return step.grad_sync[: len(step.grad_sync) // 2]
    return ()


__all__ = ["accumulated", "accumulation_note", "per_backward"]
