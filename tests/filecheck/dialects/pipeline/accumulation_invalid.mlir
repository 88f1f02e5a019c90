// RUN: unityc-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Gradient accumulation is checked as micro-batching is (the same code): each error is
// located at the graph function or the input at fault.

// k divides the rows of every input's pieces: 8 rows in 2 pieces do not split into 8.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.accumulation = 8 : i64} {
  %x = pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x4xf32, shard [2, 1]>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x4xf32, shard [2, 1]> -> !pcg.tensor<f32, sum 2>
  %r = parallel.reduce %l degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<f32, sum 2> -> !pcg.tensor<f32>
  func.return %r : !pcg.tensor<f32>
}
// CHECK: accumulation_invalid.mlir:[[# @LINE - 5]]:3: error: 8 micro-batches do not divide the batch of input 'x': its pieces hold 4 rows of dim 0 (8 in 2 shards)

// -----

// In a pipelined plan, k x M micro-batches: 2 x 4 do not divide 4 rows.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 4 : i64, unityc.accumulation = 2 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<4x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 0 : i64} : !pcg.tensor<4x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: accumulation_invalid.mlir:[[# @LINE - 4]]:3: error: 8 micro-batches do not divide the batch of input 'x': its pieces hold 4 rows of dim 0 (4 in 1 shards)

// -----

// Micro-batches split dim 0 of every input: a scalar input has none.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.accumulation = 2 : i64} {
  %x = pcg.input key "x" : !pcg.tensor<f32>
  func.return %x : !pcg.tensor<f32>
}
// CHECK: accumulation_invalid.mlir:[[# @LINE - 3]]:3: error: input 'x' is a scalar: micro-batches split dim 0 of every input

// -----

// At least one step.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.accumulation = 0 : i64} {
  %x = pcg.input key "x" : !pcg.tensor<4xf32>
  %l = pcg.reduce %x kind "mean" dims [0] : !pcg.tensor<4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: accumulation_invalid.mlir:[[# @LINE - 5]]:1: error: unityc.accumulation must be at least 1, got 0

// -----

// An i64.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.accumulation = "2"} {
  %x = pcg.input key "x" : !pcg.tensor<4xf32>
  %l = pcg.reduce %x kind "mean" dims [0] : !pcg.tensor<4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: accumulation_invalid.mlir:[[# @LINE - 5]]:1: error: 'unityc.accumulation' must be an integer (unityc.accumulation = N : i64), got "2"
