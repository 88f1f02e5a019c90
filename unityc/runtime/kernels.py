"""Per-task kernels that take more than one torch call (the rest are emitted inline).

They follow `unityc/interpreter/kernels.py`, the executable definition of what one task of each
pcg op computes on its local pieces: a task holding partial sum 0 adds biases, a task holding a
vocabulary shard looks up only its rows (others give zeros), losses divide by the logical count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def clamp(x: torch.Tensor, low: float | None, high: float | None) -> torch.Tensor:
    """min(max(x, low), high) as `F.hardtanh` (ReLU6, hardtanh): the gradient passes where
    low < x < high (torch.clamp's also at the bounds themselves, a set of measure zero)."""
    return F.hardtanh(x, -math.inf if low is None else low, math.inf if high is None else high)


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


def project_heads(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor | None,
    width: int,
    norm: torch.Tensor | None,
    eps: float,
) -> torch.Tensor:
    """[B, L, E] projected by w (and b) -> heads [B, N, L, width], N = w's rows / width; with
    `norm`, each head RMS-normalized (Qwen3's q_norm / k_norm)."""
    out = F.linear(x, w, b).reshape(x.shape[0], x.shape[1], w.shape[0] // width, width)
    if norm is not None:
        out = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps) * norm
    return out.transpose(1, 2)


def rotate_heads(x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None) -> torch.Tensor:
    """Rotary embeddings (rotate_half) on the first cos.shape[-1] dims of each head (GPT-NeoX's
    rotary_pct), else all, at the positions cos and sin hold."""
    if cos is None or sin is None:
        return x
    dims = cos.shape[-1]
    part, rest = x[..., :dims], x[..., dims:]
    half = dims // 2
    rotated = part * cos + torch.cat((-part[..., half:], part[..., :half]), dim=-1) * sin
    return rotated if dims == x.shape[-1] else torch.cat((rotated, rest), dim=-1)


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
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    norm_eps: float = 0.0,
    scale: float | None = None,
    softcap: float | None = None,
    causal: int | None = None,
    kernel: str = "math",
    recompute_core: bool = False,
) -> torch.Tensor:
    """Multi-head attention over this task's `heads` (its shard of the projections). wk and wv
    hold this task's KV heads (as many as wq's heads or fewer: grouped-query attention, query
    head i reading KV head i // (heads / KV heads)); q_norm and k_norm RMS-normalize each
    query and key head (Qwen3), before cos and sin rotate them (rotary, on the first
    cos.shape[-1] dims of each head: all, or GPT-NeoX's partial rotary). The scores are scaled
    by `scale` (default 1/sqrt(head width)) and, with `softcap` c, capped to c·tanh(s / c)
    before the additive mask (Gemma-2). `causal` (None: not causal) is the position of this
    piece's first query in the whole sequence: query i attends keys j <= i + causal.

    `kernel` "sdpa" runs `F.scaled_dot_product_attention` (no Sq x Sk tensor kept for backward:
    `is_causal` where only the causal mask applies, grouped-query heads as `enable_gqa`; a
    causal mask with another mask, or at a query offset, is one mask it builds); "math" writes
    the scores out (soft-capping and dropout need it). A key mask that masks nothing in this
    batch (no sequence padded) is dropped, as HF's SDPA path checks at run time
    (`padding_mask.all()`): a causal SDPA then runs `is_causal`, building no B x Sq x Sk mask
    and skipping the masked half of the scores.

    `recompute_core` (selective recomputation, `patterns.recomputes_core`): the core, from the
    projected heads to the context (scores, softmax, dropout, times V), runs under
    `torch.utils.checkpoint` (non-reentrant), as Megatron-LM's selective recomputation: backward
    keeps the projections' input, the heads and the context (the output projection's input) and
    runs the core's forward again, not the projections' (`memory.attention_core_saved_bytes` is
    what it no longer keeps)."""
    batch, sq, _ = q.shape
    width = wq.shape[0] // heads
    groups = wk.shape[0] // width

    query = rotate_heads(project_heads(q, wq, bq, width, q_norm, norm_eps), cos, sin)
    keys = rotate_heads(project_heads(k, wk, bk, width, k_norm, norm_eps), cos, sin)
    values = project_heads(v, wv, bv, width, None, norm_eps)
    if mask is not None and _masks_nothing(mask):
        mask = None  # no key padded in this batch: SDPA runs is_causal, the math kernel adds nothing
    core: Callable[..., torch.Tensor]
    if kernel == "sdpa":
        assert dropout is None and softcap is None, "SDPA has no soft-capping and no program-drawn dropout"
        core = partial(_sdpa, causal=causal, scale=scale, gqa=groups != heads)
    else:
        core = partial(_math_attention, causal=causal, scale=scale, softcap=softcap, dropout=dropout)
    if recompute_core:
        query, keys, values = _autocast_heads(query, keys, values)
        context = checkpoint(core, query, keys, values, mask, use_reentrant=False)
    else:
        context = core(query, keys, values, mask)
    return F.linear(context.transpose(1, 2).reshape(batch, sq, heads * width), wo, bo)


def _autocast_heads(*heads: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Under autocast, the heads in its dtype: the core's matmuls (or SDPA) would cast them, and
    their backward keep those copies; a checkpoint keeps its inputs instead, so the copies are
    taken before it (rotary's fp32 cos and sin promote q and k to fp32 under bf16-mixed)."""
    device = heads[0].device.type
    if not torch.is_autocast_enabled(device):
        return heads
    dtype = torch.get_autocast_dtype(device)
    return tuple(h.to(dtype) if h.is_floating_point() else h for h in heads)


def _causal_allowed(sq: int, sk: int, start: int, device: torch.device) -> torch.Tensor:
    """[Sq, Sk] booleans: query i (at `start` + i in the whole sequence) may attend key j <= that."""
    return torch.ones(sq, sk, dtype=torch.bool, device=device).tril(start)


def _sdpa(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    causal: int | None,
    scale: float | None,
    gqa: bool,
) -> torch.Tensor:
    """F.scaled_dot_product_attention on heads [B, H, S, D] (keys, values: [B, G, Sk, D])."""
    sq, sk = query.shape[2], keys.shape[2]
    is_causal = causal == 0 and mask is None and sq == sk
    if causal is not None and not is_causal:
        allowed = _causal_allowed(sq, sk, causal, query.device)
        mask = allowed if mask is None else mask.masked_fill(~allowed, torch.finfo(mask.dtype).min)
    return F.scaled_dot_product_attention(
        query, keys, values, attn_mask=mask, is_causal=is_causal, scale=scale, enable_gqa=gqa
    )


def _masks_nothing(mask: torch.Tensor) -> bool:
    """An additive key mask ([..., 1, Sk], not learned) that is zero everywhere: it keeps every
    key. One pass over B x Sk values (a host sync on a GPU, as HF's own check)."""
    if not mask.is_floating_point() or mask.requires_grad or mask.dim() < 2 or mask.shape[-2] != 1:
        return False
    return not bool(mask.any())


def _math_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None,
    causal: int | None,
    scale: float | None,
    softcap: float | None,
    dropout: Callable[[torch.Tensor], torch.Tensor] | None,
) -> torch.Tensor:
    """softmax(q kᵀ · scale [capped] + mask [causal]) [dropout] v, grouped-query heads repeated."""
    heads, groups = query.shape[1], keys.shape[1]

    def repeat(x: torch.Tensor) -> torch.Tensor:
        return x if groups == heads else x.repeat_interleave(heads // groups, dim=1)

    width = math.sqrt(query.shape[-1])
    factor = 1 / width if scale is None else scale
    if math.frexp(factor)[0] == 0.5:  # a power of two: scaling q is exact, S x D work, not S x S
        scores = (query * factor) @ repeat(keys).transpose(-1, -2)
    else:
        scores = query @ repeat(keys).transpose(-1, -2)
        scores = scores / width if scale is None else scores * scale
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if mask is not None:
        scores = scores + mask
    if causal is not None:
        allowed = _causal_allowed(scores.shape[2], scores.shape[3], causal, scores.device)
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1)
    if dropout is not None:
        probs = dropout(probs)
    return probs @ repeat(values)


class Shards(Protocol):
    """The ranks holding the other shards of a piece: sums (differentiable) and gathers."""

    @property
    def size(self) -> int: ...

    def sum(self, x: torch.Tensor, grad: bool = True) -> torch.Tensor: ...

    def gather(self, x: torch.Tensor, dim: int) -> torch.Tensor: ...


def check_classes(target: torch.Tensor, classes: int, ignore_index: int | None = None) -> None:
    """Every target is a class in [0, classes) or the ignore_index. Without one, every target is
    counted, so a target such as -100 (torch's ignore_index) is an error, not a row silently
    dropped from the sum and still counted by the mean. (Asynchronous on a GPU.)"""
    ok = (target >= 0) & (target < classes)
    if ignore_index is not None:
        ok |= target == ignore_index
    ok = ok.all()
    if ignore_index is not None:
        message = f"cross-entropy target outside the {classes} classes, not the ignore_index {ignore_index}"
    else:
        message = (
            f"cross-entropy target outside the {classes} classes (an ignored target such as -100?): the "
            "plan's cross-entropy has no ignore_index; import the model with targets holding it"
        )
    if target.is_cuda:
        torch._assert_async(ok, message)
    elif not bool(ok):
        raise ValueError(message)


class _Picked(torch.autograd.Function):
    """Each row's logit at `index`; its backward scatters the gradient there, keeping only the
    indices (`Tensor.gather` keeps the whole logits shard for backward)."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.shape = logits.shape
        return logits.gather(1, index.unsqueeze(1)).squeeze(1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (index,) = ctx.saved_tensors
        out = grad.new_zeros(ctx.shape)
        return out.scatter_(1, index.unsqueeze(1), grad.unsqueeze(1)), None


def class_shard_losses(
    logits: torch.Tensor,
    target: torch.Tensor,
    start: int,
    shards: int,
    peak: torch.Tensor,
    sumexp: torch.Tensor,
) -> torch.Tensor:
    """Per row, the part of its cross-entropy that the class shard starting at class `start`
    (one of `shards`) holds: log(sumexp) / shards, less the target's logit (shifted by the row's
    `peak`) where this shard holds the target. `sumexp` is the row's sum of exp(logit - peak)
    over every shard, so the parts of all shards add up to logsumexp(row) - logit[target]."""
    local = target - start
    inside = (local >= 0) & (local < logits.shape[1])
    picked = _Picked.apply(logits, torch.where(inside, local, torch.zeros_like(local)))
    shifted = torch.where(inside, picked - peak, torch.zeros_like(picked))
    return sumexp.log() / shards - shifted


def without_padding(logits: torch.Tensor, start: int, real: int | None) -> torch.Tensor:
    """The class shard `logits` (its first column the whole logits' `start`) with the columns at
    or past `real` (a padded vocabulary's) set to -inf: no probability, a zero gradient."""
    if real is None or start + logits.shape[1] <= real:
        return logits
    padding = torch.arange(start, start + logits.shape[1], device=logits.device) >= real
    return logits.masked_fill(padding, float("-inf"))


def cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    divisor: int | None,
    ignore_index: int | None = None,
    start: int = 0,
    classes: Shards | None = None,
    rows: Shards | None = None,
    real: int | None = None,
) -> torch.Tensor:
    """Summed cross-entropy of these rows over `divisor`: the logical row count for a mean, 1 for
    a sum, None for a mean over the kept targets (those not `ignore_index`) of the whole batch,
    counted across the row shards `rows`. `classes` (None: this piece holds every class) are the
    ranks holding the other class shards of these rows (Megatron-LM's vocabulary-parallel
    cross-entropy): the row maxima and sums of exponentials are reduced across them, never the
    logits, and this shard's part is `class_shard_losses`. `real` (a padded vocabulary): the
    classes are the first `real` columns of the whole logits; the others count as -inf."""
    shards = 1 if classes is None else classes.size
    check_classes(target, real or logits.shape[1] * shards, ignore_index)
    logits = without_padding(logits, start, real)
    kept = None if ignore_index is None else target != ignore_index
    if classes is None:
        total = F.cross_entropy(
            logits, target, reduction="sum", ignore_index=-100 if ignore_index is None else ignore_index
        )
    else:
        # in fp32, as autocast runs F.cross_entropy (and Megatron-LM its vocabulary-parallel one):
        # the exponentials (kept for backward) and their sums are fp32
        logits = logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits
        with torch.no_grad():
            peak = classes.gather(logits.max(dim=1, keepdim=True).values, 1).max(dim=1).values
        sumexp = classes.sum((logits - peak.unsqueeze(1)).exp().sum(dim=1))
        losses = class_shard_losses(logits, target, start, shards, peak, sumexp)
        total = (losses if kept is None else torch.where(kept, losses, torch.zeros_like(losses))).sum()
    if divisor is None:
        assert kept is not None, "a mean over the kept targets needs an ignore_index"
        count = kept.sum().to(total.dtype)
        return total / (count if rows is None else rows.sum(count, grad=False))
    return total / divisor if divisor != 1 else total


def mse_loss(x: torch.Tensor, target: torch.Tensor, divisor: int) -> torch.Tensor:
    """Summed squared error of this piece over the logical element count (1 for sum)."""
    total = ((x - target) ** 2).sum()
    return total / divisor if divisor != 1 else total


def reduce(x: torch.Tensor, dims: tuple[int, ...], keepdim: bool, divisor: int) -> torch.Tensor:
    """Sum over `dims`, divided by the logical count of reduced elements for a mean."""
    out = x.sum(dim=dims, keepdim=keepdim) if dims else x
    return out / divisor if divisor != 1 else out


def with_halo(
    x: torch.Tensor,
    dim: int,
    above: int,
    below: int,
    before: torch.Tensor | None,
    after: torch.Tensor | None,
    fill: float,
) -> torch.Tensor:
    """A spatial shard extended along `dim` by its halo (`unityc.dialects.spatial`): `before`,
    the `above` rows that end the shard before it, and `after`, the `below` rows that start the
    shard after it; None on the first (last) shard, whose halo is the window's padding (`fill`:
    0 for a convolution or an average, -inf for a max). A negative `below` drops this shard's
    last -below rows (no window reads them). Differentiable: a halo row's gradient flows back
    to the shard that sent it."""
    parts: list[torch.Tensor] = []
    if above > 0:
        parts.append(before if before is not None else _filled(x, dim, above, fill))
    parts.append(x if below >= 0 else x.narrow(dim, 0, x.shape[dim] + below))
    if below > 0:
        parts.append(after if after is not None else _filled(x, dim, below, fill))
    return torch.cat(parts, dim) if len(parts) > 1 else parts[0]


def _filled(x: torch.Tensor, dim: int, rows: int, fill: float) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] = rows
    return torch.full(shape, fill, dtype=x.dtype, device=x.device)


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The type a norm's statistics are computed in: fp32, or float64 for a float64 input."""
    return torch.promote_types(dtype, torch.float32)


class _RmsNorm(torch.autograd.Function):
    """RMS norm as one kernel would run it: forward by torch's fused `aten._fused_rms_norm`
    (what `F.rms_norm` runs on CUDA), backward in closed form from x and the per-row rstd,
    the only tensors kept (`F.rms_norm`'s CPU path also keeps an fp32 copy of x and the
    normalized x)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, x: torch.Tensor, weight: torch.Tensor | None, dims: int, eps: float, offset: float,
        after_cast: bool,
    ) -> torch.Tensor:  # fmt: skip
        shape, wide = list(x.shape[-dims:]), _wide(x.dtype)
        if weight is None:
            y, rstd = torch.ops.aten._fused_rms_norm(x, shape, None, eps)
        elif not after_cast and weight.dtype == x.dtype == wide:
            y, rstd = torch.ops.aten._fused_rms_norm(x, shape, weight + offset if offset else weight, eps)
        elif after_cast:  # n cast to x's type first (HF Llama), then the weight
            y, rstd = torch.ops.aten._fused_rms_norm(x, shape, None, eps)
            y = (y * (weight + offset if offset else weight)).to(x.dtype)
        else:  # weight and normalization in fp32, one rounding to x's type (F.rms_norm, Gemma)
            _, rstd = torch.ops.aten._fused_rms_norm(x, shape, None, eps)
            y = (x.to(wide) * rstd * (weight.to(wide) + offset)).to(x.dtype)  # as Gemma's `1 + w.float()`
        ctx.save_for_backward(x, rstd, weight)
        ctx.args = (dims, offset, after_cast)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        x, rstd, weight = ctx.saved_tensors
        dims, offset, after_cast = ctx.args
        wide = _wide(x.dtype)
        reduce_dims = tuple(range(x.dim() - dims, x.dim()))
        n = x.to(wide) * rstd
        g = dy.to(wide)
        dw = None
        if weight is not None:
            scale = weight.to(wide) + offset
            rows = tuple(range(x.dim() - dims))
            normed = n.to(x.dtype).to(wide) if after_cast else n
            dw = (g * normed).sum(dim=rows).to(weight.dtype) if ctx.needs_input_grad[1] else None
            g = g * scale
        dx = rstd * (g - n * (g * n).mean(dim=reduce_dims, keepdim=True))
        return dx.to(x.dtype), dw, None, None, None, None


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, dims: int, eps: float, offset: float = 0.0,
    after_cast: bool = False,
) -> torch.Tensor:  # fmt: skip
    """`pcg.rms_norm` on a piece: RMS norm over the last `dims` dims (see the op), keeping only x
    and the per-row rstd (fp32) for backward."""
    return _RmsNorm.apply(x, weight, dims, eps, offset, after_cast)  # type: ignore[no-any-return]


def rms_norm_saved_bytes(rows: int) -> int:
    """What `rms_norm` keeps besides its input x (and weight): the per-row rstd, fp32."""
    return 4 * rows


def _activation(act: str, x: torch.Tensor) -> torch.Tensor:
    if act == "silu":
        return F.silu(x)
    return F.gelu(x, approximate="tanh" if act == "gelu_tanh" else "none")


class _Gated(torch.autograd.Function):
    """act(gate) * up keeping only gate and up: act(gate) is recomputed in backward (one
    element-wise pass) instead of being kept, as torch.compile's min-cut partitioner does."""

    @staticmethod
    def forward(ctx: Any, gate: torch.Tensor, up: torch.Tensor, act: str) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(gate, up)
        ctx.act = act
        return _activation(act, gate) * up

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        gate, up = ctx.saved_tensors
        d_gate = d_up = None
        if ctx.needs_input_grad[0]:
            d_act = dy * up
            if ctx.act == "silu":
                d_gate = torch.ops.aten.silu_backward(d_act, gate)
            else:
                approximate = "tanh" if ctx.act == "gelu_tanh" else "none"
                d_gate = torch.ops.aten.gelu_backward(d_act, gate, approximate=approximate)
        if ctx.needs_input_grad[1]:
            d_up = dy * _activation(ctx.act, gate)
        return d_gate, d_up, None


def gated_activation(gate: torch.Tensor, up: torch.Tensor, act: str) -> torch.Tensor:
    """`pcg.gated_activation` on a piece: act(gate) * up, keeping only gate and up."""
    return _Gated.apply(gate, up, act)  # type: ignore[no-any-return]


def topk_indices(
    x: torch.Tensor, k: int, groups: int = 1, group_k: int | None = None, group_top: int = 1
) -> torch.Tensor:
    """The indices of the `k` largest elements along the last dim (descending). With `groups`
    G > 1, group-limited (DeepSeek-V3's router): each of the G equal groups of the last dim is
    scored by the sum of its `group_top` largest elements, and only the `group_k` best groups'
    elements are candidates. Indices carry no gradient."""
    with torch.no_grad():
        if groups > 1:
            grouped = x.reshape(*x.shape[:-1], groups, x.shape[-1] // groups)
            scores = grouped.topk(group_top, dim=-1).values.sum(dim=-1)
            best = scores.topk(group_k or groups, dim=-1).indices
            keep = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, best, True)
            x = grouped.masked_fill(~keep.unsqueeze(-1), -math.inf).reshape(x.shape)
        return x.topk(k, dim=-1).indices


def experts(
    x: torch.Tensor,
    indices: torch.Tensor,
    weights: torch.Tensor,
    gate_up: torch.Tensor,
    down: torch.Tensor,
    activation: str = "silu",
) -> torch.Tensor:
    """The routed experts, dropless, sort-based: the (token, slot) pairs sorted by expert, one
    gated FFN per expert on its contiguous slice (its size known only now, at run time), each row
    scaled by its gate weight and added back at its token. x [T, H], indices and weights [T, k],
    gate_up [E, 2I, H] (gate rows, then up rows), down [E, H, I]. An expert no token chose
    runs nothing (its weights' gradient is zero)."""
    if activation != "silu":
        raise ValueError(f"experts: unknown activation '{activation}'")
    k = indices.shape[1]
    flat = indices.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=gate_up.shape[0]).tolist()
    token = order // k
    rows = x[token]
    outs = []
    for e, part in enumerate(torch.split(rows, counts)):
        if part.shape[0] == 0:
            continue
        gate, up = F.linear(part, gate_up[e]).chunk(2, dim=-1)
        outs.append(F.linear(F.silu(gate) * up, down[e]))
    routed = torch.cat(outs) * weights.reshape(-1)[order].unsqueeze(-1)
    return torch.zeros_like(x).index_add(0, token, routed.to(x.dtype))
