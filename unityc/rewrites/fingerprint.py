"""Fingerprints of tensors and graphs, as in TASO extended with Unity's parallel degrees.

A tensor's fingerprint is its full type (shape, element type, shard/sum/copy degrees: two
subgraphs are interchangeable only if their outputs have equal types) and a few random
projections of its logical value, rounded to `digits` significant digits so that values equal up
to float64 rounding (a different order of additions) print alike. A graph's fingerprint is the
tuple of its outputs' fingerprints, sorted: graphs whose outputs are equal as multisets land in
one bucket, and the sorted order says which output of one corresponds to which of the other.
"""

from __future__ import annotations

import torch

from unityc.dialects.pcg_types import TensorType
from unityc.interpreter.pieces import CopiesDiffer, Pieces, assemble

TypeKey = tuple[tuple[int, ...], str, tuple[int, ...], int, int]
OutputPrint = tuple[TypeKey, tuple[str, ...]]


def type_key(t: TensorType) -> TypeKey:
    return (t.shape, str(t.element_type), t.shard, t.sum_degree, t.copy_degree)


class Fingerprinter:
    def __init__(self, seed: int = 0, projections: int = 2, digits: int = 6):
        self.seed = seed
        self.projections = projections
        self.digits = digits
        self._vectors: dict[tuple[int, ...], torch.Tensor] = {}

    def vectors(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Fixed random projection vectors for values of this shape: [projections, numel]."""
        if shape not in self._vectors:
            gen = torch.Generator().manual_seed(self.seed * 7919 + hash(shape) % 1_000_003)
            numel = 1
            for s in shape:
                numel *= s
            self._vectors[shape] = (
                torch.rand(self.projections, numel, generator=gen, dtype=torch.float64) * 2 - 1
            )
        return self._vectors[shape]

    def value(self, value: torch.Tensor) -> tuple[str, ...]:
        flat = value.reshape(-1).to(torch.float64)
        sums = self.vectors(tuple(value.shape)) @ flat
        return tuple(self.round(float(s)) for s in sums)

    def round(self, x: float) -> str:
        if x != x:  # NaN
            return "nan"
        if abs(x) < 1e-12:
            return "0"
        return f"{x:.{self.digits - 1}e}"

    def output(self, t: TensorType, pieces: Pieces) -> OutputPrint:
        """The fingerprint of one tensor; a value whose copies differ gets a unique one."""
        try:
            value = assemble(pieces)
        except CopiesDiffer:
            return (type_key(t), (f"copies-differ-{id(pieces)}",))
        return (type_key(t), self.value(value))
