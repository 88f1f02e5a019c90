"""fuse-collectives: rewrite pairs of parallel ops into the collective that does both at once.

reduce n → replicate n          = all_reduce n
reduce n → partition d, n       = reduce_scatter d, n
combine d, n → replicate n      = all_gather d, n
combine a, n → partition b, n   = all_to_all a → b, n     (a ≠ b)

The pair fuses only when the first op's result has no other use, so no value is lost. The rule
is `dialects/identities.fusion` (the search fuses its `Graph` by it too); this pass applies it to
any module (several functions, other dialects' ops), which is why it walks the xDSL ops.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from unityc.dialects import parallel
from unityc.dialects.identities import fusion
from unityc.dialects.plan import carry_plan

_OPS = {cls.name: cls for cls in parallel.ALL_OPS}


class FusePair(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, parallel.ParallelOp) or len(op.operands) != 1:
            return
        first = op.operands[0].owner
        if not isinstance(first, parallel.ParallelOp) or len(first.operands) != 1:
            return
        if not first.results[0].has_one_use():
            return
        fused = fusion(first.name, first.attrs(), op.name, op.attrs())
        if fused is None:
            return
        name, attrs = fused
        new = _OPS[name].build_inferred([first.operands[0]], **attrs)
        carry_plan(op, new)  # its stage, recompute, and its view where the task space is the same
        rewriter.replace(op, new)
        rewriter.erase(first)


@dataclass(frozen=True)
class FuseCollectivesPass(ModulePass):
    name = "fuse-collectives"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FusePair()])).rewrite_module(op)
