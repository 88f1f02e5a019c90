// RUN: unityc-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The precision is one of fp32 and bf16-mixed, written as a string; the error is
// located at the graph function.

func.func @main() -> !pcg.tensor<f32> attributes {unityc.precision = "fp8"} {
  %x = pcg.input key "x" : !pcg.tensor<8xf32>
  %l = pcg.reduce %x kind "mean" dims [0] : !pcg.tensor<8xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: precision_invalid.mlir:[[# @LINE - 5]]:1: error: 'unityc.precision': unknown precision 'fp8' (known: fp32, bf16-mixed)

// -----

func.func @main() -> !pcg.tensor<f32> attributes {unityc.precision = 16 : i64} {
  %x = pcg.input key "x" : !pcg.tensor<8xf32>
  %l = pcg.reduce %x kind "mean" dims [0] : !pcg.tensor<8xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: precision_invalid.mlir:[[# @LINE - 5]]:1: error: 'unityc.precision' must be a string (one of fp32, bf16-mixed), got 16 : i64
