"""Identities of the parallel dialect: inverse pairs cancel, repeated ops merge."""

from __future__ import annotations

from typing import Any

from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from unityc.dialects import parallel


def _producer(value: SSAValue, kind: type[parallel.ParallelOp]) -> Any:
    owner = value.owner
    return owner if isinstance(owner, kind) else None


class _Cancel(RewritePattern):
    """op(inverse(x)) = x when both act on the same dim with the same degree."""

    OP: type[parallel.ParallelOp]
    INVERSE: type[parallel.ParallelOp]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, self.OP):
            return
        inner = _producer(op.input, self.INVERSE)
        if inner is None or inner.attrs() != op.attrs():
            return
        rewriter.replace(op, [], [inner.input])


class _Merge(RewritePattern):
    """op(op(x, n), m) = op(x, n*m) on the same dim: sub-indices nest row-major."""

    OP: type[parallel.ParallelOp]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, self.OP):
            return
        inner = _producer(op.input, self.OP)
        outer_attrs, inner_attrs = op.attrs(), inner.attrs() if inner else None
        if inner is None or outer_attrs.get("dim") != inner_attrs.get("dim"):
            return
        degree = outer_attrs["degree"] * inner_attrs["degree"]
        merged = self.OP.build_inferred([inner.input], **{**outer_attrs, "degree": degree})
        if "view" in op.attributes:  # same result type, so the outer op's placement still fits
            merged.attributes["view"] = op.attributes["view"]
        rewriter.replace(op, merged)


class InverseOfPartition(_Cancel):
    OP, INVERSE = parallel.CombineOp, parallel.PartitionOp


class InverseOfCombine(_Cancel):
    OP, INVERSE = parallel.PartitionOp, parallel.CombineOp


class InverseOfPipeline(_Cancel):
    OP, INVERSE = parallel.BatchOp, parallel.PipelineOp


class InverseOfBatch(_Cancel):
    OP, INVERSE = parallel.PipelineOp, parallel.BatchOp


class MergePartitions(_Merge):
    OP = parallel.PartitionOp


class MergeCombines(_Merge):
    OP = parallel.CombineOp


class MergeReplicates(_Merge):
    OP = parallel.ReplicateOp


class MergeReduces(_Merge):
    OP = parallel.ReduceOp
