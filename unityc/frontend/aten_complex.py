"""Complex tensors lowered to real arithmetic: `view_as_complex` splits a trailing pair into a
`Complex` (its real and imaginary parts), products and sums of complex tensors are real ops on
the parts, shape ops apply to both parts, and `view_as_real` stacks the parts back as the
trailing pair. Llama 4's rotary (`view_as_real(view_as_complex(x) * freqs_cis)`) so becomes the
rotation it is, `(a + bi)(c + di) = (ac - bd) + (ad + bc)i`, with the folded table's cosines and
sines as constants: exact for values and gradients, and each op keeps its parallel forms."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from xdsl.ir import SSAValue

from unityc.dialects import pcg
from unityc.frontend import aten as core
from unityc.frontend.aten import Value, reshape_to
from unityc.frontend.importer import (
    COMPLEX_LOWERINGS,
    FOLDED_AS,
    LOWERINGS,
    Complex,
    Const,
    FxImporter,
    lowering,
    tensor_type,
)

aten = torch.ops.aten


def complex_lowering(*targets: Any) -> Callable[[Any], Any]:
    def register(fn: Any) -> Any:
        for t in targets:
            COMPLEX_LOWERINGS[t] = fn
        return fn

    return register


@lowering(aten.view_as_complex.default)
def _view_as_complex(im: FxImporter, node: fx.Node, x: Value) -> Complex:
    """The trailing pair `[..., 2]` as the real and imaginary parts `[...]`."""
    x = im.tensor(x)
    shape = tensor_type(x).shape
    if not shape or shape[-1] != 2:
        raise im.fail(f"view_as_complex needs a last dim of 2, got shape {list(shape)}")
    real, imag = im.op(pcg.SplitOp, [x], dim=len(shape) - 1, sizes=[1, 1])
    return Complex(reshape_to(im, real, shape[:-1]), reshape_to(im, imag, shape[:-1]))


@complex_lowering(aten.view_as_real.default)
def _view_as_real(im: FxImporter, node: fx.Node, z: Complex) -> Value:
    """The parts stacked as the trailing pair (a concatenation of the parts, each `[..., 1]`)."""
    shape = im.meta_shape()
    dtype = _real_dtype(node)
    parts = [reshape_to(im, im.tensor(p, dtype=dtype), (*shape[:-1], 1)) for p in (z.real, z.imag)]
    return im.op(pcg.ConcatOp, [parts], dim=len(shape) - 1)


def _real_dtype(node: fx.Node) -> torch.dtype:
    """The real dtype of `node`'s value (float32 for complex64)."""
    dtype = node.meta["val"].dtype
    return dtype.to_real() if dtype.is_complex else dtype


def _parts(v: Value) -> tuple[Value, Value | None]:
    """(real, imaginary) of an operand; a real operand has no imaginary part (None)."""
    if isinstance(v, Complex):
        return v.real, v.imag
    if isinstance(v, Const) and v.value.is_complex():
        return Const(v.value.real), Const(v.value.imag)
    return v, None


def _arith(im: FxImporter, node: fx.Node, kind: str, a: Value, b: Value) -> Value:
    """a ∘ b of two real parts (SSA values, constants or numbers), through the real lowering of
    `kind` (its broadcasting, constants and scalars), for the result's shape."""
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(getattr(torch, kind)(a.value, b.value))
    target = getattr(aten, kind).Tensor
    part = _PartNode(node, target, _real_dtype(node), _broadcast(a, b))
    return core._binary(im, part, a, b)  # type: ignore[arg-type]


def _broadcast(a: Value, b: Value) -> tuple[int, ...]:
    shapes = [_shape(v) for v in (a, b)]
    return tuple(torch.broadcast_shapes(*[s for s in shapes if s is not None]))


def _shape(v: Value) -> tuple[int, ...] | None:
    if isinstance(v, SSAValue):
        return tensor_type(v).shape
    if isinstance(v, Const):
        return tuple(v.value.shape)
    return ()


class _PartNode:
    """The FX node of a complex op seen as the real op on its parts: the same name and origin,
    the real dtype and the part's shape (what `_binary` reads from its node)."""

    def __init__(self, node: fx.Node, target: Any, dtype: torch.dtype, shape: tuple[int, ...]) -> None:
        self.name = node.name
        self.target = target
        self.meta = {**node.meta, "val": torch.empty(shape, dtype=dtype, device="meta")}


@complex_lowering(aten.mul.Tensor, aten.mul.Scalar)
def _mul(im: FxImporter, node: fx.Node, a: Value, b: Value) -> Complex:
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    if ai is None or bi is None:  # a real factor scales both parts
        scale, (zr, zi) = (a, (br, bi)) if ai is None else (b, (ar, ai))
        return Complex(_arith(im, node, "mul", zr, scale), _arith(im, node, "mul", zi, scale))
    real = _arith(im, node, "sub", _arith(im, node, "mul", ar, br), _arith(im, node, "mul", ai, bi))
    imag = _arith(im, node, "add", _arith(im, node, "mul", ar, bi), _arith(im, node, "mul", ai, br))
    return Complex(real, imag)


@complex_lowering(aten.add.Tensor, aten.sub.Tensor)
def _add_sub(im: FxImporter, node: fx.Node, a: Value, b: Value, alpha: Any = 1) -> Complex:
    if alpha != 1:
        raise im.fail("a complex add or sub with alpha is not supported")
    kind = "add" if node.target is aten.add.Tensor else "sub"
    (ar, ai), (br, bi) = _parts(a), _parts(b)
    real = _arith(im, node, kind, ar, br)
    if ai is None or bi is None:
        imag = ai if bi is None else (bi if kind == "add" else _arith(im, node, "mul", bi, -1))
    else:
        imag = _arith(im, node, kind, ai, bi)
    return Complex(real, imag)


SHAPE_OPS = (
    *core.VIEW_OPS,
    aten.permute.default,
    aten.transpose.int,
    aten.expand.default,
    aten.clone.default,
    aten.alias.default,
    aten.contiguous.default,
    aten.slice.Tensor,
    aten.select.int,
)


@complex_lowering(*SHAPE_OPS)
def _shape_op(im: FxImporter, node: fx.Node, z: Complex, *args: Any, **kwargs: Any) -> Complex:
    """A view of a complex tensor: the same view of each part (its shape is the complex one)."""
    fn = LOWERINGS[node.target]
    part = _PartNode(node, node.target, _real_dtype(node), im.meta_shape(node))
    return Complex(*(_fold_or(im, fn, part, p, args, kwargs) for p in (z.real, z.imag)))


def _fold_or(im: FxImporter, fn: Any, node: Any, part: Value, args: Any, kwargs: Any) -> Value:
    if isinstance(part, Const):
        target: Any = FOLDED_AS.get(node.target, node.target)
        return Const(target(part.value, *args, **kwargs))
    return fn(im, node, part, *args, **kwargs)
