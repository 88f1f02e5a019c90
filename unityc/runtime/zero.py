"""Sharded data parallelism (ZeRO) and the persistent bytes a rank holds.

A weight the plan marks `zero = s` is held in n >= 2 copies (one per rank of its copy group);
this rank keeps shard i of it: elements [i*m, (i+1)*m) of the flattened piece, m = ceil(numel/n)
(the last shard padded with zeros, which Adam and SGD keep at zero). The optimizer updates the
shard only; the math is that of plain copies (both optimizers are element-wise).

* ZeRO-1: the piece and its gradient stay whole; the gradients are all-reduced with the other
  copies (`grads.GradientSync`); the shard's gradient is this rank's slice; after the step the
  updated shards are all-gathered into the piece.
* ZeRO-2: the piece stays whole; its gradient is reduce-scattered into the shard's gradient as
  soon as the backward has accumulated it (a post-accumulate-grad hook), and dropped.
* ZeRO-3: only the shard is kept. Reading the weight in forward all-gathers it (`GatherWeight`,
  whose backward reduce-scatters the gradient into the shard's); the forward drops the gathered
  piece after its last use, and every tensor autograd saves from it is packed as a reference to
  the weight (`saved_tensors_hooks`) and gathered again when the backward unpacks it.

Why not torch's own: `ZeroRedundancyOptimizer` shards by whole parameters (ranks own different
parameters), and FSDP2's `fully_shard` shards `nn.Module` parameters along dim 0 and drives the
gathers from module hooks; a generated program's forward is one function over pieces of
weights, some held in copies by only a subset of ranks, so neither maps onto it. The collectives
here are torch.distributed's `all_gather_single` and `reduce_scatter_single` on one process
group per copy group, created by every rank in plan order.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist

from unityc.runtime.comm import Communicator
from unityc.runtime.plan import Layout, Plan


class Shard:
    """One ZeRO weight piece on this rank."""

    def __init__(
        self, key: str, stage: int, piece: torch.Tensor, group: Any, ranks: tuple[int, ...], rank: int
    ):
        self.key, self.stage, self.group = key, stage, group
        self.n = len(ranks)
        self.index = ranks.index(rank)
        self.shape = tuple(piece.shape)
        self.numel = piece.numel()
        self.m = math.ceil(self.numel / self.n)
        flat = torch.zeros(self.m * self.n, dtype=piece.dtype, device=piece.device)
        flat[: self.numel] = piece.detach().reshape(-1)
        self.shard = torch.nn.Parameter(flat[self.index * self.m : (self.index + 1) * self.m].clone())
        self.full: torch.nn.Parameter | None = None if stage == 3 else piece  # type: ignore[assignment]

    def flat_range(self) -> tuple[int, int]:
        """The elements [start, stop) of the flattened piece that this rank's shard holds."""
        start = min(self.index * self.m, self.numel)
        return start, min(start + self.m, self.numel)

    def gathered(self) -> torch.Tensor:
        """The whole piece from every copy's shard (no autograd)."""
        flat = torch.empty(self.m * self.n, dtype=self.shard.dtype, device=self.shard.device)
        dist.all_gather_single(flat, self.shard.detach(), group=self.group)
        return flat[: self.numel].view(self.shape)

    def scattered(self, grad: torch.Tensor) -> torch.Tensor:
        """This rank's shard of the sum of every copy's gradient of the whole piece."""
        flat = torch.zeros(self.m * self.n, dtype=grad.dtype, device=grad.device)
        flat[: self.numel] = grad.reshape(-1)
        out = torch.empty(self.m, dtype=grad.dtype, device=grad.device)
        dist.reduce_scatter_single(out, flat, group=self.group)
        return out

    def own_slice(self, grad: torch.Tensor) -> torch.Tensor:
        """This rank's slice of a whole (already summed) gradient, zero-padded."""
        start, end = self.index * self.m, min((self.index + 1) * self.m, self.numel)
        flat = grad.reshape(-1)
        if end - start == self.m:
            return flat[start:end]
        out = torch.zeros(self.m, dtype=grad.dtype, device=grad.device)
        out[: max(end - start, 0)] = flat[start:end]
        return out


class GatherWeight(torch.autograd.Function):
    """ZeRO-3: the whole piece gathered from the shards; backward reduce-scatters."""

    @staticmethod
    def forward(ctx: Any, shard: torch.Tensor, owner: Shard) -> torch.Tensor:  # type: ignore[override]
        ctx.owner = owner
        return owner.gathered()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return ctx.owner.scattered(grad), None


class ForwardWeights(Mapping[str, torch.Tensor]):
    """The weights as the forward reads them: ZeRO-3 pieces gathered on each read."""

    def __init__(self, zero: Zero):
        self.zero = zero

    def __getitem__(self, key: str) -> torch.Tensor:
        shard = self.zero.shards.get(key)
        if shard is None or shard.stage != 3:
            return self.zero.weights[key]
        full = GatherWeight.apply(shard.shard, shard)
        self.zero.live[id(full)] = (weakref.ref(full), shard)
        return full

    def __iter__(self) -> Iterator[str]:
        return iter(self.zero.weights)

    def __len__(self) -> int:
        return len(self.zero.weights)


class Zero:
    """This rank's weights with their ZeRO shards: what the optimizer updates, what the forward
    reads, the collectives around the step, and the bytes kept."""

    def __init__(self, comm: Communicator, plan: Plan, weights: dict[str, torch.Tensor]):
        self.plan = plan
        order: dict[tuple[int, ...], None] = {}
        for key in plan.zero:  # plan order: every rank creates every group
            for ranks in plan.weights[key].copy_groups():
                order.setdefault(ranks)
        groups = comm.new_groups(list(order))
        self.weights = weights
        self.shards: dict[str, Shard] = {}
        for key, stage in plan.zero.items():
            piece = weights.get(key)
            if piece is None:
                continue
            ranks = next(r for r in plan.weights[key].copy_groups() if comm.rank in r)
            self.shards[key] = Shard(key, stage, piece, groups[ranks], ranks, comm.rank)
            if stage == 3:  # the whole piece is not kept
                weights[key] = self.shards[key].shard
            if stage == 2:
                piece.register_post_accumulate_grad_hook(self._reduce_scatter(self.shards[key]))
        self.live: dict[int, tuple[weakref.ref[torch.Tensor], Shard]] = {}
        self.forward_weights = ForwardWeights(self)

    @property
    def sync_layouts(self) -> dict[str, Layout]:
        """The weights whose whole gradients are all-reduced across copies (ZeRO-1 included)."""
        return {k: v for k, v in self.plan.weights.items() if self.plan.zero.get(k, 0) < 2}

    def held(self) -> tuple[dict[str, torch.Tensor], dict[str, tuple[int, int]]]:
        """What a checkpoint saves and loads: by weight key, the tensor the optimizer updates (a
        ZeRO weight's shard, else the piece), and for the shards the elements [start, stop) of
        the flattened piece each holds (the padding is not the weight's)."""
        tensors = {k: self.shards[k].shard if k in self.shards else p for k, p in self.weights.items()}
        flats = {k: s.flat_range() for k, s in self.shards.items()}
        return tensors, flats

    def params(self) -> list[torch.Tensor]:
        """What the optimizer updates: whole pieces, or the shards of ZeRO weights."""
        return [self.shards[k].shard if k in self.shards else p for k, p in self.weights.items()]

    def _reduce_scatter(self, shard: Shard) -> Any:
        def hook(piece: torch.Tensor) -> None:  # once per backward: per micro-batch in a pipeline
            assert piece.grad is not None
            scattered = shard.scattered(piece.grad)
            shard.shard.grad = scattered if shard.shard.grad is None else shard.shard.grad + scattered
            piece.grad = None

        return hook

    # --- the step ------------------------------------------------------------------------

    @contextlib.contextmanager
    def saving(self) -> Iterator[None]:
        """The forward: tensors saved from gathered ZeRO-3 pieces are packed as references."""
        if not any(s.stage == 3 for s in self.shards.values()):
            yield
            return
        with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
            yield
        self.live.clear()

    def _pack(self, t: torch.Tensor) -> Any:
        base = t if t._base is None else t._base
        entry = self.live.get(id(base))
        if entry is None or entry[0]() is not base:
            return t
        return (entry[1], tuple(t.shape), t.stride(), t.storage_offset())

    @staticmethod
    def _unpack(packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        shard, shape, stride, offset = packed
        return shard.gathered().as_strided(shape, stride, offset)

    def after_sync(self) -> None:
        """ZeRO-1: each shard's gradient is its slice of the all-reduced whole gradient."""
        for shard in self.shards.values():
            if shard.stage == 1 and shard.full is not None and shard.full.grad is not None:
                shard.shard.grad = shard.own_slice(shard.full.grad)

    @torch.no_grad()
    def after_step(self) -> None:
        """ZeRO-1/2: the updated shards all-gathered into the whole pieces."""
        for shard in self.shards.values():
            if shard.full is not None:
                shard.full.copy_(shard.gathered())

    def zero_grad(self) -> None:
        for p in self.weights.values():
            p.grad = None
        for shard in self.shards.values():
            shard.shard.grad = None

    # --- what --check reads --------------------------------------------------------------

    def whole_weights(self) -> dict[str, torch.Tensor]:
        """Every local piece, ZeRO-3 ones gathered (a collective of their copy groups)."""
        return {k: self.shards[k].gathered() if self._sharded(k, 3) else p for k, p in self.weights.items()}

    def whole_grads(self) -> dict[str, torch.Tensor | None]:
        """Every local piece's summed gradient, ZeRO-2/3 ones gathered from the shards."""
        out: dict[str, torch.Tensor | None] = {}
        for key, p in self.weights.items():
            shard = self.shards.get(key)
            if shard is None or shard.stage < 2:
                out[key] = p.grad
                continue
            grad = shard.shard.grad if shard.shard.grad is not None else torch.zeros_like(shard.shard)
            flat = torch.empty(shard.m * shard.n, dtype=grad.dtype, device=grad.device)
            dist.all_gather_single(flat, grad, group=shard.group)
            out[key] = flat[: shard.numel].view(shard.shape)
        return out

    def _sharded(self, key: str, stage: int) -> bool:
        return key in self.shards and self.shards[key].stage >= stage

    def persistent_bytes(self, optimizer: torch.optim.Optimizer | None) -> tuple[int, int, int]:
        """(weights, gradients, optimizer state) this rank keeps, in the plan's dtypes: whole
        pieces or shards, the gradients the optimizer steps with (whole for ZeRO-0/1), and the
        optimizer's per-element state (Adam's m and v; its scalar step count is not counted)."""
        weights = grads = state = 0
        for key, p in self.weights.items():
            size = self.plan.weights[key].torch_dtype.itemsize
            shard = self.shards.get(key)
            weights += p.numel() * size  # the shard, for ZeRO-3
            grad = shard.shard.grad if shard is not None and shard.stage >= 2 else p.grad
            grads += 0 if grad is None else grad.numel() * size
            param = shard.shard if shard is not None else p
            if optimizer is not None:
                for name, value in optimizer.state.get(param, {}).items():
                    if name != "step" and isinstance(value, torch.Tensor):
                        state += value.numel() * size
        return weights, grads, state
