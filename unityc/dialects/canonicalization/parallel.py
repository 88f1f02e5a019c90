"""Identities of the parallel dialect as canonicalization patterns: inverse pairs cancel,
repeated ops merge. The rules are `dialects/identities.py`'s (which the search applies to its
`Graph` too); canonicalization applies the ones that keep each op's degree: an inverse pair by
different degrees stays."""

from __future__ import annotations

from xdsl.ir import Operation
from xdsl.pattern_rewriter import PatternRewriter, RewritePattern

from unityc.dialects import parallel
from unityc.dialects.identities import Kind, identity
from unityc.dialects.plan import carry_plan


class _Identity(RewritePattern):
    """`op(inner(x))` by the identity of kind KIND, for ops of class OP."""

    OP: type[parallel.ParallelOp]
    KIND: Kind

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, self.OP):
            return
        inner = op.input.owner
        if not isinstance(inner, parallel.ParallelOp):
            return
        found = identity(op.name, op.attrs(), inner.name, inner.attrs())
        if found is None or found.kind is not self.KIND:
            return
        if found.kind is Kind.CANCEL:
            rewriter.replace(op, [], [inner.input])
            return
        merged = self.OP.build_inferred([inner.input], **{**op.attrs(), **found.attrs})
        carry_plan(op, merged)  # its stage, recompute, and its view where the task space is the same
        rewriter.replace(op, merged)


class InverseOfPartition(_Identity):
    OP, KIND = parallel.CombineOp, Kind.CANCEL


class InverseOfCombine(_Identity):
    OP, KIND = parallel.PartitionOp, Kind.CANCEL


class InverseOfPipeline(_Identity):
    OP, KIND = parallel.BatchOp, Kind.CANCEL


class InverseOfBatch(_Identity):
    OP, KIND = parallel.PipelineOp, Kind.CANCEL


class MergePartitions(_Identity):
    OP, KIND = parallel.PartitionOp, Kind.MERGE


class MergeCombines(_Identity):
    OP, KIND = parallel.CombineOp, Kind.MERGE


class MergeReplicates(_Identity):
    OP, KIND = parallel.ReplicateOp, Kind.MERGE


class MergeReduces(_Identity):
    OP, KIND = parallel.ReduceOp, Kind.MERGE
