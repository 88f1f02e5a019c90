"""Parallel values as the interpreter holds them: one torch tensor per piece.

A `Pieces` value of type `!pcg.tensor<..., shard [k0, ..], sum s, copy c>` keeps an object
array of shape (k0, .., s, c): entry (i0, .., j, r) is copy r of partial sum j of shard
(i0, ..). `assemble` rebuilds the logical tensor (checking that copies agree); `scatter` cuts
a logical tensor into pieces (partial sum 0 holds the value, the others zeros).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from unityc.dialects.pcg_types import TensorType


class CopiesDiffer(Exception):
    """Two copies of one piece hold different values: the plan is not a valid replication."""


@dataclass
class Pieces:
    type: TensorType
    array: np.ndarray

    def __getitem__(self, coord: tuple[int, ...]) -> torch.Tensor:
        return self.array[coord]

    @staticmethod
    def empty(t: TensorType) -> Pieces:
        return Pieces(t, np.empty(t.task_degrees(), dtype=object))


@dataclass
class MicroBatches:
    """The value of a tensor between `parallel.pipeline` and `parallel.batch`: one per micro-batch."""

    items: list[Pieces]


def shard_slices(t: TensorType, shard_coord: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(i * p, (i + 1) * p) for i, p in zip(shard_coord, t.piece_shape, strict=True))


def scatter(value: torch.Tensor, t: TensorType) -> Pieces:
    if tuple(value.shape) != t.shape:
        raise ValueError(f"value of shape {list(value.shape)} does not fit {t}")
    out = Pieces.empty(t)
    for coord in itertools.product(*(range(d) for d in t.task_degrees())):
        shard, sum_index = coord[:-2], coord[-2]
        piece = value[shard_slices(t, shard)]
        out.array[coord] = piece.clone() if sum_index == 0 else torch.zeros_like(piece)
    return out


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two copies hold the same values; NaNs at the same places count as equal."""
    if torch.equal(a, b):
        return True
    if not a.is_floating_point() or a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a[~nan], b[~nan])


def assemble(pieces: Pieces, name: str = "value") -> torch.Tensor:
    t = pieces.type
    first = pieces.array.flat[0]
    out = torch.zeros(t.shape, dtype=first.dtype)
    for coord in itertools.product(*(range(k) for k in t.shard), range(t.sum_degree)):
        copies = [pieces.array[(*coord, r)] for r in range(t.copy_degree)]
        for r, other in enumerate(copies[1:], start=1):
            if not _same(copies[0], other):
                raise CopiesDiffer(f"{name}: copy {r} of piece {list(coord)} differs from copy 0")
        out[shard_slices(t, coord[:-1])] += copies[0]
    return out
