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

// A stage that needs communication between its ranks (here tensor parallel) is refused, located.
// RUN: not unityc-opt %S/Inputs/pipeline_tensor_parallel.mlir -t torch 2>&1 | filecheck %s --check-prefix=TP
// TP-NOT: Traceback
// TP: pipeline_tensor_parallel.mlir:6:5: error: parallel.replicate of stage 0 needs a collective: -t torch runs each pipeline stage without communication between its ranks (data parallelism inside a stage: each task reads the pieces its own pipeline brings)
