"""Losses of the `pcg` dialect: cross-entropy (vocabulary-parallel) and mean squared error."""

from __future__ import annotations

from typing import Any, ClassVar

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
)
from unityc.dialects.syntax import Kind, op_definition


class _LossOp(PcgOp, fam.Loss):
    """A scalar loss. Sharded rows give partial sums (each task divides by the global count)."""

    output = result_def(TensorType)
    PROPS: ClassVar[tuple] = (("reduction", Kind.STR, False),)
    AUTOCAST: ClassVar[str] = "f32"

    @classmethod
    def check_reduction(cls, attrs: dict[str, Any]) -> None:
        if attrs["reduction"] not in ("mean", "sum"):
            raise op_error(cls, f"reduction must be mean or sum, got '{attrs['reduction']}'")


@op_definition
class CrossEntropyOp(_LossOp):
    """Cross-entropy of logits [N, C] against class indices [N].

    `ignore_index` (optional, torch's): a target equal to it adds nothing, and a mean divides
    by the count of the kept targets of the whole batch. Rows may shard either way: with a sum
    each task's rows add up; under a mean every task divides by that global count (-t torch
    all-reduces it across the row shards; a pipelined plan refuses it, since each micro-batch
    would count its own). Without `ignore_index` every target must be a class.

    Sharding the classes is Megatron-LM's vocabulary-parallel cross-entropy: the tasks holding
    one block of rows compute each row's log-sum-exp together (the row maximum and the sum of
    exponentials reduced across their class shards, no logits gathered), and class shard v's
    partial sum is the sum over its rows of lse / V - the target's logit where shard v holds
    the target (V class shards), so the partial sums add up to the loss.

    `classes` (optional): only the first `classes` of the C columns are classes; the others are
    a padded vocabulary's (`search/vocabulary.py`), taking no part in the loss (their logits
    count as -inf: no probability, no gradient)."""

    name = "pcg.cross_entropy"
    logits = operand_def(TensorType)
    target = operand_def(TensorType)
    PROPS: ClassVar[tuple] = (*_LossOp.PROPS, ("ignore_index", Kind.INT, True), ("classes", Kind.INT, True))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        logits, target = operands
        cls.check_reduction(attrs)
        check_indices(cls, target, "target")
        if logits.rank != 2 or target.shape != logits.shape[:1]:
            raise op_error(
                cls, f"logits {list(logits.shape)} and target {list(target.shape)} should be [N, C], [N]"
            )
        classes = attrs.get("classes")
        if classes is not None and not 0 < classes <= logits.shape[1]:
            raise op_error(cls, f"classes {classes} should be in 1..{logits.shape[1]} (the logits' columns)")
        b = form_builder(cls, ["logits", "target"], operands)
        rows = b.shared_dim("n", [(0, 0), (1, 0)])
        vocabulary = b.shared_dim("v", [(0, 1)])
        form = b.build([([], [rows, vocabulary])])
        return form, [result_type(form, 0, (), float_dtype(cls, logits))]


@op_definition
class MseLossOp(_LossOp):
    """Mean (or summed) squared error of two tensors of one shape; every dim may shard."""

    name = "pcg.mse_loss"
    input = operand_def(TensorType)
    target = operand_def(TensorType)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, target = operands
        cls.check_reduction(attrs)
        if x.shape != target.shape or x.element_type != target.element_type:
            raise op_error(cls, f"input {x} and target {target} must have one shape and type")
        b = form_builder(cls, ["input", "target"], operands)
        sums = [b.shared_dim(f"d{i}", [(0, i), (1, i)]) for i in range(x.rank)]
        form = b.build([([], sums)])
        return form, [result_type(form, 0, (), float_dtype(cls, x))]
