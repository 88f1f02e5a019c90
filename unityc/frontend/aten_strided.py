"""Lowerings of ATen's strided views (Tensor.unfold, as_strided): each is the gather of the
elements it reads, exact also for gradients (repeated reads add up)."""

from __future__ import annotations

import torch
from torch import fx

from unityc.dialects import pcg
from unityc.frontend.aten import Value, reshape_to
from unityc.frontend.importer import FxImporter, lowering, tensor_type

aten = torch.ops.aten


@lowering(aten.unfold.default)
def _unfold(im: FxImporter, node: fx.Node, x: Value, dim: int, size: int, step: int) -> Value:
    """Tensor.unfold, windows of `size` every `step` along `dim` (a strided view, overlapping if
    step < size): a gather of each window's elements along `dim` (exact also for gradients:
    repeated reads add up), split into [windows, size] and the window axis moved last. The other
    dims keep their parallel forms."""
    x = im.tensor(x)
    shape = tensor_type(x).shape
    dim %= max(len(shape), 1)
    if size < 1 or step < 1 or size > shape[dim]:
        raise im.fail(f"unfold of {size} every {step} along a dim of {shape[dim]} is not a valid window")
    windows = (shape[dim] - size) // step + 1
    indices = [w * step + j for w in range(windows) for j in range(size)]
    picked = x if indices == list(range(shape[dim])) else im.op(pcg.GatherOp, [x], dim=dim, indices=indices)
    split = reshape_to(im, picked, (*shape[:dim], windows, size, *shape[dim + 1 :]))
    rank = len(shape) + 1
    perm = [d for d in range(rank) if d != dim + 1] + [dim + 1]
    return split if perm == sorted(perm) else im.op(pcg.TransposeOp, [split], perm=perm)


@lowering(aten.as_strided.default)
def _as_strided(
    im: FxImporter, node: fx.Node, x: Value, size: list[int], stride: list[int], offset: int | None = None
) -> Value:
    """as_strided read through the input's own memory layout (its strides in the exported
    program): the element each result position reads, as an index into the input. A view that
    keeps the elements in order (a restride, as adaptive pooling's channels-last output) is a
    reshape; any other pattern (overlapping pooling windows, a strided view) gathers those
    elements, which is exact also for gradients (repeated reads add up, as as_strided's do)."""
    source = node.args[0].meta["val"]  # type: ignore[union-attr]
    x = im.tensor(x)
    storage = _positions(tuple(source.shape), tuple(source.stride()), source.storage_offset())
    if storage.unique().numel() != storage.numel():
        raise im.fail("as_strided of a tensor whose elements overlap in memory is not supported")
    span = int(storage.max()) + 1 if storage.numel() else 0
    inverse = torch.full((span,), -1, dtype=torch.long)
    inverse[storage.flatten()] = torch.arange(storage.numel())
    wanted = _positions(tuple(size), tuple(stride), offset or 0).flatten()
    if wanted.numel() and (int(wanted.max()) >= span or bool((inverse[wanted] < 0).any())):
        raise im.fail("as_strided reads memory outside its input")
    index = inverse[wanted] if wanted.numel() else wanted
    if torch.equal(index, torch.arange(storage.numel())):
        return reshape_to(im, x, tuple(size))
    flat = reshape_to(im, x, (storage.numel(),))
    return reshape_to(im, im.op(pcg.GatherOp, [flat], dim=0, indices=index.tolist()), tuple(size))


def _positions(size: tuple[int, ...], stride: tuple[int, ...], offset: int) -> torch.Tensor:
    """The memory position of every element of a strided view."""
    position = torch.full(size, offset, dtype=torch.long)
    for d, (n, step) in enumerate(zip(size, stride, strict=True)):
        shape = [1] * len(size)
        shape[d] = n
        position = position + (torch.arange(n) * step).reshape(shape)
    return position
