// The search on graphs off the usual path (issue 14, found by benchmarks/fuzz.py): outputs
// that are constants returned as they are (a KeyError in the segment split before), and a
// pipelined plan as input (its schedule attributes were kept on the graph the search starts
// from, so pricing failed with "pcg.input (node 0) of a pipelined plan has no stage").

// RUN: unityc-opt %s --split-input-file --unity-search --machine cpu:2 --budget 2 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK-NOT: error
// CHECK: func.func @main() -> (!pcg.tensor<f32{{.*}}>, !pcg.tensor<2xf32>, !pcg.tensor<1xf32>)
// CHECK: %inf = pcg.constant {{.*}} {view = #pcg.view<start 0>} : !pcg.tensor<2xf32>
// CHECK: func.return %{{.*}}, %inf, %nan
// CHECK: func.func @main() -> !pcg.tensor<f32
// CHECK-NOT: unityc.schedule
// CHECK-NOT: stage =
// CHECK: pcg.cross_entropy

func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<2xf32>, !pcg.tensor<1xf32>) {
  %x = pcg.input key "x" : !pcg.tensor<2xf32>
  %loss = pcg.reduce %x kind "sum" dims [0] : !pcg.tensor<2xf32> -> !pcg.tensor<f32>
  %inf = pcg.constant value dense<[0.000000e+00, 0xff800000]> : tensor<2xf32> : !pcg.tensor<2xf32>
  %nan = pcg.constant value dense<0x7fc00000> : tensor<1xf32> : !pcg.tensor<1xf32>
  func.return %loss, %inf, %nan : !pcg.tensor<f32>, !pcg.tensor<2xf32>, !pcg.tensor<1xf32>
}

// -----

// A pipelined plan: `stage = k : i64` on every op beside its view, the schedule
// and micro-batch count on the graph function. Stage 0 (device 0) computes the
// hidden layer, stage 1 (device 1) the head and the loss; each input's batch
// (16 rows) is split into 4 micro-batches of 4 rows.

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
