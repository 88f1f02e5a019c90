"""The `parallel` dialect: operators that change a tensor's parallel degrees.

| op                              | degrees                      | alone, at runtime        |
|---------------------------------|------------------------------|--------------------------|
| partition dim d, degree n       | shard[d] *= n                | split / scatter          |
| combine dim d, degree n         | shard[d] /= n                | gather / concatenate     |
| replicate degree n              | copy *= n                    | broadcast                |
| reduce degree n                 | sum /= n                     | sum partial values       |
| pipeline dim d, degree n        | shape[d] /= n                | split into micro-batches |
| batch dim d, degree n           | shape[d] *= n                | gather micro-batches     |
| all_reduce degree n             | sum /= n, copy *= n          | reduce then replicate    |
| reduce_scatter dim d, degree n  | sum /= n, shard[d] *= n      | reduce then partition    |
| all_gather dim d, degree n      | shard[d] /= n, copy *= n     | combine then replicate   |
| all_to_all src a, dst b, deg. n | shard[a] /= n, shard[b] *= n | combine a, partition b   |
| sum_concat a, b                 | sum *= 2 (a's, then b's)     | none: pieces stay put    |

Index convention (what the interpreter and codegen follow): an op that multiplies a degree by n
gives the new sub-index the innermost place: piece i of the input becomes pieces i*n .. i*n+n-1
(chunks of it for partition, copies for replicate); an op that divides a degree by n merges
pieces i*n .. i*n+n-1 (concatenates for combine, sums for reduce).
"""

from __future__ import annotations

from typing import Any, ClassVar

from xdsl.ir import Attribute, Dialect, Operation
from xdsl.irdl import operand_def, result_def, traits_def
from xdsl.traits import HasCanonicalizationPatternsTrait

from unityc.dialects.canonicalization import canonicalization
from unityc.dialects.forms import Form
from unityc.dialects.pcg_types import PcgOp, TensorType, degree_problem, op_error, own_form
from unityc.dialects.syntax import Kind, op_definition


class ParallelOp(PcgOp):
    """A data-movement op: one operand, one result; its tasks are the result's pieces."""

    input = operand_def(TensorType)
    output = result_def(TensorType)
    AUTOCAST: ClassVar[str] = "input"

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        """(shape, shard degrees, sum degree, copy degree) of the result."""
        raise NotImplementedError(f"{cls.name} does not define its degrees")  # every op overrides

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (t,) = operands
        if attrs.get("degree") is not None and attrs["degree"] < 2:
            raise op_error(cls, f"degree must be at least 2, got {attrs['degree']}")
        shape, shard, sum_, copy = cls.new_degrees(t, attrs)
        if problem := degree_problem(shape, shard, sum_, copy):
            raise op_error(cls, f"cannot apply to {t}: {problem}")
        result = TensorType(shape, t.element_type, shard, sum_, copy)
        return own_form(result), [result]


def _dim(cls: type[ParallelOp], t: TensorType, dim: int, what: str = "dim") -> int:
    if not 0 <= dim < t.rank:
        raise op_error(cls, f"{what} {dim} is out of range for rank {t.rank}")
    return dim


def _divide(cls: type[ParallelOp], value: int, degree: int, what: str) -> int:
    if value % degree:
        raise op_error(cls, f"degree {degree} does not divide the {what} ({value})")
    return value // degree


def _canonicalization(*names: str) -> HasCanonicalizationPatternsTrait:
    return canonicalization("parallel", *names)


DIM_DEGREE = (("dim", Kind.INT, False), ("degree", Kind.INT, False))
DEGREE = (("degree", Kind.INT, False),)


@op_definition
class PartitionOp(ParallelOp):
    """Cuts every piece into `degree` chunks along `dim`."""

    name = "parallel.partition"
    PROPS = DIM_DEGREE
    traits = traits_def(_canonicalization("InverseOfCombine", "MergePartitions"))

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        d, n = _dim(cls, t, attrs["dim"]), attrs["degree"]
        shard = list(t.shard)
        _divide(cls, t.piece_shape[d], n, f"piece size of dimension {d}")
        shard[d] *= n
        return list(t.shape), shard, t.sum_degree, t.copy_degree


@op_definition
class CombineOp(ParallelOp):
    """Concatenates groups of `degree` adjacent shards along `dim`."""

    name = "parallel.combine"
    PROPS = DIM_DEGREE
    traits = traits_def(_canonicalization("InverseOfPartition", "MergeCombines"))

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        d, n = _dim(cls, t, attrs["dim"]), attrs["degree"]
        shard = list(t.shard)
        shard[d] = _divide(cls, shard[d], n, f"shard degree of dimension {d}")
        return list(t.shape), shard, t.sum_degree, t.copy_degree


@op_definition
class ReplicateOp(ParallelOp):
    """Makes `degree` copies of every piece."""

    name = "parallel.replicate"
    PROPS = DEGREE
    traits = traits_def(_canonicalization("MergeReplicates"))

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        return list(t.shape), list(t.shard), t.sum_degree, t.copy_degree * attrs["degree"]


@op_definition
class ReduceOp(ParallelOp):
    """Sums groups of `degree` partial values."""

    name = "parallel.reduce"
    PROPS = DEGREE
    traits = traits_def(_canonicalization("MergeReduces"))

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        sum_ = _divide(cls, t.sum_degree, attrs["degree"], "sum degree")
        return list(t.shape), list(t.shard), sum_, t.copy_degree


@op_definition
class PipelineOp(ParallelOp):
    """Splits the tensor into `degree` micro-batches along `dim`; the ops that follow run once
    per micro-batch until a `parallel.batch` gathers them."""

    name = "parallel.pipeline"
    PROPS = DIM_DEGREE
    traits = traits_def(_canonicalization("InverseOfBatch"))

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        d, n = _dim(cls, t, attrs["dim"]), attrs["degree"]
        shape = list(t.shape)
        shape[d] = _divide(cls, shape[d], n, f"size of dimension {d}")
        return shape, list(t.shard), t.sum_degree, t.copy_degree


@op_definition
class BatchOp(ParallelOp):
    """Gathers `degree` micro-batches along `dim`."""

    name = "parallel.batch"
    PROPS = DIM_DEGREE
    traits = traits_def(_canonicalization("InverseOfPipeline"))

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        d = _dim(cls, t, attrs["dim"])
        shape = list(t.shape)
        shape[d] *= attrs["degree"]
        return shape, list(t.shard), t.sum_degree, t.copy_degree


@op_definition
class AllReduceOp(ParallelOp):
    """reduce then replicate, by `degree`: every task ends with the full sum."""

    name = "parallel.all_reduce"
    PROPS = DEGREE

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        n = attrs["degree"]
        return list(t.shape), list(t.shard), _divide(cls, t.sum_degree, n, "sum degree"), t.copy_degree * n


@op_definition
class ReduceScatterOp(ParallelOp):
    """reduce then partition along `dim`, by `degree`."""

    name = "parallel.reduce_scatter"
    PROPS = DIM_DEGREE

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        d, n = _dim(cls, t, attrs["dim"]), attrs["degree"]
        shard = list(t.shard)
        _divide(cls, t.piece_shape[d], n, f"piece size of dimension {d}")
        shard[d] *= n
        return list(t.shape), shard, _divide(cls, t.sum_degree, n, "sum degree"), t.copy_degree


@op_definition
class AllGatherOp(ParallelOp):
    """combine along `dim` then replicate, by `degree`."""

    name = "parallel.all_gather"
    PROPS = DIM_DEGREE

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        d, n = _dim(cls, t, attrs["dim"]), attrs["degree"]
        shard = list(t.shard)
        shard[d] = _divide(cls, shard[d], n, f"shard degree of dimension {d}")
        return list(t.shape), shard, t.sum_degree, t.copy_degree * n


@op_definition
class AllToAllOp(ParallelOp):
    """combine along `src` then partition along `dst`, by `degree`."""

    name = "parallel.all_to_all"
    PROPS = (("src", Kind.INT, False), ("dst", Kind.INT, False), ("degree", Kind.INT, False))

    @classmethod
    def new_degrees(cls, t: TensorType, attrs: dict[str, Any]) -> tuple[list[int], list[int], int, int]:
        src, dst, n = _dim(cls, t, attrs["src"], "src"), _dim(cls, t, attrs["dst"], "dst"), attrs["degree"]
        if src == dst:
            raise op_error(cls, "src and dst must differ")
        shard = list(t.shard)
        shard[src] = _divide(cls, shard[src], n, f"shard degree of dimension {src}")
        _divide(cls, t.piece_shape[dst], n, f"piece size of dimension {dst}")
        shard[dst] *= n
        return list(t.shape), shard, t.sum_degree, t.copy_degree


@op_definition
class SumConcatOp(PcgOp):
    """Concatenation on the sum axis (Unity's "concat on the replica dim"): `a` and `b` of one
    type become one tensor with twice the sum degree whose partial sums are a's, then b's; its
    logical value is a + b. No data moves when the result's pieces sit where a's and b's do, so
    `parallel.reduce` of it is an add done by a collective (Unity's Add = Concat + Reduce)."""

    name = "parallel.sum_concat"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    output = result_def(TensorType)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        a, b = operands
        if a != b:
            raise op_error(cls, f"operands must have one type, got {a} and {b}")
        result = TensorType(list(a.shape), a.element_type, list(a.shard), a.sum_degree * 2, a.copy_degree)
        return own_form(result), [result]


ALL_OPS: list[type[PcgOp]] = [
    PartitionOp,
    CombineOp,
    ReplicateOp,
    ReduceOp,
    PipelineOp,
    BatchOp,
    AllReduceOp,
    ReduceScatterOp,
    AllGatherOp,
    AllToAllOp,
    SumConcatOp,
]

PARALLEL = Dialect("parallel", list[type[Operation]](ALL_OPS), [])

__all__ = ["ALL_OPS", "PARALLEL"]
