"""The static description a generated program carries: how tensors are held and what each
collective does. Plain frozen values; the compiler computes them, the runtime executes them.

A *piece coordinate* is (shard index per dim, sum index, copy index), as in the pcg dialect: a
tensor of shape S with shard degrees k, sum degree s and copy degree c is held as Πk·s·c pieces
of shape S/k; partial sums add up to the value, copies are equal.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

from unityc.runtime.packing import unpack
from unityc.runtime.patterns import DUAL, PATTERNS

Coord = tuple[int, ...]

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "int64": torch.int64,
}


def torch_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise ValueError(f"unknown dtype '{name}' (known: {', '.join(DTYPES)})")
    return DTYPES[name]


@dataclass(frozen=True)
class Layout:
    """A logical tensor and the piece each rank holds (at most one per rank)."""

    shape: tuple[int, ...]
    dtype: str
    shard: tuple[int, ...]
    sum: int = 1
    copy: int = 1
    pieces: Mapping[int, Coord] = field(default_factory=dict)
    """rank -> its piece's coordinate (shard indices, sum index, copy index)."""

    def __post_init__(self) -> None:
        torch_dtype(self.dtype)
        shard, shape = list(self.shard), list(self.shape)
        if len(shard) != len(shape):
            raise ValueError(f"shard {shard} has rank {len(shard)}, the shape {shape} has rank {len(shape)}")
        if any(s < 0 for s in shape) or min((*shard, self.sum, self.copy)) < 1:
            raise ValueError(
                f"a layout needs sizes >= 0 and degrees >= 1: shape {shape}, shard {shard}, "
                f"sum {self.sum}, copy {self.copy}"
            )
        degrees = (*shard, self.sum, self.copy)
        for rank, coord in self.pieces.items():
            if len(coord) != len(degrees) or any(not 0 <= i < n for i, n in zip(coord, degrees, strict=True)):
                raise ValueError(
                    f"rank {rank}'s piece {coord} is no coordinate of shard {shard}, sum {self.sum}, "
                    f"copy {self.copy}"
                )
        object.__setattr__(self, "pieces", MappingProxyType(dict(self.pieces)))  # frozen all through

    def __hash__(self) -> int:
        pieces = tuple(sorted(self.pieces.items()))
        return hash((self.shape, self.dtype, self.shard, self.sum, self.copy, pieces))

    @property
    def piece_shape(self) -> tuple[int, ...]:
        return tuple(s // k for s, k in zip(self.shape, self.shard, strict=True))

    @property
    def torch_dtype(self) -> torch.dtype:
        return torch_dtype(self.dtype)

    def slices(self, coord: Coord) -> tuple[slice, ...]:
        """Where the piece at `coord` lies in the logical tensor."""
        return tuple(
            slice(i * p, (i + 1) * p) for i, p in zip(coord[: len(self.shape)], self.piece_shape, strict=True)
        )

    def offsets(self, coord: Coord) -> tuple[int, ...]:
        return tuple(i * p for i, p in zip(coord[: len(self.shape)], self.piece_shape, strict=True))

    def piece_of(self, rank: int, value: torch.Tensor) -> torch.Tensor | None:
        """This rank's piece of a logical value (partial sum 0 holds the value, others zeros)."""
        coord = self.pieces.get(rank)
        if coord is None:
            return None
        piece = value[self.slices(coord)].clone()
        return piece if coord[-2] == 0 else torch.zeros_like(piece)

    def copy_groups(self) -> list[tuple[int, ...]]:
        """Ranks holding copies of one piece (same shard and sum index), for copy degree > 1."""
        if self.copy == 1:
            return []
        groups: dict[Coord, list[int]] = {}
        for rank, coord in sorted(self.pieces.items()):
            groups.setdefault(coord[:-1], []).append(rank)
        return [tuple(ranks) for _, ranks in sorted(groups.items()) if len(ranks) > 1]


@dataclass(frozen=True)
class Collective:
    """One collective among the ranks holding its input pieces (`ins`, in piece order) and its
    output pieces (`outs`, in piece order). `shape` is an input piece's shape.

    | kind           | input piece j on ins[j] | output piece k on outs[k]                   |
    |----------------|-------------------------|---------------------------------------------|
    | p2p            | piece j                 | piece j moved to outs[j]                    |
    | scatter        | one piece               | chunk k along `dim`                         |
    | gather         | chunk j along `dim`     | one piece: the chunks concatenated          |
    | broadcast      | one piece               | a copy of it                                |
    | reduce         | partial j               | one piece: the sum                          |
    | all_reduce     | partial j               | a copy of the sum                           |
    | reduce_scatter | partial j               | chunk k along `dim` of the sum              |
    | all_gather     | chunk j along `dim`     | a copy of the concatenation                 |
    | all_to_all     | chunk j along `dim`     | chunk k along `dst` of the concatenation    |
    """

    kind: str
    ins: tuple[int, ...]
    outs: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str = "float32"
    dim: int = 0
    dst: int = 0

    def __post_init__(self) -> None:
        if self.kind not in PATTERNS:  # the collectives the cost model prices
            raise ValueError(f"unknown collective '{self.kind}' (known: {', '.join(PATTERNS)})")
        if self.kind == "p2p" and len(self.ins) != len(self.outs):
            raise ValueError("p2p needs one destination per source")

    @property
    def ranks(self) -> tuple[int, ...]:
        """The process group it runs in (sorted; group rank i is ranks[i])."""
        return tuple(sorted(set(self.ins) | set(self.outs)))

    @property
    def out_shape(self) -> tuple[int, ...]:
        shape = list(self.shape)
        match self.kind:
            case "scatter" | "reduce_scatter":
                shape[self.dim] //= len(self.outs)
            case "gather" | "all_gather":
                shape[self.dim] *= len(self.ins)
            case "all_to_all":
                shape[self.dst] //= len(self.outs)
                shape[self.dim] *= len(self.ins)
        return tuple(shape)

    def dual(self) -> Collective:
        """The collective that carries gradients back: outputs become inputs."""
        if self.kind == "all_to_all":
            return Collective(
                "all_to_all", self.outs, self.ins, self.out_shape, self.dtype, self.dst, self.dim
            )
        return Collective(DUAL[self.kind], self.outs, self.ins, self.out_shape, self.dtype, self.dim)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch_dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Model:
    """The reference model a plan was compiled from (the module attribute `unityc.model`)."""

    name: str
    config: str = "small"
    batch: int | None = None
    overrides: tuple[tuple[str, str], ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class Constant:
    """A folded constant: its values in row-major order (one value: a splat, every element that
    one) and how it is held. A large one holds its bytes packed instead (`packing.py`; `values`
    empty), the program's text shared by every constant of that value and decoded once per
    process."""

    values: tuple[float | int | bool, ...]
    layout: Layout
    packed: str = ""

    def __post_init__(self) -> None:
        count = math.prod(self.layout.shape)
        if self.packed and self.values:
            raise ValueError("a constant holds either its values or its packed bytes, not both")
        if not self.packed and len(self.values) not in (1, count):
            shape = list(self.layout.shape)
            raise ValueError(f"a constant of shape {shape} needs {count} values, got {len(self.values)}")

    def tensor(self) -> torch.Tensor:
        if self.packed:
            return _unpacked(self.packed, self.layout.dtype, self.layout.shape)
        if len(self.values) == 1:  # a splat: one value (a large zero base is never spelled out)
            return torch.full(self.layout.shape, self.values[0], dtype=self.layout.torch_dtype)
        return torch.tensor(self.values, dtype=self.layout.torch_dtype).reshape(self.layout.shape)


@functools.cache
def _unpacked(text: str, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor `text` packs (a dense literal's bytes: little-endian, i1 as one byte each)."""
    wide = torch.uint8 if dtype == "bool" else torch_dtype(dtype)
    raw = unpack(text, math.prod(shape) * wide.itemsize)
    values = torch.frombuffer(bytearray(raw), dtype=wide).reshape(shape)
    return values != 0 if dtype == "bool" else values


@dataclass(frozen=True)
class Plan:
    """Everything about a plan that is not the forward code: machine, model, layouts, groups."""

    source: str
    machine: str
    world_size: int
    model: Model
    samples: int
    """Samples per iteration (the leading dimension of the first input)."""
    groups: tuple[tuple[int, ...], ...]
    """Every process group the collectives use, created by every rank in this order."""
    weights: Mapping[str, Layout]
    inputs: Mapping[str, Layout]
    outputs: tuple[Layout, ...]
    """The graph's outputs, the loss first."""
    constants: Mapping[str, Constant] = field(default_factory=dict)
    tables: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Index vectors the kernels use (gather indices), moved to the device once."""
    zero: Mapping[str, int] = field(default_factory=dict)
    """Weight key -> ZeRO stage (1, 2, 3) of the weights held sharded across their copies."""
    frozen: frozenset[str] = frozenset()
    """The weight keys the model does not train (`requires_grad=False`): no gradient, no
    optimizer state, never updated; held (ZeRO-3: sharded) and saved like the others."""
    bf16_pieces: frozenset[str] = frozenset()
    """bf16-mixed: the trained weight keys (ZeRO-0/1/2) held as a bf16 piece beside an fp32
    master, a shard under ZeRO (Megatron-LM's bf16 parameters with fp32 main parameters and its
    distributed optimizer, FSDP2's `MixedPrecisionPolicy`; `runtime.zero`): every reader of the
    weight runs in bf16 under autocast, so the program keeps 2 bytes an element of the weight,
    its fp32 gradient and the fp32 master the optimizer steps, not an fp32 piece and autocast's
    bf16 copy of it (`cost.memory.is_bf16_piece`)."""
    memory: Mapping[str, Mapping[int, tuple[int, int, int]]] = field(default_factory=dict)
    """Optimizer -> rank -> (weights, gradients, optimizer state) bytes the memory model predicts
    the rank keeps (`cost.memory.persistent_bytes`); --check compares them."""
    flops: float = 0.0
    """The model's training FLOPs per iteration (forward, backward, update; the cost model's
    count on logical shapes): the numerator of model FLOPs utilization."""
    peak_flops: float = 0.0
    """The machine's peak FLOP/s, all devices together (the cost model's)."""
    predicted_s: float = 0.0
    """The cost model's iteration time for the plan (its simulated timeline)."""
    tokens: int = 0
    """Tokens per iteration (the first input's elements, for integer token inputs), else 0."""
    precision: str = "fp32"
    """The graph function's `unityc.precision`: "bf16-mixed" runs each forward under autocast
    (`runtime/precision.py`)."""
    accumulation: int = 1
    """Gradient accumulation steps (the graph function's `unityc.accumulation`): a step runs the
    forward and backward on that many micro-batches, micro-batch m being chunk m of this rank's
    piece of every input along dim 0, sums their gradients and syncs and updates once."""
    bounds: Mapping[str, int] = field(default_factory=dict)
    """Input key -> the rows of the embedding it indexes: its values must lie in [0, rows)."""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.frozen) - set(self.weights))
        if unknown:
            raise ValueError(f"frozen weights {unknown} are no weights of the plan")
        held = [k for k in self.bf16_pieces if k in self.weights and k not in self.frozen]
        wrong = sorted(set(self.bf16_pieces) - {k for k in held if self.zero.get(k, 0) < 3})
        if wrong:
            raise ValueError(f"bf16 pieces {wrong} are no trained ZeRO-0/1/2 weights of the plan")
        if self.bf16_pieces and self.precision != "bf16-mixed":
            raise ValueError(f"bf16 pieces in a plan of precision {self.precision}")

    def trained(self, key: str) -> bool:
        """Whether the model trains weight `key` (it is not `frozen`)."""
        return key not in self.frozen
