// The `zero` baseline: data parallelism with every weight's copies sharded ZeRO-`stage`
// (1: optimizer state, 2: + gradients, 3: + the weights themselves, FSDP), and with
// `recompute=true` every pcg op recomputed in backward (parallel ops break the regions).
// RUN: unityc-opt %examples/mlp.mlir -p 'zero{machine="cpu:2" stage=3 recompute=true optimizer="adam"}' 2>%t.err | filecheck %s --check-prefix=Z3
// RUN: filecheck %s --check-prefix=Z3-ERR < %t.err
// RUN: unityc-opt %examples/mlp.mlir -p 'zero{machine="cpu:2" stage=1}' 2>/dev/null | filecheck %s --check-prefix=Z1
// RUN: not unityc-opt %examples/mlp.mlir -p 'zero{machine="cpu:2" stage=5}' 2>&1 | filecheck %s --check-prefix=BAD

// Z3:      %w1 = pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 3 : i64} : !pcg.tensor<64x32xf32, copy 2>
// Z3:      pcg.linear %x, %w1 bias %b1 {view = #pcg.view<start 0, [intra 1]>, recompute}
// Z3:      pcg.relu %{{.*}} {view = #pcg.view<start 0, [intra 1]>, recompute}
// Z3:      parallel.reduce %{{.*}} degree 2 {view = #pcg.view<start 0>} :
// Z3-ERR:  zero (2-way, ZeRO-3, recomputed) on cpu:2: iteration time {{.*}}, peak memory
// Z1:      %w1 = pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 1 : i64}
// Z1-NOT:  recompute
// BAD:     error: zero: stage must be 0, 1, 2 or 3, got 5

// -t torch: a ZeRO-3 weight is read through the runtime (gathered), dropped after its last
// use; a run of recompute ops is one function under torch.utils.checkpoint that reads its
// weights itself (so a ZeRO-3 weight is gathered again when the region is recomputed); the
// plan carries the ZeRO stages and the bytes the memory model predicts per rank.
// RUN: sed -e 's/"tower2.0.weight" {view = #pcg.view<start 0, \[intra 1\]>}/"tower2.0.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 3 : i64}/' -e 's/%g = pcg.linear %x2, %v1 {view/%g = pcg.linear %x2, %v1 {recompute, view/' %S/../codegen/Inputs/tiny_mlp_plan.mlir > %t.plan.mlir
// RUN: unityc-opt %t.plan.mlir -t torch | filecheck %s --check-prefix=TORCH
// TORCH:      from torch.utils.checkpoint import checkpoint
// TORCH:      zero={'tower2.0.weight': 3},
// TORCH-NEXT: memory={'sgd': {0: (416, 416, 0), 1: (416, 416, 0)}, 'adam': {0: (416, 416, 832), 1: (416, 416, 832)}},
// TORCH:      def _recompute_1():
// TORCH-NEXT:     v1 = w["tower2.0.weight"]
// TORCH-NEXT:     x2 = x["input2"]
// TORCH-NEXT:     # pcg.linear(x2, v1)
// TORCH-NEXT:     g = F.linear(x2, v1)
// TORCH-NEXT:     del v1  # ZeRO-3: gathered again in backward
// TORCH-NEXT:     return (g,)
// TORCH-NEXT: g, = checkpoint(_recompute_1, use_reentrant=False)
// TORCH-NEXT: # pcg.relu(g)
