// RUN: unityc-opt %s | filecheck %s
// RUN: %roundtrip-generic
// RUN: unityc-opt %s -p apply-rules | filecheck %s --check-prefix=KEPT
// RUN: unityc-run %s | filecheck %s --check-prefix=VALUES
// RUN: unityc-run %examples/mlp.mlir | filecheck %s --check-prefix=VALUES

// A per-op plan holds, beside the machine view, two more properties in the op's attribute
// dictionary:
// * `zero = 1|2|3 : i64` on a pcg.weight held in n >= 2 copies: sharded data parallelism across
//   the copies (1: optimizer state sharded, 2: + gradients reduce-scattered, 3: + the weight
//   stored sharded, all-gathered before use in forward and in backward);
// * `recompute` (a unit attribute) on any op: its saved activations are recomputed in backward.
// Neither changes the math: the interpreter computes the same loss as the plain graph
// (examples/mlp.mlir, unparallelized: VALUES), and graph conversion keeps both (KEPT).

// CHECK:      %w1 = pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 3 : i64} : !pcg.tensor<64x32xf32, copy 2>
// CHECK:      %b1 = pcg.weight key "fc1.bias" {view = #pcg.view<start 0, [intra 1]>, zero = 1 : i64} : !pcg.tensor<64xf32, copy 2>
// CHECK:      %1 = pcg.relu %0 {recompute, view = #pcg.view<start 0, [intra 1]>}
// CHECK:      %w2 = pcg.weight key "fc2.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 2 : i64}
// KEPT:       zero = 3 : i64
// KEPT:       zero = 1 : i64
// KEPT:       pcg.relu %{{.*}} {view = #pcg.view<start 0, [intra 1]>, recompute}
// KEPT:       zero = 2 : i64
// VALUES:     output 0: !pcg.tensor<f32>  shape []  sum=2.44303

builtin.module attributes {unityc.machine = "cpu:2"} {
  func.func @main() -> !pcg.tensor<f32> {
    %x = pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x32xf32, shard [2, 1]>
    %w1 = pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 3 : i64} : !pcg.tensor<64x32xf32, copy 2>
    %b1 = pcg.weight key "fc1.bias" {view = #pcg.view<start 0, [intra 1]>, zero = 1 : i64} : !pcg.tensor<64xf32, copy 2>
    %0 = pcg.linear %x, %w1 bias %b1 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x32xf32, shard [2, 1]>, !pcg.tensor<64x32xf32, copy 2>, !pcg.tensor<64xf32, copy 2> -> !pcg.tensor<16x64xf32, shard [2, 1]>
    %1 = pcg.relu %0 {recompute, view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x64xf32, shard [2, 1]> -> !pcg.tensor<16x64xf32, shard [2, 1]>
    %w2 = pcg.weight key "fc2.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 2 : i64} : !pcg.tensor<10x64xf32, copy 2>
    %b2 = pcg.weight key "fc2.bias" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<10xf32, copy 2>
    %2 = pcg.linear %1, %w2 bias %b2 {recompute, view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x64xf32, shard [2, 1]>, !pcg.tensor<10x64xf32, copy 2>, !pcg.tensor<10xf32, copy 2> -> !pcg.tensor<16x10xf32, shard [2, 1]>
    %label = pcg.input key "label" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16xi64, shard [2]>
    %3 = pcg.cross_entropy %2, %label reduction "mean" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x10xf32, shard [2, 1]>, !pcg.tensor<16xi64, shard [2]> -> !pcg.tensor<f32, sum 2>
    %4 = parallel.reduce %3 degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<f32, sum 2> -> !pcg.tensor<f32>
    func.return %4 : !pcg.tensor<f32>
  }
}
