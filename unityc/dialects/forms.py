"""Parallel forms: how an operator's tasks map onto the pieces of its operands.

A parallel tensor with shard degrees k_0..k_{n-1}, sum degree s and copy degree c is held as
k_0 * ... * k_{n-1} * s * c pieces. A piece is addressed by its *coordinate*: one index per
shard dimension, then a sum index, then a copy index.

An operator's task space is described by named *factors* (each a degree). Every axis of the
result and of each operand (a shard dimension, the sum axis or the copy axis) is the row-major
product of some factors. A task assigns an index to each factor; from it we read the coordinate
of the result piece it produces and of every operand piece it reads.

Convention (the one rule everything else follows): an operand's copy axis is made of every
factor it does not otherwise hold, in the order the factors appear in the result's axes
(shard dims, then sum, then copy). So a weight used by a batch-sharded matmul has copy degree
equal to the batch shard degree, and task b reads copy b.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

COPY = "copy"


class FormError(Exception):
    """An operand degree combination the operator does not support."""


@dataclass(frozen=True)
class FormLayout:
    """The factors making up each axis of one tensor: shard dims, sum, copy."""

    shard: tuple[tuple[str, ...], ...]
    sum: tuple[str, ...]
    copy: tuple[str, ...]

    def axes(self) -> tuple[tuple[str, ...], ...]:
        return (*self.shard, self.sum, self.copy)


@dataclass(frozen=True)
class Form:
    """Factors (name, degree) in task order, and the layout of each operand and result."""

    factors: tuple[tuple[str, int], ...]
    operands: tuple[FormLayout | None, ...]
    results: tuple[FormLayout, ...]

    def tasks(self) -> Iterator[dict[str, int]]:
        names = [n for n, _ in self.factors]
        for idx in itertools.product(*(range(d) for _, d in self.factors)):
            yield dict(zip(names, idx, strict=True))

    def coord(self, layout: FormLayout, task: dict[str, int]) -> tuple[int, ...]:
        degrees = dict(self.factors)
        out: list[int] = []
        for axis in layout.axes():
            index = 0
            for f in axis:
                index = index * degrees[f] + task[f]
            out.append(index)
        return tuple(out)

    def task_of(self, layout: FormLayout, coord: Sequence[int]) -> dict[str, int]:
        """The task whose piece of `layout` is at `coord` (`coord`'s inverse for a layout that
        holds every factor, as a result does: one piece per task)."""
        degrees = dict(self.factors)
        task: dict[str, int] = {}
        for axis, index in zip(layout.axes(), coord, strict=True):
            for f in reversed(axis):
                task[f] = index % degrees[f]
                index //= degrees[f]
        return {name: task.get(name, 0) for name, _ in self.factors}

    def axis_degree(self, axis: Sequence[str]) -> int:
        degrees = dict(self.factors)
        return math.prod(degrees[f] for f in axis)

    def degrees_of_result(self) -> tuple[int, ...]:
        """The task degrees of the first result (shard dims, sum, copy)."""
        shard, total, copies = self.degrees_of(self.results[0])
        return (*shard, total, copies)

    def degrees_of(self, layout: FormLayout) -> tuple[tuple[int, ...], int, int]:
        """(shard degrees, sum degree, copy degree) of a layout."""
        shard = tuple(self.axis_degree(a) for a in layout.shard)
        return shard, self.axis_degree(layout.sum), self.axis_degree(layout.copy)


@dataclass
class _Use:
    shard: dict[int, tuple[str, ...]] = field(default_factory=dict)
    sum: tuple[str, ...] = ()


class Degrees(Protocol):
    """What a form reads of an operand's type: its shard, sum and copy degrees."""

    @property
    def shard(self) -> tuple[int, ...]: ...

    @property
    def sum_degree(self) -> int: ...

    @property
    def copy_degree(self) -> int: ...


class FormBuilder:
    """Builds a Form from operand types, with errors that name the operand and dimension.

    Operands are given as (name, type-or-None); a type needs `.shard`, `.sum_degree`,
    `.copy_degree`. Factors are declared by the op's inference code; whatever an operand does
    not bind must have degree 1 there (shards, sum) or is absorbed into its copy axis.
    """

    def __init__(self, op: str, operands: Sequence[tuple[str, Degrees | None]]):
        self.op = op
        self.names = [n for n, _ in operands]
        self.types = [t for _, t in operands]
        self.degrees: dict[str, int] = {}
        self.uses = [_Use() for _ in operands]
        self.reasons: dict[tuple[int, int], str] = {}

    def _type(self, operand: int):
        t = self.types[operand]
        assert t is not None
        return t

    def fail(self, msg: str) -> FormError:
        return FormError(f"{self.op}: {msg}")

    def shared_dim(self, name: str, uses: Sequence[tuple[int, int]]) -> str:
        """A factor sharding every (operand, dim) in `uses` alike; the degrees must agree."""
        present = [(o, d) for o, d in uses if self.types[o] is not None]
        degree = None
        first = None
        for o, d in present:
            k = self._type(o).shard[d]
            if degree is None:
                degree, first = k, (o, d)
            elif k != degree:
                fo, fd = first  # type: ignore[misc]
                raise self.fail(
                    f"operand '{self.names[o]}' dimension {d} has shard degree {k}, "
                    f"but operand '{self.names[fo]}' dimension {fd} has {degree}; "
                    "they must be sharded alike"
                )
            self.uses[o].shard[d] = (name,)
        self.degrees[name] = degree or 1
        return name

    def split_dim(
        self, outer: str, inner: str, uses: Sequence[tuple[int, int]], inner_uses: Sequence[tuple[int, int]]
    ) -> tuple[str, str]:
        """Two factors: `outer` x `inner` (row-major) sharding every (operand, dim) of `uses`
        alike, `inner` alone sharding those of `inner_uses` (expert parallelism: the tokens split
        over data x expert, the experts over expert only). The inner degree must divide the
        outer uses' degree."""
        whole = self.shared_dim(outer, uses)
        part = self.shared_dim(inner, inner_uses)
        total, k = self.degrees[whole], self.degrees[part]
        if total % k:
            o, d = next((o, d) for o, d in inner_uses if self.types[o] is not None)
            raise self.fail(
                f"operand '{self.names[o]}' dimension {d} has shard degree {k}, which does not "
                f"divide the {total} shards of the dims split with it"
            )
        self.degrees[whole] = total // k
        for o, d in uses:
            if self.types[o] is not None:
                self.uses[o].shard[d] = (outer, inner)
        return whole, part

    def operand_sum(self, name: str, operand: int) -> str:
        """A factor carrying an operand's partial sums into the result's sum axis."""
        if self.types[operand] is None:
            self.degrees[name] = 1
            return name
        self.degrees[name] = self._type(operand).sum_degree
        self.uses[operand].sum = (*self.uses[operand].sum, name)
        return name

    def shared_sum(self, name: str, operands: Sequence[int]) -> str:
        """A factor for operands whose partial sums add up together (add, concat)."""
        present = [o for o in operands if self.types[o] is not None]
        degrees = {self._type(o).sum_degree for o in present}
        if len(degrees) > 1:
            listing = ", ".join(f"'{self.names[o]}' {self._type(o).sum_degree}" for o in present)
            raise self.fail(f"operands must have equal sum degrees (have {listing})")
        for o in present:
            self.uses[o].sum = (name,)
        self.degrees[name] = degrees.pop() if degrees else 1
        return name

    def forbid(self, operand: int, dim: int, reason: str) -> None:
        """Say why an operand dimension may not be sharded (used in the error message)."""
        self.reasons[(operand, dim)] = reason

    def build(self, results: Sequence[tuple[Sequence[Sequence[str]], Sequence[str]]]) -> Form:
        """Finish with each result's (shard factor lists, sum factors); copy is inferred."""
        self._check_unbound()
        first = results[0]
        order: list[str] = [f for axis in first[0] for f in axis] + list(first[1])
        copy = self._copy_degree(order)
        self.degrees[COPY] = copy
        factors = tuple((f, self.degrees[f]) for f in (*order, COPY))
        operand_layouts: list[FormLayout | None] = []
        for o, t in enumerate(self.types):
            if t is None:
                operand_layouts.append(None)
                continue
            use = self.uses[o]
            held = self._held(o)
            shard = tuple(use.shard.get(d, ()) for d in range(len(t.shard)))
            absorbed = tuple(f for f, _ in factors if f not in held)
            operand_layouts.append(FormLayout(shard, use.sum, absorbed))
        result_layouts = tuple(
            FormLayout(tuple(tuple(a) for a in shard), tuple(s), (COPY,)) for shard, s in results
        )
        return Form(factors, tuple(operand_layouts), result_layouts)

    def _held(self, operand: int) -> set[str]:
        """The factors an operand holds as shards or partial sums (the rest make its copies)."""
        use = self.uses[operand]
        return {f for axis in use.shard.values() for f in axis} | set(use.sum)

    def _check_unbound(self) -> None:
        for o, t in enumerate(self.types):
            if t is None:
                continue
            for d, k in enumerate(t.shard):
                if k != 1 and d not in self.uses[o].shard:
                    why = self.reasons.get((o, d), "this operator cannot split it")
                    raise self.fail(
                        f"operand '{self.names[o]}' dimension {d} has shard degree {k}, but {why}"
                    )
            if t.sum_degree != 1 and not self.uses[o].sum:
                raise self.fail(
                    f"operand '{self.names[o]}' has sum degree {t.sum_degree}, but this "
                    "operator is not linear in it: reduce the partial sums first"
                )

    def _copy_degree(self, order: Sequence[str]) -> int:
        copy = None
        for o, t in enumerate(self.types):
            if t is None:
                continue
            held = self._held(o)
            absorbed = math.prod(self.degrees[f] for f in order if f not in held)
            if copy is None:
                if t.copy_degree % absorbed:
                    raise self.fail(
                        f"operand '{self.names[o]}' has copy degree {t.copy_degree}, which is "
                        f"not a multiple of {absorbed}, the degree of the tasks it is shared by"
                    )
                copy = t.copy_degree // absorbed
            if t.copy_degree != absorbed * copy:
                raise self.fail(
                    f"operand '{self.names[o]}' has copy degree {t.copy_degree}, but this "
                    f"parallel form needs {absorbed * copy} (one copy per task that reads it)"
                )
        return copy or 1
