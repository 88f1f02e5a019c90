"""Attention split over the sequence (context parallelism): the ring and the all-to-all (Ulysses).

Every rank of a context group holds a shard of the sequence: its query, key and value rows
(after their projections, rotary at the rows' own positions). Two exchanges make the attention
over the whole sequence exact:

* **ring** (`ring_attention`): the key/value blocks travel around the ring (`batch_isend_irecv`,
  the next block's transfer overlapping the current block's compute); each block's partial
  result and its log-sum-exp are merged exactly (online softmax). The backward re-runs the ring:
  the per-block backward with the *merged* output and log-sum-exp gives each block's exact share
  of dQ, dK, dV; the dK/dV accumulators travel with their blocks and arrive home after one lap.
* **all-to-all** (`ulysses_attention`): q, k, v are exchanged from sequence-sharded to
  head-sharded (`all_to_all_single`), attended whole, and the output exchanged back.

`Chunking` says which rows a rank holds: contiguous (rank r: chunk r of C) or zig-zag (rank r:
chunks r and 2C-1-r of 2C), which balances causal work: every rank then computes the same
number of visible blocks. Masks are exact under the split: causal and sliding windows from the
rows' global positions, key padding (travelling with its keys), and an additive mask's rows
(this rank's queries over every key, in global key order). Grouped-query heads are kept grouped
(key/value heads are expanded per block, their gradients summed back).

Per-block attention uses the fused kernels that return the log-sum-exp
(`_scaled_dot_product_flash_attention_for_cpu` on CPU, `_scaled_dot_product_efficient_attention`
on CUDA) or, with `math=True` (the float64 `--check` path), plain torch.
"""

from __future__ import annotations

import math as _math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

from unityc.runtime.kernels import project_heads, rotate_heads

EXCHANGES = ("ring", "all-to-all")
"""The exchanges of a context-parallel attention (what `pcg.attention`'s context form declares)."""


@dataclass(frozen=True)
class Chunking:
    """Which sequence rows rank `rank` of a context group of `degree` ranks holds.

    The sequence is cut into `pieces` equal chunks: `degree` (contiguous: rank r holds chunk r)
    or 2·`degree` (zig-zag: rank r holds chunks r and 2·degree-1-r, so that under a causal mask
    every rank sees the same number of visible key chunks)."""

    degree: int
    rank: int
    zigzag: bool = True

    def __post_init__(self) -> None:
        if self.degree < 1:
            raise ValueError(f"context degree must be at least 1, got {self.degree}")
        if not 0 <= self.rank < self.degree:
            raise ValueError(f"rank {self.rank} is not in a context group of {self.degree}")

    @property
    def pieces(self) -> int:
        return 2 * self.degree if self.zigzag else self.degree

    def chunks(self) -> tuple[int, ...]:
        """This rank's chunk indices, in the order its rows hold them."""
        if not self.zigzag:
            return (self.rank,)
        return (self.rank, self.pieces - 1 - self.rank)

    def of(self, rank: int) -> Chunking:
        """The same chunking seen from another rank of the group."""
        return Chunking(self.degree, rank, self.zigzag)

    def chunk_length(self, seq: int) -> int:
        if seq % self.pieces:
            raise ValueError(f"sequence length {seq} does not split into {self.pieces} equal chunks")
        return seq // self.pieces

    def positions(self, seq: int, device: torch.device | None = None) -> torch.Tensor:
        """The global positions of this rank's rows (int64, in row order)."""
        c = self.chunk_length(seq)
        return torch.cat([torch.arange(i * c, (i + 1) * c, device=device) for i in self.chunks()])

    def shard(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """This rank's rows of a whole-sequence tensor `x` (sequence along `dim`)."""
        c = self.chunk_length(x.shape[dim])
        return torch.cat([x.narrow(dim, i * c, c) for i in self.chunks()], dim=dim)

    def unshard(self, shards: Sequence[torch.Tensor], dim: int) -> torch.Tensor:
        """The whole sequence from every rank's shard (`shards[r]` from rank r)."""
        if len(shards) != self.degree:
            raise ValueError(f"{len(shards)} shards for a context group of {self.degree}")
        pieces: list[torch.Tensor | None] = [None] * self.pieces
        for r, x in enumerate(shards):
            held = self.of(r).chunks()
            for j, part in zip(held, x.chunk(len(held), dim=dim), strict=True):
                pieces[j] = part
        return torch.cat([p for p in pieces if p is not None], dim=dim)


@dataclass(frozen=True)
class Masking:
    """Which keys a query sees: `causal` (key position ≤ query position) and a sliding `window`
    (|query - key| < window), from global positions."""

    causal: bool = False
    window: int | None = None

    def __post_init__(self) -> None:
        if self.window is not None and self.window < 1:
            raise ValueError(f"sliding window must be at least 1, got {self.window}")

    def visible(self, qpos: torch.Tensor, kpos: torch.Tensor) -> torch.Tensor | None:
        """[Lq, Lk] bool: which keys each query sees (None: all)."""
        if not self.causal and self.window is None:
            return None
        diff = qpos[:, None] - kpos[None, :]
        seen = torch.ones_like(diff, dtype=torch.bool)
        if self.causal:
            seen &= diff >= 0
        if self.window is not None:
            seen &= diff.abs() < self.window
        return seen

    def kind(self, q: range, k: range) -> str:
        """How a block of query positions `q` sees key positions `k`: "none" (no key visible),
        "full" (every key), "causal" (the same positions, lower triangle) or "mask"."""
        lo, hi = q.start - (k.stop - 1), (q.stop - 1) - k.start  # the least and largest q - k
        if self.causal and hi < 0:
            return "none"
        if self.window is not None and (lo >= self.window or -hi >= self.window):
            return "none"
        window_ok = self.window is None or max(hi, -lo) < self.window
        if window_ok and (not self.causal or lo >= 0):
            return "full"
        if window_ok and self.causal and q == k:
            return "causal"
        return "mask"


@dataclass(frozen=True)
class _Block:
    """One block's mask for the kernels: none, is_causal, or an explicit boolean `seen`."""

    causal: bool
    seen: torch.Tensor | None  # [B|1, H|1, Lq, Lk] bool
    bias: torch.Tensor | None  # [B|1, H|1, Lq, Lk] additive


def _expand(x: torch.Tensor, heads: int) -> torch.Tensor:
    groups = x.shape[1]
    return x if groups == heads else x.repeat_interleave(heads // groups, dim=1)


def _fold(dx: torch.Tensor, groups: int) -> torch.Tensor:
    b, heads, n, d = dx.shape
    return dx if groups == heads else dx.view(b, groups, heads // groups, n, d).sum(2)


def _additive(block: _Block, dtype: torch.dtype) -> torch.Tensor | None:
    mask = block.bias.to(dtype) if block.bias is not None else None
    if block.seen is None:
        return mask
    hidden = torch.zeros(block.seen.shape, dtype=dtype, device=block.seen.device)
    hidden = hidden.masked_fill(~block.seen, float("-inf"))
    return hidden if mask is None else hidden + mask


def _dead(block: _Block) -> torch.Tensor | None:
    """[B|1, H|1, Lq] bool: the rows that see no key of this block."""
    if block.seen is None:
        return None
    return ~block.seen.any(-1)


def _scores(q: torch.Tensor, k: torch.Tensor, block: _Block, scale: float) -> torch.Tensor:
    s = (q @ k.transpose(-1, -2)) * scale
    mask = _additive(block, s.dtype)
    if mask is not None:
        s = s + mask
    if block.causal:
        tri = torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~tri, float("-inf"))
    return s


def _forward(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: _Block, scale: float, math: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """One block's attention output [B, H, Lq, D] and log-sum-exp [B, H, Lq] (float32 or wider;
    -inf where a row sees no key of the block)."""
    heads = q.shape[1]
    k, v = _expand(k, heads), _expand(v, heads)
    wide = torch.promote_types(q.dtype, torch.float32)
    if math:
        s = _scores(q.to(wide), k.to(wide), block, scale)
        lse = torch.logsumexp(s, dim=-1)
        p = torch.exp(s - lse.masked_fill(torch.isinf(lse), 0.0)[..., None])
        return (p @ v.to(wide)), lse
    mask = _additive(block, q.dtype)
    if q.is_cuda:
        out, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, mask, True, 0.0, block.causal, scale=scale
        )
        lse = lse[..., : q.shape[2]]
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, block.causal, attn_mask=mask, scale=scale
        )
    out, lse = out.to(wide), lse.to(wide)
    dead = _dead(block)
    if dead is not None:  # the fused kernels report lse 0 on a row with no visible key
        lse = lse.masked_fill(dead, float("-inf"))
        out = out.masked_fill(dead[..., None], 0.0)
    return out, lse


def _backward(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    block: _Block,
    scale: float,
    math: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One block's share of dq, dk, dv given the *merged* output and log-sum-exp of the rows
    (rows that see no key at all carry lse 0 and dout 0, so they contribute nothing)."""
    heads, groups = q.shape[1], k.shape[1]
    k, v = _expand(k, heads), _expand(v, heads)
    wide = torch.promote_types(q.dtype, torch.float32)
    if math:
        q, k, v, dout, out = (t.to(wide) for t in (q, k, v, dout, out))
        p = torch.exp(_scores(q, k, block, scale) - lse[..., None])
        dv = p.transpose(-1, -2) @ dout
        dp = dout @ v.transpose(-1, -2)
        ds = p * (dp - (dout * out).sum(-1, keepdim=True))
        dq, dk = (ds @ k) * scale, (ds.transpose(-1, -2) @ q) * scale
        return dq, _fold(dk, groups), _fold(dv, groups)
    mask = _additive(block, q.dtype)
    dout, out = dout.to(q.dtype), out.to(q.dtype)
    if q.is_cuda:
        rows = q.shape[2]
        padded = lse.new_zeros(*lse.shape[:-1], -(-rows // 32) * 32)
        padded[..., :rows] = lse
        seed = torch.zeros((), dtype=torch.int64, device=q.device)
        dq, dk, dv, _ = torch.ops.aten._scaled_dot_product_efficient_attention_backward(
            dout, q, k, v, mask, out, padded.float(), seed, seed, 0.0, [True, True, True, False],
            block.causal, scale=scale,
        )  # fmt: skip
    else:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dout, q, k, v, out, lse.to(wide), 0.0, block.causal, attn_mask=mask, scale=scale
        )  # (the log-sum-exp stays fp32 under bf16, as the forward kernel returned it)
    return dq.to(wide), _fold(dk.to(wide), groups), _fold(dv.to(wide), groups)


def _merge(
    acc: tuple[torch.Tensor, torch.Tensor] | None, part: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two partial attentions of the same rows over disjoint keys, merged by their log-sum-exp."""
    if acc is None:
        return part
    (o1, l1), (o2, l2) = acc, part
    lse = torch.logaddexp(l1, l2)
    safe = lse.masked_fill(torch.isinf(lse), 0.0)
    w1, w2 = torch.exp(l1 - safe), torch.exp(l2 - safe)
    return o1 * w1[..., None] + o2 * w2[..., None], lse


@dataclass(frozen=True)
class _Ring:
    """What the ring's forward and backward share: the group, the chunking, the masks."""

    group: Any
    chunking: Chunking
    masking: Masking
    scale: float
    math: bool
    seq: int
    device: torch.device

    ranks: tuple[int, ...] | None = None
    """The global ranks holding chunks 0, 1, ... (None: the group's ranks in their order)."""

    def peers(self) -> tuple[int, int]:
        """The global ranks this rank sends to (next) and receives from (previous)."""
        r, c = self.chunking.rank, self.chunking.degree
        if self.ranks is not None:
            return self.ranks[(r + 1) % c], self.ranks[(r - 1) % c]
        return (
            dist.get_global_rank(self.group, (r + 1) % c) if self.group is not None else (r + 1) % c,
            dist.get_global_rank(self.group, (r - 1) % c) if self.group is not None else (r - 1) % c,
        )

    def shift(self, tensors: Sequence[torch.Tensor], tag: int) -> tuple[list[Any], list[torch.Tensor]]:
        """Start sending `tensors` to the next rank and receiving the previous rank's."""
        after, before = self.peers()
        received = [torch.empty_like(t) for t in tensors]
        ops = [
            dist.P2POp(dist.isend, t.contiguous(), after, self.group, tag + i) for i, t in enumerate(tensors)
        ]
        ops += [dist.P2POp(dist.irecv, t, before, self.group, tag + i) for i, t in enumerate(received)]
        return dist.batch_isend_irecv(ops), received

    def blocks(
        self, source: int, seen: torch.Tensor | None, bias: torch.Tensor | None
    ) -> list[tuple[slice, slice, _Block]]:
        """The visible (query rows, key rows, mask) blocks of this rank's queries against the keys
        held by rank `source`: `seen` [B, Lk] is that rank's key padding, `bias` this rank's
        additive mask rows over every key (global order)."""
        c = self.chunking.chunk_length(self.seq)
        mine, theirs = self.chunking.chunks(), self.chunking.of(source).chunks()
        out = []
        for a, qa in enumerate(mine):
            for b, kb in enumerate(theirs):
                qr, kr = range(qa * c, (qa + 1) * c), range(kb * c, (kb + 1) * c)
                kind = self.masking.kind(qr, kr)
                if kind == "none":
                    continue
                rows, cols = slice(a * c, (a + 1) * c), slice(b * c, (b + 1) * c)
                extra = bias[..., rows, kb * c : (kb + 1) * c] if bias is not None else None
                keep = seen[:, None, None, cols].bool() if seen is not None else None
                if kind == "mask":
                    pos = self.masking.visible(torch.tensor(qr), torch.tensor(kr))
                    assert pos is not None
                    pos = pos.to(self.device)
                    keep = pos[None, None] if keep is None else keep & pos
                causal = kind == "causal" and keep is None and extra is None
                if kind == "causal" and not causal:  # a padded or biased diagonal block: explicit
                    tri = torch.ones(c, c, dtype=torch.bool, device=self.device)
                    keep = tri.tril()[None, None] if keep is None else keep & tri.tril()
                out.append((rows, cols, _Block(causal, keep, extra)))
        return out


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        padding: torch.Tensor | None,
        bias: torch.Tensor | None,
        ring: _Ring,
    ) -> torch.Tensor:
        degree = ring.chunking.degree
        kv = torch.stack([k, v])
        held = [kv] if padding is None else [kv, padding]
        parts: dict[int, tuple[torch.Tensor, torch.Tensor] | None] = {}
        for step in range(degree):
            source = (ring.chunking.rank - step) % degree
            pending = ring.shift(held, 0) if step < degree - 1 else None
            seen = held[1] if padding is not None else None
            for rows, cols, block in ring.blocks(source, seen, bias):
                part = _forward(
                    q[:, :, rows],
                    held[0][0][:, :, cols],
                    held[0][1][:, :, cols],
                    block,
                    ring.scale,
                    ring.math,
                )
                parts[rows.start] = _merge(parts.get(rows.start), part)
            if pending is not None:
                for work in pending[0]:
                    work.wait()
                held = pending[1]
        c = ring.chunking.chunk_length(ring.seq)
        zero = q.new_zeros(*q.shape[:2], c, q.shape[3], dtype=torch.promote_types(q.dtype, torch.float32))
        empty = (zero, zero.new_full(zero.shape[:-1], float("-inf")))  # rows that see no key
        rows_done = [parts.get(start) or empty for start in range(0, q.shape[2], c)]
        out = torch.cat([o for o, _ in rows_done], dim=2)
        lse = torch.cat([lse for _, lse in rows_done], dim=2)
        ctx.ring = ring
        ctx.save_for_backward(q, k, v, out, lse, padding, bias)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        q, k, v, out, lse, padding, bias = ctx.saved_tensors
        ring: _Ring = ctx.ring
        degree = ring.chunking.degree
        dead = torch.isinf(lse)
        lse = lse.masked_fill(dead, 0.0)
        dout = dout.masked_fill(dead[..., None], 0.0)
        wide = out.dtype
        dq = torch.zeros(q.shape, dtype=wide, device=q.device)
        held = [torch.stack([k, v])] if padding is None else [torch.stack([k, v]), padding]
        incoming: tuple[list[Any], list[torch.Tensor]] | None = None
        for step in range(degree):
            source = (ring.chunking.rank - step) % degree
            pending = ring.shift(held, 0) if step < degree - 1 else None
            seen = held[1] if padding is not None else None
            dkv = torch.zeros(held[0].shape, dtype=wide, device=q.device)
            for rows, cols, block in ring.blocks(source, seen, bias):
                kb, vb = held[0][0][:, :, cols], held[0][1][:, :, cols]
                dqb, dkb, dvb = _backward(
                    dout[:, :, rows], q[:, :, rows], kb, vb, out[:, :, rows], lse[:, :, rows],
                    block, ring.scale, ring.math,
                )  # fmt: skip
                dq[:, :, rows] += dqb
                dkv[0][:, :, cols] += dkb
                dkv[1][:, :, cols] += dvb
            if incoming is not None:  # the shares of this block from the ranks it has visited
                for work in incoming[0]:
                    work.wait()
                dkv += incoming[1][0]
            incoming = ring.shift([dkv], 8) if degree > 1 else None
            if pending is not None:
                for work in pending[0]:
                    work.wait()
                held = pending[1]
        if incoming is not None:  # this rank's own block, home after one lap
            for work in incoming[0]:
                work.wait()
            dkv = incoming[1][0]
        return dq.to(q.dtype), dkv[0].to(k.dtype), dkv[1].to(v.dtype), None, None, None


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, degree: int) -> None:
    if (
        q.dim() != 4
        or k.shape != v.shape
        or k.dim() != 4
        or (q.shape[0], q.shape[3]) != (k.shape[0], k.shape[3])
    ):
        raise ValueError(
            "q must be [B, H, L, D] and k, v [B, G, L, D] of the same batch and head width: "
            f"got {list(q.shape)}, {list(k.shape)}, {list(v.shape)}"
        )
    if q.shape[2] != k.shape[2]:
        raise ValueError("context-parallel attention is self-attention: q, k and v hold the same rows")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{k.shape[1]} key/value heads do not divide {q.shape[1]} query heads")


def ring_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group: Any,
    chunking: Chunking,
    masking: Masking = Masking(),
    padding: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    scale: float | None = None,
    math: bool = False,
    ranks: Sequence[int] | None = None,
) -> torch.Tensor:
    """Attention of this rank's query rows over the whole sequence, the key/value blocks passed
    around the ring of `group` (None: every rank); `ranks`: the global ranks holding chunks
    0, 1, ... in order (None: the group's own order).

    q [B, H, L, D], k, v [B, G, L, D]: this rank's rows (`chunking`), G dividing H (grouped-query).
    `padding` [B, L] bool: this rank's keys that exist (False: padding). `bias` [B|1, H|1, L, S]:
    an additive mask, this rank's query rows over every key in global order (not differentiated).
    Returns [B, H, L, D], exact against attention over the whole sequence; differentiable in q, k, v."""
    _check(q, k, v, chunking.degree)
    if bias is not None and bias.requires_grad:
        raise ValueError("ring attention does not differentiate an additive mask")
    ring = _Ring(
        group,
        chunking,
        masking,
        scale or 1 / _math.sqrt(q.shape[-1]),
        math,
        q.shape[2] * chunking.degree,
        q.device,
        None if ranks is None else tuple(ranks),
    )
    chunking.chunk_length(ring.seq)
    if padding is not None:  # sent around the ring as bytes (gloo has no bool)
        padding = padding.to(torch.uint8)
    return _RingAttention.apply(q, k, v, padding, bias, ring)


def _group(group: Any) -> Any:
    """The process group itself (None: every rank), for the functional collectives."""
    return dist.group.WORLD if group is None else group


def _to_heads(x: torch.Tensor, group: Any, degree: int) -> torch.Tensor:
    """[B, N, L, D] sequence-sharded → [B, N/C, C·L, D] head-sharded (rows in rank order)."""
    b, n, rows, d = x.shape
    send = x.reshape(b, degree, n // degree, rows, d).transpose(0, 1).contiguous()
    got = funcol.all_to_all_single_autograd(send, None, None, _group(group))
    return got.permute(1, 2, 0, 3, 4).reshape(b, n // degree, degree * rows, d)


def _to_rows(x: torch.Tensor, group: Any, degree: int) -> torch.Tensor:
    """The inverse of `_to_heads`: [B, N/C, C·L, D] → [B, N, L, D]."""
    b, n, full, d = x.shape
    send = x.reshape(b, n, degree, full // degree, d).permute(2, 0, 1, 3, 4).contiguous()
    got = funcol.all_to_all_single_autograd(send, None, None, _group(group))
    return got.transpose(0, 1).reshape(b, degree * n, full // degree, d)


def _gather(x: torch.Tensor, group: Any, degree: int, dim: int) -> torch.Tensor:
    parts = [torch.empty_like(x) for _ in range(degree)]
    dist.all_gather(parts, x.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


def ulysses_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    group: Any,
    chunking: Chunking,
    masking: Masking = Masking(),
    padding: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    scale: float | None = None,
    math: bool = False,
) -> torch.Tensor:
    """The same attention as `ring_attention` (same arguments), by the all-to-all exchange: the
    heads are split over the group (`all_to_all_single`), each rank attends its heads over the
    whole sequence, and the output goes back to sequence rows. The query heads must divide by
    the degree; key/value heads are repeated up to the degree when fewer."""
    degree = chunking.degree
    _check(q, k, v, degree)
    if q.shape[1] % degree:
        raise ValueError(f"all-to-all attention splits {q.shape[1]} heads over {degree} ranks: not evenly")
    if bias is not None and bias.requires_grad:
        raise ValueError("all-to-all attention does not differentiate an additive mask")
    groups = k.shape[1]
    if groups % degree:
        if degree % groups:
            raise ValueError(
                f"{groups} key/value heads and context degree {degree}: neither divides the other"
            )
        k, v = _expand(k, degree), _expand(v, degree)
    rows = q.shape[2]
    seq = rows * degree
    qh, kh, vh = (_to_heads(t, group, degree) for t in (q, k, v))
    order = torch.cat([chunking.of(r).positions(seq) for r in range(degree)]).to(q.device)
    seen = masking.visible(order, order)
    keep = None if seen is None else seen[None, None]
    if padding is not None:
        present = _gather(padding.to(torch.uint8), group, degree, 1).bool()[:, None, None, :]
        keep = present if keep is None else keep & present
    mask = None
    if keep is not None:
        mask = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill(~keep, float("-inf"))
    if bias is not None:
        rows_all = _gather(bias, group, degree, 2)  # [B|1, H|1, S (rank order), S (global)]
        if bias.shape[1] != 1:  # a per-head mask: this rank's heads
            heads = q.shape[1] // degree
            rows_all = rows_all[:, chunking.rank * heads : (chunking.rank + 1) * heads]
        extra = rows_all.index_select(3, order).to(q.dtype)
        mask = extra if mask is None else mask + extra
    if math:
        wide = torch.promote_types(q.dtype, torch.float32)
        scores = (qh.to(wide) @ _expand(kh, qh.shape[1]).to(wide).transpose(-1, -2)) * (
            scale or 1 / _math.sqrt(q.shape[-1])
        )
        if mask is not None:
            scores = scores + mask.to(wide)
        out = (torch.softmax(scores, -1) @ _expand(vh, qh.shape[1]).to(wide)).to(q.dtype)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            qh, kh, vh, attn_mask=mask, scale=scale, enable_gqa=kh.shape[1] != qh.shape[1]
        )
    return _to_rows(out, group, degree)


class ContextGroup(Protocol):
    """The ranks of one context group, in chunk order, and their process group
    (`runtime.context.ShardGroup`)."""

    @property
    def ranks(self) -> tuple[int, ...]: ...

    @property
    def process_group(self) -> Any: ...


def context_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    wq: torch.Tensor,
    wk: torch.Tensor,
    wv: torch.Tensor,
    wo: torch.Tensor,
    bq: torch.Tensor | None,
    bk: torch.Tensor | None,
    bv: torch.Tensor | None,
    bo: torch.Tensor | None,
    mask: torch.Tensor | None,
    heads: int,
    context: ContextGroup | None,
    exchange: str,
    cos: torch.Tensor | None = None,
    sin: torch.Tensor | None = None,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    norm_eps: float = 0.0,
    scale: float | None = None,
    causal: Any = None,
    kernel: str = "sdpa",
) -> torch.Tensor:
    """One task of a context-parallel `pcg.attention` (what `-t torch` emits): this rank's
    sequence rows of q = k = v [B, L, E], projected onto this task's `heads` (and KV heads),
    rotated at their positions (cos/sin rows), attended over the whole sequence by the op's
    `exchange` among the `context` ranks, and projected out. `mask` [B|1, H|1, L|1, S]: the
    additive mask's rows of these queries over every key (a key-padding mask broadcast); `causal`
    (the op's flag: not None) masks by global positions. `kernel` is the op's choice for the
    whole-sequence attention; the blocks always run the fused kernels (plain torch in float64)."""
    if context is None:
        raise ValueError("a context-parallel attention task must be in a context group")
    if exchange not in EXCHANGES:
        raise ValueError(f'context exchange "{exchange}" is not one of {", ".join(EXCHANGES)}')
    chunking = Chunking(len(context.ranks), context.ranks.index(dist.get_rank()), zigzag=False)
    width = wq.shape[0] // heads
    qh = rotate_heads(project_heads(q, wq, bq, width, q_norm, norm_eps), cos, sin)
    kh = rotate_heads(project_heads(k, wk, bk, width, k_norm, norm_eps), cos, sin)
    vh = project_heads(v, wv, bv, width, None, norm_eps)
    bias = None if mask is None else mask.expand(*mask.shape[:2], q.shape[1], mask.shape[3]).detach()
    math = q.dtype == torch.float64
    masking = Masking(causal=causal is not None)
    group = context.process_group
    if exchange == "ring":
        out = ring_attention(
            qh, kh, vh, group, chunking, masking, bias=bias, scale=scale, math=math, ranks=context.ranks
        )
    elif list(context.ranks) != sorted(context.ranks):
        raise ValueError(f"all-to-all attention needs its ranks in order, got {list(context.ranks)}")
    else:
        out = ulysses_attention(qh, kh, vh, group, chunking, masking, bias=bias, scale=scale, math=math)
    return F.linear(out.transpose(1, 2).reshape(q.shape[0], q.shape[1], heads * width), wo, bo)
