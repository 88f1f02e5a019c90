"""Shape ops of the `pcg` dialect: concat, split, reshape, transpose, gather, reduce."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from xdsl.dialects.builtin import i64
from xdsl.ir import Attribute
from xdsl.irdl import (
    operand_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import Pure

from unityc.dialects.canonicalization import canonicalization
from unityc.dialects.forms import Form
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg_types import (
    PcgOp,
    TensorType,
    float_dtype,
    form_builder,
    normalize_dim,
    op_error,
    result_type,
    same_dims,
)
from unityc.dialects.syntax import Kind, op_definition


@op_definition
class ConcatOp(PcgOp, fam.Shape, fam.DataMovement, fam.SavesNothing):
    """Concatenation along `dim` (unsharded); other dims and partial sums must agree."""

    name = "pcg.concat"
    inputs = var_operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        if not operands:
            raise op_error(cls, "needs at least one operand")
        first = operands[0]
        dim = normalize_dim(cls, attrs["dim"], first.rank)
        for t in operands:
            if t.rank != first.rank or any(t.shape[d] != first.shape[d] for d in range(t.rank) if d != dim):
                raise op_error(
                    cls, f"shapes {list(first.shape)} and {list(t.shape)} do not concatenate on {dim}"
                )
            if t.element_type != first.element_type:
                raise op_error(cls, "operand element types differ")
        names = [f"inputs#{i}" for i in range(len(operands))]
        b = form_builder(cls, names, operands)
        for o in range(len(operands)):
            b.forbid(o, dim, "concatenated shards would not be shards of the result")
        shard = [
            [b.shared_dim(f"d{d}", [(o, d) for o in range(len(operands))])] if d != dim else []
            for d in range(first.rank)
        ]
        form = b.build([(shard, [b.shared_sum("s", range(len(operands)))])])
        shape = list(first.shape)
        shape[dim] = sum(t.shape[dim] for t in operands)
        return form, [result_type(form, 0, shape, first.element_type)]


@op_definition
class SplitOp(PcgOp, fam.Shape, fam.DataMovement, fam.SavesNothing):
    """Splits along `dim` (unsharded) into pieces of the given sizes."""

    name = "pcg.split"
    input = operand_def(TensorType)
    outputs = var_result_def(TensorType)
    PROPS = (("dim", Kind.INT, False), ("sizes", Kind.INTS, False))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        sizes = attrs["sizes"]
        if sum(sizes) != x.shape[dim] or min(sizes, default=0) < 1:
            raise op_error(cls, f"sizes {list(sizes)} do not split dimension {dim} of size {x.shape[dim]}")
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, dim, "split pieces would not be shards of the results")
        shard = same_dims(b, 0, x.rank, skip=[dim])
        sums = [b.operand_sum("s", 0)]
        form = b.build([(shard, sums)] * len(sizes))
        types: list[Attribute] = []
        for i, size in enumerate(sizes):
            shape = list(x.shape)
            shape[dim] = size
            types.append(result_type(form, i, shape, x.element_type))
        return form, types


@op_definition
class ReshapeOp(PcgOp, fam.Shape, fam.RunsAsView, fam.SavesNothing):
    """Row-major reshape. A sharded input dim must lead its group of merged/split dims, and
    its shard degree passes to the leading result dim of that group."""

    name = "pcg.reshape"
    traits = traits_def(Pure(), canonicalization("pcg", "FoldReshape"))
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("shape", Kind.INTS, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        shape = tuple(attrs["shape"])
        if math.prod(shape) != math.prod(x.shape) or min(shape, default=1) < 1:
            raise op_error(cls, f"cannot reshape {list(x.shape)} to {list(shape)}")
        b = form_builder(cls, ["input"], operands)
        result_shard: list[list[str]] = [[] for _ in shape]
        for in_dims, out_dims in reshape_groups(x.shape, shape):
            for d in in_dims[1:]:
                b.forbid(0, d, "it does not lead its group of reshaped dims")
            if not out_dims:
                continue
            lead_in, lead_out = in_dims[0], out_dims[0]
            factor = b.shared_dim(f"d{lead_in}", [(0, lead_in)])
            if shape[lead_out] % b.degrees[factor]:
                raise op_error(
                    cls,
                    f"shard degree {b.degrees[factor]} of dimension {lead_in} does not divide "
                    f"result dimension {lead_out} of size {shape[lead_out]}",
                )
            result_shard[lead_out] = [factor]
        form = b.build([(result_shard, [b.operand_sum("s", 0)])])
        return form, [result_type(form, 0, shape, x.element_type)]


def reshape_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Pair up minimal runs of source and result dims with equal products (size-1 dims alone)."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        if i < len(src) and src[i] == 1 and (j >= len(dst) or dst[j] != 1):
            groups.append(([i], []))
            i += 1
            continue
        if j < len(dst) and dst[j] == 1 and (i >= len(src) or src[i] != 1):
            j += 1
            continue
        a, c = [i], [j]
        pa, pc = src[i], dst[j]
        i, j = i + 1, j + 1
        while pa != pc:
            if pa < pc:
                a.append(i)
                pa *= src[i]
                i += 1
            else:
                c.append(j)
                pc *= dst[j]
                j += 1
        groups.append((a, c))
    return groups


@op_definition
class TransposeOp(PcgOp, fam.Shape, fam.DataMovement, fam.RunsAsView, fam.SavesNothing):
    """Permutes dimensions: result dim i is input dim perm[i]; shards move with their dims."""

    name = "pcg.transpose"
    traits = traits_def(Pure(), canonicalization("pcg", "FoldTranspose"))
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("perm", Kind.INTS, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        perm = list(attrs["perm"])
        if sorted(perm) != list(range(x.rank)):
            raise op_error(cls, f"perm {perm} is not a permutation of {x.rank} dims")
        b = form_builder(cls, ["input"], operands)
        shard = [[b.shared_dim(f"d{p}", [(0, p)])] for p in perm]
        form = b.build([(shard, [b.operand_sum("s", 0)])])
        return form, [result_type(form, 0, [x.shape[p] for p in perm], x.element_type)]


@op_definition
class GatherOp(PcgOp, fam.Shape, fam.DataMovement, fam.SavesNothing):
    """index_select along `dim` with fixed `indices` (folded at import, e.g. DLRM's interaction
    pairs); `dim` is unsharded, other dims shard and partial sums pass through (it is linear)."""

    name = "pcg.gather"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False), ("indices", Kind.INTS, False))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        indices = list(attrs["indices"])
        if not indices or min(indices) < 0 or max(indices) >= x.shape[dim]:
            raise op_error(cls, f"indices must be non-empty and within [0, {x.shape[dim]})")
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, dim, "gathered rows would not be shards of the result")
        form = b.build([(same_dims(b, 0, x.rank, skip=[dim]), [b.operand_sum("s", 0)])])
        shape = list(x.shape)
        shape[dim] = len(indices)
        return form, [result_type(form, 0, shape, x.element_type)]


REDUCE_SUMS = ("sum", "mean")
"""Reduce kinds that are linear: a sharded reduced dim gives partial sums."""
REDUCE_SELECTS = ("max", "min", "amax", "amin", "argmax", "argmin")
"""Reduce kinds that pick an element: the reduced dims stay whole and partial sums are not
accepted. `max`/`min` are torch.max/min over one dim (the gradient goes to the index picked),
`amax`/`amin` over any dims (ties share the gradient), `argmax`/`argmin` the index (i64)."""
ONE_DIM_SELECTS = ("max", "min", "argmax", "argmin")


@op_definition
class ReduceOp(PcgOp, fam.Shape, fam.SavesNothing):
    """Sum, mean, max, min (values or indices) over `dims`. A sharded reduced dim gives partial
    sums for a sum or mean; a selecting kind (`REDUCE_SELECTS`) keeps its reduced dims whole."""

    name = "pcg.reduce"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("kind", Kind.STR, False), ("dims", Kind.INTS, False), ("keepdim", Kind.FLAG, True))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        kind = attrs["kind"]
        if kind not in REDUCE_SUMS + REDUCE_SELECTS:
            raise op_error(
                cls, f"kind must be one of {', '.join(REDUCE_SUMS + REDUCE_SELECTS)}, got '{kind}'"
            )
        dims = sorted({normalize_dim(cls, d, x.rank) for d in attrs["dims"]})
        if kind in ONE_DIM_SELECTS and len(dims) != 1:
            raise op_error(cls, f"a {kind} reduces exactly one dim, got {len(dims)}")
        linear = kind in REDUCE_SUMS
        b = form_builder(cls, ["input"], operands)
        if not linear:
            for d in dims:
                b.forbid(0, d, f"a {kind} needs the whole reduced dim")
        shard: list[list[str]] = []
        reduced: list[str] = []
        for d in range(x.rank):
            if not linear and d in dims:
                if attrs["keepdim"]:
                    shard.append([])
                continue
            factor = b.shared_dim(f"d{d}", [(0, d)])
            if d in dims:
                reduced.append(factor)
            if d not in dims or attrs["keepdim"]:
                shard.append([] if d in dims else [factor])
        sums = [b.operand_sum("s", 0), *reduced] if linear else []
        form = b.build([(shard, sums)])
        shape = [1 if d in dims else s for d, s in enumerate(x.shape) if attrs["keepdim"] or d not in dims]
        dtype = i64 if kind in ("argmax", "argmin") else float_dtype(cls, x)
        return form, [result_type(form, 0, shape, dtype)]
