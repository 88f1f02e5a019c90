"""The exchange of a context-parallel attention (`pcg.attention` with `context`), priced as
`runtime/ring_attention.py` runs it."""

from __future__ import annotations

from collections.abc import Sequence

from unityc.cost.communication import collective_time
from unityc.cost.compute import OpCost, Piece
from unityc.cost.schedule import Comm
from unityc.machine.spec import Machine


def context_exchanges(
    exchange: str,
    groups: Sequence[tuple[int, ...]],
    wq: Piece,
    wk: Piece,
    out: Piece,
    machine: Machine,
    cost: OpCost,
) -> tuple[list[Comm], list[Comm]]:
    """Forward and backward communication of each context group (the devices of tasks that
    differ only in the context factor, in chunk order); `wq`, `wk`: a task's projection pieces
    (its heads), `out`: its result piece, `cost`: one task's compute.

    "ring": C-1 steps, each sending the task's projected K/V block to the next task while it
    attends the block it holds, so only what the send takes beyond the block's compute is
    exposed: (C-1)·max(0, send - compute/C) forward; in backward each step also passes the dK/dV
    accumulators (twice the bytes) and a last hop brings them home. "all-to-all": q, k, v and
    the output each traded once between rows and heads (alpha-beta), forward and backward alike."""
    batch, rows = out.shape[0], out.shape[1]
    element = out.nbytes // max(out.numel, 1)
    q_bytes = batch * rows * wq.shape[0] * element
    block = 2 * batch * rows * wk.shape[0] * element  # K and V of this task's rows
    fwd: list[Comm] = []
    bwd: list[Comm] = []
    for devices in groups:
        degree = len(devices)
        if exchange == "all-to-all":
            for nbytes in (q_bytes, block // 2, block // 2, q_bytes):
                seconds = collective_time("all_to_all", nbytes, devices, machine)
                fwd.append(Comm(devices, seconds, nbytes))
                bwd.append(Comm(devices, seconds, nbytes))
            continue
        pairs = [(a, devices[(i + 1) % degree]) for i, a in enumerate(devices)]

        def send(nbytes: int, pairs: list[tuple[int, int]] = pairs) -> float:
            return max(collective_time("p2p", nbytes, pair, machine) for pair in pairs)

        exposed = (degree - 1) * max(0.0, send(block) - cost.fwd_s / degree)
        fwd.append(Comm(devices, exposed, (degree - 1) * block))
        exposed = (degree - 1) * max(0.0, send(2 * block) - cost.bwd_s / degree) + send(block)
        bwd.append(Comm(devices, exposed, degree * 2 * block))
    return fwd, bwd
