// RUN: unityc-opt %s | filecheck %s
// RUN: %roundtrip-generic
// RUN: unityc-opt %s -p 'data-parallel{machine="cpu:2"}' | filecheck %s --check-prefix=KEPT
// RUN: unityc-opt %s -p 'megatron{machine="cpu:2"}' | filecheck %s --check-prefix=KEPT
// RUN: unityc-opt %s --unity-search --machine cpu:2 --budget 2 2>/dev/null | filecheck %s --check-prefix=KEPT
// RUN: unityc-opt %s -p 'zero{machine="cpu:2" stage=2}' -t torch | filecheck %s --check-prefix=PROGRAM

// Mixed precision is the graph function's `unityc.precision`: printed, parsed,
// kept by every pass and search, and run by the generated program under autocast.

func.func @main() -> !pcg.tensor<f32> attributes {unityc.precision = "bf16-mixed"} {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %w = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32>
  %h = pcg.linear %x, %w : !pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32> -> !pcg.tensor<8x32xf32>
  %l = pcg.reduce %h kind "mean" dims [0, 1] : !pcg.tensor<8x32xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: func.func @main() -> !pcg.tensor<f32> attributes {unityc.precision = "bf16-mixed"} {
// KEPT:  func.func @main() -> !pcg.tensor<f32> attributes {unityc.precision = "bf16-mixed"} {
// KEPT:  pcg.linear
// PROGRAM: precision="bf16-mixed"
