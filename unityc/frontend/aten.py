"""Core ATen -> pcg lowerings, one small function per op family (see `LOWERINGS`)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx
from xdsl.ir import SSAValue

from unityc.dialects import pcg
from unityc.dialects.pcg_types import TensorType
from unityc.frontend.builder import element_type
from unityc.frontend.importer import (
    Const,
    Expanded,
    FxImporter,
    LogSoftmax,
    Unusable,
    lowering,
)

aten = torch.ops.aten
Value = Any


def _type(v: SSAValue) -> TensorType:
    assert isinstance(v.type, TensorType)
    return v.type


def _scalar(v: Value) -> float | int | None:
    """A Python number for scalars and rank-0 constants, else None."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int | float):
        return v
    if isinstance(v, Const) and v.value.dim() == 0:
        return v.value.item()
    return None


def _reshape(im: FxImporter, x: SSAValue, shape: tuple[int, ...]) -> SSAValue:
    if _type(x).shape == tuple(shape):
        return x
    return im.op(pcg.ReshapeOp, [x], shape=list(shape))


# --- elementwise -----------------------------------------------------------------------------

UNARY = {
    aten.relu.default: pcg.ReluOp,
    aten.sigmoid.default: pcg.SigmoidOp,
    aten.tanh.default: pcg.TanhOp,
    aten.exp.default: pcg.ExpOp,
    aten.sqrt.default: pcg.SqrtOp,
    aten.neg.default: pcg.NegOp,
}


@lowering(*UNARY)
def _unary(im: FxImporter, node: fx.Node, x: Value) -> Value:
    return im.op(UNARY[node.target], [im.tensor(x)])


@lowering(aten.gelu.default)
def _gelu(im: FxImporter, node: fx.Node, x: Value, approximate: str = "none") -> Value:
    return im.op(pcg.GeluOp, [im.tensor(x)], tanh=approximate == "tanh")


@lowering(aten.rsqrt.default, aten.reciprocal.default)
def _pow_of(im: FxImporter, node: fx.Node, x: Value) -> Value:
    exponent = -0.5 if node.target == aten.rsqrt.default else -1.0
    return im.op(pcg.PowOp, [im.tensor(x)], exponent=exponent)


@lowering(aten.pow.Tensor_Scalar)
def _pow(im: FxImporter, node: fx.Node, x: Value, exponent: Value) -> Value:
    return im.op(pcg.PowOp, [im.tensor(x)], exponent=float(exponent))


@lowering(aten.silu.default)
def _silu(im: FxImporter, node: fx.Node, x: Value) -> Value:
    x = im.tensor(x)
    return im.op(pcg.MulOp, [x, im.op(pcg.SigmoidOp, [x])])


BINARY = {
    "add": pcg.AddOp,
    "sub": pcg.SubOp,
    "mul": pcg.MulOp,
    "div": pcg.DivOp,
}


@lowering(
    aten.add.Tensor,
    aten.add.Scalar,
    aten.sub.Tensor,
    aten.sub.Scalar,
    aten.mul.Tensor,
    aten.mul.Scalar,
    aten.div.Tensor,
    aten.div.Scalar,
    aten.rsub.Scalar,
)
def _binary(
    im: FxImporter, node: fx.Node, a: Value, b: Value, alpha: Value = 1, rounding_mode: Any = None
) -> Value:
    kind = node.target.__name__.split(".")[0]  # type: ignore[union-attr]
    if kind == "rsub":
        kind, a, b = "sub", b, a
    if rounding_mode is not None:
        raise im.fail("division with rounding is not supported")
    if alpha != 1:
        b = _scaled(im, b, alpha)
    sa, sb = _scalar(a), _scalar(b)
    if sb is not None:
        return _with_scalar(im, kind, a, sb)
    if sa is not None:
        return _scalar_first(im, kind, sa, b)
    if kind == "add" and _is_zero(a) != _is_zero(b) and not isinstance(a if _is_zero(b) else b, Const):
        return im.tensor(b if _is_zero(a) else a)  # adding an all-zero mask: x + 0 == x
    dtype = node.meta["val"].dtype
    lhs, rhs = _broadcast_operand(im, a, dtype), _broadcast_operand(im, b, dtype)
    result = im.op(BINARY[kind], [lhs, rhs])
    if _type(result).shape != im.meta_shape():
        raise im.fail(f"{kind} broadcasts through an expand to {list(im.meta_shape())}; not supported")
    return result


def _is_zero(v: Value) -> bool:
    return isinstance(v, Const) and v.value.is_floating_point() and not v.value.any()


def _scaled(im: FxImporter, b: Value, alpha: Value) -> Value:
    s = _scalar(b)
    if s is not None:
        return s * alpha
    return im.op(pcg.ScalarMulOp, [im.tensor(b)], scale=float(alpha))


def _broadcast_operand(im: FxImporter, v: Value, dtype: torch.dtype) -> SSAValue:
    if isinstance(v, Expanded):
        return v.value
    if isinstance(v, Const):
        return im.tensor(Const(v.value.to(dtype)) if v.value.dtype != dtype else v, compact=True)
    return im.tensor(v)


def _with_scalar(im: FxImporter, kind: str, a: Value, s: float | int) -> Value:
    x = im.tensor(a)
    if kind == "add":
        return x if s == 0 else im.op(pcg.ScalarAddOp, [x], value=float(s))
    if kind == "sub":
        return x if s == 0 else im.op(pcg.ScalarAddOp, [x], value=-float(s))
    if kind == "mul":
        return x if s == 1 else im.op(pcg.ScalarMulOp, [x], scale=float(s))
    return x if s == 1 else im.op(pcg.ScalarMulOp, [x], scale=1.0 / float(s))


def _scalar_first(im: FxImporter, kind: str, s: float | int, b: Value) -> Value:
    x = im.tensor(b)
    if kind in ("add", "mul"):
        return _with_scalar(im, kind, x, s)
    if kind == "sub":
        return _with_scalar(im, "add", im.op(pcg.NegOp, [x]), s)
    inverse = im.op(pcg.PowOp, [x], exponent=-1.0)
    return _with_scalar(im, "mul", inverse, s)


# --- contractions --------------------------------------------------------------------------


@lowering(aten.linear.default)
def _linear(im: FxImporter, node: fx.Node, x: Value, w: Value, b: Value = None) -> Value:
    return im.op(pcg.LinearOp, [im.tensor(x), im.tensor(w), im.tensor(b) if b is not None else None])


@lowering(aten.addmm.default)
def _addmm(
    im: FxImporter, node: fx.Node, bias: Value, a: Value, b: Value, beta: Value = 1, alpha: Value = 1
) -> Value:
    if beta != 1 or alpha != 1:
        raise im.fail("addmm with beta or alpha other than 1 is not supported")
    rhs = im.tensor(b)
    owner = rhs.owner
    if isinstance(owner, pcg.TransposeOp) and isinstance(owner.input.owner, pcg.WeightOp):
        # addmm(bias, x, W^T) is nn.Linear: keep it one op so its parallel forms apply
        return im.op(pcg.LinearOp, [im.tensor(a), owner.input, im.tensor(bias)])
    product = im.op(pcg.MatmulOp, [im.tensor(a), rhs])
    return im.op(pcg.AddOp, [product, _broadcast_operand(im, bias, node.meta["val"].dtype)])


@lowering(aten.mm.default)
def _mm(im: FxImporter, node: fx.Node, a: Value, b: Value) -> Value:
    return im.op(pcg.MatmulOp, [im.tensor(a), im.tensor(b)])


@lowering(aten.bmm.default)
def _bmm(im: FxImporter, node: fx.Node, a: Value, b: Value) -> Value:
    return im.op(pcg.BatchMatmulOp, [im.tensor(a), im.tensor(b)])


@lowering(aten.convolution.default)
def _convolution(
    im: FxImporter,
    node: fx.Node,
    x: Value,
    w: Value,
    b: Value,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
) -> Value:
    if transposed:
        raise im.fail("transposed convolution is not supported")
    if len(stride) != 2:
        raise im.fail(f"only 2-D convolution is supported, got {len(stride)}-D")
    bias = im.tensor(b) if b is not None else None
    return im.op(
        pcg.Conv2dOp,
        [im.tensor(x), im.tensor(w), bias],
        stride=list(stride),
        padding=list(padding),
        dilation=list(dilation),
        groups=groups if groups != 1 else None,
    )


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
    h, w = _type(x).shape[2:]
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


@lowering(aten._softmax.default)
def _softmax(im: FxImporter, node: fx.Node, x: Value, dim: int, half_to_float: bool = False) -> Value:
    return im.op(pcg.SoftmaxOp, [im.tensor(x)], dim=dim)


@lowering(aten._log_softmax.default)
def _log_softmax(im: FxImporter, node: fx.Node, x: Value, dim: int, half_to_float: bool = False) -> Value:
    x = im.tensor(x)
    return LogSoftmax(x, dim % _type(x).rank)


@lowering(aten.nll_loss_forward.default)
def _nll_loss(
    im: FxImporter, node: fx.Node, x: Value, target: Value, weight: Value, reduction: int, ignore_index: int
) -> Value:
    if not isinstance(x, LogSoftmax) or x.dim != 1 or _type(x.value).rank != 2:
        raise im.fail("nll_loss is supported only on log_softmax over dim 1 of [N, C] (cross-entropy)")
    if weight is not None or reduction not in (1, 2):
        raise im.fail("cross-entropy with class weights or reduction='none' is not supported")
    loss = im.op(
        pcg.CrossEntropyOp, [x.value, im.tensor(target)], reduction="mean" if reduction == 1 else "sum"
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


# --- embeddings -----------------------------------------------------------------------------


@lowering(aten.embedding.default)
def _embedding(im: FxImporter, node: fx.Node, w: Value, ids: Value, *_: Any) -> Value:
    return im.op(pcg.EmbeddingOp, [im.tensor(ids), im.tensor(w)])


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
    (total,) = _type(ids).shape
    bags = _fixed_bags(im, offsets, total, include_last_offset)
    bagged = _reshape(im, ids, (bags, total // bags))
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


# --- shapes ---------------------------------------------------------------------------------


@lowering(
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.unsqueeze.default,
    aten.flatten.using_ints,
)
def _view(im: FxImporter, node: fx.Node, x: Value, *_: Any) -> Value:
    if isinstance(x, Expanded):
        raise im.fail("reshaping a broadcast (expand) is not supported")
    return _reshape(im, im.tensor(x), im.meta_shape())


@lowering(aten.permute.default)
def _permute(im: FxImporter, node: fx.Node, x: Value, dims: list[int]) -> Value:
    x = im.tensor(x)
    perm = [d % _type(x).rank for d in dims]
    return x if perm == sorted(perm) else im.op(pcg.TransposeOp, [x], perm=perm)


@lowering(aten.t.default, aten.transpose.int)
def _transpose(im: FxImporter, node: fx.Node, x: Value, a: int = 0, b: int = 1) -> Value:
    x = im.tensor(x)
    rank = _type(x).rank
    perm = list(range(rank))
    perm[a % rank], perm[b % rank] = perm[b % rank], perm[a % rank]
    return x if perm == sorted(perm) else im.op(pcg.TransposeOp, [x], perm=perm)


@lowering(aten.expand.default)
def _expand(im: FxImporter, node: fx.Node, x: Value, sizes: list[int], implicit: bool = False) -> Value:
    shape = im.meta_shape()
    base = x.value if isinstance(x, Expanded) else im.tensor(x)
    return base if _type(base).shape == shape else Expanded(base, shape)


@lowering(
    aten.clone.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
    aten.contiguous.default,
)
def _same(im: FxImporter, node: fx.Node, x: Value, *_: Any, **__: Any) -> Value:
    return x


@lowering(aten._to_copy.default)
def _to_copy(im: FxImporter, node: fx.Node, x: Value, **kwargs: Any) -> Value:
    dtype = node.meta["val"].dtype
    x = im.tensor(x)
    if _type(x).element_type == element_type(dtype):
        return x
    return im.op(pcg.CastOp, [x], dtype=element_type(dtype))


@lowering(aten.cat.default)
def _cat(im: FxImporter, node: fx.Node, tensors: list[Value], dim: int = 0) -> Value:
    parts = [im.tensor(t) for t in tensors]
    if len(parts) == 1:
        return parts[0]
    return im.op(pcg.ConcatOp, [parts], dim=dim % _type(parts[0]).rank)


@lowering(aten.split.Tensor, aten.split_with_sizes.default)
def _split(im: FxImporter, node: fx.Node, x: Value, split: Any, dim: int = 0) -> Value:
    x = im.tensor(x)
    t = _type(x)
    dim %= t.rank
    size = t.shape[dim]
    sizes = (
        list(split)
        if isinstance(split, list | tuple)
        else [min(split, size - i) for i in range(0, size, split)]
    )
    if len(sizes) == 1:
        return [x]
    results = im.op(pcg.SplitOp, [x], dim=dim, sizes=sizes)
    return list(results)


@lowering(aten.slice.Tensor)
def _slice(
    im: FxImporter, node: fx.Node, x: Value, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Value:
    x = im.tensor(x)
    t = _type(x)
    dim %= t.rank
    size = t.shape[dim]
    begin, stop, stride = slice(start, end, step).indices(size)
    if stride != 1:
        raise im.fail("strided slicing is not supported")
    return _take(im, x, dim, begin, max(begin, stop))


def _take(im: FxImporter, x: SSAValue, dim: int, begin: int, stop: int) -> SSAValue:
    """x[begin:stop] along `dim`, as the middle result of a split."""
    size = _type(x).shape[dim]
    if (begin, stop) == (0, size):
        return x
    if stop == begin:
        raise im.fail("empty slices are not supported")
    sizes = [s for s in (begin, stop - begin, size - stop) if s > 0]
    results = im.op(pcg.SplitOp, [x], dim=dim, sizes=sizes)
    return results[1 if begin > 0 else 0]


@lowering(aten.select.int)
def _select(im: FxImporter, node: fx.Node, x: Value, dim: int, index: int) -> Value:
    x = im.tensor(x)
    dim %= _type(x).rank
    index %= _type(x).shape[dim]
    return _reshape(im, _take(im, x, dim, index, index + 1), im.meta_shape())


@lowering(aten.index_select.default)
def _index_select(im: FxImporter, node: fx.Node, x: Value, dim: int, index: Value) -> Value:
    if not isinstance(index, Const):
        raise im.fail("index_select needs constant indices")
    x = im.tensor(x)
    return im.op(pcg.GatherOp, [x], dim=dim % _type(x).rank, indices=index.value.flatten().tolist())


@lowering(aten.index.Tensor)
def _index(im: FxImporter, node: fx.Node, x: Value, indices: list[Value]) -> Value:
    """x[:, i, j] with constant index vectors on adjacent dims: flatten them and gather."""
    x = im.tensor(x)
    shape = _type(x).shape
    first = next(d for d, i in enumerate(indices) if i is not None)
    used = [i for i in indices[first:] if i is not None]
    if len(used) != len(indices) - first or not all(
        isinstance(i, Const) and i.value.dim() == 1 for i in used
    ):
        raise im.fail("indexing is supported only with constant 1-D index vectors on adjacent dims")
    dims = list(range(first, first + len(used)))
    flat = torch.zeros_like(used[0].value)
    for d, i in zip(dims, used, strict=True):
        flat = flat * shape[d] + i.value
    merged = (*shape[:first], math.prod(shape[d] for d in dims), *shape[dims[-1] + 1 :])
    gathered = im.op(pcg.GatherOp, [_reshape(im, x, merged)], dim=first, indices=flat.tolist())
    return _reshape(im, gathered, im.meta_shape())


@lowering(aten.sum.dim_IntList, aten.mean.dim, aten.sum.default, aten.mean.default)
def _reduce(
    im: FxImporter, node: fx.Node, x: Value, dims: Any = None, keepdim: bool = False, **_: Any
) -> Value:
    x = im.tensor(x)
    rank = _type(x).rank
    dims = list(range(rank)) if not dims else [d % rank for d in dims]
    kind = "mean" if node.target in (aten.mean.dim, aten.mean.default) else "sum"
    return im.op(pcg.ReduceOp, [x], kind=kind, dims=dims, keepdim=bool(keepdim))


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
    rank = _type(q).rank
    perm = [*range(rank - 2), rank - 1, rank - 2]
    scores = im.op(pcg.BatchMatmulOp, [q, im.op(pcg.TransposeOp, [k], perm=perm)])
    width = _type(q).shape[-1]
    scores = im.op(pcg.ScalarMulOp, [scores], scale=scale if scale is not None else 1.0 / math.sqrt(width))
    mask = _additive_mask(im, attn_mask, is_causal, _type(scores).shape)
    if mask is not None:
        scores = im.op(pcg.AddOp, [scores, im.tensor(mask, compact=True)])
    probs = im.op(pcg.SoftmaxOp, [scores], dim=rank - 1)
    if dropout_p > 0:
        probs = im.op(pcg.DropoutOp, [probs], p=float(dropout_p))
    return im.op(pcg.BatchMatmulOp, [probs, v])


def _additive_mask(im: FxImporter, mask: Value, causal: bool, shape: tuple[int, ...]) -> Value:
    if mask is not None and not isinstance(mask, Const):
        return mask
    sq, sk = shape[-2:]
    value = torch.zeros(sq, sk)
    if causal:
        value = value.masked_fill(torch.ones(sq, sk, dtype=torch.bool).tril().logical_not(), float("-inf"))
    if isinstance(mask, Const):
        m = mask.value
        value = value + (
            torch.zeros_like(m, dtype=torch.float32).masked_fill(~m, float("-inf"))
            if m.dtype == torch.bool
            else m
        )
    if not causal and mask is None:
        return None
    return Const(value)


@lowering(aten._assert_tensor_metadata.default, aten._assert_scalar.default)
def _assertion(im: FxImporter, node: fx.Node, *args: Any, **kwargs: Any) -> Value:
    return None  # a check export inserted on shapes/dtypes we already know
