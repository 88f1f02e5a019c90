"""Backward collectives of sequence parallelism that run beside a matmul, as the program runs
them (`runtime.regather.Overlapped`, after Megatron-LM's
`LinearWithGradAccumulationAndAsyncCommunication`): the one rule the estimate and the search
read (`steps.StepBuilder`).

An op outside a checkpoint region that keeps a sequence-parallel all-gather's shard
(`backward.regathered`) and reads the gathered tensor as a linear's or matmul's left operand
(a `pcg.linear`, a `pcg.matmul`, or the q, k, v projections of a `pcg.attention` without
context parallelism) launches the all-gather again at the start of its backward and computes
the input's gradient meanwhile; when it is the gather's only reader (one operand in the whole
graph), it also launches the gather's dual reduce-scatter of that gradient and computes the
weight's gradient meanwhile. Each collective's exposed time is what outlasts the matmul it
runs beside: max(0, collective - matmul) on each device, the matmul's seconds being its share
of the op's backward FLOPs times the op's backward seconds there (`beside`). The forward
collectives (the column-parallel all-gather, the row-parallel reduce-scatter) stay exposed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from unityc.cost.compute import CONTEXT_DEGREE, Piece, Work
from unityc.cost.schedule import Comm

OVERLAPPED = ("pcg.linear", "pcg.matmul", "pcg.attention")
"""The ops whose kernel runs a matmul of a gathered operand as `Overlapped`."""


def matmul_shares(
    kind: str, attrs: Mapping[str, Any], operands: Sequence[Piece | None], position: int, bwd: Work
) -> tuple[float, float]:
    """(input gradient, weight gradient): the shares of an op's backward FLOPs (`bwd`, one task)
    of the two matmuls its backward runs for a gathered operand at `position`; (0, 0) where the
    program runs no `Overlapped` for it (the weight gradient's is 0 for attention, whose
    gathered input has three readers)."""
    if kind not in OVERLAPPED or bwd.flops <= 0:
        return 0.0, 0.0
    if kind == "pcg.attention":
        if position > 2 or attrs.get(CONTEXT_DEGREE, 1) > 1:
            return 0.0, 0.0
        x, w = operands[position], operands[3 + position]
        if x is None or w is None:
            return 0.0, 0.0
        return 2 * x.numel * w.shape[0] / bwd.flops, 0.0
    x, w = operands[0], operands[1]
    if position != 0 or x is None or w is None or len(w.shape) != 2:
        return 0.0, 0.0
    rows = w.shape[0] if kind == "pcg.linear" else w.shape[1]
    main = 2 * x.numel * rows / bwd.flops
    return main, main


def beside(share: float, bwd: Sequence[tuple[int, float]]) -> dict[int, float]:
    """Per device, the seconds of a matmul that is `share` of an op's backward (`bwd`: its
    (device, seconds))."""
    return {d: share * s for d, s in bwd} if share > 0 else {}


def exposed(comms: Sequence[Comm], matmul: Mapping[int, float]) -> tuple[Comm, ...]:
    """The collectives as the schedule sees them when each runs beside `matmul` (per device,
    seconds): what outlasts the matmul on the member that finishes it first."""
    if not matmul:
        return tuple(comms)
    out = []
    for c in comms:
        hidden = min((matmul.get(d, 0.0) for d in c.devices), default=0.0)
        out.append(c if hidden <= 0 else replace(c, seconds=max(0.0, c.seconds - hidden)))
    return tuple(out)


__all__ = ["OVERLAPPED", "beside", "exposed", "matmul_shares"]
