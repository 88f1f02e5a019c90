// A pipelined plan (`stage` on every op, `unityc.schedule` and `unityc.microbatches` on the
// graph function) becomes one function per stage, written for one micro-batch (here 2 of the
// batch's 4 rows: the loss divides by 2), and a PIPELINE that torch.distributed.pipelining runs:
// what crosses from stage 0 to stage 1 is stage 0's result and stage 1's argument.

// RUN: unityc-opt %S/Inputs/tiny_pipeline_plan.mlir -t torch | filecheck %s

// PLAN holds the whole batch: each rank loads its pieces of all 4 rows.
// CHECK:      PLAN = rt.Plan(
// CHECK:          samples=4,
// CHECK:          "input1": Layout((4, 4), "float32", shard=(1, 1), pieces={0: (0, 0, 0, 0)}),
// CHECK:          "labels": Layout((4,), "int64", shard=(1,), pieces={1: (0, 0, 0)}),
// CHECK:      PIPELINE = rt.Pipeline('1f1b', 2, ((0,), (1,)))

// CHECK:      def stage_0(ctx: rt.Context, w: dict[str, torch.Tensor], x: dict[str, torch.Tensor]) -> tuple:
// CHECK-NEXT:     """Stage 0 on ranks 0, one micro-batch; returns what the next stage receives."""
// CHECK:          x1 = x.get("input1")  # 2x4xf32 on rank 0
// CHECK:          t1 = F.linear(a, w2) if rank == 0 else None
// CHECK-NEXT:     return (t1,)

// CHECK:      def stage_1(ctx: rt.Context, w: dict[str, torch.Tensor], x: dict[str, torch.Tensor], t1) -> tuple:
// CHECK-NEXT:     """Stage 1 on ranks 1, one micro-batch; returns the outputs, the loss first."""
// CHECK:          sum_1 = t1 + t2 if rank == 1 else None
// CHECK:          loss = rt.kernels.cross_entropy(sum_1, labels, 2) if rank == 1 else None
// CHECK-NEXT:     return (loss, sum_1)

// CHECK:      PROGRAM = rt.Pipelined(PIPELINE, (stage_0, stage_1))
// CHECK:          sys.exit(rt.main(PLAN, PROGRAM, build=build_reference))

// A stage that communicates between its ranks (here tensor parallel: its input broadcast to
// both ranks of its group) runs its collectives in the stage's code, on the group's process group
// (in PLAN's groups: every rank creates it).
// RUN: unityc-opt %S/Inputs/pipeline_tensor_parallel.mlir -t torch | filecheck %s --check-prefix=TP
// TP:      groups=((0, 1),),
// TP:      PIPELINE = rt.Pipeline('gpipe', 2, ((0, 1), (2, 3)))
// TP:      def stage_0(
// TP:          x1r = ctx.parallel(x1, (Collective("broadcast", ins=(0,), outs=(0, 1), shape=(2, 4)),), grad=False)
// TP-NEXT:     w1 = w.get("tower1.0.weight")  # 8x4xf32, shard [2, 1] on ranks 0, 1
// TP:          h = F.linear(x1r, w1) if rank in (0, 1) else None
// TP-NEXT:     return (h,)
// TP:      def stage_1(ctx: rt.Context, w: dict[str, torch.Tensor], x: dict[str, torch.Tensor], h) -> tuple:
// TP:          l = h.sum(dim=(0, 1)) / 16 if rank in (2, 3) else None

// Recomputation inside stages: a run of recompute ops across the stage boundary (stage 0's last
// linear, stage 1's first linear and relu) is one `torch.utils.checkpoint` region per stage, the
// one of stage 0 ending with what it sends.
// RUN: sed -e 's/= pcg.linear %a, %w2 {stage/= pcg.linear %a, %w2 {recompute, stage/' -e 's/%g = pcg.linear %x2, %v1 {stage/%g = pcg.linear %x2, %v1 {recompute, stage/' -e 's/%b = pcg.relu %g {stage/%b = pcg.relu %g {recompute, stage/' %S/Inputs/tiny_pipeline_plan.mlir > %t.recompute.mlir
// RUN: unityc-opt %t.recompute.mlir -t torch | filecheck %s --check-prefix=RECOMPUTE
// RECOMPUTE:      from torch.utils.checkpoint import checkpoint
// RECOMPUTE:      def stage_0(
// RECOMPUTE:          def _recompute_1(a):
// RECOMPUTE:              t1 = F.linear(a, w2) if rank == 0 else None
// RECOMPUTE:          t1, = checkpoint(_recompute_1, a, use_reentrant=False)
// RECOMPUTE-NEXT:     return (t1,)
// RECOMPUTE:      def stage_1(
// RECOMPUTE:          def _recompute_1():
// RECOMPUTE:              b = F.relu(g) if rank == 1 else None
// RECOMPUTE-NEXT:         return (b,)
// RECOMPUTE-NEXT:     b, = checkpoint(_recompute_1, use_reentrant=False)
