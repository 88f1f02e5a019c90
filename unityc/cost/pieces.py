"""What pricing asks of a tensor type (its piece, its degrees), computed once per type object:
the cache the per-op pricing (`pricing`) and the transfers (`transfers`) share."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from unityc.cost.compute import Piece
from unityc.dialects.pcg_types import TensorType

FLOAT_DTYPES = ("f16", "bf16", "f32", "f64")


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """What pricing asks of a tensor type, computed once per type object."""

    key: int
    """Equal types have equal keys (cheap to hash, unlike the type)."""
    degrees: tuple[int, ...]
    """`task_degrees()`: shard dims, sum, copy."""
    is_float: bool
    piece: Piece
    tasks: int
    """The number of pieces (the product of the degrees)."""


_BY_ID: dict[int, tuple[TensorType, TypeInfo]] = {}
_BY_VALUE: dict[TensorType, TypeInfo] = {}


def type_info(t: TensorType) -> TypeInfo:
    """Type facts by object identity (the object is kept alive, so its id stays unique), falling
    back to equality: hashing a type walks its parameters, which the search cannot afford."""
    hit = _BY_ID.get(id(t))
    if hit is not None:
        return hit[1]
    info = _BY_VALUE.get(t)
    if info is None:
        p = Piece(t.piece_shape, str(t.element_type))
        info = TypeInfo(len(_BY_VALUE), t.task_degrees(), p.dtype in FLOAT_DTYPES, p, t.num_pieces)
        _BY_VALUE[t] = info
    _BY_ID[id(t)] = (t, info)
    return info


def piece(t: TensorType | None, logical: bool = False) -> Piece | None:
    if t is None:
        return None
    return _piece(t, logical)


def _piece(t: TensorType, logical: bool) -> Piece:
    if not logical:
        return type_info(t).piece
    return _logical_piece(t)


@lru_cache(maxsize=100_000)
def _logical_piece(t: TensorType) -> Piece:
    return Piece(t.shape, str(t.element_type))
