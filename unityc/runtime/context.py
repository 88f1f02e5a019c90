"""What a generated forward calls on this rank: parallel ops, implicit transfers, dropout."""

from __future__ import annotations

import contextlib
import math
import sys
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, overload

import torch

from unityc.runtime.comm import Communicator, Exchange
from unityc.runtime.kernels import with_halo
from unityc.runtime.plan import Collective
from unityc.runtime.precision import step_cast
from unityc.runtime.regather import Regathers

Stage = Sequence[Collective]


class Context:
    """This rank's view of one training step: its communicator, the token chain, the step."""

    def __init__(self, comm: Communicator, check: bool = False, seed: int = 0):
        self.comm = comm
        self.rank = comm.rank
        self.device = comm.device
        self.check = check
        self.seed = seed
        self.step = 0
        self.tables: dict[str, torch.Tensor] = {}
        self._index_terms: dict[tuple[int, ...], torch.Tensor] = {}
        self.regathers = Regathers(comm)
        self.token = self.new_token()

    def new_token(self) -> torch.Tensor:
        """The start of a token chain (a step's, or a pipeline stage's micro-batch's)."""
        self.regathers.clear()
        return torch.zeros((), device=self.device, requires_grad=True)

    def begin_step(self, step: int) -> None:
        self.step = step
        self.token = self.new_token()

    # --- data movement -------------------------------------------------------------------

    def _run(self, c: Collective, x: torch.Tensor | None, grad: bool) -> torch.Tensor | None:
        if x is not None and x.is_floating_point() and x.dtype != (dtype := self.comm.dtype(c.dtype)):
            x = x.to(dtype)  # the element type the plan moves (bf16-mixed: what autocast gives)
        if not grad:
            with torch.no_grad():
                return self.comm.run(c, x)
        self.token, *out = Exchange.apply(self.comm, c, self.token, x)
        return out[0] if out else None

    def parallel(
        self,
        x: torch.Tensor | None,
        *stages: Stage,
        grad: bool = False,
        regather: bool = False,
        readers: int = 0,
    ) -> torch.Tensor | None:
        """Runs a parallel op: stages one after the other, each a set of independent collectives
        (one per group of pieces, in a fixed order). Returns this rank's output piece or None.
        `regather` (one all-gather stage): the ops reading the output keep this rank's piece
        for backward and gather it again there (`regathering`); `readers`: how many operands
        read it (one: its one matmul also runs its backward reduce-scatter, `regather.Overlapped`)."""
        for stage in stages:
            out: torch.Tensor | None = None
            for c in stage:
                if self.rank not in c.ranks:
                    continue
                piece = x if self.rank in c.ins else None
                y = self._run(c, piece, grad)
                if self.rank in c.outs:
                    out = y
                if regather and grad and piece is not None and y is not None:
                    self.regathers.record(y, piece.to(self.comm.dtype(c.dtype)), c, readers)
            x = out
        return x

    @staticmethod
    def step_cast(w: torch.Tensor | None) -> torch.Tensor | None:
        """Weight `w`'s bf16 copy, once per step, that a view read in bf16 is taken of
        (`precision.step_cast`)."""
        return step_cast(w)

    def regathering(self) -> contextlib.AbstractContextManager[None]:
        """The saved-tensor hooks of an op reading a `regather` output (`runtime.regather`)."""
        return self.regathers.hooks()

    def p2p(
        self,
        x: torch.Tensor | None,
        moves: Sequence[tuple[int, int]],
        shape: Sequence[int],
        dtype: str = "float32",
        grad: bool = False,
    ) -> torch.Tensor | None:
        """Pieces that a task reads from another rank: each (source, destination) pair moves the
        source's piece. A destination gets the piece it reads, a rank not involved keeps `x`."""
        c = Collective("p2p", tuple(s for s, _ in moves), tuple(d for _, d in moves), tuple(shape), dtype)
        if self.rank not in c.ranks:
            return x
        return self._run(c, x if self.rank in c.ins else None, grad)

    def halo(
        self,
        x: torch.Tensor,
        dim: int,
        above: int,
        below: int,
        fill: float,
        chains: Sequence[tuple[int, ...]],
        dtype: str = "float32",
        grad: bool = False,
    ) -> torch.Tensor:
        """A spatial shard extended by its halo along `dim` (`kernels.with_halo`): in every
        chain (the ranks holding consecutive shards of one piece), each rank sends its last
        `above` rows to the next rank and its first `below` rows to the one before, as two
        point-to-point exchanges (their backward sends the halo's gradients back)."""
        chain = next(c for c in chains if self.rank in c)
        i = chain.index(self.rank)
        before = after = None
        if above > 0:
            down = [(c[j], c[j + 1]) for c in chains for j in range(len(c) - 1)]
            rows = x.narrow(dim, x.shape[dim] - above, above)
            before = self.p2p(rows, down, _rows(x, dim, above), dtype, grad)
        if below > 0:
            up = [(c[j + 1], c[j]) for c in chains for j in range(len(c) - 1)]
            after = self.p2p(x.narrow(dim, 0, below), up, _rows(x, dim, below), dtype, grad)
        before = before if i > 0 else None
        after = after if i < len(chain) - 1 else None
        return with_halo(x, dim, above, below, before, after, fill)

    def shards(self, groups: Sequence[tuple[int, ...]]) -> ShardGroup | None:
        """This rank's group among `groups` (the ranks holding the other shards of its piece, in
        shard order), for kernels that reduce across them; None if it is in none."""
        return next((ShardGroup(self, g) for g in groups if self.rank in g), None)

    # --- randomness ----------------------------------------------------------------------

    def dropout(
        self, x: torch.Tensor, p: float, key: str, offsets: Sequence[int], shape: Sequence[int]
    ) -> torch.Tensor:
        """Dropout whose mask is a hash of the element's index in the logical tensor (and the
        step): every copy of a piece drops the same elements, whatever rank computes it. The
        identity under --check, as in the reference run and the interpreter."""
        if self.check or p <= 0:
            return x
        if x.numel() >= FUSED_MASK_FROM and (fused := _fused()) is not None:
            terms, salt, threshold = self._mask_inputs(x.shape, p, key, offsets, shape)
            return _FusedDropout.apply(x, terms, salt, threshold, 1 / (1 - p), fused)
        keep = self._keep_mask(x.shape, p, key, offsets, shape)
        return x * keep * (1 / (1 - p))

    def dropout_fn(
        self, p: float, key: str, offsets: Sequence[int], shape: Sequence[int]
    ) -> Callable[[torch.Tensor], torch.Tensor] | None:
        if self.check or p <= 0:
            return None
        return lambda x: self.dropout(x, p, key, offsets, shape)

    def _keep_mask(
        self, piece: Sequence[int], p: float, key: str, offsets: Sequence[int], shape: Sequence[int]
    ) -> torch.Tensor:
        """Keep (True) or drop each element of this piece: a hash of the element's index in the
        logical tensor, salted by the key, seed and step. In 32-bit integers, which a CPU core
        multiplies 8 at a time (int64 has no vector multiply there): the index times the golden
        ratio plus the salt, modulo 2^32, is a sum of one small per-dimension vector each
        (broadcast, so the full-size work is adding them), then mixed by Wellons' `lowbias32`
        (xor-shifts and two multiplies). Logical indices past 2^32 repeat the masks of those
        2^32 before them. The per-dimension vectors do not change between steps: they are kept
        (a few small int32 vectors per distinct piece)."""
        terms, salt, threshold = self._mask_inputs(piece, p, key, offsets, shape)
        if math.prod(piece) >= FUSED_MASK_FROM and (fused := _fused()) is not None:
            return fused.keep(terms, salt, threshold).expand(tuple(piece))
        h = terms[0] + salt
        for term in terms[1:]:
            h = h + term  # int32 sums wrap mod 2^32
        if tuple(h.shape) != tuple(piece):
            h = h.expand(tuple(piece)).clone()
        return _keep_of_hash(h, threshold)

    def _mask_inputs(
        self, piece: Sequence[int], p: float, key: str, offsets: Sequence[int], shape: Sequence[int]
    ) -> tuple[list[torch.Tensor], torch.Tensor, int]:
        """The hash's per-dimension terms of this piece, its salt (a tensor: a new step does not
        recompile the fused kernels) and the keep threshold of its low 24 bits."""
        strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
        salt = _int32(zlib.crc32(f"{key}:{self.seed}:{self.step}".encode()))
        terms = [
            self._index_term(len(piece), d, size, offset, stride)
            for d, (size, offset, stride) in enumerate(zip(piece, offsets, strides, strict=True))
        ]
        return terms, torch.tensor(salt, dtype=torch.int32), math.ceil(p * (1 << 24))

    def _index_term(self, rank: int, d: int, size: int, offset: int, stride: int) -> torch.Tensor:
        """Dimension d's part of (logical index x golden ratio) mod 2^32, shaped to broadcast."""
        cache_key = (rank, d, size, offset, stride)
        term = self._index_terms.get(cache_key)
        if term is None:
            view = [1] * rank
            view[d] = size
            positions = torch.arange(offset, offset + size, dtype=torch.int64, device=self.device)
            term = _int32(positions * (stride * GOLDEN % 2**32)).reshape(view)
            self._index_terms[cache_key] = term
        return term


GOLDEN = 0x9E3779B1
LOWBIAS32 = ((16, 0x7FEB352D), (15, 0x846CA68B), (16, 0))
"""Chris Wellons' `lowbias32` integer hash: (shift, then multiplier) rounds."""
FUSED_MASK_FROM = 1 << 22
"""Masks of this many elements or more are made by one compiled loop (`torch.compile`): eager
torch runs the hash's eleven element-wise passes one after another, each a read and a write of
the whole int32 tensor (GPT-2 at sequence 2048: 8 x 2048 x 2048 scores a layer, 0.8 s eager
against 0.4 s compiled on one core, `benchmarks/program_memory_results.md`). Smaller masks stay
eager: compiling costs seconds once per process, more than such a mask ever takes."""


def _keep_of_hash(h: torch.Tensor, threshold: int) -> torch.Tensor:
    """`lowbias32` of the int32 tensor `h` (mixed in place), its low 24 bits >= `threshold`."""
    for shift, multiplier in LOWBIAS32:
        shifted = h >> shift
        shifted &= (1 << (32 - shift)) - 1  # a logical shift of the 32 bits
        h ^= shifted
        if multiplier:
            h *= _int32(multiplier)
    return (h & 0xFFFFFF) >= threshold


def _keep_of_terms(terms: list[torch.Tensor], salt: torch.Tensor, threshold: int) -> torch.Tensor:
    """The keep mask of the broadcast sum of `terms` plus `salt`, out of place (for compiling)."""
    h = salt + terms[0]
    for term in terms[1:]:
        h = h + term
    for shift, multiplier in LOWBIAS32:
        h = h ^ ((h >> shift) & ((1 << (32 - shift)) - 1))
        if multiplier:
            h = h * _int32(multiplier)
    return (h & 0xFFFFFF) >= threshold


def _dropped(
    x: torch.Tensor, terms: list[torch.Tensor], salt: torch.Tensor, threshold: int, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dropout's output and keep mask in one pass over `x` (for compiling)."""
    keep = _keep_of_terms(terms, salt, threshold)
    return torch.where(keep, x * scale, torch.zeros_like(x)), keep


def _dropped_grad(grad: torch.Tensor, keep: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.where(keep, grad * scale, torch.zeros_like(grad))


@dataclass(frozen=True)
class _Fused:
    """The mask's kernels compiled by `torch.compile`, one loop each."""

    keep: Callable[..., torch.Tensor]
    dropped: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    grad: Callable[..., torch.Tensor]


class _FusedDropout(torch.autograd.Function):
    """x * keep / (1 - p) by one compiled loop that also writes the mask; backward keeps the
    mask (one byte an element), as eager `x * keep * scale` does, and is one loop too."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, terms: Any, salt: Any, threshold: int, scale: float, fused: Any
    ) -> Any:
        out, keep = fused.dropped(x, terms, salt, threshold, scale)
        ctx.save_for_backward(keep)
        ctx.scale, ctx.fused = scale, fused
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        (keep,) = ctx.saved_tensors
        return ctx.fused.grad(grad, keep, ctx.scale), None, None, None, None, None


_FUSED: list[_Fused | None] = []


def _fused() -> _Fused | None:
    """The compiled mask kernels, or None where `torch.compile` cannot run here (no C++
    compiler, say: then said once on stderr, and masks are made eagerly, bit for bit the same)."""
    if _FUSED:
        return _FUSED[0]
    try:
        fused = _Fused(
            torch.compile(_keep_of_terms, dynamic=False),
            torch.compile(_dropped, dynamic=False),
            torch.compile(_dropped_grad, dynamic=False),
        )
        probe = [torch.arange(4, dtype=torch.int32).reshape(4, 1), torch.arange(3, dtype=torch.int32)]
        salt = torch.tensor(7, dtype=torch.int32)
        h = (probe[0] + probe[1] + 7).contiguous()
        if not torch.equal(fused.keep(probe, salt, 1 << 20), _keep_of_hash(h, 1 << 20)):
            raise RuntimeError("the compiled mask differs from the eager one")
        _FUSED.append(fused)
    except Exception as error:  # any failure of the compiler means eager masks
        first = (str(error).splitlines() or [type(error).__name__])[0]
        sys.stderr.write(f"note: dropout masks made eagerly (torch.compile: {first})\n")
        _FUSED.append(None)
    return _FUSED[0]


@overload
def _int32(value: int) -> int: ...
@overload
def _int32(value: torch.Tensor) -> torch.Tensor: ...
def _int32(value: int | torch.Tensor) -> int | torch.Tensor:
    """The signed 32-bit integer with the same low 32 bits (two's complement)."""
    value = value & 0xFFFFFFFF
    if isinstance(value, int):
        return value - (1 << 32) if value >= 1 << 31 else value
    return torch.where(value >= 1 << 31, value - (1 << 32), value).to(torch.int32)


class ShardGroup:
    """Collectives among the ranks holding the shards of one piece (a kernel's own reductions:
    the vocabulary-parallel cross-entropy's row maxima, sums of exponentials and target counts)."""

    def __init__(self, ctx: Context, ranks: tuple[int, ...]) -> None:
        self.ctx, self.ranks = ctx, ranks

    @property
    def size(self) -> int:
        return len(self.ranks)

    def _collective(self, kind: str, x: torch.Tensor, dim: int = 0) -> Collective:
        dtype = str(x.dtype).removeprefix("torch.")
        return Collective(kind, self.ranks, self.ranks, tuple(x.shape), dtype, dim)

    def sum(self, x: torch.Tensor, grad: bool = True) -> torch.Tensor:
        """The sum of every rank's `x` (its gradient: the sum of theirs, by the dual all-reduce)."""
        out = self.ctx._run(self._collective("all_reduce", x), x, grad)
        assert out is not None
        return out

    @property
    def process_group(self) -> Any:
        """The torch process group of these ranks (None: every rank), for kernels that run their
        own exchange (context-parallel attention's ring or all-to-all)."""
        return self.ctx.comm.group(tuple(sorted(self.ranks)))

    def gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's `x` concatenated along `dim`, in shard order (no gradient)."""
        out = self.ctx._run(self._collective("all_gather", x, dim), x.detach(), False)
        assert out is not None
        return out


def _rows(x: torch.Tensor, dim: int, rows: int) -> tuple[int, ...]:
    """The shape of `rows` rows of `x` along `dim`."""
    return tuple(rows if d == dim else n for d, n in enumerate(x.shape))
