// `-t torch` writes one SPMD training program per plan: the PLAN (machine, model spec, the
// piece each rank holds of every weight, input and output, the process groups) and a forward
// in plain torch on this rank's pieces, with the parallel ops as collectives.

// RUN: unityc-opt %S/Inputs/tiny_mlp_plan.mlir -t torch | filecheck %s

// CHECK:      from unityc.models.spec import build_reference
// CHECK:      PLAN = rt.Plan(
// CHECK-NEXT:     source='{{.*}}tiny_mlp_plan.mlir',
// CHECK-NEXT:     machine='cpu:2',
// CHECK-NEXT:     world_size=2,
// CHECK-NEXT:     model=rt.Model('mlp', 'small', batch=None, overrides=(('hidden_dims', '[8, 6]'), ('in_features', '4')), seed=0),
// CHECK-NEXT:     samples=4,
// CHECK-NEXT:     groups=((0, 1),),

// Column-parallel rows, row-parallel columns, and copies (data parallelism): rank -> piece.
// CHECK:      "tower1.0.weight": Layout((8, 4), "float32", shard=(2, 1), pieces={0: (0, 0, 0, 0), 1: (1, 0, 0, 0)}),
// CHECK-NEXT: "tower1.2.weight": Layout((6, 8), "float32", shard=(1, 2), pieces={0: (0, 0, 0, 0), 1: (0, 1, 0, 0)}),
// CHECK-NEXT: "tower2.0.weight": Layout((8, 4), "float32", shard=(1, 1), copy=2, pieces={0: (0, 0, 0, 0), 1: (0, 0, 0, 1)}),
// CHECK:      "input1": Layout((4, 4), "float32", shard=(1, 1), pieces={0: (0, 0, 0, 0)}),
// CHECK-NEXT: "input2": Layout((4, 4), "float32", shard=(2, 1), pieces={0: (0, 0, 0, 0), 1: (1, 0, 0, 0)}),
// CHECK:      outputs=(Layout((), "float32", shard=(), pieces={0: (0, 0)}), Layout((4, 6), "float32", shard=(1, 1), pieces={0: (0, 0, 0, 0)}),),

// Sources held by some ranks only are looked up with .get (None elsewhere).
// CHECK:      def forward(ctx: rt.Context, w: dict[str, torch.Tensor], x: dict[str, torch.Tensor]) -> tuple:
// CHECK:      w1 = w["tower1.0.weight"]  # 8x4xf32, shard [2, 1] on all ranks
// CHECK:      x1 = x.get("input1")  # 4x4xf32 on rank 0

// replicate is a broadcast from the input's rank; data that needs no gradient moves outside autograd.
// CHECK:      # parallel.replicate(x1) -> 4x4xf32, copy 2 on all ranks
// CHECK-NEXT: x1r = ctx.parallel(x1, (Collective("broadcast", ins=(0,), outs=(0, 1), shape=(4, 4)),), grad=False)
// CHECK-NEXT: # pcg.linear(x1r, w1) -> 4x8xf32, shard [1, 2] on all ranks
// CHECK-NEXT: h = F.linear(x1r, w1)

// Row-parallel partial sums, reduced onto rank 0; the reduce's backward is a broadcast.
// CHECK:      p = F.linear(a, w2)
// CHECK-NEXT: # parallel.reduce(p) -> 4x6xf32 on rank 0
// CHECK-NEXT: t1 = ctx.parallel(p, (Collective("reduce", ins=(0, 1), outs=(0,), shape=(4, 6)),), grad=True)

// combine is a gather of the batch shards (shape: one input piece).
// CHECK:      t2 = ctx.parallel(q, (Collective("gather", ins=(0, 1), outs=(0,), shape=(2, 6)),), grad=True)

// Ops placed on rank 0 only run there (`sum` is renamed: it would shadow a builtin).
// CHECK-NEXT: # pcg.add(t1, t2) -> 4x6xf32 on rank 0
// CHECK-NEXT: sum_1 = t1 + t2 if rank == 0 else None
// CHECK-NEXT: # pcg.cross_entropy(sum_1, labels) -> f32 on rank 0
// CHECK-NEXT: loss = rt.kernels.cross_entropy(sum_1, labels, 4) if rank == 0 else None
// CHECK-NEXT: return (loss, sum_1)
// CHECK:      if __name__ == "__main__":
// CHECK-NEXT:     sys.exit(rt.main(PLAN, forward, build=build_reference))

// The machine can be overridden on the command line.
// RUN: unityc-opt %S/Inputs/tiny_mlp_plan.mlir -t 'torch{machine="cpu:4"}' | filecheck %s --check-prefix=FOUR
// FOUR:      machine='cpu:4',
// FOUR-NEXT: world_size=4,
