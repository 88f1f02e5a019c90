// A weight read on two stages (a tied embedding: the embedding on stage 0, the output layer on
// stage 1) is held by each, as Megatron-LM holds it: one pcg.weight of the same key per stage
// reading it, each in copies over its stage's group (the program sums the gradients of all four
// copies after the schedule). No stage reads a weight of another.
// RUN: unityc-opt %s -p 'gpipe{machine="cpu:4" stages=2 microbatches=2 schedule="1f1b"}' 2>/dev/null | filecheck %s
// CHECK:      %w = pcg.weight key "wte" {view = #pcg.view<start 0, [intra 1]>, stage = 0 : i64} : !pcg.tensor<10x32xf32, copy 2>
// CHECK-NEXT: %e = pcg.embedding %ids, %w {view = #pcg.view<start 0, [intra 1]>, stage = 0 : i64}
// CHECK:      %wte = pcg.weight key "wte" {view = #pcg.view<start 2, [intra 1]>, stage = 1 : i64} : !pcg.tensor<10x32xf32, copy 2>
// CHECK-NEXT: %logits = pcg.linear %a, %wte {view = #pcg.view<start 2, [intra 1]>, stage = 1 : i64}

func.func @main() -> !pcg.tensor<f32> {
  %ids = pcg.input key "ids" : !pcg.tensor<16xi64>
  %label = pcg.input key "label" : !pcg.tensor<16xi64>
  %w = pcg.weight key "wte" : !pcg.tensor<10x32xf32>
  %e = pcg.embedding %ids, %w : !pcg.tensor<16xi64>, !pcg.tensor<10x32xf32> -> !pcg.tensor<16x32xf32>
  %a = pcg.relu %e : !pcg.tensor<16x32xf32> -> !pcg.tensor<16x32xf32>
  %logits = pcg.linear %a, %w : !pcg.tensor<16x32xf32>, !pcg.tensor<10x32xf32> -> !pcg.tensor<16x10xf32>
  %loss = pcg.cross_entropy %logits, %label reduction "mean" : !pcg.tensor<16x10xf32>, !pcg.tensor<16xi64> -> !pcg.tensor<f32>
  func.return %loss : !pcg.tensor<f32>
}
