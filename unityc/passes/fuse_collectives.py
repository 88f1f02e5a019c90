"""fuse-collectives: rewrite pairs of parallel ops into the collective that does both at once.

reduce n → replicate n          = all_reduce n
reduce n → partition d, n       = reduce_scatter d, n
combine d, n → replicate n      = all_gather d, n
combine a, n → partition b, n   = all_to_all a → b, n     (a ≠ b)

The pair fuses only when the first op's result has no other use, so no value is lost.
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


class FusePair(RewritePattern):
    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, parallel.ReplicateOp | parallel.PartitionOp):
            return
        first = op.input.owner
        if not isinstance(first, parallel.ReduceOp | parallel.CombineOp) or not first.output.has_one_use():
            return
        a, b = first.attrs(), op.attrs()
        if a["degree"] != b["degree"]:
            return
        fused = _fused(first, op, a, b)
        if fused is not None:
            if "view" in op.attributes:  # same result, same task space: the placement carries over
                fused.attributes["view"] = op.attributes["view"]
            rewriter.replace(op, fused)
            rewriter.erase(first)


def _fused(first: Operation, second: Operation, a: dict, b: dict) -> Operation | None:
    x, n = first.input, a["degree"]
    match first, second:
        case parallel.ReduceOp(), parallel.ReplicateOp():
            return parallel.AllReduceOp.build_inferred([x], degree=n)
        case parallel.ReduceOp(), parallel.PartitionOp():
            return parallel.ReduceScatterOp.build_inferred([x], dim=b["dim"], degree=n)
        case parallel.CombineOp(), parallel.ReplicateOp():
            return parallel.AllGatherOp.build_inferred([x], dim=a["dim"], degree=n)
        case parallel.CombineOp(), parallel.PartitionOp() if a["dim"] != b["dim"]:
            return parallel.AllToAllOp.build_inferred([x], src=a["dim"], dst=b["dim"], degree=n)
    return None


@dataclass(frozen=True)
class FuseCollectivesPass(ModulePass):
    name = "fuse-collectives"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([FusePair()])).rewrite_module(op)
