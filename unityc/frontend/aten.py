"""Core ATen -> pcg lowerings, one small function per op family (see `LOWERINGS`): elementwise
arithmetic, contractions and shape ops here; neural-network layers in `aten_nn.py`, reductions
in `aten_reduce.py`."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx
from xdsl.ir import SSAValue

from unityc.dialects import pcg
from unityc.dialects.pcg_types import FLOAT_TYPES
from unityc.frontend import no_grad, widening  # noqa: F401  (register unityc::stop_gradient, unityc::widen)
from unityc.frontend.builder import ELEMENT_TYPES, element_type
from unityc.frontend.importer import (
    Const,
    Expanded,
    FxImporter,
    compact,
    filled,
    lowering,
    tensor_type,
)

aten = torch.ops.aten
Value = Any


def _scalar(v: Value) -> float | int | None:
    """A Python number for scalars and rank-0 constants, else None."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int | float):
        return v
    if isinstance(v, Const) and v.value.dim() == 0:
        return v.value.item()
    return None


def reshape_to(im: FxImporter, x: SSAValue, shape: tuple[int, ...]) -> SSAValue:
    if tensor_type(x).shape == tuple(shape):
        return x
    return im.op(pcg.ReshapeOp, [x], shape=list(shape))


# --- elementwise -----------------------------------------------------------------------------

UNARY = {
    aten.relu.default: pcg.ReluOp,
    aten.sigmoid.default: pcg.SigmoidOp,
    aten.tanh.default: pcg.TanhOp,
    aten.exp.default: pcg.ExpOp,
    aten.sqrt.default: pcg.SqrtOp,
    aten.log1p.default: pcg.Log1pOp,
    aten.log.default: pcg.LogOp,
    aten.abs.default: pcg.AbsOp,
    aten.neg.default: pcg.NegOp,
}


@lowering(*UNARY)
def _unary(im: FxImporter, node: fx.Node, x: Value) -> Value:
    return im.op(UNARY[node.target], [im.tensor(x)])  # type: ignore[index]  # @lowering: an OpOverload


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


@lowering(
    aten.hardtanh.default,
    aten.clamp.default,
    aten.clamp_min.default,
    aten.clamp_max.default,
)
def _clamp(im: FxImporter, node: fx.Node, x: Value, low: Value = None, high: Value = None) -> Value:
    """hardtanh (ReLU6: 0, 6), clamp, clamp_min, clamp_max with number bounds: `pcg.clamp`."""
    if node.target == aten.clamp_max.default:
        low, high = None, low
    bounds = [None if v is None else _scalar(v) for v in (low, high)]
    if any(b is None and v is not None for b, v in zip(bounds, (low, high), strict=True)):
        raise im.fail(f"{node.target} is supported only with number bounds")
    if bounds == [None, None]:
        return x
    attrs = {k: float(v) for k, v in zip(("low", "high"), bounds, strict=True) if v is not None}
    return im.op(pcg.ClampOp, [im.tensor(x)], **attrs)


FLIPPED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
"""s ∘ x as x ∘' s."""


@lowering(aten.cumsum.default)
def _cumsum(im: FxImporter, node: fx.Node, x: Value, dim: int, dtype: Any = None) -> Value:
    """The running sum in the result's element type (torch sums integers and booleans as int64)."""
    x = im.tensor(x)
    wanted = element_type(node.meta["val"].dtype)
    if tensor_type(x).element_type != wanted:
        x = im.op(pcg.CastOp, [x], dtype=wanted)
    return im.op(pcg.CumsumOp, [x], dim=dim % max(tensor_type(x).rank, 1))


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
        zero, kept = (a, im.tensor(b)) if _is_zero(a) else (b, im.tensor(a))
        if tensor_type(kept).shape == im.meta_shape():
            return _plus_zero(im, kept, zero)
    dtype = node.meta["val"].dtype
    if isinstance(a, Const):
        rhs = _broadcast_operand(im, b, dtype, ())
        lhs = _broadcast_operand(im, a, dtype, tensor_type(rhs).shape)
    else:
        lhs = _broadcast_operand(im, a, dtype, ())
        rhs = _broadcast_operand(im, b, dtype, tensor_type(lhs).shape)
    result = im.op(BINARY[kind], [lhs, rhs])
    if tensor_type(result).shape != im.meta_shape():
        raise im.fail(f"{kind} broadcasts through an expand to {list(im.meta_shape())}; not supported")
    return result


def _plus_zero(im: FxImporter, kept: SSAValue, zero: Value) -> SSAValue:
    """x + an all-zero tensor (a mask, DeepSeek-V3's `e_score_correction_bias` at its start):
    x, but under autocast not always its type: a bf16 x plus an fp32 zero is fp32 (DeepSeek-V3
    selects its experts on bf16 sigmoid scores plus its fp32 bias, so in fp32; on the bf16
    scores alone two groups one fp32 ulp apart tie and swap). So an fp32 zero leaves a
    widening of x (a cast to f32 of an f32 value, what `unityc::widen` lowers to), which
    `widening.drop_idle_widenings` removes where x is not bf16 under autocast or its readers
    compute at a fixed precision."""
    if not isinstance(zero, Const) or zero.value.dtype != torch.float32:
        return kept
    if tensor_type(kept).element_type != element_type(torch.float32):
        return kept
    return im.op(pcg.CastOp, [kept], dtype=element_type(torch.float32))


def infinity_at(im: FxImporter, weight: SSAValue, infinity: float) -> SSAValue:
    """`infinity` (±inf) where the 0/1 floats `weight` are 1 and 0 where they are 0, exactly:
    ±log1p(-weight) (-0 or ∓inf), since weight·inf would be nan at the zeros."""
    log = im.op(pcg.Log1pOp, [im.op(pcg.NegOp, [weight])])
    return log if infinity < 0 else im.op(pcg.NegOp, [log])


@lowering(aten.where.self)
def _where(im: FxImporter, node: fx.Node, cond: Value, a: Value, b: Value) -> Value:
    """where(cond, a, b) of finite floats or integers (HF's additive masks, masked_fill by a
    number, T5's -100 labels made pad ids): cond·a + (1 - cond)·b with cond as 0/1, exact (one
    term is 0; each side's gradient is the incoming one where it was chosen, 0 elsewhere). An
    infinite number (CPM-Ant's `masked_fill(score, mask, -inf)` before its softmax) is the term
    ±log1p(-w) of its 0/1 weight w, 0 where not chosen and ±inf where chosen, since w·inf would
    be nan where w is 0. A constant tensor side holding inf, or nan anywhere, is refused."""
    dtype = node.meta["val"].dtype
    if dtype == torch.bool or dtype.is_complex:
        raise im.fail("where is supported only on floating-point and integer values")
    sides = []
    for side in (a, b):
        number = _scalar(side)
        usable = (
            not math.isnan(number) and (math.isfinite(number) or dtype.is_floating_point)
            if number is not None
            else not (isinstance(side, Const) and not bool(torch.isfinite(side.value).all()))
        )
        if not usable:
            raise im.fail("where is supported only between finite values and infinite numbers")
        sides.append(number)
    chosen = _zero_one(im, cond, (), dtype)
    negated = im.op(pcg.NegOp, [chosen]) if dtype.is_floating_point else _with_scalar(im, "mul", chosen, -1)
    other = _with_scalar(im, "add", negated, 1)
    terms = []
    for weight, side, number in ((chosen, a, sides[0]), (other, b, sides[1])):
        if number is not None and math.isinf(number):
            terms.append(infinity_at(im, weight, number))
            continue
        if number is not None:
            if number != 0:
                terms.append(_with_scalar(im, "mul", weight, number))
            continue
        operand = _broadcast_operand(im, side, dtype, tensor_type(weight).shape)
        terms.append(im.op(pcg.MulOp, [weight, operand]))
    if not terms:
        terms.append(_with_scalar(im, "mul", chosen, 0))
    out = terms[0] if len(terms) == 1 else im.op(pcg.AddOp, terms)
    return lazily_broadcast(out, im.meta_shape())


@lowering(aten.masked_fill.Scalar)
def _masked_fill(im: FxImporter, node: fx.Node, x: Value, mask: Value, value: Value) -> Value:
    """x with `value` where `mask` holds: where(mask, value, x)."""
    return _where(im, node, mask, value, x)


@lowering(aten.gather.default)
def _gather_elements(im: FxImporter, node: fx.Node, x: Value, dim: int, index: Value, **_: Any) -> Value:
    """torch.gather: from a constant holding one repeated value (RoBERTa's all-zero token type
    ids gathered at its position ids), that value whatever the indices; from a computed float
    tensor at computed indices of its shape but for `dim` (a router's selected scores), a
    `pcg.take`."""
    if isinstance(x, Const) and x.value.numel() and bool((x.value == x.value.flatten()[0]).all()):
        return filled(im.meta_shape(), x.value.flatten()[0].item(), x.value.dtype)
    if not isinstance(x, Const) and not isinstance(index, Const):
        source = im.tensor(x)
        return im.op(pcg.TakeOp, [source, im.tensor(index)], dim=dim % tensor_type(source).rank)
    raise im.fail("gather is supported only from a constant of one repeated value or at computed indices")


def _zero_one(
    im: FxImporter, v: Value, partner: tuple[int, ...], dtype: torch.dtype = torch.float32
) -> SSAValue:
    """A boolean value as 0/1 floats (unbroadcast, if it was expanded)."""
    if isinstance(v, Const):
        return im.tensor(v, partner=partner, dtype=dtype)
    x = v.value if isinstance(v, Expanded) else im.tensor(v)
    if tensor_type(x).element_type != element_type(torch.bool):
        raise im.fail("a mask operand must be boolean")
    return im.op(pcg.CastOp, [x], dtype=element_type(dtype))


def lazily_broadcast(x: SSAValue, shape: tuple[int, ...]) -> Value:
    """x as a value of `shape`: itself, or an `Expanded` that elementwise consumers broadcast."""
    return x if tensor_type(x).shape == shape else Expanded(x, shape)


def _is_zero(v: Value) -> bool:
    return isinstance(v, Const) and v.value.is_floating_point() and not compact(v.value).any()


def _scaled(im: FxImporter, b: Value, alpha: Value) -> Value:
    s = _scalar(b)
    if s is not None:
        return s * alpha
    return im.op(pcg.ScalarMulOp, [im.tensor(b)], scale=float(alpha))


def _broadcast_operand(im: FxImporter, v: Value, dtype: torch.dtype, partner: tuple[int, ...]) -> SSAValue:
    """An operand of a broadcasting op whose other operand has shape `partner`."""
    if isinstance(v, Expanded):
        return v.value
    if isinstance(v, Const):
        return im.tensor(v, partner=partner, dtype=dtype)
    return im.tensor(v)


def _with_scalar(im: FxImporter, kind: str, a: Value, s: float | int) -> Value:
    x = im.tensor(a)
    if tensor_type(x).element_type not in FLOAT_TYPES:
        return _integer_with_scalar(im, kind, x, s)
    if kind == "add":
        return x if s == 0 else im.op(pcg.ScalarAddOp, [x], value=float(s))
    if kind == "sub":
        return x if s == 0 else im.op(pcg.ScalarAddOp, [x], value=-float(s))
    if kind == "mul":
        return x if s == 1 else im.op(pcg.ScalarMulOp, [x], scale=float(s))
    return x if s == 1 else im.op(pcg.ScalarMulOp, [x], scale=1.0 / float(s))


def _integer_with_scalar(im: FxImporter, kind: str, x: SSAValue, s: float | int) -> SSAValue:
    """x ∘ s on an integer tensor (RoBERTa's position ids): the op with a one-element constant
    of x's type, so the arithmetic stays exact and integral."""
    if kind == "div" or float(s) != int(s):
        raise im.fail(f"{kind} of an integer tensor by {s} is not supported (only +, -, * by integers)")
    if (kind, s) in (("add", 0), ("sub", 0), ("mul", 1)):
        return x
    t = tensor_type(x)
    dtype = next(d for d, e in ELEMENT_TYPES.items() if e == t.element_type)
    value = torch.full([1] * t.rank, -int(s) if kind == "sub" else int(s), dtype=dtype)
    operand = im.builder.constant(value, "scalar")
    return im.op(pcg.MulOp if kind == "mul" else pcg.AddOp, [x, operand])


def _scalar_first(im: FxImporter, kind: str, s: float | int, b: Value) -> Value:
    x = im.tensor(b)
    if kind in ("add", "mul"):
        return _with_scalar(im, kind, x, s)
    if kind == "sub":
        return _with_scalar(im, "add", im.op(pcg.NegOp, [x]), s)
    inverse = im.op(pcg.PowOp, [x], exponent=-1.0)
    return _with_scalar(im, "mul", inverse, s)


COMPARISONS = {
    getattr(getattr(aten, kind), overload): kind
    for kind in pcg.COMPARISONS
    for overload in ("Scalar", "Tensor")
}
"""aten.eq.Scalar, aten.ne.Tensor, ...: every comparison `pcg.compare` has, both overloads."""


@lowering(*COMPARISONS, makes_masks=True)
def _compare(im: FxImporter, node: fx.Node, a: Value, b: Value) -> Value:
    """A comparison as a boolean mask, broadcast lazily to the batch: of a tensor and a number
    (or a one-element constant) as `pcg.compare` (RoBERTa's `ids != pad`); of two tensors, or
    of constants whose mask would be too large to fold (a causal mask is `le` of the key
    positions [1, 1, 1, S] against the query positions [1, 1, S, 1]), as
    `pcg.compare_tensors` in the promoted dtype, constants entering at their compact shapes."""
    kind = COMPARISONS[node.target]
    sa, sb = _scalar(a), _scalar(b)
    if sb is None and sa is not None:
        kind, a, sb = FLIPPED[kind], b, sa
    if sb is not None:
        x = _compare_operand(im, a, None)
        return lazily_broadcast(im.op(pcg.CompareOp, [x], kind=kind, value=float(sb)), im.meta_shape())
    dtype = _promoted(node)
    operands = [_compare_operand(im, v, dtype) for v in (a, b)]
    return lazily_broadcast(im.op(pcg.CompareTensorsOp, operands, kind=kind), im.meta_shape())


@lowering(aten.expm1.default)
def _expm1(im: FxImporter, node: fx.Node, x: Value) -> Value:
    """exp(x) - 1 (xIELU's negative branch)."""
    return _with_scalar(im, "sub", im.op(pcg.ExpOp, [im.tensor(x)]), 1)


def _promoted(node: fx.Node) -> torch.dtype:
    """The dtype torch compares the first two arguments of `node` in."""
    stand_ins: list[Any] = []
    for arg in node.args[:2]:
        val = arg.meta["val"] if isinstance(arg, fx.Node) else arg
        if isinstance(val, torch.Tensor):  # a 1-element tensor of its rank class (0-d or not)
            val = torch.empty([1] * min(val.dim(), 1), dtype=val.dtype)
        stand_ins.append(val)
    return torch.result_type(*stand_ins)


def _compare_operand(im: FxImporter, v: Value, dtype: torch.dtype | None) -> SSAValue:
    """An operand of a comparison at its compact shape, cast to `dtype` (None: as it is)."""
    if isinstance(v, Const):
        return im.constant(compact(v.value), dtype=dtype)
    if isinstance(v, bool | int | float):
        return im.constant(torch.tensor(v, dtype=dtype))
    x = v.value if isinstance(v, Expanded) else im.tensor(v)
    if dtype is None or tensor_type(x).element_type == element_type(dtype):
        return x
    return im.op(pcg.CastOp, [x], dtype=element_type(dtype))


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
    bias_shape = tuple(node.args[0].meta["val"].shape)  # type: ignore[union-attr]
    linear_bias = bias_shape == (tensor_type(rhs).shape[-1],)
    if linear_bias and isinstance(owner, pcg.TransposeOp) and isinstance(owner.input.owner, pcg.WeightOp):
        # addmm(bias, x, W^T) is nn.Linear: keep it one op so its parallel forms apply
        return im.op(pcg.LinearOp, [im.tensor(a), owner.input, im.tensor(bias)])
    product = im.op(pcg.MatmulOp, [im.tensor(a), rhs])
    bias_operand = _broadcast_operand(im, bias, node.meta["val"].dtype, tensor_type(product).shape)
    return im.op(pcg.AddOp, [product, bias_operand])


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
    """2-D convolution as `pcg.conv2d`; 1-D (Conv1d) as a 2-D one over a height of 1 (input
    [N, C, L] and weight [O, I, K] reshaped to [N, C, 1, L] and [O, I, 1, K]), which keeps
    conv2d's parallel forms (batch, output channels, groups)."""
    if transposed:
        raise im.fail("transposed convolution is not supported")
    if len(stride) not in (1, 2):
        raise im.fail(f"only 1-D and 2-D convolution are supported, got {len(stride)}-D")
    bias = im.tensor(b) if b is not None else None
    x, w = im.tensor(x), im.tensor(w)
    one_d = len(stride) == 1
    if one_d:
        (n, c, length), (o, i, k) = tensor_type(x).shape, tensor_type(w).shape
        x, w = reshape_to(im, x, (n, c, 1, length)), reshape_to(im, w, (o, i, 1, k))
        stride, padding, dilation = [1, stride[0]], [0, padding[0]], [1, dilation[0]]
    out = im.op(
        pcg.Conv2dOp,
        [x, w, bias],
        stride=list(stride),
        padding=list(padding),
        dilation=list(dilation),
        groups=groups if groups != 1 else None,
    )
    return reshape_to(im, out, im.meta_shape()) if one_d else out


# --- shapes ---------------------------------------------------------------------------------


VIEW_OPS = (
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.squeeze.default,
    aten.unsqueeze.default,
    aten.flatten.using_ints,
)
"""The ops that only reshape (`_view`): the complex parts take them too (`aten_complex`)."""


@lowering(*VIEW_OPS)
def _view(im: FxImporter, node: fx.Node, x: Value, *_: Any) -> Value:
    return reshape_to(im, im.tensor(x), im.meta_shape())  # a broadcast is materialized first


@lowering(aten.permute.default)
def _permute(im: FxImporter, node: fx.Node, x: Value, dims: list[int]) -> Value:
    x = im.tensor(x)
    perm = [d % tensor_type(x).rank for d in dims]
    return x if perm == sorted(perm) else im.op(pcg.TransposeOp, [x], perm=perm)


@lowering(aten.t.default, aten.transpose.int)
def _transpose(im: FxImporter, node: fx.Node, x: Value, a: int = 0, b: int = 1) -> Value:
    x = im.tensor(x)
    rank = tensor_type(x).rank
    perm = list(range(rank))
    perm[a % rank], perm[b % rank] = perm[b % rank], perm[a % rank]
    return x if perm == sorted(perm) else im.op(pcg.TransposeOp, [x], perm=perm)


@lowering(aten.expand.default)
def _expand(im: FxImporter, node: fx.Node, x: Value, sizes: list[int], implicit: bool = False) -> Value:
    shape = im.meta_shape()
    base = x.value if isinstance(x, Expanded) else im.tensor(x)
    return base if tensor_type(base).shape == shape else Expanded(base, shape)


@lowering(
    aten.clone.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
    aten.contiguous.default,
)
def _same(im: FxImporter, node: fx.Node, x: Value, *_: Any, **__: Any) -> Value:
    return x


@lowering(torch.ops.unityc.stop_gradient.default)
def _stop_gradient(im: FxImporter, node: fx.Node, x: Value) -> Value:
    """What the model detached or computed under `torch.no_grad()` (`no_grad.py`):
    `pcg.stop_gradient` of a floating-point value, anything else as it is."""
    return im.stop_gradient(x)


@lowering(aten._to_copy.default)
def _to_copy(im: FxImporter, node: fx.Node, x: Value, **kwargs: Any) -> Value:
    dtype = node.meta["val"].dtype
    x = im.tensor(x)
    if tensor_type(x).element_type == element_type(dtype):
        return x
    return im.op(pcg.CastOp, [x], dtype=element_type(dtype))


@lowering(torch.ops.unityc.widen.default)
def _widen(im: FxImporter, node: fx.Node, x: Value) -> Value:
    """The model's own cast to float32 of an f32 value (`widening.py`): a cast to f32, which
    `widening.drop_idle_widenings` keeps where the value is bf16 under autocast; a constant (or
    a lazily broadcast value) as it is."""
    if not isinstance(x, SSAValue):
        return x
    return im.op(pcg.CastOp, [x], dtype=element_type(torch.float32))


@lowering(aten.cat.default)
def _cat(im: FxImporter, node: fx.Node, tensors: list[Value], dim: int = 0) -> Value:
    """Concatenation; empty parts (Phi-3's pass-through half of a full rotary) are left out."""
    kept = [t for t in tensors if not (isinstance(t, Const) and t.value.numel() == 0)]
    if all(isinstance(t, Const) for t in kept):
        return Const(torch.cat([t.value for t in kept], dim=dim))
    parts = [im.tensor(t) for t in kept]
    if len(parts) == 1:
        return parts[0]
    return im.op(pcg.ConcatOp, [parts], dim=dim % tensor_type(parts[0]).rank)


@lowering(aten.repeat.default)
def _repeat(im: FxImporter, node: fx.Node, x: Value, repeats: list[int]) -> Value:
    """`Tensor.repeat`: the tensor tiled, as a concatenation of copies along each repeated dim
    (leading new dims made first as dims of size 1), so it keeps concat's parallel forms."""
    value = im.tensor(x)
    shape = tensor_type(value).shape
    if len(repeats) < len(shape) or any(r < 1 for r in repeats):
        raise im.fail(
            f"repeat {list(repeats)} of a tensor of shape {list(shape)}: needs one count >= 1 per dim"
        )
    value = reshape_to(im, value, (1,) * (len(repeats) - len(shape)) + tuple(shape))
    for dim, count in enumerate(repeats):
        if count > 1:
            value = im.op(pcg.ConcatOp, [[value] * count], dim=dim)
    return value


@lowering(aten.constant_pad_nd.default)
def _constant_pad(im: FxImporter, node: fx.Node, x: Value, pad: list[int], value: float = 0.0) -> Value:
    """`pad` holds (before, after) pairs from the last dim backwards: each padded dim becomes a
    concat with constant blocks of `value` (a negative amount crops, as a slice)."""
    out = im.tensor(x)
    dtype = node.meta["val"].dtype
    if len(pad) % 2 or len(pad) // 2 > tensor_type(out).rank:
        raise im.fail(
            f"constant_pad_nd with {len(pad)} pad amounts for a rank-{tensor_type(out).rank} tensor"
        )
    for i in range(len(pad) // 2):
        dim = tensor_type(out).rank - 1 - i
        before, after = int(pad[2 * i]), int(pad[2 * i + 1])
        size = tensor_type(out).shape[dim]
        out = _take(im, out, dim, max(0, -before), size - max(0, -after))
        blocks = []
        for amount in (before, after):
            shape = list(tensor_type(out).shape)
            shape[dim] = amount
            block = torch.full((), value, dtype=dtype).expand(shape)  # a splat
            blocks.append([im.builder.constant(block, "pad")] if amount > 0 else [])
        parts = [*blocks[0], out, *blocks[1]]
        if len(parts) > 1:
            out = im.op(pcg.ConcatOp, [parts], dim=dim)
    return out


@lowering(aten.split.Tensor, aten.split_with_sizes.default)
def _split(im: FxImporter, node: fx.Node, x: Value, split: Any, dim: int = 0) -> Value:
    x = im.tensor(x)
    t = tensor_type(x)
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
    t = tensor_type(x)
    dim %= t.rank
    size = t.shape[dim]
    begin, stop, stride = slice(start, end, step).indices(size)
    if stop <= begin:  # known without reading x: no elements (Phi-3's x[..., d:] of width d)
        return Const(torch.empty(im.meta_shape(), dtype=node.meta["val"].dtype))
    if stride != 1:  # x[::k]: the elements at begin, begin + k, ...
        return im.op(pcg.GatherOp, [x], dim=dim, indices=list(range(begin, stop, stride)))
    return _take(im, x, dim, begin, stop)


def _take(im: FxImporter, x: SSAValue, dim: int, begin: int, stop: int) -> SSAValue:
    """x[begin:stop] along `dim`, as the middle result of a split."""
    size = tensor_type(x).shape[dim]
    if (begin, stop) == (0, size):
        return x
    if stop == begin:
        raise im.fail("empty slices are not supported")
    sizes = [s for s in (begin, stop - begin, size - stop) if s > 0]
    results = im.op(pcg.SplitOp, [x], dim=dim, sizes=sizes)
    return results[1 if begin > 0 else 0]


@lowering(
    aten.new_zeros.default,
    aten.zeros_like.default,
    aten.full_like.default,
    aten.fill.Tensor,
    aten.fill.Scalar,
)
def _filled(im: FxImporter, node: fx.Node, x: Value, *args: Any, **kwargs: Any) -> Value:
    """A tensor of one known value shaped like (or sized from) a traced one: a constant; the
    traced tensor's values are not read (T5's `_shift_right` starts from `labels.new_zeros`)."""
    value = 0 if node.target in (aten.new_zeros.default, aten.zeros_like.default) else args[-1]
    number = _scalar(value)
    if number is None:
        raise im.fail("a fill value computed from the model's inputs is not supported")
    return filled(im.meta_shape(), number, node.meta["val"].dtype)


@lowering(aten.copy.default)
def _copy(im: FxImporter, node: fx.Node, dst: Value, src: Value, non_blocking: bool = False) -> Value:
    """copy(dst, src): src's values in dst's shape and type (functionalized in-place copies, as
    `x[..., 1:] = y`; the write into dst is the slice_scatter that follows)."""
    if isinstance(src, Const):
        return Const(compact(src.value).to(node.meta["val"].dtype).expand(im.meta_shape()))
    out = im.tensor(src)
    wanted = element_type(node.meta["val"].dtype)
    if tensor_type(out).element_type != wanted:
        out = im.op(pcg.CastOp, [out], dtype=wanted)
    if tensor_type(out).shape != im.meta_shape():
        return lazily_broadcast(out, im.meta_shape())
    return out


@lowering(aten.select.int)
def _select(im: FxImporter, node: fx.Node, x: Value, dim: int, index: int) -> Value:
    x = im.tensor(x)
    dim %= tensor_type(x).rank
    index %= tensor_type(x).shape[dim]
    return reshape_to(im, _take(im, x, dim, index, index + 1), im.meta_shape())


@lowering(aten.index_select.default)
def _index_select(im: FxImporter, node: fx.Node, x: Value, dim: int, index: Value) -> Value:
    if not isinstance(index, Const):
        raise im.fail("index_select needs constant indices")
    x = im.tensor(x)
    dim %= tensor_type(x).rank
    indices = (index.value.flatten() % tensor_type(x).shape[dim]).tolist()  # negative indices count back
    return im.op(pcg.GatherOp, [x], dim=dim, indices=indices)


@lowering(aten.index.Tensor)
def _index(im: FxImporter, node: fx.Node, x: Value, indices: list[Value]) -> Value:
    """x[:, i, j] with constant index vectors on adjacent dims: flatten them and gather; every
    dim indexed by a broadcast `arange` (HF's `mask[batch_idx, kv_idx]`): a reshape."""
    x = im.tensor(x)
    shape = tensor_type(x).shape
    if _is_arange_grid(shape, indices, im.meta_shape()):
        return reshape_to(im, x, im.meta_shape())
    first = next(d for d, i in enumerate(indices) if i is not None)
    used = [i for i in indices[first:] if i is not None]
    if len(used) != len(indices) - first or not all(
        isinstance(i, Const) and i.value.dim() == 1 for i in used
    ):
        raise im.fail("indexing is supported only with constant 1-D index vectors on adjacent dims")
    dims = list(range(first, first + len(used)))
    flat = torch.zeros_like(used[0].value)
    for d, i in zip(dims, used, strict=True):
        flat = flat * shape[d] + i.value % shape[d]  # negative indices count back
    merged = (*shape[:first], math.prod(shape[d] for d in dims), *shape[dims[-1] + 1 :])
    gathered = im.op(pcg.GatherOp, [reshape_to(im, x, merged)], dim=first, indices=flat.tolist())
    return reshape_to(im, gathered, im.meta_shape())


def _is_arange_grid(shape: tuple[int, ...], indices: list[Value], result: tuple[int, ...]) -> bool:
    """Whether x[i0, i1, ...] only reshapes x: one constant index per dim of x, index d an
    arange(shape[d]) along one result dim, those dims in order, every other result dim of size 1."""
    if len(indices) != len(shape) or math.prod(result) != math.prod(shape):
        return False
    at = -1
    for size, index in zip(shape, indices, strict=True):
        if not isinstance(index, Const) or index.value.dim() != len(result):
            return False
        long = [d for d, n in enumerate(index.value.shape) if n > 1]
        if size == 1:
            if index.value.numel() != 1 or int(index.value.flatten()[0]) not in (0, -1):
                return False
            continue
        if len(long) != 1 or long[0] <= at or result[long[0]] != size:
            return False
        at = long[0]
        if not torch.equal(index.value.flatten(), torch.arange(size, dtype=index.value.dtype)):
            return False
    return True


@lowering(aten._assert_tensor_metadata.default, aten._assert_scalar.default)
def _assertion(im: FxImporter, node: fx.Node, *args: Any, **kwargs: Any) -> Value:
    return None  # a check export inserted on shapes/dtypes we already know
