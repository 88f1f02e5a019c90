"""Embedding lookups of the `pcg` dialect: embedding and embedding bag."""

from __future__ import annotations

from typing import Any

from xdsl.ir import Attribute
from xdsl.irdl import (
    operand_def,
    result_def,
)

from unityc.dialects.forms import Form
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg_types import (
    PcgOp,
    TensorType,
    check_indices,
    float_dtype,
    form_builder,
    op_error,
    result_type,
    same_dims,
)
from unityc.dialects.syntax import Kind, op_definition


@op_definition
class EmbeddingOp(PcgOp, fam.Lookup):
    """weight[indices]: result shape indices.shape + [D]. Sharding the vocabulary (weight dim 0)
    is exact: each task looks up only the ids in its range, giving partial sums.

    `padding_idx` (optional, a row of the vocabulary) is torch's: the forward still reads that
    row, but the lookup adds nothing to its gradient. A vocabulary-sharded task applies it to
    its local rows when the row falls in its shard."""

    name = "pcg.embedding"
    indices = operand_def(TensorType)
    weight = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("padding_idx", Kind.INT, True),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        ids, w = operands
        check_indices(cls, ids, "indices")
        if w.rank != 2:
            raise op_error(cls, "weight must be [vocabulary, dim]")
        pad = attrs.get("padding_idx")
        if pad is not None and not 0 <= pad < w.shape[0]:
            raise op_error(cls, f"padding_idx {pad} is not a row of the {w.shape[0]}-row vocabulary")
        b = form_builder(cls, ["indices", "weight"], operands)
        shard = [*same_dims(b, 0, ids.rank), [b.shared_dim("e", [(1, 1)])]]
        form = b.build([(shard, [b.shared_dim("v", [(1, 0)]), b.operand_sum("sw", 1)])])
        return form, [result_type(form, 0, (*ids.shape, w.shape[1]), float_dtype(cls, w))]


@op_definition
class EmbeddingBagOp(PcgOp, fam.Lookup):
    """Sum or mean of weight rows over fixed-size bags: indices [B, L] -> [B, D]. Sharding the
    bag (L) or the vocabulary gives partial sums."""

    name = "pcg.embedding_bag"
    indices = operand_def(TensorType)
    weight = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("mode", Kind.STR, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        ids, w = operands
        check_indices(cls, ids, "indices")
        if attrs["mode"] not in ("sum", "mean"):
            raise op_error(cls, f"mode must be sum or mean, got '{attrs['mode']}'")
        if ids.rank != 2 or w.rank != 2:
            raise op_error(cls, "indices must be [bags, bag size] and weight [vocabulary, dim]")
        b = form_builder(cls, ["indices", "weight"], operands)
        shard = [[b.shared_dim("b", [(0, 0)])], [b.shared_dim("e", [(1, 1)])]]
        sums = [b.shared_dim("l", [(0, 1)]), b.shared_dim("v", [(1, 0)]), b.operand_sum("sw", 1)]
        form = b.build([(shard, sums)])
        return form, [result_type(form, 0, (ids.shape[0], w.shape[1]), float_dtype(cls, w))]
