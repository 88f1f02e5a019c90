"""Normalization and softmax in the `pcg` dialect: batch norm, layer norm, RMS norm, softmax, cumsum."""

from __future__ import annotations

import math
from typing import Any

from xdsl.dialects.builtin import i1
from xdsl.ir import Attribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    operand_def,
    opt_operand_def,
    result_def,
)

from unityc.dialects.forms import Form
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg_types import (
    PcgOp,
    TensorType,
    check_eps,
    float_dtype,
    form_builder,
    normalize_dim,
    op_error,
    result_type,
    same_dims,
)
from unityc.dialects.syntax import Kind, op_definition


@op_definition
class BatchNormOp(PcgOp, fam.Normalization):
    """Training-mode batch norm over (N, C, ...) with batch statistics; channels shard.

    The batch and spatial dims may not be sharded: the statistics span them.
    """

    name = "pcg.batch_norm"
    AUTOCAST = "input"
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    output = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    PROPS = (("eps", Kind.FLOAT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, w, bias = operands
        if x.rank < 2:
            raise op_error(cls, "input must have a channel dimension")
        check_eps(cls, attrs["eps"])
        if (values := x.shape[0] * math.prod(x.shape[2:])) < 2:
            raise op_error(cls, f"training statistics need more than 1 value per channel, got {values}")
        for name, t in (("weight", w), ("bias", bias)):
            if t is not None and t.shape != (x.shape[1],):
                raise op_error(cls, f"{name} shape {list(t.shape)} should be [{x.shape[1]}]")
        b = form_builder(cls, ["input", "weight", "bias"], operands)
        for d in [0, *range(2, x.rank)]:
            b.forbid(0, d, "batch statistics are computed over it")
        channels = b.shared_dim("c", [(0, 1), (1, 0), (2, 0)])
        form = b.build([([[], [channels]] + [[] for _ in range(x.rank - 2)], [])])
        return form, [result_type(form, 0, x.shape, float_dtype(cls, x))]


@op_definition
class LayerNormOp(PcgOp, fam.Normalization):
    """Layer norm over the last `dims` dimensions, with optional elementwise weight and bias."""

    name = "pcg.layer_norm"
    AUTOCAST = "input"
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    output = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    PROPS = (("dims", Kind.INT, False), ("eps", Kind.FLOAT, False))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, w, bias = operands
        n = attrs["dims"]
        check_eps(cls, attrs["eps"])
        if not 1 <= n <= x.rank:
            raise op_error(cls, f"cannot normalize {n} dims of a rank-{x.rank} tensor")
        for name, t in (("weight", w), ("bias", bias)):
            if t is not None and t.shape != x.shape[-n:]:
                raise op_error(cls, f"{name} shape {list(t.shape)} should be {list(x.shape[-n:])}")
        b = form_builder(cls, ["input", "weight", "bias"], operands)
        normalized = range(x.rank - n, x.rank)
        for d in normalized:
            b.forbid(0, d, "it is normalized over")
        shard = same_dims(b, 0, x.rank, skip=normalized)
        form = b.build([(shard, [])])
        return form, [result_type(form, 0, x.shape, float_dtype(cls, x))]


@op_definition
class RmsNormOp(PcgOp, fam.Normalization):
    """RMS norm over the last `dims` dimensions (Zhang & Sennrich 2019; Llama, Qwen2, Mistral,
    Gemma, T5), computed in fp32 whatever the input's element type:

        n = f32(x) * rsqrt(mean(f32(x)^2 over the last `dims` dims) + eps)
        y = n * (weight + offset)                        cast to x's element type (F.rms_norm)
        y = (n cast to x's element type) * (weight + offset)   with `weight_after_cast` (HF Llama)

    `offset` (default 0) is Gemma's `1 + weight`. The weight, if any, has the normalized shape
    and x's element type; the two orders differ only in rounding when x is narrower than fp32.
    Every dim but the normalized ones shards; the backward keeps x and the per-row rstd.
    """

    name = "pcg.rms_norm"
    AUTOCAST = "input"
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    output = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    PROPS = (
        ("dims", Kind.INT, False),
        ("eps", Kind.FLOAT, False),
        ("offset", Kind.FLOAT, True),
        ("weight_after_cast", Kind.FLAG, True),
    )

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, w = operands
        n = attrs["dims"]
        check_eps(cls, attrs["eps"])
        offset = attrs.get("offset")
        if offset is not None and not math.isfinite(offset):
            raise op_error(cls, f"offset must be a finite number, got {offset}")
        if not 1 <= n <= x.rank:
            raise op_error(cls, f"cannot normalize {n} dims of a rank-{x.rank} tensor")
        dtype = float_dtype(cls, x)
        if w is None and (offset is not None or attrs.get("weight_after_cast")):
            raise op_error(cls, "offset and weight_after_cast need a weight")
        if w is not None and w.shape != x.shape[-n:]:
            raise op_error(cls, f"weight shape {list(w.shape)} should be {list(x.shape[-n:])}")
        if w is not None and w.element_type != dtype:
            raise op_error(cls, f"weight element type {w.element_type} differs from the input's {dtype}")
        b = form_builder(cls, ["input", "weight"], operands)
        normalized = range(x.rank - n, x.rank)
        for d in normalized:
            b.forbid(0, d, "it is normalized over")
        form = b.build([(same_dims(b, 0, x.rank, skip=normalized), [])])
        return form, [result_type(form, 0, x.shape, dtype)]


@op_definition
class SoftmaxOp(PcgOp, fam.Normalization, fam.SavesResult):
    """Softmax along `dim`, which may not be sharded."""

    name = "pcg.softmax"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, dim, "softmax normalizes along it")
        form = b.build([(same_dims(b, 0, x.rank, skip=[dim]), [])])
        return form, [result_type(form, 0, x.shape, float_dtype(cls, x))]


@op_definition
class CumsumOp(PcgOp, fam.Scan, fam.SavesNothing):
    """Running sum along `dim` (torch.cumsum), any element type. `dim` may not be sharded;
    linear, so partial sums pass through."""

    name = "pcg.cumsum"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        if x.element_type == i1:
            raise op_error(cls, "sums numbers, not booleans: cast the mask first")
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, dim, "each element sums every element before it")
        form = b.build([(same_dims(b, 0, x.rank, skip=[dim]), [b.operand_sum("s", 0)])])
        return form, [result_type(form, 0, x.shape, x.element_type)]
