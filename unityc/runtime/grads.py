"""Gradient synchronization of weights held in copies (data parallelism without a replicate op).

A weight with copy degree > 1 used directly by ops has one partial gradient per copy; the
logical gradient is their sum, so the ranks holding copies of one piece all-reduce it. Gradients
are flattened into buckets per group (as DDP does) and reduced with asynchronous collectives on
process groups of their own, so they never interleave with the forward/backward collectives.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist

from unityc.runtime.comm import Communicator
from unityc.runtime.plan import Layout

BUCKET_BYTES = 25 * 1024 * 1024


class GradientSync:
    def __init__(
        self,
        comm: Communicator,
        layouts: Mapping[str, Layout],
        weights: Mapping[str, torch.Tensor],
        bucket_bytes: int = BUCKET_BYTES,
    ):
        order: dict[tuple[int, ...], list[str]] = {}
        for key, layout in layouts.items():  # plan order: the same on every rank
            for ranks in layout.copy_groups():
                order.setdefault(ranks, []).append(key)
        groups = comm.new_groups(list(order))  # a collective: every rank creates every group
        self.buckets: list[tuple[object, list[torch.Tensor]]] = []
        for ranks, keys in order.items():
            if comm.rank not in ranks:
                continue
            params = [weights[k] for k in keys if k in weights]
            for bucket in _buckets(params, bucket_bytes):
                self.buckets.append((groups[ranks], bucket))

    def run(self) -> None:
        """All-reduces (sums) the gradients of every copy group this rank belongs to."""
        pending = []
        for group, params in self.buckets:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            flat = torch.cat([g.reshape(-1) for g in grads])
            pending.append((dist.all_reduce(flat, group=group, async_op=True), flat, params))
        for work, flat, params in pending:
            work.wait()
            offset = 0
            for p in params:
                n = p.numel()
                p.grad = flat[offset : offset + n].view_as(p)
                offset += n


def _buckets(params: list[torch.Tensor], limit: int) -> list[list[torch.Tensor]]:
    out: list[list[torch.Tensor]] = []
    size = 0
    for p in params:
        nbytes = p.numel() * p.element_size()
        if not out or size + nbytes > limit or p.dtype != out[-1][0].dtype:
            out.append([])
            size = 0
        out[-1].append(p)
        size += nbytes
    return out
