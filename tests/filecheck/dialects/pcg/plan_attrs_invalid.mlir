// RUN: unityc-opt %s --split-input-file --verify-diagnostics | filecheck %s

// `zero` shards a weight across its copies: it needs a pcg.weight with copy degree >= 2 and a
// stage of 1, 2 or 3; `recompute` is a unit attribute.

func.func @main() -> !pcg.tensor<64x32xf32> {
  %w = pcg.weight key "w" {zero = 3 : i64} : !pcg.tensor<64x32xf32>
  func.return %w : !pcg.tensor<64x32xf32>
}
// CHECK: 'zero = 3' shards a weight across its copies; this one has copy degree 1 (needs >= 2)

// -----

func.func @main() -> !pcg.tensor<64x32xf32, copy 2> {
  %w = pcg.weight key "w" {zero = 4 : i64} : !pcg.tensor<64x32xf32, copy 2>
  func.return %w : !pcg.tensor<64x32xf32, copy 2>
}
// CHECK: 'zero' must be 1, 2 or 3 (: i64), got 4 : i64

// -----

func.func @main() -> !pcg.tensor<64x32xf32, copy 2> {
  %x = pcg.input key "x" {zero = 1 : i64} : !pcg.tensor<64x32xf32, copy 2>
  func.return %x : !pcg.tensor<64x32xf32, copy 2>
}
// CHECK: 'zero' applies to pcg.weight only, not to pcg.input

// -----

func.func @main() -> !pcg.tensor<64x32xf32> {
  %w = pcg.weight key "w" : !pcg.tensor<64x32xf32>
  %r = pcg.relu %w {recompute = true} : !pcg.tensor<64x32xf32> -> !pcg.tensor<64x32xf32>
  func.return %r : !pcg.tensor<64x32xf32>
}
// CHECK: 'recompute' is a unit attribute (write it bare), got true
