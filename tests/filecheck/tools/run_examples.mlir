// unityc-run runs a graph in the reference interpreter on seeded random inputs
// and weights (keyed by name) and prints a checksum of each output's logical
// value. The tensor-parallel MLP plan and the plain MLP see the same inputs and
// weights, so they print the same loss, for any seed.

// RUN: unityc-run %examples/mlp.mlir | filecheck %s
// RUN: unityc-run %examples/mlp_tensor_parallel.mlir | filecheck %s
// CHECK:      {{^}}output 0: !pcg.tensor<f32>  shape []  sum=2.44303 abs=2.44303{{$}}
// CHECK-NOT:  output 1

// Another seed, in float64: whatever the values, the two outputs are equal.
// RUN: unityc-run %examples/mlp.mlir --seed 7 --float64 > %t.serial
// RUN: unityc-run %examples/mlp_tensor_parallel.mlir --seed 7 --float64 > %t.parallel
// RUN: diff %t.serial %t.parallel
// RUN: filecheck %s --check-prefix=ANY --input-file %t.parallel
// ANY: {{^}}output 0: !pcg.tensor<f32>  shape []  sum=[[SUM:[0-9.e+-]+]] abs=[[SUM]]{{$}}

// Both examples are valid IR whose printed form parses back to itself.
// RUN: unityc-opt %examples/mlp.mlir > %t.mlp1.mlir
// RUN: unityc-opt %t.mlp1.mlir > %t.mlp2.mlir
// RUN: diff %t.mlp1.mlir %t.mlp2.mlir
// RUN: filecheck %s --check-prefix=MLP --input-file %t.mlp1.mlir
// MLP: func.func @main() -> !pcg.tensor<f32> {
// MLP: %loss = pcg.cross_entropy %logits, %label reduction "mean" : !pcg.tensor<16x10xf32>, !pcg.tensor<16xi64> -> !pcg.tensor<f32>
// RUN: unityc-opt %examples/mlp_tensor_parallel.mlir > %t.tp1.mlir
// RUN: unityc-opt %t.tp1.mlir > %t.tp2.mlir
// RUN: diff %t.tp1.mlir %t.tp2.mlir
// RUN: filecheck %s --check-prefix=TP --input-file %t.tp1.mlir
// TP: %partial = pcg.linear %a, %w2 bias %b2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x64xf32, shard [1, 2]>, !pcg.tensor<10x64xf32, shard [1, 2]>, !pcg.tensor<10xf32, copy 2> -> !pcg.tensor<16x10xf32, sum 2>
// TP: %logits = parallel.reduce %partial degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<16x10xf32, sum 2> -> !pcg.tensor<16x10xf32>
