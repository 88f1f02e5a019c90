// The tiny two-tower MLP of tiny_mlp_plan.mlir as a 2-stage pipeline on two ranks: stage 0
// (rank 0) runs tower 1, stage 1 (rank 1) tower 2, the sum and the loss; 1F1B over 2
// micro-batches of 2 rows. Stages need not be cuts of one tensor: they follow data flow.
builtin.module attributes {unityc.machine = "cpu:2", unityc.model = {model = "mlp", config = "small", seed = 0 : i64, overrides = {hidden_dims = "[8, 6]", in_features = "4"}}} {
  func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<4x6xf32>) attributes {unityc.schedule = "1f1b", unityc.microbatches = 2 : i64} {
    %w1 = pcg.weight key "tower1.0.weight" {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<8x4xf32>
    %w2 = pcg.weight key "tower1.2.weight" {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<6x8xf32>
    %x1 = pcg.input key "input1" {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<4x4xf32>
    %h = pcg.linear %x1, %w1 {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<4x4xf32>, !pcg.tensor<8x4xf32> -> !pcg.tensor<4x8xf32>
    %a = pcg.relu %h {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
    %t1 = pcg.linear %a, %w2 {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<4x6xf32>
    %v1 = pcg.weight key "tower2.0.weight" {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<8x4xf32>
    %v2 = pcg.weight key "tower2.2.weight" {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<6x8xf32>
    %x2 = pcg.input key "input2" {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<4x4xf32>
    %labels = pcg.input key "labels" {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<4xi64>
    %g = pcg.linear %x2, %v1 {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<4x4xf32>, !pcg.tensor<8x4xf32> -> !pcg.tensor<4x8xf32>
    %b = pcg.relu %g {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
    %t2 = pcg.linear %b, %v2 {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<4x6xf32>
    %sum = pcg.add %t1, %t2 {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<4x6xf32>, !pcg.tensor<4x6xf32> -> !pcg.tensor<4x6xf32>
    %loss = pcg.cross_entropy %sum, %labels reduction "mean" {stage = 1 : i64, view = #pcg.view<start 1>} : !pcg.tensor<4x6xf32>, !pcg.tensor<4xi64> -> !pcg.tensor<f32>
    func.return %loss, %sum : !pcg.tensor<f32>, !pcg.tensor<4x6xf32>
  }
}
