"""Gradient synchronization of weights held in copies (data parallelism without a replicate op).

A weight with copy degree > 1 used directly by ops has one partial gradient per copy; the
logical gradient is their sum, so the ranks holding copies of one piece all-reduce it. As DDP
does, the gradients of each copy group are cut into buckets (`patterns.gradient_buckets`:
the plan's weights in reverse order, at most `--bucket-mb` MiB each, 25 by default) and a
bucket is all-reduced, asynchronously, as soon as the backward has produced every gradient in
it (a `register_post_accumulate_grad_hook` on each weight piece), so the reduction overlaps the
rest of the backward. A copy group's buckets start strictly in their fixed order (a bucket that
is complete waits for the ones before it), so every rank of the group issues the same
collectives in the same order whatever order its gradients arrive in. Each copy group has a
process group of its own, so these collectives never interleave with the forward/backward ones.
`finish` starts what is left (a weight this step gave no gradient reduces zeros) and waits for
all of it before the optimizer step.

With `--no-overlap` (and in pipelined programs, whose schedule accumulates each gradient over
several backward passes) nothing starts during the backward: `finish` reduces every bucket
after it. The sums are the same either way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from unityc.runtime.comm import Communicator
from unityc.runtime.patterns import BUCKET_BYTES, gradient_buckets
from unityc.runtime.plan import Layout


class _Bucket:
    """Gradients reduced by one collective: their pieces, flattened while in flight."""

    def __init__(self, params: list[torch.Tensor]):
        self.params = params
        self.waiting: set[int] = set()
        self.work: Any = None
        self.flat: torch.Tensor | None = None

    def start(self, group: Any) -> None:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        self.flat = torch.cat([g.reshape(-1) for g in grads])
        self.work = dist.all_reduce(self.flat, group=group, async_op=True)

    def wait(self) -> None:
        assert self.work is not None and self.flat is not None
        self.work.wait()
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = self.flat[offset : offset + n].view_as(p)
            offset += n
        self.work = self.flat = None


class _Queue:
    """One copy group's buckets on this rank, started in order."""

    def __init__(self, group: Any, buckets: list[_Bucket]):
        self.group, self.buckets = group, buckets
        self.started = 0

    def reset(self) -> None:
        self.started = 0
        for bucket in self.buckets:
            bucket.waiting = {id(p) for p in bucket.params}

    def ready(self, bucket: _Bucket, param: torch.Tensor) -> None:
        bucket.waiting.discard(id(param))
        while self.started < len(self.buckets) and not self.buckets[self.started].waiting:
            self.start_next()

    def start_next(self) -> None:
        self.buckets[self.started].start(self.group)
        self.started += 1

    def finish(self) -> None:
        while self.started < len(self.buckets):
            self.start_next()


class GradientSync:
    """The all-reduces of this rank's weight copies; `begin` before the backward, `finish` after."""

    def __init__(
        self,
        comm: Communicator,
        layouts: Mapping[str, Layout],
        weights: Mapping[str, torch.Tensor],
        bucket_bytes: int = BUCKET_BYTES,
        overlap: bool = True,
    ):
        order: dict[tuple[int, ...], list[str]] = {}
        for key, layout in layouts.items():  # plan order: the same on every rank
            for ranks in layout.copy_groups():
                order.setdefault(ranks, []).append(key)
        groups = comm.new_groups(list(order))  # a collective: every rank creates every group
        self.overlap = overlap
        self.armed = False
        self.early = self.total = 0
        """Buckets started during a backward, and all buckets reduced, over the run so far."""
        self.queues: list[_Queue] = []
        for ranks, keys in order.items():
            if comm.rank not in ranks:
                continue
            params = [weights[k] for k in reversed(keys) if k in weights]  # as the backward makes them
            sizes = [(p.numel() * p.element_size(), str(p.dtype)) for p in params]
            buckets = [_Bucket([params[i] for i in b]) for b in gradient_buckets(sizes, bucket_bytes)]
            queue = _Queue(groups[ranks], buckets)
            self.queues.append(queue)
            if overlap:
                for bucket in buckets:
                    for p in bucket.params:
                        p.register_post_accumulate_grad_hook(self._hook(queue, bucket))

    @property
    def buckets(self) -> int:
        return sum(len(q.buckets) for q in self.queues)

    def _hook(self, queue: _Queue, bucket: _Bucket) -> Any:
        def hook(param: torch.Tensor) -> None:
            if self.armed:
                queue.ready(bucket, param)

        return hook

    def begin(self) -> None:
        """Before the backward: buckets start as their gradients are produced (with overlap)."""
        for queue in self.queues:
            queue.reset()
        self.armed = self.overlap

    def finish(self) -> None:
        """After the backward: starts the buckets not started yet, in order, and waits for all;
        every gradient is then the sum over its copies."""
        self.armed = False
        for queue in self.queues:
            self.early += queue.started
            self.total += len(queue.buckets)
            queue.finish()
        for queue in self.queues:
            for bucket in queue.buckets:
                bucket.wait()
        for queue in self.queues:
            queue.started = 0
