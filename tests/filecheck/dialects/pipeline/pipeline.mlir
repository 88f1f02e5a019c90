// RUN: unityc-opt %s | filecheck %s
// RUN: %roundtrip-generic

// A pipelined plan: `stage = k : i64` on every op beside its view, the schedule
// and micro-batch count on the graph function. Stage 0 (device 0) computes the
// hidden layer, stage 1 (device 1) the head and the loss; each input's batch
// (16 rows) is split into 4 micro-batches of 4 rows.

// CHECK:      func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "1f1b", unityc.microbatches = 4 : i64} {
// CHECK-NEXT:   %x = pcg.input key "x" {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<16x32xf32>
// CHECK:        %loss = pcg.cross_entropy %logits, %label reduction "mean" {stage = 1 : i64, view = #pcg.view<start 1>}
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "1f1b", unityc.microbatches = 4 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<16x32xf32>
  %w1 = pcg.weight key "fc1.weight" {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<64x32xf32>
  %h = pcg.linear %x, %w1 {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<16x32xf32>, !pcg.tensor<64x32xf32> -> !pcg.tensor<16x64xf32>
  %label = pcg.input key "label" {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<16xi64>
  %w2 = pcg.weight key "fc2.weight" {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<10x64xf32>
  %logits = pcg.linear %h, %w2 {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<16x64xf32>, !pcg.tensor<10x64xf32> -> !pcg.tensor<16x10xf32>
  %loss = pcg.cross_entropy %logits, %label reduction "mean" {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<16x10xf32>, !pcg.tensor<16xi64> -> !pcg.tensor<f32>
  func.return %loss : !pcg.tensor<f32>
}
