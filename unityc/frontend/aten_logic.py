"""Lowerings of boolean logic on masks: and (of masks, and of 0/1 integer masks), not."""

from __future__ import annotations

import torch
from torch import fx
from xdsl.ir import SSAValue

from unityc.dialects import pcg
from unityc.frontend.aten import Value, _zero_one, lazily_broadcast
from unityc.frontend.builder import element_type
from unityc.frontend.importer import Const, Expanded, FxImporter, compact, lowering, tensor_type

aten = torch.ops.aten


@lowering(aten.bitwise_and.Tensor, aten.logical_and.default)
def _and(im: FxImporter, node: fx.Node, a: Value, b: Value, as_mask: bool = False) -> Value:
    """Boolean and (of masks): an all-true constant operand only broadcasts the other; else the
    product of the two as 0/1 floats, cast back to booleans (exact). An integer and of 0/1 values
    (CPM-Ant's int32 context mask and a boolean one) is the same product, in the integer type."""
    dtype = torch.bool if as_mask else node.meta["val"].dtype
    if dtype != torch.bool:
        if not all(_zero_one_valued(v) for v in (a, b)):
            raise im.fail("bitwise and is supported only on booleans and on 0/1 integer masks")
        a, b = (Const(v.value.bool()) if isinstance(v, Const) else v for v in (a, b))
        both = _and(im, node, a, b, as_mask=True)
        base = both.value if isinstance(both, Expanded) else im.tensor(both)
        return lazily_broadcast(im.op(pcg.CastOp, [base], dtype=element_type(dtype)), im.meta_shape())
    shape = im.meta_shape()
    for const, other in ((a, b), (b, a)):
        if isinstance(const, Const) and bool(compact(const.value).all()):  # not the broadcast
            return lazily_broadcast(other.value if isinstance(other, Expanded) else im.tensor(other), shape)
    lhs = _zero_one(im, a, ())
    rhs = _zero_one(im, b, tensor_type(lhs).shape)
    product = im.op(pcg.MulOp, [lhs, rhs])
    return lazily_broadcast(im.op(pcg.CastOp, [product], dtype=element_type(torch.bool)), shape)


@lowering(aten.bitwise_not.default, aten.logical_not.default)
def _not(im: FxImporter, node: fx.Node, x: Value) -> Value:
    """Boolean not (of a mask: AXK1's router `~score_mask.bool()`): `x == 0`, broadcast lazily
    as x was."""
    base = x.value if isinstance(x, Expanded) else im.tensor(x)
    if tensor_type(base).element_type != element_type(torch.bool):
        raise im.fail(f"{node.target} is supported only on booleans")
    return lazily_broadcast(im.op(pcg.CompareOp, [base], kind="eq", value=0.0), im.meta_shape())


def _zero_one_valued(v: Value) -> bool:
    """Whether `v` holds only 0 and 1: a boolean tensor, or a constant of those values."""
    if isinstance(v, Const):
        return bool(((v.value == 0) | (v.value == 1)).all())
    x = v.value if isinstance(v, Expanded) else v
    return isinstance(x, SSAValue) and tensor_type(x).element_type == element_type(torch.bool)
