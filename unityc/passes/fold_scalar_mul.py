"""fold-scalar-mul: fold chains of constant scalings, a hand-written rewrite pass.

    scalar_mul(scalar_mul(x, a), b)  ->  scalar_mul(x, a * b)     (the inner one has no other use)
    scalar_mul(x, 1.0)               ->  x

This is the other way to extend unityc (besides a `.rules` file for `apply-rules`): plain xDSL
`RewritePattern`s, walked to a fixpoint by `PatternRewriteWalker`, registered as a pass in
`unityc/tools/opt.py`. Scaling is linear, so both folds hold for every parallel type (partial
sums included) and keep the result type; a folded op keeps the outer op's machine view.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from unityc.dialects import pcg
from unityc.dialects.pcg.elementwise import UnaryOp
from unityc.dialects.plan import carry_plan


class FoldNestedScalarMul(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: UnaryOp, rewriter: PatternRewriter) -> None:
        # ScalarMulOp is built by a factory (a value, not a type to annotate with): match its family
        inner = op.input.owner
        if (
            not isinstance(op, pcg.ScalarMulOp)
            or not isinstance(inner, pcg.ScalarMulOp)
            or not inner.output.has_one_use()
        ):
            return
        scale = inner.attrs()["scale"] * op.attrs()["scale"]
        folded = pcg.ScalarMulOp.build_inferred([inner.input], scale=scale)
        if folded.output.type != op.output.type:
            return
        carry_plan(op, folded)  # its stage, recompute, and its view where the task space is the same
        rewriter.replace(op, folded)
        rewriter.erase(inner)


class DropUnitScale(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: UnaryOp, rewriter: PatternRewriter) -> None:
        if (
            not isinstance(op, pcg.ScalarMulOp)
            or op.attrs()["scale"] != 1.0
            or op.input.type != op.output.type
        ):
            return
        rewriter.replace(op, [], [op.input])


@dataclass(frozen=True)
class FoldScalarMulPass(ModulePass):
    name = "fold-scalar-mul"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns = GreedyRewritePatternApplier([FoldNestedScalarMul(), DropUnitScale()])
        PatternRewriteWalker(patterns).rewrite_module(op)
