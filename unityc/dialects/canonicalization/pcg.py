"""Identities of pcg shape ops: the reshape/transpose plumbing torch.export leaves behind folds
away, and a batch matmul over flattened batch dims keeps them (so attention stays recognizable)."""

from __future__ import annotations

import math
from typing import Any

from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from unityc.dialects import pcg
from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import carry_plan


def _type(v: SSAValue) -> TensorType:
    assert isinstance(v.type, TensorType)
    return v.type


def _replace_if_same_type(
    rewriter: PatternRewriter, op: Operation, cls: Any, x: SSAValue, **attrs: Any
) -> None:
    """Replaces `op` by `cls(x, **attrs)` when the result type is unchanged."""
    try:
        new = cls.build_inferred([x], **attrs)
    except FormError:
        return  # the shorter chain would not carry these degrees
    if new.results[0].type == op.results[0].type:
        carry_plan(op, new)  # its stage, recompute, and its view where the task space is the same
        rewriter.replace(op, new)


class FoldReshape(RewritePattern):
    """reshape(x) = x when shapes agree; reshape(reshape(x)) = reshape(x)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, pcg.ReshapeOp):
            return
        if op.input.type == op.output.type:
            rewriter.replace(op, [], [op.input])
            return
        inner = op.input.owner
        if isinstance(inner, pcg.ReshapeOp) and inner.input.type == op.output.type:
            rewriter.replace(op, [], [inner.input])  # reshaped there and back
        elif isinstance(inner, pcg.ReshapeOp):
            _replace_if_same_type(
                rewriter, op, pcg.ReshapeOp, inner.input, shape=list(_type(op.output).shape)
            )


class FoldTranspose(RewritePattern):
    """transpose(x, identity) = x; transpose(transpose(x, p), q) = transpose(x, p∘q)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, pcg.TransposeOp):
            return
        perm = list(op.attrs()["perm"])
        if perm == sorted(perm):
            rewriter.replace(op, [], [op.input])
            return
        inner = op.input.owner
        if not isinstance(inner, pcg.TransposeOp):
            return
        first = list(inner.attrs()["perm"])
        composed = [first[p] for p in perm]
        if composed == sorted(composed) and inner.input.type == op.output.type:
            rewriter.replace(op, [], [inner.input])
            return
        _replace_if_same_type(rewriter, op, pcg.TransposeOp, inner.input, perm=composed)


class UnflattenBatchMatmul(RewritePattern):
    """bmm(reshape(a, [B·H, m, k]), reshape(b, [B·H, k, n])) = reshape(bmm(a, b), [B·H, m, n])
    for a [B, H, m, k] and b [B, H, k, n]: what torch.matmul on 4-D tensors exports to."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, pcg.BatchMatmulOp):
            return
        lhs, rhs = op.lhs.owner, op.rhs.owner
        if not (isinstance(lhs, pcg.ReshapeOp) and isinstance(rhs, pcg.ReshapeOp)):
            return
        a, b = _type(lhs.input), _type(rhs.input)
        if a.rank != b.rank or a.rank <= _type(op.lhs).rank or a.shape[:-2] != b.shape[:-2]:
            return
        if not all(_unsharded(t) for t in (a, b, _type(op.lhs), _type(op.rhs))):
            return
        batch = math.prod(a.shape[:-2])
        if _type(op.lhs).shape != (batch, *a.shape[-2:]) or _type(op.rhs).shape != (batch, *b.shape[-2:]):
            return
        product = pcg.BatchMatmulOp.build_inferred([lhs.input, rhs.input])
        flat = pcg.ReshapeOp.build_inferred([product.output], shape=list(_type(op.output).shape))
        carry_plan(op, product, flat)
        rewriter.replace(op, [product, flat])


def _unsharded(t: TensorType) -> bool:
    return t.num_pieces == 1
