"""Lowerings of ATen reductions to `pcg.reduce`: sum and mean, max and min over a dim (values
and indices), amax and amin, argmax and argmin."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch import fx
from xdsl.ir import SSAValue

from unityc.dialects import pcg
from unityc.dialects.pcg_types import FLOAT_TYPES
from unityc.frontend.aten import Value
from unityc.frontend.builder import element_type
from unityc.frontend.importer import FxImporter, Unusable, lowering, tensor_type

aten = torch.ops.aten


@lowering(aten.sum.dim_IntList, aten.mean.dim, aten.sum.default, aten.mean.default)
def _reduce(
    im: FxImporter, node: fx.Node, x: Value, dims: Any = None, keepdim: bool = False, **_: Any
) -> Value:
    x = im.tensor(x)
    rank = tensor_type(x).rank
    dims = list(range(rank)) if not dims else [d % rank for d in dims]
    kind = "mean" if node.target in (aten.mean.dim, aten.mean.default) else "sum"
    if tensor_type(x).element_type in FLOAT_TYPES:
        return im.op(pcg.ReduceOp, [x], kind=kind, dims=dims, keepdim=bool(keepdim))
    return _integer_sum(im, node, x, dims, bool(keepdim))


COUNT_LIMIT = 1 << 24
"""The most elements a count may sum over: float32 holds every integer up to 2^24 exactly."""


def _integer_sum(im: FxImporter, node: fx.Node, x: SSAValue, dims: list[int], keepdim: bool) -> Value:
    """A count of a boolean mask (CPM-Ant's `(segment != 0).sum(-1)`): the float32 sum of its
    0/1 values cast to torch's result type (int64), exact while the summed dims hold at most
    2^24 elements. Sums of other integers (whose totals nothing bounds) are refused."""
    t = tensor_type(x)
    if node.target not in (aten.sum.dim_IntList, aten.sum.default) or t.element_type != element_type(
        torch.bool
    ):
        raise im.fail("sum and mean of integer tensors are supported only as counts of a boolean mask")
    if math.prod(t.shape[d] for d in dims) > COUNT_LIMIT:
        raise im.fail(f"a count over more than {COUNT_LIMIT} elements is not supported (float32 sums)")
    total = im.op(
        pcg.ReduceOp,
        [im.op(pcg.CastOp, [x], dtype=element_type(torch.float32))],
        kind="sum",
        dims=dims,
        keepdim=keepdim,
    )
    return im.op(pcg.CastOp, [total], dtype=element_type(node.meta["val"].dtype))


@lowering(aten.max.dim, aten.min.dim)
def _max_min_dim(
    im: FxImporter, node: fx.Node, x: Value, dim: int, keepdim: bool = False, **_: Any
) -> tuple[Value, Value]:
    """torch.max/min over one dim: (values, indices), each a pcg.reduce, built only if used."""
    x = im.tensor(x)
    dim %= tensor_type(x).rank
    kind = "max" if node.target is aten.max.dim else "min"
    used = {u.args[1] for u in node.users if u.target is operator.getitem}
    out: list[Value] = []
    for index, name in enumerate((kind, f"arg{kind}")):
        if index not in used:
            out.append(Unusable(f"the unused {name} of {kind}(dim)"))
            continue
        out.append(im.op(pcg.ReduceOp, [x], kind=name, dims=[dim], keepdim=bool(keepdim)))
    return out[0], out[1]


@lowering(aten.amax.default, aten.amin.default, aten.max.default, aten.min.default)
def _amax_amin(
    im: FxImporter, node: fx.Node, x: Value, dim: Any = None, keepdim: bool = False, **_: Any
) -> Value:
    """amax/amin over `dim` (all dims if empty), and max/min of the whole tensor (ties share
    the gradient in both, as torch's backward does)."""
    x = im.tensor(x)
    rank = tensor_type(x).rank
    dims = list(range(rank)) if not dim else [d % rank for d in dim]
    kind = "amax" if node.target in (aten.amax.default, aten.max.default) else "amin"
    return im.op(pcg.ReduceOp, [x], kind=kind, dims=dims, keepdim=bool(keepdim))


@lowering(aten.argmax.default, aten.argmin.default)
def _argmax_argmin(
    im: FxImporter, node: fx.Node, x: Value, dim: int | None = None, keepdim: bool = False, **_: Any
) -> Value:
    x = im.tensor(x)
    kind = "argmax" if node.target is aten.argmax.default else "argmin"
    if dim is None:
        raise im.fail(f"{kind} without a dim (an index into the flattened tensor) is not supported")
    return im.op(pcg.ReduceOp, [x], kind=kind, dims=[dim % tensor_type(x).rank], keepdim=bool(keepdim))


@lowering(aten.linalg_vector_norm.default)
def _vector_norm(
    im: FxImporter,
    node: fx.Node,
    x: Value,
    ord: Any = 2,
    dim: Any = None,
    keepdim: bool = False,
    dtype: Any = None,
    **_: Any,
) -> Value:
    """The 2-norm over `dim` (all dims if empty; weight norm's `||v||` over every dim but one) as
    what it computes, `sqrt(sum(x * x))`, with torch's gradient where the norm is 0 (Zaya's q/k
    L2 normalization of an all-zero row): 0, where sqrt's would be inf and the chain nan. With
    z = (sum == 0) as 0/1, the norm is sqrt(sum + z) * (1 - z): exactly sqrt(sum), and no
    gradient reaches a zero sum."""
    if ord != 2 or dtype is not None:
        raise im.fail(f"vector_norm is supported only with ord=2 and no dtype, got ord={ord}")
    x = im.tensor(x)
    rank = tensor_type(x).rank
    dims = list(range(rank)) if not dim else [d % rank for d in dim]
    squares = im.op(pcg.MulOp, [x, x])
    total = im.op(pcg.ReduceOp, [squares], kind="sum", dims=dims, keepdim=bool(keepdim))
    zero = im.op(pcg.CompareOp, [total], kind="eq", value=0.0)
    z = im.op(pcg.CastOp, [zero], dtype=tensor_type(total).element_type)
    root = im.op(pcg.SqrtOp, [im.op(pcg.AddOp, [total, z])])
    return im.op(pcg.MulOp, [root, im.op(pcg.ScalarAddOp, [im.op(pcg.NegOp, [z])], value=1.0)])
