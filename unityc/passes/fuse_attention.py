"""fuse-attention: recognize multi-head attention written as separate ops and make it one
`pcg.attention`, so that head parallelism is available as a rewrite of a single op.

The recognized form (what HF BERT's eager attention, the zoo's BERT and SDPA import to):

    q = transpose(reshape(linear(xq, wq, bq), [B, Sq, H, D]), [0, 2, 1, 3])
    k = transpose(reshape(linear(xk, wk, bk), [B, Sk, H, D]), [0, 2, 3, 1])
    v = transpose(reshape(linear(xv, wv, bv), [B, Sk, H, D]), [0, 2, 1, 3])
    p = softmax(scalar_mul(batch_matmul(q, k), 1/sqrt(D)) [+ mask], -1) [-> dropout]
    out = linear(reshape(transpose(batch_matmul(p, v), [0, 2, 1, 3]), [B, Sq, H·D]), wo, bo)

Every intermediate must have this one use, so nothing else observes what disappears.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.transforms.dead_code_elimination import region_dce

from unityc.dialects import pcg
from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType


def _only_use(value: SSAValue, cls: type[Operation] | tuple[type[Operation], ...]) -> Any:
    """The op of kind `cls` producing `value`, if `value` has no other use."""
    owner = value.owner
    return owner if isinstance(owner, cls) and value.has_one_use() else None


def _perm(op: Any) -> list[int]:
    return list(op.attrs()["perm"])


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return value.type.shape


@dataclass
class _Projection:
    x: SSAValue
    weight: SSAValue
    bias: SSAValue | None
    heads: int
    width: int


def _heads_of(value: SSAValue, perm: list[int]) -> _Projection | None:
    """Matches transpose(reshape(linear(x, w, b), [B, S, H, D]), perm)."""
    t = _only_use(value, pcg.TransposeOp)
    if t is None or _perm(t) != perm:
        return None
    r = _only_use(t.input, pcg.ReshapeOp)
    if r is None:
        return None
    proj = _only_use(r.input, pcg.LinearOp)
    shape = _shape(r.output)
    if proj is None or len(shape) != 4 or shape[:2] != _shape(proj.output)[:2]:
        return None
    return _Projection(proj.input, proj.weight, proj.bias, shape[2], shape[3])


def _probabilities(value: SSAValue) -> tuple[SSAValue, float | None] | None:
    """Matches [dropout](softmax(s, -1)); returns s and the dropout probability."""
    dropout = None
    d = _only_use(value, pcg.DropoutOp)
    if d is not None:
        dropout, value = d.attrs()["p"], d.input
    s = _only_use(value, pcg.SoftmaxOp)
    if s is None or s.attrs()["dim"] % 4 != 3:
        return None
    return s.input, dropout


def _scores(value: SSAValue) -> tuple[Any, SSAValue | None] | None:
    """Matches scalar_mul(batch_matmul(q, k), c) [+ mask]; returns the product op and the mask."""
    mask = None
    add = _only_use(value, pcg.AddOp)
    if add is not None:
        for scaled, other in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
            if _only_use(scaled, pcg.ScalarMulOp) is not None:
                value, mask = scaled, other
                break
        else:
            return None
    mul = _only_use(value, pcg.ScalarMulOp)
    product = _only_use(mul.input, pcg.BatchMatmulOp) if mul is not None else None
    if product is None:
        return None
    return (product, mul.attrs()["scale"]), mask


class FuseAttention(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, pcg.LinearOp):
            return
        fused = _fuse(op)
        if fused is not None:
            fused[-1].results[0].name_hint = "attention"
            rewriter.replace(op, fused)


def _fuse(out: pcg.LinearOp) -> list[Operation] | None:
    """The ops replacing `out` (a mask reshape, if needed, and the attention), or None."""
    flat = _only_use(out.input, pcg.ReshapeOp)
    merged = _only_use(flat.input, pcg.TransposeOp) if flat is not None else None
    if merged is None or _perm(merged) != [0, 2, 1, 3]:
        return None
    context = _only_use(merged.input, pcg.BatchMatmulOp)
    if context is None or len(_shape(context.output)) != 4:
        return None
    probs = _probabilities(context.lhs)
    value = _heads_of(context.rhs, [0, 2, 1, 3])
    if probs is None or value is None:
        return None
    scores, dropout = probs
    matched = _scores(scores)
    if matched is None:
        return None
    (product, scale), mask = matched
    query = _heads_of(product.lhs, [0, 2, 1, 3])
    key = _heads_of(product.rhs, [0, 2, 3, 1])
    if query is None or key is None:
        return None
    heads, width = query.heads, query.width
    if (key.heads, key.width, value.heads, value.width) != (heads, width, heads, width):
        return None
    if not math.isclose(scale, 1.0 / math.sqrt(width), rel_tol=1e-6):
        return None
    new_ops: list[Operation] = []
    if mask is not None and len(_shape(mask)) < 4:  # e.g. a causal [Sq, Sk] mask
        try:
            shaped = pcg.ReshapeOp.build_inferred(
                [mask], shape=[1] * (4 - len(_shape(mask))) + list(_shape(mask))
            )
        except FormError:
            return None
        shaped.output.name_hint = "mask"
        new_ops.append(shaped)
        mask = shaped.output
    operands = [query.x, key.x, value.x, query.weight, key.weight, value.weight, out.weight]
    operands += [query.bias, key.bias, value.bias, out.bias, mask]
    try:
        fused = pcg.AttentionOp.build_inferred(operands, heads=heads, dropout=dropout or None)
    except FormError:
        return None  # e.g. a mask of a shape the op does not take
    if fused.output.type != out.output.type:
        return None
    return [*new_ops, fused]


@dataclass(frozen=True)
class FuseAttentionPass(ModulePass):
    """Fuses multi-head attention subgraphs into `pcg.attention`."""

    name = "fuse-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseAttention()).rewrite_module(op)
        region_dce(op.body)
