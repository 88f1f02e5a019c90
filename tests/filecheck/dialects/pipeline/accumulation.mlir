// RUN: unityc-opt %s --split-input-file | filecheck %s
// RUN: unityc-opt %s --split-input-file --print-op-generic | unityc-opt --split-input-file | filecheck %s

// The interpreter runs the 4 micro-batches of Inputs/accumulated_plan.mlir (examples/mlp.mlir
// data parallel on 2 devices, 16 rows: 2 rows per piece per micro-batch): the loss is their
// mean, exactly the value of the same plan without accumulation.
// RUN: unityc-run %S/Inputs/accumulated_plan.mlir > %t.acc
// RUN: sed 's/ attributes {unityc.accumulation = 4 : i64}//' %S/Inputs/accumulated_plan.mlir > %t.plain.mlir
// RUN: unityc-run %t.plain.mlir > %t.plain
// RUN: diff %t.acc %t.plain
// RUN: filecheck %s --check-prefix=INTERP < %t.acc
// RUN: not grep accumulation %t.plain.mlir
// INTERP: output 0: !pcg.tensor<f32>  shape []

// Gradient accumulation, `unityc.accumulation = k : i64` on the graph function (any plan,
// pipelined or not): the batch runs as k micro-batches one after another, their gradients
// summed, one gradient sync and update. A pipelined plan runs its schedule k times.

// CHECK: func.func @main() -> !pcg.tensor<f32> attributes {unityc.accumulation = 4 : i64} {
func.func @main() -> !pcg.tensor<f32> attributes {unityc.accumulation = 4 : i64} {
  %x = pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x4xf32, shard [2, 1]>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x4xf32, shard [2, 1]> -> !pcg.tensor<f32, sum 2>
  %r = parallel.reduce %l degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<f32, sum 2> -> !pcg.tensor<f32>
  func.return %r : !pcg.tensor<f32>
}

// -----

// CHECK: func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64, unityc.accumulation = 2 : i64} {
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64, unityc.accumulation = 2 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 0 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
