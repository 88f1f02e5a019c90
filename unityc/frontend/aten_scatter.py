"""`torch.scatter` into a tensor of one repeated value at computed indices, as masks and
routers write it: Llama 4's router scatters its top-k logits into a table of -inf
(`full_like(logits, -inf).scatter_(1, top_index, top_value)`), DeepSeek-V3.2's sparse attention
scatters False into an all-True mask at the indexer's top-k keys. Each is a one-hot of the
indices against the positions of the scattered dim (`pcg.compare_tensors` of the indices and a
constant arange), and then what lands at each position: the one-hot's count (`value`), or the sum
of the one-hot times the sources (`src`; exact, one term per position is non-zero, and its
gradient is the source's own element of the incoming one, as scatter's backward gathers it).

And `slice_scatter` / `select_scatter` (functionalized `x[..., a:b] = y`): the parts of the base
around the written region, and the source, concatenated; a base of one value (`new_empty`,
zeros, full) is a splat there, and the regions a later scatter covers are left out."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx
from xdsl.ir import SSAValue

from unityc.dialects import pcg
from unityc.frontend.aten import Value, _take, infinity_at, reshape_to
from unityc.frontend.builder import element_type
from unityc.frontend.importer import Const, FxImporter, compact, filled, lowering, tensor_type

aten = torch.ops.aten


@lowering(aten.scatter.src, aten.scatter.value)
def _scatter(im: FxImporter, node: fx.Node, base: Value, dim: int, index: Value, src: Value) -> Value:
    shape = im.meta_shape()
    dtype = node.meta["val"].dtype
    dim %= max(len(shape), 1)
    fill = _one_value(base)
    if fill is None:
        raise im.fail(
            "scatter is supported only into a tensor of one repeated value (a filled table or mask)"
        )
    index_node = node.args[2]
    index_shape = tuple(int(s) for s in index_node.meta["val"].shape)  # type: ignore[union-attr]
    if len(index_shape) != len(shape) or any(
        i != s for d, (i, s) in enumerate(zip(index_shape, shape, strict=True)) if d != dim
    ):
        raise im.fail(
            f"scatter with indices of shape {list(index_shape)} into {list(shape)} is not supported"
        )
    counting = dtype if dtype.is_floating_point else torch.float32
    hot = _one_hot(im, index, index_shape, dim, shape[dim], counting)  # [..., k, T, ...]
    if node.target is aten.scatter.value:
        return _scatter_value(im, hot, dim, dtype, fill, src)
    if not dtype.is_floating_point:
        raise im.fail("scatter of tensors is supported only for floating-point values")
    source = im.tensor(src)
    if tensor_type(source).shape != index_shape:
        raise im.fail("scatter of a source shaped unlike its indices is not supported")
    spread = reshape_to(im, source, (*index_shape[: dim + 1], 1, *index_shape[dim + 1 :]))
    landed = im.op(pcg.ReduceOp, [im.op(pcg.MulOp, [hot, spread])], kind="sum", dims=[dim])
    if fill == 0:
        return landed
    return im.op(pcg.AddOp, [landed, _times(im, _missed(im, hot, dim), fill)])


def _scatter_value(
    im: FxImporter, hot: SSAValue, dim: int, dtype: torch.dtype, fill: float, value: Any
) -> Value:
    """A number at the indices, `fill` elsewhere."""
    if not isinstance(value, int | float | bool):
        raise im.fail("scatter of a tensor value is not supported")
    if value == fill:
        return filled(im.meta_shape(), fill, dtype)
    count = im.op(pcg.ReduceOp, [hot], kind="sum", dims=[dim])
    if dtype == torch.bool:  # the mask of the indices, or its complement
        return im.op(pcg.CompareOp, [count], kind="gt" if value else "lt", value=0.5)
    if not dtype.is_floating_point:
        raise im.fail("scatter of a number is supported only into floating-point or boolean tensors")
    hit = im.op(pcg.CastOp, [im.op(pcg.CompareOp, [count], kind="gt", value=0.5)], dtype=element_type(dtype))
    terms = [t for t in (_times(im, hit, value), _times(im, _missed(im, hot, dim), fill)) if t]
    return terms[0] if len(terms) == 1 else im.op(pcg.AddOp, terms)


def _one_hot(
    im: FxImporter, index: Value, shape: tuple[int, ...], dim: int, size: int, dtype: torch.dtype
) -> SSAValue:
    """hot[..., i, j, ...] = (index[..., i, ...] == j) as 0/1 of `dtype`, j the new axis after `dim`."""
    index = im.tensor(index)
    if tensor_type(index).element_type != element_type(torch.int64):
        index = im.op(pcg.CastOp, [index], dtype=element_type(torch.int64))
    column = reshape_to(im, index, (*shape[: dim + 1], 1, *shape[dim + 1 :]))
    positions = torch.arange(size).reshape([1] * (dim + 1) + [size] + [1] * (len(shape) - dim - 1))
    equal = im.op(pcg.CompareTensorsOp, [column, im.constant(positions)], kind="eq")
    return im.op(pcg.CastOp, [equal], dtype=element_type(dtype))


def _missed(im: FxImporter, hot: SSAValue, dim: int) -> SSAValue:
    """1 where no index lands, 0 where one does."""
    count = im.op(pcg.ReduceOp, [hot], kind="sum", dims=[dim])
    return im.op(
        pcg.CastOp, [im.op(pcg.CompareOp, [count], kind="lt", value=0.5)], dtype=tensor_type(hot).element_type
    )


def _times(im: FxImporter, x: SSAValue, number: float) -> SSAValue | None:
    """`number` where the 0/1 floats `x` are 1, 0 elsewhere (None: all 0); an infinite number
    exactly, without 0·inf (`infinity_at`)."""
    if number == 0:
        return None
    if math.isinf(number):
        return infinity_at(im, x, number)
    return x if number == 1 else im.op(pcg.ScalarMulOp, [x], scale=float(number))


def _one_value(base: Value) -> float | None:
    """The value every element of a constant holds, else None (also for nan)."""
    if not isinstance(base, Const) or base.value.numel() == 0:
        return None
    part = compact(base.value)
    first = part.flatten()[0]
    if bool(torch.isnan(first)) or not bool((part == first).all()):
        return None
    return first.item()


@lowering(aten.slice_scatter.default, aten.select_scatter.default)
def _scatter_into(im: FxImporter, node: fx.Node, base: Value, src: Value, dim: int = 0, *where: Any) -> Value:
    """base with src written over base[start:end] (or base[index]) along `dim`: the parts of
    base around it and src, concatenated (exact; each part's gradient is its own). Where base is
    an earlier scatter's concat that nothing else reads, the parts this one covers are dropped
    (DeepSeek-V3's keys: a `new_empty` written by two copies is the concat of the two sources,
    not of the first and a zero region, then split)."""
    shape = im.meta_shape()
    dim %= len(shape)
    size = shape[dim]
    if node.target == aten.select_scatter.default:
        begin = int(where[0]) % size
        begin, stop, step = begin, begin + 1, 1
    else:
        start, end, step = [*where, None, None, None][:3]
        begin, stop, step = slice(start, end, step).indices(size)
    if step != 1:
        raise im.fail("a strided slice_scatter is not supported")
    if stop <= begin:
        return base
    part_shape = list(shape)
    part_shape[dim] = stop - begin
    if isinstance(src, Const):
        middle: Value = Const(src.value.reshape(part_shape) if src.value.numel() else src.value)
    else:
        middle = reshape_to(im, im.tensor(src), tuple(part_shape))
    dtype = node.meta["val"].dtype
    if isinstance(base, Const) and isinstance(middle, Const):
        fill = _one_value(base)
        if fill is not None and fill == _one_value(middle):
            return filled(shape, fill, dtype)
        value = base.value.clone()
        value.narrow(dim, begin, stop - begin).copy_(middle.value)
        return Const(value)
    before, after = _region(im, base, dim, 0, begin), _region(im, base, dim, stop, size)
    parts = [*before, im.tensor(middle, dtype=dtype), *after]
    result = parts[0] if len(parts) == 1 else im.op(pcg.ConcatOp, [parts], dim=dim)
    base_node = node.args[0]
    if isinstance(base, SSAValue) and isinstance(base_node, fx.Node) and len(base_node.users) == 1:
        im.erase_unread(base)
    return result


def _region(im: FxImporter, base: Value, dim: int, lo: int, hi: int) -> list[SSAValue]:
    """base[lo:hi] along `dim`: a constant's part (a splat stays one); of a concat along `dim`
    whose part edges lo and hi are, those parts; else a split's part."""
    if hi <= lo:
        return []
    if isinstance(base, Const):
        return [im.tensor(Const(base.value.narrow(dim, lo, hi - lo)))]
    value = im.tensor(base)
    owner = value.owner
    if isinstance(owner, pcg.ConcatOp) and owner.attrs()["dim"] == dim:
        edges = [0]
        for part in owner.operands:
            edges.append(edges[-1] + tensor_type(part).shape[dim])
        if lo in edges and hi in edges:
            return list(owner.operands[edges.index(lo) : edges.index(hi)])
    return [_take(im, value, dim, lo, hi)]
