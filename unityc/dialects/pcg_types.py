"""The parallel tensor type of the `pcg` dialect and the base of its ops.

A value of type `!pcg.tensor<64x1024xf32, shard [4, 1], sum 2, copy 2>` is a logical tensor
held as pieces: each dimension cut into `shard` equal parts, `sum` partial values that add up
to the logical value, and `copy` identical copies of each. Degrees equal to 1 are not printed.

An operator's parallelism is derived from its operands' degrees (see `forms.py` for how tasks
map onto pieces); an op accepts only degree combinations whose reassembled result equals the
unparallelized one, and its verifier names the operand and dimension it rejects.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    IntAttr,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition, traits_def
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from unityc.dialects.forms import COPY, Form, FormBuilder, FormError, FormLayout
from unityc.dialects.plan import OpPlan, PlanError
from unityc.dialects.syntax import UnitycOp

TORCH_NAMES: dict[Attribute, str] = {
    f16: "float16",
    bf16: "bfloat16",
    f32: "float32",
    f64: "float64",
    i1: "bool",
    i32: "int32",
    i64: "int64",
}
"""The element types of the dialect and the name of each one's torch dtype (`torch.<name>`): the
one dtype table (the importer, the interpreter and codegen derive theirs from it)."""
ELEMENT_TYPES: tuple[Attribute, ...] = tuple(TORCH_NAMES)
FLOAT_TYPES: tuple[Attribute, ...] = (f16, bf16, f32, f64)

MAX_ELEMENTS = 1 << 48
"""Elements of one tensor (256 Ti: 2 PiB in f64, more than any machine we model holds in
total). Bounding it keeps byte counts exact in int64 and float64 throughout the cost model."""

MAX_PIECES = 1 << 20
"""Pieces of one tensor (shard degrees x sum x copy): more than one per device of any machine
we model; the interpreter, the cost model and codegen enumerate pieces."""


def degree_problem(shape: Sequence[int], shard: Sequence[int], sum_: int, copy: int) -> str | None:
    """Why these degrees are impossible for this shape, or None."""
    if len(shard) != len(shape):
        return f"{len(shard)} shard degrees for a rank-{len(shape)} tensor"
    for d, (size, k) in enumerate(zip(shape, shard, strict=True)):
        if size == DYNAMIC_INDEX:
            return f"dimension {d} is dynamic ('?'); sizes must be static"
        if size < 1:
            return f"dimension {d} has size {size}; sizes must be positive"
        if k < 1:
            return f"shard degree {k} of dimension {d} must be at least 1"
        if size % k:
            return f"shard degree {k} does not divide dimension {d} of size {size}"
    if sum_ < 1 or copy < 1:
        return "sum and copy degrees must be at least 1"
    if (elements := math.prod(shape)) > MAX_ELEMENTS:
        return f"{elements} elements are too many (at most 2^48 = {MAX_ELEMENTS})"
    if (pieces := math.prod(shard) * sum_ * copy) > MAX_PIECES:
        return f"{pieces} pieces (shard x sum x copy) are too many (at most 2^20 = {MAX_PIECES})"
    return None


@irdl_attr_definition
class TensorType(ParametrizedAttribute, TypeAttribute):
    """A parallel tensor: logical shape, element type, shard degree per dim, sum and copy degree."""

    name = "pcg.tensor"

    shape_attr: ArrayAttr[IntAttr]
    element_type: Attribute
    shard_attr: ArrayAttr[IntAttr]
    sum_attr: IntAttr
    copy_attr: IntAttr

    def __init__(
        self,
        shape: Sequence[int],
        element_type: Attribute,
        shard: Sequence[int] | None = None,
        sum: int = 1,
        copy: int = 1,
    ):
        shard = [1] * len(shape) if shard is None else shard
        super().__init__(
            ArrayAttr([IntAttr(s) for s in shape]),
            element_type,
            ArrayAttr([IntAttr(k) for k in shard]),
            IntAttr(sum),
            IntAttr(copy),
        )

    def __hash__(self) -> int:
        """Computed once: the search hashes the same tensor types millions of times (graph
        hashing, mapping caches), and xDSL's generated hash walks every parameter each time."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            params = (self.shape_attr, self.element_type, self.shard_attr, self.sum_attr, self.copy_attr)
            cached = hash(params)
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the cached hash: string hashes differ between processes."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.data for a in self.shape_attr.data)

    @property
    def shard(self) -> tuple[int, ...]:
        return tuple(a.data for a in self.shard_attr.data)

    @property
    def sum_degree(self) -> int:
        return self.sum_attr.data

    @property
    def copy_degree(self) -> int:
        return self.copy_attr.data

    @property
    def rank(self) -> int:
        return len(self.shape_attr.data)

    @property
    def num_pieces(self) -> int:
        return math.prod(self.shard) * self.sum_degree * self.copy_degree

    @property
    def piece_shape(self) -> tuple[int, ...]:
        return tuple(s // k for s, k in zip(self.shape, self.shard, strict=True))

    def task_degrees(self) -> tuple[int, ...]:
        """The degrees of its task space: shard dims, sum, copy."""
        return (*self.shard, self.sum_degree, self.copy_degree)

    def verify(self) -> None:
        if self.element_type not in ELEMENT_TYPES:
            raise VerifyException(f"unsupported element type {self.element_type}")
        if problem := degree_problem(self.shape, self.shard, self.sum_degree, self.copy_degree):
            raise VerifyException(f"invalid !pcg.tensor: {problem}")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        start = parser.pos
        with parser.in_angle_brackets():
            shape, element_type = parser.parse_ranked_shape()
            if element_type not in ELEMENT_TYPES:
                parser.raise_error(f"unsupported element type {element_type}", start, parser.pos)
            shard, sum_, copy = [1] * len(shape), 1, 1
            seen: set[str] = set()
            while parser.parse_optional_punctuation(",") is not None:
                at = parser.pos
                keyword = parser.parse_keyword_in(("shard", "sum", "copy"))
                if keyword in seen:
                    parser.raise_error(f"'{keyword}' is given twice", at, parser.pos)
                seen.add(keyword)
                if keyword == "shard":
                    shard = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
                elif keyword == "sum":
                    sum_ = parser.parse_integer()
                else:
                    copy = parser.parse_integer()
            if problem := degree_problem(shape, shard, sum_, copy):
                parser.raise_error(f"invalid !pcg.tensor: {problem}", start, parser.pos)
        return (
            ArrayAttr([IntAttr(s) for s in shape]),
            element_type,
            ArrayAttr([IntAttr(k) for k in shard]),
            IntAttr(sum_),
            IntAttr(copy),
        )

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_string("".join(f"{s}x" for s in self.shape))
        printer.print_attribute(self.element_type)
        if any(k != 1 for k in self.shard):
            printer.print_string(", shard [" + ", ".join(map(str, self.shard)) + "]")
        if self.sum_degree != 1:
            printer.print_string(f", sum {self.sum_degree}")
        if self.copy_degree != 1:
            printer.print_string(f", copy {self.copy_degree}")
        printer.print_string(">")


def result_type(form: Form, index: int, shape: Sequence[int], element_type: Attribute) -> TensorType:
    shard, sum_, copy = form.degrees_of(form.results[index])
    problem = degree_problem(shape, shard, sum_, copy)
    if problem:
        raise FormError(f"result {index} would be impossible: {problem}")
    return TensorType(shape, element_type, shard, sum_, copy)


class PcgOp(UnitycOp):
    """Base of the ops of both dialects: pure, and checks its machine view."""

    traits = traits_def(Pure())
    AUTOCAST: ClassVar[str] = "promote"
    """The element type the op computes and writes under bf16 mixed precision (see
    `dialects/precision.py`): `promote` (the widest float type it reads), `bf16` (autocast's
    lower-precision ops), `f32` (autocast's fp32 ops), `input` (its first operand's) or
    `declared` (its result type's)."""

    def verify_extra(self) -> None:
        """The op's plan (`dialects/plan.py`): well formed, applicable, its view fitting the tasks."""
        try:
            plan = OpPlan.from_attributes(self.attributes)
        except PlanError as e:
            raise VerifyException(str(e)) from None
        result = self.results[0].type if self.results else None
        assert result is None or isinstance(result, TensorType)
        if problem := plan.problem_for(self.name, result):
            raise VerifyException(problem)
        if plan.view is None or result is None:
            return
        if problem := plan.view.problem_for(result.task_degrees()):
            raise VerifyException(problem)


def form_builder(cls: type[UnitycOp], names: Sequence[str], operands: Sequence[Any]) -> FormBuilder:
    return FormBuilder(cls.name, list(zip(names, operands, strict=True)))


def op_error(cls: type[UnitycOp], msg: str) -> FormError:
    return FormError(f"{cls.name}: {msg}")


def same_dims(b: FormBuilder, operand: int, rank: int, skip: Sequence[int] = ()) -> list[list[str]]:
    """One factor per dimension of `operand` (excluding `skip`), as result shard axes."""
    return [[b.shared_dim(f"d{i}", [(operand, i)])] if i not in skip else [] for i in range(rank)]


def float_dtype(cls: type[UnitycOp], t: TensorType) -> Attribute:
    if t.element_type not in FLOAT_TYPES:
        raise op_error(cls, f"expects a floating-point operand, got {t.element_type}")
    return t.element_type


def normalize_dim(cls: type[UnitycOp], dim: int, rank: int) -> int:
    if not -rank <= dim < max(rank, 1):
        raise op_error(cls, f"dimension {dim} is out of range for rank {rank}")
    return dim % max(rank, 1)


def own_form(t: TensorType) -> Form:
    """The form whose tasks are exactly the pieces of `t` (sources and parallel ops)."""
    shard = tuple((f"d{i}",) for i in range(t.rank))
    factors = (*((f"d{i}", k) for i, k in enumerate(t.shard)), ("s", t.sum_degree), (COPY, t.copy_degree))
    return Form(factors, (), (FormLayout(shard, ("s",), (COPY,)),))


INT_TYPES: tuple[Attribute, ...] = (i64,)
"""Element types of indices and class labels."""


def check_probability(cls: type[UnitycOp], name: str, p: float | None) -> None:
    if p is not None and not 0.0 <= p < 1.0:
        raise op_error(cls, f"{name} must be a probability in [0, 1), got {p}")


def check_eps(cls: type[UnitycOp], eps: float) -> None:
    if not eps >= 0.0:  # also refuses nan
        raise op_error(cls, f"eps must be a non-negative number, got {eps}")


def check_indices(cls: type[UnitycOp], t: TensorType, what: str) -> None:
    if t.element_type not in INT_TYPES:
        raise op_error(cls, f"{what} must be i64, got {t.element_type}")
