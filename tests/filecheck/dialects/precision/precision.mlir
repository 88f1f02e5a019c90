// RUN: unityc-opt %s | filecheck %s
// RUN: %roundtrip-generic
// RUN: unityc-opt %s -p 'data-parallel{machine="cpu:2"}' | filecheck %s --check-prefix=KEPT
// RUN: unityc-opt %s -p 'megatron{machine="cpu:2"}' | filecheck %s --check-prefix=KEPT
// RUN: unityc-opt %s --unity-search --machine cpu:2 --budget 2 2>/dev/null | filecheck %s --check-prefix=KEPT
// RUN: unityc-import mlp --precision bf16-mixed -o %t.mlir
// RUN: filecheck %s --check-prefix=IMPORT < %t.mlir
// RUN: unityc-opt %t.mlir -p 'megatron{machine="cpu:2"}' -t torch 2>/dev/null | filecheck %s --check-prefix=PROGRAM
// RUN: not unityc-import mlp --precision fp8 2>&1 | filecheck %s --check-prefix=BAD

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
// KEPT:  func.func @main() -> !pcg.tensor<f32{{.*}}> attributes {unityc.precision = "bf16-mixed"{{.*}}} {
// KEPT:  pcg.linear

// unityc-import --precision records it on the graph function.
// IMPORT: func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<4x32xf32>) attributes {unityc.precision = "bf16-mixed"} {
// IMPORT: pcg.weight key "tower1.0.weight" {{.*}}xf32>

// The program runs bf16-mixed; a row-parallel linear's partial sums (bf16 under autocast)
// are all-reduced in bf16, while the weights stay fp32.
// PROGRAM:     "tower1.0.weight": Layout((32, 16), "float32"
// PROGRAM:     precision='bf16-mixed',
// PROGRAM: Collective("all_reduce", ins=(0, 1), outs=(0, 1), shape=(4, 32), dtype="bfloat16")

// BAD: unityc-import: error: argument --precision: invalid choice: 'fp8' (choose from 'fp32', 'bf16-mixed')
