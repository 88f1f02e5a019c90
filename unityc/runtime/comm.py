"""Collectives on this rank's pieces, with exact gradients, in one global order.

`Communicator.run(c, x)` executes one `Collective` with torch.distributed: every rank in
`c.ranks` calls it; a rank passes its input piece (or None) and gets its output piece (or None).

Gradients: `Exchange` wraps one collective as an autograd Function whose backward runs the dual
collective (scatter <-> gather, broadcast <-> reduce, all_reduce <-> all_reduce, reduce_scatter
<-> all_gather, all_to_all <-> all_to_all, p2p <-> p2p reversed). So partition and combine,
replicate and reduce are each other's backward, and every gradient is exact (no W-fold sums).

Ordering: every rank must enter the backward collectives in the same order, including ranks that
only send (their forward output is nothing a loss depends on). Each Exchange therefore also
takes and returns a scalar *token*; chaining the tokens makes every rank's backward visit its
collectives in exactly the reverse of the forward order, and the final token is a root of the
backward pass on every rank, so no rank skips a collective its peers wait in.

`Communicator.start` launches an all-gather or reduce-scatter without waiting (the matmuls of
`regather.Overlapped` run meanwhile); an `Exchange` whose output's one reader ran its dual
that way (`ctx.reduced`) moves nothing in backward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from unityc.runtime.plan import Collective, torch_dtype


class Communicator:
    """This rank's process groups (created by every rank, in one order) and collectives."""

    def __init__(
        self,
        rank: int,
        world: int,
        groups: Sequence[tuple[int, ...]],
        device: torch.device,
        float_dtype: torch.dtype | None = None,
        timeout: timedelta | None = None,
    ):
        self.rank = rank
        self.world = world
        self.device = device
        self.float_dtype = float_dtype
        """Replaces every floating-point dtype of the plan (a float64 run)."""
        self.timeout = timeout
        """How long a collective of this rank's groups waits for its peers (None: torch's default)."""
        # Creating a group is a collective call on every rank: the program lists every group up
        # front and every rank makes them in that order.
        self.groups: dict[tuple[int, ...], Any] = {}
        for ranks in groups:
            self.groups[ranks] = None if len(ranks) == world else dist.new_group(list(ranks), timeout)

    def group(self, ranks: tuple[int, ...]) -> Any:
        """The process group of `ranks` (None: the default group of all ranks)."""
        if ranks not in self.groups:
            raise KeyError(f"no process group for ranks {list(ranks)}: the plan's groups must list it")
        return self.groups[ranks]

    def new_groups(self, groups: Sequence[tuple[int, ...]]) -> dict[tuple[int, ...], Any]:
        """Fresh process groups (own communicators), e.g. for gradient synchronization."""
        return {ranks: dist.new_group(list(ranks), self.timeout) for ranks in groups}

    # --- one collective ------------------------------------------------------------------

    def run(self, c: Collective, x: torch.Tensor | None) -> torch.Tensor | None:
        """This rank's output piece of `c` (None if it holds none); `x` is its input piece."""
        if self.rank not in c.ranks:
            return None
        if c.dtype == "bool":  # collectives reduce numbers, not bools: move bytes
            out = self.run(_as_bytes(c), None if x is None else x.to(torch.uint8))
            return None if out is None else out.bool()
        x = None if x is None else x.contiguous()
        return getattr(self, f"_{c.kind}")(c, x, self.group(c.ranks) if c.kind != "p2p" else None)

    def start(self, c: Collective, x: torch.Tensor) -> Callable[[], torch.Tensor]:
        """Launches `c` (an all_gather or reduce_scatter among its members, this rank one of
        them) without waiting: returns the wait, which gives this rank's output piece. The
        other kinds run at once. The same sums in the same order as `run`, so the same bits."""
        assert self.rank in c.ins and self.rank in c.outs, f"{c.kind} started on a rank outside it"
        x = x.contiguous()
        group = self.group(c.ranks)
        if c.kind == "all_gather" and c.dtype != "bool":
            slots = [self._empty(c.shape, c) for _ in c.ranks]
            work = dist.all_gather(slots, x, group=group, async_op=True)

            def gathered() -> torch.Tensor:
                work.wait()
                return torch.cat([slots[c.ranks.index(r)] for r in c.ins], c.dim)

            return gathered
        if c.kind == "reduce_scatter" and c.dtype != "bool":
            parts = [p.contiguous() for p in x.chunk(len(c.outs), c.dim)]
            out = self._empty(c.out_shape, c)
            sent = [parts[c.outs.index(r)] for r in c.ranks]
            work = dist.reduce_scatter(out, sent, op=dist.ReduceOp.SUM, group=group, async_op=True)

            def scattered() -> torch.Tensor:
                work.wait()
                del sent[:]  # the inputs live until the collective is done
                return out

            return scattered
        y = self.run(c, x)
        assert y is not None
        return lambda: y

    def dtype(self, name: str) -> torch.dtype:
        dtype = torch_dtype(name)
        return self.float_dtype if self.float_dtype is not None and dtype.is_floating_point else dtype

    def _empty(self, shape: Sequence[int], c: Collective) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=self.dtype(c.dtype), device=self.device)

    def _zeros(self, shape: Sequence[int], c: Collective) -> torch.Tensor:
        return torch.zeros(tuple(shape), dtype=self.dtype(c.dtype), device=self.device)

    def _p2p(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        ops: list[dist.P2POp] = []
        received: torch.Tensor | None = None
        for src, dst in zip(c.ins, c.outs, strict=True):
            if src == self.rank:
                assert x is not None, "p2p source without its piece"
                ops.append(dist.P2POp(dist.isend, x, dst))
            if dst == self.rank:
                received = self._empty(c.shape, c)
                ops.append(dist.P2POp(dist.irecv, received, src))
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return received

    def _scatter(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        src = c.ins[0]
        out = self._empty(c.out_shape, c)
        chunks = None
        if self.rank == src:
            assert x is not None
            parts = [p.contiguous() for p in x.chunk(len(c.outs), c.dim)]
            # the root's own slot holds a chunk it discards when it receives none
            chunks = [parts[c.outs.index(r)] if r in c.outs else parts[0] for r in c.ranks]
        dist.scatter(out, chunks, src=src, group=group)
        return out if self.rank in c.outs else None

    def _gather(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        dst = c.outs[0]
        send = x if x is not None else self._zeros(c.shape, c)
        slots = [self._empty(c.shape, c) for _ in c.ranks] if self.rank == dst else None
        dist.gather(send, slots, dst=dst, group=group)
        if slots is None:
            return None
        return torch.cat([slots[c.ranks.index(r)] for r in c.ins], c.dim)

    def _broadcast(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        src = c.ins[0]
        buf = x.clone() if self.rank == src and x is not None else self._empty(c.shape, c)
        dist.broadcast(buf, src=src, group=group)
        return buf if self.rank in c.outs else None

    def _reduce(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        dst = c.outs[0]
        buf = x.clone() if x is not None else self._zeros(c.shape, c)
        dist.reduce(buf, dst=dst, op=dist.ReduceOp.SUM, group=group)
        return buf if self.rank == dst else None

    def _all_reduce(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        assert x is not None and set(c.ins) == set(c.outs), "all_reduce needs one piece on every member"
        buf = x.clone()
        dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
        return buf

    def _reduce_scatter(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        assert x is not None and set(c.ins) == set(c.outs), "reduce_scatter needs one piece on every member"
        parts = [p.contiguous() for p in x.chunk(len(c.outs), c.dim)]
        out = self._empty(c.out_shape, c)
        dist.reduce_scatter(out, [parts[c.outs.index(r)] for r in c.ranks], op=dist.ReduceOp.SUM, group=group)
        return out

    def _all_gather(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        assert x is not None and set(c.ins) == set(c.outs), "all_gather needs one piece on every member"
        slots = [self._empty(c.shape, c) for _ in c.ranks]
        dist.all_gather(slots, x, group=group)
        return torch.cat([slots[c.ranks.index(r)] for r in c.ins], c.dim)

    def _all_to_all(self, c: Collective, x: torch.Tensor | None, group: Any) -> torch.Tensor | None:
        assert x is not None and set(c.ins) == set(c.outs), "all_to_all needs one piece on every member"
        parts = [p.contiguous() for p in x.chunk(len(c.outs), c.dst)]
        chunk = list(c.shape)
        chunk[c.dst] //= len(c.outs)
        slots = [self._empty(chunk, c) for _ in c.ranks]
        dist.all_to_all(slots, [parts[c.outs.index(r)] for r in c.ranks], group=group)
        return torch.cat([slots[c.ranks.index(r)] for r in c.ins], c.dim)


def _as_bytes(c: Collective) -> Collective:
    return Collective(c.kind, c.ins, c.outs, c.shape, "uint8", c.dim, c.dst)


class Exchange(torch.autograd.Function):
    """One collective with its dual as backward, threaded on the token chain."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, comm: Communicator, c: Collective, token: torch.Tensor, x: torch.Tensor | None
    ) -> tuple[torch.Tensor, ...]:
        ctx.comm, ctx.collective, ctx.had_input = comm, c, x is not None
        y = comm.run(c, None if x is None else x.detach())
        token_out = token.new_zeros(())
        return (token_out,) if y is None else (token_out, y)

    @staticmethod
    def backward(ctx: Any, grad_token: torch.Tensor, *grads: torch.Tensor) -> tuple[Any, ...]:
        c: Collective = ctx.collective
        dy = grads[0] if grads else None
        done = getattr(ctx, "reduced", None)  # the dual already run by the output's one reader
        ctx.reduced = None
        dx = ctx.comm.run(c.dual(), dy) if done is None else done
        return None, None, torch.zeros_like(grad_token), dx if ctx.had_input else None
