"""Lowerings that pick, element by element, one of two values by comparing them: the minimum
and maximum of two tensors, clamp by tensor bounds."""

from __future__ import annotations

import torch
from torch import fx

from unityc.dialects import pcg
from unityc.frontend.aten import (
    FLIPPED,
    Value,
    _clamp,
    _compare_operand,
    _promoted,
    _scalar,
    _where,
    lazily_broadcast,
)
from unityc.frontend.importer import FxImporter, lowering

aten = torch.ops.aten


@lowering(aten.minimum.default, aten.maximum.default)
def _minimum_maximum(im: FxImporter, node: fx.Node, a: Value, b: Value) -> Value:
    """The elementwise min/max of two tensors (xIELU's `min(x, eps)`) as where(a < b, a, b)
    (`>` for max): exact; where a == b the gradient goes to `b` whole, where torch halves it."""
    if not node.meta["val"].dtype.is_floating_point:
        raise im.fail(f"{node.target} is supported only on floating-point values")
    kind = "lt" if node.target is aten.minimum.default else "gt"
    sa, sb = _scalar(a), _scalar(b)
    if sb is not None or sa is not None:
        kind, x, number = (kind, a, sb) if sb is not None else (FLIPPED[kind], b, sa)
        mask = im.op(pcg.CompareOp, [_compare_operand(im, x, None)], kind=kind, value=float(number))  # type: ignore[arg-type]
    else:
        dtype = _promoted(node)
        mask = im.op(pcg.CompareTensorsOp, [_compare_operand(im, v, dtype) for v in (a, b)], kind=kind)
    return _where(im, node, lazily_broadcast(mask, im.meta_shape()), a, b)


@lowering(aten.clamp.Tensor)
def _clamp_by_tensors(
    im: FxImporter, node: fx.Node, x: Value, low: Value = None, high: Value = None
) -> Value:
    """clamp with tensor bounds (PhiMoE's router: `|scores|.clamp(min=max_score)`): number-like
    bounds as `pcg.clamp`, else where(x < low, low, x) then where(x > high, high, x): exact;
    where x equals a bound the gradient goes to x, as torch's."""
    bounds = [None if v is None else _scalar(v) for v in (low, high)]
    if all(b is not None or v is None for b, v in zip(bounds, (low, high), strict=True)):
        return _clamp(im, node, x, low, high)
    if not node.meta["val"].dtype.is_floating_point:
        raise im.fail(f"{node.target} is supported only on floating-point values")
    dtype = node.meta["val"].dtype
    for kind, bound in (("lt", low), ("gt", high)):
        if bound is None:
            continue
        operands = [_compare_operand(im, v, dtype) for v in (x, bound)]
        mask = lazily_broadcast(im.op(pcg.CompareTensorsOp, operands, kind=kind), im.meta_shape())
        x = _where(im, node, mask, bound, x)
    return x
