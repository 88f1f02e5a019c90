"""Core ATen -> pcg lowerings of neural-network layers: pooling, normalization, losses, dropout,
embeddings and attention."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx
from xdsl.ir import SSAValue

from unityc.dialects import pcg
from unityc.frontend.aten import Value, lazily_broadcast, reshape_to, tensor_type
from unityc.frontend.builder import element_type
from unityc.frontend.importer import (
    FOLD_LIMIT,
    Const,
    Expanded,
    FxImporter,
    LogSoftmax,
    Unusable,
    collapse,
    compact,
    filled,
    lowering,
)

aten = torch.ops.aten

# --- pooling and normalization --------------------------------------------------------------


@lowering(aten.max_pool2d_with_indices.default)
def _max_pool(
    im: FxImporter,
    node: fx.Node,
    x: Value,
    kernel: list[int],
    stride: list[int] | None = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> Value:
    if ceil_mode or _pair(dilation) != [1, 1]:
        raise im.fail("max pooling with ceil_mode or dilation is not supported")
    out = im.op(
        pcg.Pool2dOp,
        [im.tensor(x)],
        kind="max",
        kernel=_pair(kernel),
        stride=_pair(stride or kernel),
        padding=_pair(padding),
    )
    return (out, Unusable("the indices of max pooling"))


@lowering(aten.avg_pool2d.default)
def _avg_pool(
    im: FxImporter,
    node: fx.Node,
    x: Value,
    kernel: list[int],
    stride: list[int] | None = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: Any = None,
) -> Value:
    if ceil_mode or divisor_override is not None or (not count_include_pad and _pair(padding) != [0, 0]):
        raise im.fail("average pooling with ceil_mode, divisor_override or count_include_pad=False")
    return im.op(
        pcg.Pool2dOp,
        [im.tensor(x)],
        kind="avg",
        kernel=_pair(kernel),
        stride=_pair(stride or kernel),
        padding=_pair(padding),
    )


@lowering(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool(im: FxImporter, node: fx.Node, x: Value, output_size: list[int]) -> Value:
    x = im.tensor(x)
    h, w = tensor_type(x).shape[2:]
    oh, ow = _pair(output_size)
    if (oh, ow) == (1, 1):
        return im.op(pcg.ReduceOp, [x], kind="mean", dims=[2, 3], keepdim=True)
    if h % oh or w % ow:
        raise im.fail(f"adaptive pooling from {h}x{w} to {oh}x{ow} has uneven windows")
    kernel = [h // oh, w // ow]
    return im.op(pcg.Pool2dOp, [x], kind="avg", kernel=kernel, stride=kernel)


def _pair(v: Any) -> list[int]:
    if isinstance(v, int):
        return [v, v]
    return [int(v[0]), int(v[-1])]


@lowering(aten._native_batch_norm_legit_functional.default, aten._native_batch_norm_legit.default)
def _batch_norm(im: FxImporter, node: fx.Node, x: Value, w: Value, b: Value, *rest: Any) -> Value:
    training, eps = rest[-3], rest[-1]
    if not training:
        raise im.fail("batch norm in eval mode (running statistics) is not supported: train the model")
    operands = [im.tensor(x), _optional(im, w), _optional(im, b)]
    out = im.op(pcg.BatchNormOp, operands, eps=float(eps))
    return (out, *[Unusable("batch-norm statistics")] * 4)


@lowering(aten._native_batch_norm_legit_no_training.default)
def _batch_norm_eval(im: FxImporter, node: fx.Node, *args: Any) -> Value:
    raise im.fail("batch norm in eval mode (running statistics) is not supported: train the model")


def _optional(im: FxImporter, v: Value) -> SSAValue | None:
    return None if v is None else im.tensor(v)


@lowering(aten.native_group_norm.default)
def _group_norm(
    im: FxImporter,
    node: fx.Node,
    x: Value,
    w: Value,
    b: Value,
    n: int,
    c: int,
    hw: int,
    groups: int,
    eps: float,
) -> Value:
    """Group norm (wav2vec 2.0's feature encoder) as what it computes: each sample's channels in
    `groups` groups, each group normalized over its channels and positions (a layer norm of the
    [N, G, C/G x positions] view, no affine), then the per-channel scale and shift broadcast over
    the positions. Its parallel forms are those ops': any split of the batch."""
    value = im.tensor(x)
    shape = tensor_type(value).shape
    grouped = im.op(pcg.ReshapeOp, [value], shape=[shape[0], int(groups), (int(c) // int(groups)) * int(hw)])
    normed = im.op(pcg.LayerNormOp, [grouped, None, None], dims=1, eps=float(eps))
    out = im.op(pcg.ReshapeOp, [normed], shape=list(shape))
    per_channel = [int(c)] + [1] * (len(shape) - 2)
    if w is not None:
        out = im.op(pcg.MulOp, [out, im.op(pcg.ReshapeOp, [im.tensor(w)], shape=per_channel)])
    if b is not None:
        out = im.op(pcg.AddOp, [out, im.op(pcg.ReshapeOp, [im.tensor(b)], shape=per_channel)])
    return (out, Unusable("group-norm statistics"), Unusable("group-norm statistics"))


@lowering(aten.layer_norm.default, aten.native_layer_norm.default)
def _layer_norm(
    im: FxImporter,
    node: fx.Node,
    x: Value,
    shape: list[int],
    w: Value = None,
    b: Value = None,
    eps: float = 1e-5,
    *_: Any,
) -> Value:
    out = im.op(
        pcg.LayerNormOp, [im.tensor(x), _optional(im, w), _optional(im, b)], dims=len(shape), eps=float(eps)
    )
    if node.target == aten.native_layer_norm.default:
        return (out, Unusable("layer-norm statistics"), Unusable("layer-norm statistics"))
    return out


@lowering(aten.rms_norm.default)
def _rms_norm(
    im: FxImporter, node: fx.Node, x: Value, shape: list[int], w: Value = None, eps: float | None = None
) -> Value:
    """F.rms_norm, nn.RMSNorm (eps None: the input type's machine epsilon, as torch's)."""
    if eps is None:
        eps = torch.finfo(node.meta["val"].dtype).eps
    return im.op(pcg.RmsNormOp, [im.tensor(x), _optional(im, w)], dims=len(shape), eps=float(eps))


@lowering(aten._softmax.default)
def _softmax(im: FxImporter, node: fx.Node, x: Value, dim: int, half_to_float: bool = False) -> Value:
    return im.op(pcg.SoftmaxOp, [im.tensor(x)], dim=dim)


@lowering(aten._log_softmax.default)
def _log_softmax(im: FxImporter, node: fx.Node, x: Value, dim: int, half_to_float: bool = False) -> Value:
    x = im.tensor(x)
    return LogSoftmax(x, dim % tensor_type(x).rank)


@lowering(aten.nll_loss_forward.default)
def _nll_loss(
    im: FxImporter, node: fx.Node, x: Value, target: Value, weight: Value, reduction: int, ignore_index: int
) -> Value:
    if not isinstance(x, LogSoftmax) or x.dim != 1 or tensor_type(x.value).rank != 2:
        raise im.fail("nll_loss is supported only on log_softmax over dim 1 of [N, C] (cross-entropy)")
    if weight is not None or reduction not in (1, 2):
        raise im.fail("cross-entropy with class weights or reduction='none' is not supported")
    loss = im.op(
        pcg.CrossEntropyOp,
        [x.value, im.tensor(target)],
        reduction="mean" if reduction == 1 else "sum",
        ignore_index=ignore_index,
    )
    return (loss, Unusable("the nll_loss total weight"))


@lowering(aten.mse_loss.default)
def _mse_loss(im: FxImporter, node: fx.Node, x: Value, target: Value, reduction: int = 1) -> Value:
    if reduction not in (1, 2):
        raise im.fail("mse_loss with reduction='none' is not supported")
    return im.op(
        pcg.MseLossOp, [im.tensor(x), im.tensor(target)], reduction="mean" if reduction == 1 else "sum"
    )


@lowering(aten.native_dropout.default)
def _dropout(im: FxImporter, node: fx.Node, x: Value, p: float, train: bool | None) -> Value:
    x = im.tensor(x)
    out = im.op(pcg.DropoutOp, [x], p=float(p)) if train and p > 0 else x
    return (out, Unusable("the dropout mask"))


@lowering(aten.bernoulli.p)
def _bernoulli(im: FxImporter, node: fx.Node, x: Value, p: float = 0.5, generator: Any = None) -> Value:
    """Draws of 1 with probability p (else 0) shaped like x, as torchvision's stochastic depth
    draws its per-sample keep mask: p * dropout(ones, 1 - p), a dropout mask scaled back to
    {0, 1}, so the program draws it as it draws every dropout mask. Where dropout is off (the
    interpreter, `--check`) a draw is its mean p on both sides (`runtime.check.dropout_off`)."""
    if generator is not None:
        raise im.fail("bernoulli with an explicit generator is not supported")
    dtype = node.meta["val"].dtype
    if p in (0.0, 1.0):
        return filled(im.meta_shape(), p, dtype)
    ones = im.tensor(Const(torch.ones(im.meta_shape(), dtype=dtype)))
    return im.op(pcg.ScalarMulOp, [im.op(pcg.DropoutOp, [ones], p=1.0 - float(p))], scale=float(p))


# --- embeddings -----------------------------------------------------------------------------


@lowering(aten.embedding.default)
def _embedding(
    im: FxImporter,
    node: fx.Node,
    w: Value,
    ids: Value,
    padding_idx: int = -1,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Value:
    if scale_grad_by_freq:
        raise im.fail("embedding with scale_grad_by_freq=True is not supported")
    pad = None if padding_idx is None or padding_idx < 0 else padding_idx  # aten's -1: none
    if isinstance(ids, Const):  # e.g. token type ids repeated over the batch: look up one row
        rows = im.op(pcg.EmbeddingOp, [im.constant(compact(ids.value).long()), im.tensor(w)], padding_idx=pad)
        return lazily_broadcast(rows, im.meta_shape())
    ids = im.tensor(ids)
    if tensor_type(ids).element_type != element_type(torch.int64):  # CPM-Ant's int32 ids
        ids = im.op(pcg.CastOp, [ids], dtype=element_type(torch.int64))
    return im.op(pcg.EmbeddingOp, [ids, im.tensor(w)], padding_idx=pad)


@lowering(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def _embedding_bag(
    im: FxImporter,
    node: fx.Node,
    w: Value,
    ids: Value,
    offsets: Value,
    scale_grad: bool = False,
    mode: int = 0,
    sparse: bool = False,
    per_sample_weights: Value = None,
    include_last_offset: bool = False,
    padding_idx: int = -1,
) -> Value:
    if mode not in (0, 1) or per_sample_weights is not None or padding_idx not in (-1, None):
        raise im.fail("embedding_bag supports mode sum or mean without per-sample weights or padding_idx")
    ids = im.tensor(ids)
    (total,) = tensor_type(ids).shape
    bags = _fixed_bags(im, offsets, total, include_last_offset)
    bagged = reshape_to(im, ids, (bags, total // bags))
    out = im.op(pcg.EmbeddingBagOp, [bagged, im.tensor(w)], mode="sum" if mode == 0 else "mean")
    return (out, *[Unusable("embedding_bag bookkeeping")] * 3)


def _fixed_bags(im: FxImporter, offsets: Value, total: int, include_last: bool) -> int:
    """The bag count, if `offsets` are constant and cut `total` ids into equal bags."""
    if not isinstance(offsets, Const):
        raise im.fail("embedding_bag needs constant offsets (use 2-D indices: fixed-size bags)")
    starts = offsets.value.tolist()
    if include_last:
        starts = starts[:-1]
    bags = len(starts)
    if bags == 0 or total % bags or starts != list(range(0, total, total // bags)):
        raise im.fail("embedding_bag supports only bags of equal size")
    return bags


# --- attention ------------------------------------------------------------------------------


@lowering(aten.scaled_dot_product_attention.default)
def _sdpa(
    im: FxImporter,
    node: fx.Node,
    q: Value,
    k: Value,
    v: Value,
    attn_mask: Value = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Value:
    """The core of attention in pcg ops; `fuse-attention` turns it and its projections into one op."""
    q, k, v = im.tensor(q), im.tensor(k), im.tensor(v)
    rank = tensor_type(q).rank
    perm = [*range(rank - 2), rank - 1, rank - 2]
    scores = im.op(pcg.BatchMatmulOp, [q, im.op(pcg.TransposeOp, [k], perm=perm)])
    width = tensor_type(q).shape[-1]
    scores = im.op(pcg.ScalarMulOp, [scores], scale=scale if scale is not None else 1.0 / math.sqrt(width))
    mask = _additive_mask(im, attn_mask, is_causal, tensor_type(scores).shape)
    if mask is not None:
        scores = im.op(pcg.AddOp, [scores, im.tensor(mask, partner=tensor_type(scores).shape)])
    probs = im.op(pcg.SoftmaxOp, [scores], dim=rank - 1)
    if dropout_p > 0:
        probs = im.op(pcg.DropoutOp, [probs], p=float(dropout_p))
    return im.op(pcg.BatchMatmulOp, [probs, v])


def _where_allowed(im: FxImporter, mask: Value) -> SSAValue:
    """A boolean mask (True: attend) as the additive mask `where(mask, 0, finfo.min)` that
    eager attention adds, (1 - mask) · finfo.min: a masked score's probability underflows to
    exactly 0, as with SDPA's -inf, where a row keeps one unmasked key."""
    allowed = im.op(pcg.CastOp, [im.tensor(mask)], dtype=element_type(torch.float32))
    masked = im.op(pcg.ScalarAddOp, [im.op(pcg.NegOp, [allowed])], value=1.0)
    return im.op(pcg.ScalarMulOp, [masked], scale=torch.finfo(torch.float32).min)


def _additive_mask(im: FxImporter, mask: Value, causal: bool, shape: tuple[int, ...]) -> Value:
    """SDPA's mask as the additive mask eager attention adds: a boolean or float operand (a
    broadcast one unbroadcast: the add broadcasts it), folded constants, or the causal mask,
    which is `le` of key against query positions where it is too large to fold (torch refuses
    an explicit mask together with is_causal)."""
    if mask is not None and not isinstance(mask, Const):
        x = mask.value if isinstance(mask, Expanded) else im.tensor(mask)
        boolean = tensor_type(x).element_type == element_type(torch.bool)
        return _where_allowed(im, x) if boolean else x
    sq, sk = shape[-2:]
    if causal and mask is None and sq * sk > FOLD_LIMIT:  # a key at or before the query's position
        keys, queries = im.constant(torch.arange(sk)[None, :]), im.constant(torch.arange(sq)[:, None])
        return _where_allowed(im, im.op(pcg.CompareTensorsOp, [keys, queries], kind="le"))
    value = torch.zeros(sq, sk)
    if causal:
        value = value.masked_fill(torch.ones(sq, sk, dtype=torch.bool).tril().logical_not(), float("-inf"))
    if isinstance(mask, Const):
        m = compact(mask.value)
        value = value + (
            torch.zeros_like(m, dtype=torch.float32).masked_fill(~m, float("-inf"))
            if m.dtype == torch.bool
            else m
        )
    if not causal and mask is None:
        return None
    return Const(collapse(value))
