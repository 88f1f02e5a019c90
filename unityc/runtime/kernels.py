"""Per-task kernels that take more than one torch call (the rest are emitted inline).

They follow `unityc/interpreter/kernels.py`, the executable definition of what one task of each
pcg op computes on its local pieces: a task holding partial sum 0 adds biases, a task holding a
vocabulary shard looks up only its rows (others give zeros), losses divide by the logical count.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F


def vocab_lookup(
    ids: torch.Tensor, weight: torch.Tensor, start: int = 0, padding_idx: int | None = None
) -> torch.Tensor:
    """Rows of the vocabulary shard starting at row `start`; ids outside it give zeros. The
    row `padding_idx` (a global row, None: none) gets no gradient, as in torch's embedding; only
    the shard holding it applies it."""
    rows_here = weight.shape[0]
    local = ids - start
    inside = (local >= 0) & (local < rows_here)
    pad = None if padding_idx is None or not 0 <= padding_idx - start < rows_here else padding_idx - start
    rows = F.embedding(torch.where(inside, local, torch.zeros_like(local)), weight, padding_idx=pad)
    return rows * inside.unsqueeze(-1).to(rows.dtype)


def embedding_bag(
    ids: torch.Tensor, weight: torch.Tensor, start: int | None, mode: str, bag_size: int
) -> torch.Tensor:
    """Sum (or mean over the logical bag size) of the looked-up rows of each bag; `start` is
    None when the vocabulary is not sharded."""
    rows = F.embedding(ids, weight) if start is None else vocab_lookup(ids, weight, start)
    out = rows.sum(dim=1)
    return out / bag_size if mode == "mean" else out


def attention(
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
    dropout: Callable[[torch.Tensor], torch.Tensor] | None = None,
    cos: torch.Tensor | None = None,
    sin: torch.Tensor | None = None,
) -> torch.Tensor:
    """Multi-head attention over this task's `heads` (its shard of the projections). wk and wv
    hold this task's KV heads (as many as wq's heads or fewer: grouped-query attention, query
    head i reading KV head i // (heads / KV heads)); cos and sin rotate q and k (rotary)."""
    batch, sq, _ = q.shape
    sk = k.shape[1]
    width = wq.shape[0] // heads
    groups = wk.shape[0] // width

    def project(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, s: int, n: int) -> torch.Tensor:
        return F.linear(x, w, b).reshape(batch, s, n, width).transpose(1, 2)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        if cos is None or sin is None:
            return x
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def repeat(x: torch.Tensor) -> torch.Tensor:
        return x if groups == heads else x.repeat_interleave(heads // groups, dim=1)

    keys = repeat(rotate(project(k, wk, bk, sk, groups)))
    scores = rotate(project(q, wq, bq, sq, heads)) @ keys.transpose(-1, -2) / math.sqrt(width)
    if mask is not None:
        scores = scores + mask
    probs = torch.softmax(scores, dim=-1)
    if dropout is not None:
        probs = dropout(probs)
    context = probs @ repeat(project(v, wv, bv, sk, groups))
    return F.linear(context.transpose(1, 2).reshape(batch, sq, heads * width), wo, bo)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, divisor: int) -> torch.Tensor:
    """Summed cross-entropy of these rows over the logical row count (1 for reduction=sum)."""
    total = F.cross_entropy(logits, target, reduction="sum")
    return total / divisor if divisor != 1 else total


def mse_loss(x: torch.Tensor, target: torch.Tensor, divisor: int) -> torch.Tensor:
    """Summed squared error of this piece over the logical element count (1 for sum)."""
    total = ((x - target) ** 2).sum()
    return total / divisor if divisor != 1 else total


def reduce(x: torch.Tensor, dims: tuple[int, ...], keepdim: bool, divisor: int) -> torch.Tensor:
    """Sum over `dims`, divided by the logical count of reduced elements for a mean."""
    out = x.sum(dim=dims, keepdim=keepdim) if dims else x
    return out / divisor if divisor != 1 else out
