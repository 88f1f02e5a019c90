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
* ZeRO-3: only the shard is kept. Reading the weight in forward gathers it (`GatherWeight`,
  whose backward hands the gradient to the weight's bucket); the forward drops the gathered piece
  after its last use, and every tensor autograd saves from it is packed as a reference to the
  weight (`saved_tensors_hooks`) and gathered again when the backward unpacks it.

Buckets (FSDP2's techniques): a rank's ZeRO weights of one copy group, dtype and layer
(consecutive in plan order, the layer being the key up to its first numeric component, e.g.
`model.layers.3`) form a `Bucket` whose shards move in ONE collective: one all-gather of the
concatenated shards (copied out weight by weight, as FSDP2's `foreach_all_gather_copy_out`), one
reduce-scatter of the concatenated gradients. ZeRO-3's forward prefetches the next bucket of the
same group (an async all-gather issued when the bucket before it is first read, as FSDP2's
forward prefetch) and keeps the gathered bucket until another bucket is read (FSDP2 reshards
after each layer's forward); the backward gathers a bucket on its first unpack, prefetches the
bucket before it, and keeps it until every gathered read of the bucket has its gradient. A
bucket's reduce-scatter (ZeRO-2/3) is issued asynchronously as soon as the backward has produced
the gradient of every weight of it (FSDP2's post-backward reduce-scatter, overlapping the rest
of the backward) and waited for after the backward (`after_sync`); a bucket whose weights did
not all receive a gradient is reduce-scattered there. The updated shards of ZeRO-1/2 are
all-gathered bucket by bucket after the optimizer step. Every rank of a copy group runs the
same forward and backward, so every rank issues its group's collectives in the same order.

bf16 pieces (`Plan.bf16_pieces`: bf16-mixed, trained, every reader of the weight running in bf16
under autocast), ZeRO-1/2 ones as Megatron-LM's distributed optimizer and FSDP2's
`MixedPrecisionPolicy` keep them: the rank holds the whole piece in bf16 (`Shard.values`, what
the forward reads, through `HeldCast`) and its fp32 master shard (`Shard.shard`, what the
optimizer steps); the fp32 gradient of the whole piece accumulates in a zero-byte fp32 leaf
(`Shard.full`, a stride-0 parameter), into which `HeldCast`'s backward casts the bf16 gradient
as autocast's own cast would; after the step the master shards are cast to bf16 and all-gathered
into the pieces (half the bytes of the fp32 gather). 2 + 4 + 12/n bytes an element under Adam,
not 4 + 4 + 8/n plus autocast's 2-byte copy a step. A bf16 piece of a weight without ZeRO
(`Master`) keeps its whole fp32 master beside the bf16 values (Megatron-LM's bf16 parameters
with fp32 main parameters: 2 + 4 + 12 bytes, the same as an fp32 piece and its copy a step, now
held as weights); its master is updated from the gradient its copies all-reduced and cast into
the values after the step, no collective. The values are bf16(master), what autocast's cast of
the fp32 weight gives, so --check stays exact against the single-device reference.

Why not torch's own: `ZeroRedundancyOptimizer` shards by whole parameters (ranks own different
parameters), and FSDP2's `fully_shard` shards `nn.Module` parameters along dim 0 and drives the
gathers from module hooks; a generated program's forward is one function over pieces of
weights, some held in copies by only a subset of ranks, so neither maps onto it: this module
does what FSDP2 does (above) over those pieces. The collectives are torch.distributed's
`all_gather_single` and `reduce_scatter_single` on one process group per copy group, created by
every rank in plan order.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist

from unityc.runtime.comm import Communicator
from unityc.runtime.patterns import zero_buckets
from unityc.runtime.plan import Layout, Plan
from unityc.runtime.saved import SavedBytes, counting


class Shard:
    """One ZeRO weight piece on this rank."""

    def __init__(
        self,
        key: str,
        stage: int,
        piece: torch.Tensor,
        group: Any,
        ranks: tuple[int, ...],
        rank: int,
        bf16: bool = False,
    ):
        self.key, self.stage, self.group, self.ranks = key, stage, group, ranks
        self.n = len(ranks)
        self.index = ranks.index(rank)
        self.shape = tuple(piece.shape)
        self.numel = piece.numel()
        self.m = math.ceil(self.numel / self.n)
        flat = torch.zeros(self.m * self.n, dtype=piece.dtype, device=piece.device)
        flat[: self.numel] = piece.detach().reshape(-1)
        own = flat[self.index * self.m : (self.index + 1) * self.m].clone()
        self.shard = torch.nn.Parameter(own, requires_grad=piece.requires_grad)  # frozen: no gradient
        self.full: torch.nn.Parameter | None = None if stage == 3 else piece  # type: ignore[assignment]
        self.values: torch.Tensor | None = None
        """A bf16 piece (see the module docstring): the whole piece in bf16, what forwards read."""
        if bf16 and stage in (1, 2) and piece.requires_grad:
            self.values, self.full = _bf16_piece(piece)

    @property
    def gather_dtype(self) -> torch.dtype:
        """The dtype its shard moves in when gathered after the step (a bf16 piece's: bf16)."""
        return torch.bfloat16 if self.values is not None else self.shard.dtype

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


class Master:
    """A bf16 piece of a weight not sharded (see the module docstring): its whole fp32 master
    (what the optimizer steps), its bf16 values (what forwards read) and the zero-byte fp32 leaf
    its gradient accumulates in (what the gradient sync all-reduces)."""

    def __init__(self, piece: torch.Tensor):
        self.master = torch.nn.Parameter(piece.detach().clone())
        self.values, self.full = _bf16_piece(piece)


def _bf16_piece(piece: torch.Tensor) -> tuple[torch.Tensor, torch.nn.Parameter]:
    """A bf16 piece of `piece`: its bf16 values and the fp32 leaf its gradient accumulates in
    (stride 0: no bytes of its own; `HeldCast` reads the values as that leaf)."""
    leaf = torch.zeros((), dtype=piece.dtype, device=piece.device).expand(piece.shape)
    return piece.detach().to(torch.bfloat16), torch.nn.Parameter(leaf)


class Bucket:
    """ZeRO weights of one copy group, stage, dtype and layer whose shards move in one
    collective: rank r's part of the gathered buffer is its shards concatenated (shard i at
    `offsets[i]`), as FSDP2's flat all-gather input."""

    def __init__(self, shards: list[Shard]):
        self.shards = shards
        self.group, self.n = shards[0].group, shards[0].n
        self.offsets = list(itertools.accumulate((s.m for s in shards), initial=0))
        self.m = self.offsets[-1]
        self.reads = 0
        """ZeRO-3: gathered reads of this step whose gradient the backward has not handed in."""
        self.grads: dict[str, torch.Tensor] = {}
        """Gradients of whole pieces handed in and not yet reduce-scattered, by key."""
        self.pending: list[tuple[Any, torch.Tensor, frozenset[str]]] = []
        """Reduce-scatters issued and not yet waited for: (work, this rank's part, keys)."""

    def all_gather(self) -> tuple[Any, torch.Tensor]:
        """Issues the all-gather of every shard of the bucket (async): (work, buffer)."""
        dtype = self.shards[0].gather_dtype
        local = (
            torch.cat([s.shard.detach().to(dtype) for s in self.shards])
            if len(self.shards) > 1
            else self.shards[0].shard.detach().to(dtype)
        )
        out = torch.empty(self.n * self.m, dtype=local.dtype, device=local.device)
        return dist.all_gather_single(out, local, group=self.group, async_op=True), out

    def pieces(self, out: torch.Tensor) -> dict[str, torch.Tensor]:
        """The whole pieces, by key, from an all-gathered buffer (each copied out of the ranks'
        parts, unless it is the bucket's only weight)."""
        rows = out.view(self.n, self.m)
        return {
            s.key: rows[:, a : a + s.m].reshape(-1)[: s.numel].view(s.shape)
            for s, a in zip(self.shards, self.offsets, strict=False)
        }

    def copy_out(self, out: torch.Tensor, wholes: list[torch.Tensor]) -> None:
        """Copies an all-gathered buffer into each shard's whole piece (`wholes`, in shard order)
        in one strided copy per piece (rank r's shard is row r of its columns), not through
        `pieces`' intermediate copy: the step's all-gather writes the updated weights straight
        into them, as FSDP2's copy-out."""
        rows = out.view(self.n, self.m)
        for s, a, whole in zip(self.shards, self.offsets[:-1], wholes, strict=True):
            flat, full_rows = whole.view(-1), s.numel // s.m
            flat[: full_rows * s.m].view(full_rows, s.m).copy_(rows[:full_rows, a : a + s.m])
            if full_rows * s.m < s.numel:
                flat[full_rows * s.m :].copy_(rows[full_rows, a : a + s.numel - full_rows * s.m])

    def hand_in(self, key: str, grad: torch.Tensor) -> None:
        """A gradient of a whole piece (summed with one handed in before); once every weight of
        the bucket has one, they are reduce-scattered."""
        held = self.grads.get(key)
        self.grads[key] = grad if held is None else held + grad
        if len(self.grads) == len(self.shards):
            self.reduce_scatter()

    def reduce_scatter(self) -> None:
        """Issues the reduce-scatter (async) of the gradients handed in, zeros standing for the
        weights without one (which get none)."""
        if not self.grads:
            return
        like = next(iter(self.grads.values()))
        flat = torch.zeros(self.n, self.m, dtype=like.dtype, device=like.device)
        for s, a in zip(self.shards, self.offsets, strict=False):
            grad = self.grads.get(s.key)
            if grad is None:
                continue
            rows, whole = flat[:, a : a + s.m], s.numel // s.m  # rank r's shard is row r
            g = grad.reshape(-1)
            rows[:whole] = g[: whole * s.m].view(whole, s.m)
            if whole < s.n and s.numel > whole * s.m:
                rows[whole, : s.numel - whole * s.m] = g[whole * s.m :]
        out = torch.empty(self.m, dtype=like.dtype, device=like.device)
        work = dist.reduce_scatter_single(out, flat.view(-1), group=self.group, async_op=True)
        self.pending.append((work, out, frozenset(self.grads)))
        self.grads = {}

    def finish(self) -> None:
        """Waits for the reduce-scatters issued and adds each part to its shard's gradient."""
        for work, out, keys in self.pending:
            work.wait()
            for s, a in zip(self.shards, self.offsets, strict=False):
                if s.key in keys:
                    part = out[a : a + s.m]
                    s.shard.grad = part if s.shard.grad is None else s.shard.grad + part
        self.pending.clear()


class GatherWeight(torch.autograd.Function):
    """ZeRO-3: the whole piece gathered from the shards (its bucket's, `Zero.forward_piece`);
    the backward hands the gradient to the bucket, which reduce-scatters it into the shard's
    gradient once the bucket is complete (`Zero.after_sync` waits), so the autograd gradient of
    the shard is none."""

    @staticmethod
    def forward(ctx: Any, shard: torch.Tensor, zero: Zero, owner: Shard) -> torch.Tensor:  # type: ignore[override]
        ctx.zero, ctx.owner = zero, owner
        return zero.forward_piece(owner).view(owner.shape)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[None, None, None]:  # type: ignore[override]
        ctx.zero.hand_in(ctx.owner, grad)
        return None, None, None


class HeldCast(torch.autograd.Function):
    """A bf16 piece as a forward reads it: its bf16 values, whose gradient the backward casts to
    fp32 into the zero-byte fp32 leaf (`Shard.full`), as autocast's cast of an fp32 weight
    (`ToCopyBackward`) would; it keeps nothing for backward."""

    @staticmethod
    def forward(ctx: Any, leaf: torch.Tensor, values: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.dtype = leaf.dtype
        return values.view_as(values)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        return grad.to(ctx.dtype), None


def _root(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage `t` views (`t` itself if it is no view): every view of a view
    shares its root's `_base`, so a gathered piece and its transposes are recognised by it."""
    return t if t._base is None else t._base


class ForwardWeights(Mapping[str, torch.Tensor]):
    """The weights as the forward reads them: ZeRO-3 pieces gathered on each read."""

    def __init__(self, zero: Zero):
        self.zero = zero

    def __getitem__(self, key: str) -> torch.Tensor:
        shard = self.zero.shards.get(key)
        held = shard or self.zero.masters.get(key)
        if held is not None and held.values is not None:
            return HeldCast.apply(held.full, held.values)
        if shard is None or shard.stage != 3:
            return self.zero.weights[key]
        full = GatherWeight.apply(shard.shard, self.zero, shard)
        if full.requires_grad:  # its gradient will be handed in
            self.zero.bucket_of[key].reads += 1
        root = _root(full)  # the gathered piece is a view (of its bucket's buffer or copy)
        self.zero.live[id(root)] = (weakref.ref(root), shard)
        return full

    def __iter__(self) -> Iterator[str]:
        return iter(self.zero.weights)

    def __len__(self) -> int:
        return len(self.zero.weights)


class Zero:
    """This rank's weights with their ZeRO shards: what the optimizer updates, what the forward
    reads, the collectives around the step, and the bytes kept."""

    def __init__(self, comm: Communicator, plan: Plan, weights: dict[str, torch.Tensor], bf16: bool = True):
        """`bf16`: hold the plan's bf16 pieces so (off in a float64 run, which holds every weight
        in float64; the bytes reported are the plan's all the same)."""
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
            if piece is None or (stage < 3 and not plan.trained(key)):
                continue  # a frozen weight has no gradient or optimizer state to shard
            ranks = next(r for r in plan.weights[key].copy_groups() if comm.rank in r)
            held_bf16 = bf16 and key in plan.bf16_pieces
            shard = self.shards[key] = Shard(key, stage, piece, groups[ranks], ranks, comm.rank, held_bf16)
            if stage == 3:  # the whole piece is not kept
                weights[key] = shard.shard
            elif shard.values is not None:  # the fp32 piece is not kept: its gradient's leaf
                weights[key] = shard.full  # type: ignore[assignment]
        self.masters: dict[str, Master] = {}
        """The bf16 pieces without ZeRO (`Master`), by key."""
        for key in plan.bf16_pieces if bf16 else ():
            if key in weights and key not in self.shards:
                master = self.masters[key] = Master(weights[key])
                weights[key] = master.full  # type: ignore[assignment]
        self.buckets = buckets_of(list(self.shards.values()))
        self.bucket_of = {s.key: b for b in self.buckets for s in b.shards}
        for key, shard in self.shards.items():
            if shard.stage == 2:
                weights[key].register_post_accumulate_grad_hook(self._reduce_scatter(shard))
        # ZeRO-3's gathered buckets: the next (previous) bucket of the same copy group and stage
        # in plan order, which the forward (backward) prefetches.
        self.after: dict[Bucket, Bucket] = {}
        self.before: dict[Bucket, Bucket] = {}
        last: dict[int, Bucket] = {}
        for bucket in (b for b in self.buckets if b.shards[0].stage == 3):
            group = id(bucket.group)
            if group in last:
                self.after[last[group]], self.before[bucket] = bucket, last[group]
            last[group] = bucket
        self.prefetched: dict[Bucket, tuple[Any, torch.Tensor]] = {}
        self.forward_cache: dict[Bucket, dict[str, torch.Tensor]] = {}
        self.backward_cache: dict[Bucket, dict[str, torch.Tensor]] = {}
        self.live: dict[int, tuple[weakref.ref[torch.Tensor], Shard]] = {}
        self.forward_weights = ForwardWeights(self)

    @property
    def sync_layouts(self) -> dict[str, Layout]:
        """The weights whose whole gradients are all-reduced across copies (ZeRO-1 included; no
        frozen one)."""
        return {
            k: v
            for k, v in self.plan.weights.items()
            if self.plan.zero.get(k, 0) < 2 and self.plan.trained(k)
        }

    def held(self) -> tuple[dict[str, torch.Tensor], dict[str, tuple[int, int]]]:
        """What a checkpoint saves and loads: by weight key, the tensor the optimizer updates (a
        ZeRO weight's shard, else the piece), and for the shards the elements [start, stop) of
        the flattened piece each holds (the padding is not the weight's)."""
        tensors = {k: self._held(k, p) for k, p in self.weights.items()}
        flats = {k: s.flat_range() for k, s in self.shards.items()}
        return tensors, flats

    def params(self) -> list[torch.Tensor]:
        """What the optimizer updates: whole pieces, or the shards of ZeRO weights (no frozen
        weight: it keeps no optimizer state)."""
        held = [self._held(k, p) for k, p in self.weights.items()]
        return [p for p in held if p.requires_grad]

    def _held(self, key: str, piece: torch.Tensor) -> torch.Tensor:
        """What the optimizer updates for weight `key` held as `piece`: a shard, a master, or it."""
        if key in self.shards:
            return self.shards[key].shard
        return self.masters[key].master if key in self.masters else piece

    def _reduce_scatter(self, shard: Shard) -> Any:
        bucket = self.bucket_of[shard.key]

        def hook(piece: torch.Tensor) -> None:  # once per backward: per micro-batch in a pipeline
            assert piece.grad is not None
            bucket.hand_in(shard.key, piece.grad)
            piece.grad = None

        return hook

    # --- ZeRO-3's gathers ------------------------------------------------------------------

    def forward_piece(self, shard: Shard) -> torch.Tensor:
        """The whole piece a forward read gets: from its bucket, gathered (or waited for, if
        prefetched) on the bucket's first read, which also prefetches the next bucket and drops
        the others (FSDP2 reshards after each layer's forward)."""
        bucket = self.bucket_of[shard.key]
        pieces = self.forward_cache.get(bucket)
        if pieces is None:
            pieces = self._gathered(bucket)
            self.forward_cache = {bucket: pieces}
            self._prefetch(self.after.get(bucket))
        return pieces[shard.key]

    def _unpack_piece(self, shard: Shard) -> torch.Tensor:
        """The whole piece a saved tensor of the backward refers to: its bucket gathered on the
        bucket's first unpack (which prefetches the bucket before it) and kept until the
        gradients of all its reads are handed in."""
        bucket = self.bucket_of[shard.key]
        pieces = self.backward_cache.get(bucket)
        if pieces is None:
            pieces = self._gathered(bucket)
            self.backward_cache[bucket] = pieces
            before = self.before.get(bucket)
            if before not in self.backward_cache:
                self._prefetch(before)
        return pieces[shard.key]

    def _gathered(self, bucket: Bucket) -> dict[str, torch.Tensor]:
        work, out = self.prefetched.pop(bucket) if bucket in self.prefetched else bucket.all_gather()
        work.wait()
        return bucket.pieces(out)

    def _prefetch(self, bucket: Bucket | None) -> None:
        if bucket is not None and bucket not in self.prefetched:
            self.prefetched[bucket] = bucket.all_gather()

    def hand_in(self, shard: Shard, grad: torch.Tensor) -> None:
        """ZeRO-3: the gradient of one gathered read; the bucket's gathered pieces are dropped
        once every read of it has its gradient."""
        bucket = self.bucket_of[shard.key]
        bucket.reads -= 1
        bucket.hand_in(shard.key, grad)
        if bucket.reads == 0:
            self.backward_cache.pop(bucket, None)

    def _drop_gathers(self) -> None:
        """No gathered piece outlives a forward's or a step's weights: prefetches waited for
        (every rank issued them) and dropped."""
        for work, _ in self.prefetched.values():
            work.wait()
        self.prefetched.clear()
        self.forward_cache.clear()

    # --- the step ------------------------------------------------------------------------

    @contextlib.contextmanager
    def saving(self, counter: SavedBytes | None = None) -> Iterator[None]:
        """The forward: tensors saved from gathered ZeRO-3 pieces are packed as references;
        with a `counter` (`--saved-bytes`), what autograd keeps is counted around that packing."""
        if not any(s.stage == 3 for s in self.shards.values()):
            with counting(counter, None):
                yield
            return
        try:
            with counting(counter, (self._pack, self._unpack)):
                yield
        finally:
            self._drop_gathers()
        self.live.clear()

    def _pack(self, t: torch.Tensor) -> Any:
        base = _root(t)
        entry = self.live.get(id(base))
        if entry is None or entry[0]() is not base:
            return t
        return (entry[1], tuple(t.shape), t.stride(), t.storage_offset())

    def _unpack(self, packed: Any) -> torch.Tensor:
        if isinstance(packed, torch.Tensor):
            return packed
        shard, shape, stride, offset = packed
        return self._unpack_piece(shard).as_strided(shape, stride, offset)

    def after_sync(self) -> None:
        """After the backward: the reduce-scatters of ZeRO-2/3 buckets issued (those not complete
        yet) and waited for; ZeRO-1: each shard's gradient is its slice of the all-reduced whole
        gradient."""
        for bucket in self.buckets:
            bucket.reduce_scatter()
        for bucket in self.buckets:
            bucket.finish()
            bucket.reads = 0
        self._drop_gathers()
        self.backward_cache.clear()
        for shard in self.shards.values():
            if shard.stage == 1 and shard.full is not None and shard.full.grad is not None:
                shard.shard.grad = shard.own_slice(shard.full.grad)
        for master in self.masters.values():
            master.master.grad = master.full.grad

    @torch.no_grad()
    def after_step(self) -> None:
        """ZeRO-1/2: the updated shards all-gathered into the whole pieces, bucket by bucket; the
        bf16 pieces without ZeRO: their masters cast into them."""
        issued = [(b, *b.all_gather()) for b in self.buckets if b.shards[0].full is not None]
        for master in self.masters.values():
            master.values.copy_(master.master)
        for bucket, work, out in issued:
            work.wait()
            bucket.copy_out(out, [s.full if s.values is None else s.values for s in bucket.shards])  # type: ignore[misc]

    def zero_grad(self) -> None:
        for p in self.weights.values():
            p.grad = None
        for shard in self.shards.values():
            shard.shard.grad = None
        for master in self.masters.values():
            master.master.grad = None

    # --- what --check reads --------------------------------------------------------------

    def whole_weights(self) -> dict[str, torch.Tensor]:
        """Every local piece, fp32: ZeRO-3 ones and bf16 pieces' master shards gathered (a
        collective of their copy groups), a bf16 piece's whole master as it is."""
        return {k: self._whole(k, p) for k, p in self.weights.items()}

    def _whole(self, key: str, piece: torch.Tensor) -> torch.Tensor:
        if self._gathers(key):
            return self.shards[key].gathered()
        return self.masters[key].master if key in self.masters else piece

    def _gathers(self, key: str) -> bool:
        """Whether the fp32 weight is held only as shards: ZeRO-3's, or a bf16 piece's master."""
        return self._sharded(key, 3) or (key in self.shards and self.shards[key].values is not None)

    def held_bf16(self) -> list[torch.Tensor]:
        """The bf16 pieces' values: persistent, not activations (`SavedBytes.of` excludes them)."""
        held = [s.values for s in self.shards.values() if s.values is not None]
        return held + [m.values for m in self.masters.values()]

    def whole_grads(self) -> dict[str, torch.Tensor | None]:
        """Every local piece's summed gradient, ZeRO-2/3 ones gathered from the shards."""
        out: dict[str, torch.Tensor | None] = {}
        for key, p in self.weights.items():
            shard = self.shards.get(key)
            if shard is None or shard.stage < 2 or not shard.shard.requires_grad:
                out[key] = p.grad  # a frozen weight's: None
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
            if key in self.plan.bf16_pieces:  # bf16 values, the fp32 master (a shard under ZeRO)
                numel = p.numel() if shard is None else shard.numel
                weights += numel * 2 + (numel if shard is None else shard.m) * size
            else:
                weights += p.numel() * size  # the shard, for ZeRO-3
            grad = shard.shard.grad if shard is not None and shard.stage >= 2 else p.grad
            grads += 0 if grad is None else grad.numel() * size
            param = self._held(key, p)
            if optimizer is not None:
                for name, value in optimizer.state.get(param, {}).items():
                    if name != "step" and isinstance(value, torch.Tensor):
                        state += value.numel() * size
        return weights, grads, state


def _kind(shard: Shard) -> tuple[int, torch.dtype, bool, bool]:
    """What the weights of one bucket share: stage, dtype, whether they are trained (a frozen
    ZeRO-3 weight's bucket is gathered only, its reduce-scatter never due) and whether they are
    bf16 pieces (gathered in bf16); the cost model's kind is the same (`steps.bucket_zero_weights`)."""
    return shard.stage, shard.shard.dtype, shard.shard.requires_grad, shard.values is not None


def buckets_of(shards: list[Shard]) -> list[Bucket]:
    """The shards, in plan order, cut into buckets by the rule the cost model prices
    (`patterns.zero_buckets`, `cost.pricing.zero_bucket_bytes`), per copy group: of the shards
    this rank holds in one group (every rank of the group holds the same weights there), a run
    of consecutive ones of one stage, dtype and layer. (Cut over the rank's shards of all its
    groups, a weight of another group between two of one group would split their bucket on
    this rank and not on a rank outside that other group: the ranks of a group would disagree.)
    Buckets are listed by their first shard's plan order."""
    by_group: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(shards):
        by_group.setdefault(s.ranks, []).append(i)
    cuts = [
        [held[j] for j in cut]
        for held in by_group.values()
        for cut in zero_buckets([(_kind(shards[i]), shards[i].key) for i in held])
    ]
    return [Bucket([shards[i] for i in cut]) for cut in sorted(cuts)]
