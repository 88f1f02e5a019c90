"""What one attention task keeps for backward besides its operands, for the kernel the program
runs (`AttentionOp.kernel`): the arguments `memory.attention_saved_bytes` and
`memory.attention_core_saved_bytes` take, read off one task's pieces, and the context-parallel
attention's (`memory.context_attention_saved_bytes`). Read by `steps.py` and the search's op
costs (`search/opcost.py`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from xdsl.dialects.builtin import bf16

from unityc.cost.memory import (
    attention_core_saved_bytes,
    attention_saved_bytes,
    context_attention_saved_bytes,
    probability_bytes,
)
from unityc.cost.pricing import piece
from unityc.dialects.pcg import AttentionOp
from unityc.dialects.pcg_types import TensorType


def attention_task_bytes(
    attrs: Mapping[str, Any], types: Sequence[TensorType | None], result: TensorType
) -> int:
    """What one attention task keeps besides its operands (see `memory.attention_saved_bytes`),
    for the kernel the program runs (`AttentionOp.kernel`)."""
    args = _attention_args(attrs, types, result)
    if args is None:  # fused block kernels: no probabilities
        return _context_task_bytes(attrs, types, result)
    return attention_saved_bytes(*args)


def attention_core_task_bytes(
    attrs: Mapping[str, Any], types: Sequence[TensorType | None], result: TensorType
) -> int:
    """Of `attention_task_bytes`, what only the core keeps (`memory.attention_core_saved_bytes`):
    what selective recomputation of the core (`backward.core_recomputed`) does not keep; 0 for
    a context-parallel attention (it recomputes whole)."""
    args = _attention_args(attrs, types, result)
    if args is None:
        return 0
    return attention_core_saved_bytes(*args)


def _context_task_bytes(
    attrs: Mapping[str, Any], types: Sequence[TensorType | None], result: TensorType
) -> int:
    operands = [piece(t) for t in types]
    out = piece(result)
    assert out is not None and operands[0] is not None and operands[3] is not None and operands[4] is not None
    batch, sq, e = operands[0].shape
    eh = operands[3].shape[0]
    heads, element_bytes = attrs["heads"] * eh // e, out.nbytes // max(out.numel, 1)
    return context_attention_saved_bytes(batch, sq, eh, operands[4].shape[0], heads, element_bytes)


def _attention_args(
    attrs: Mapping[str, Any], types: Sequence[TensorType | None], result: TensorType
) -> tuple[int, int, int, int, int, int, str, int, int, int] | None:
    """The arguments of `memory.attention_saved_bytes` for one task (batch, sq, sk, eh, heads,
    element bytes, kernel, ekv, mask elements built, probability bytes); None for a
    context-parallel attention."""
    operands = [piece(t) for t in types]
    out = piece(result)
    assert out is not None and operands[0] is not None and operands[1] is not None and operands[3] is not None
    if AttentionOp.context_split(attrs, types) is not None:
        return None
    batch, sq, e = operands[0].shape
    sk = operands[1].shape[1]
    eh = operands[3].shape[0]
    heads, element_bytes = attrs["heads"] * eh // e, out.nbytes // max(out.numel, 1)
    wk = operands[4]
    kernel = AttentionOp.kernel(attrs)
    mask = operands[11] if len(operands) > 11 else None
    built = 0  # `runtime.kernels._sdpa`: is_causal only unsharded, without another mask
    if kernel == "math":  # `_math_attention`: the causal [Sq, Sk] bool mask its masked_fill keeps
        built = sq * sk if attrs.get("causal") else 0
    elif attrs.get("causal") and (mask is not None or sq != sk):
        built = math.prod(mask.shape[:2]) * sq * sk if mask is not None else sq * sk
    elif mask is not None and mask.nbytes // max(mask.numel, 1) != element_bytes:
        built = mask.numel  # autocast's copy of the float mask
    dropout = attrs.get("dropout") or 0.0
    probs_bytes = probability_bytes(element_bytes, result.element_type == bf16, dropout > 0)
    ekv = wk.shape[0] if wk is not None else eh
    return batch, sq, sk, eh, heads, element_bytes, kernel, ekv, built, probs_bytes


__all__ = ["attention_core_task_bytes", "attention_task_bytes"]
