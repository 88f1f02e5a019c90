// A stage that is tensor parallel (its input broadcast to both ranks of its group).
builtin.module attributes {unityc.machine = "cpu:4", unityc.model = {model = "mlp", config = "small", seed = 0 : i64, overrides = {hidden_dims = "[8, 6]", in_features = "4"}}} {
  func.func @main() -> !pcg.tensor<f32, sum 2> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64} {
    %x1 = pcg.input key "input1" {stage = 0 : i64, view = #pcg.view<start 0>} : !pcg.tensor<4x4xf32>
    %x1r = parallel.replicate %x1 degree 2 {stage = 0 : i64, view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x4xf32> -> !pcg.tensor<4x4xf32, copy 2>
    %w1 = pcg.weight key "tower1.0.weight" {stage = 0 : i64, view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x4xf32, shard [2, 1]>
    %h = pcg.linear %x1r, %w1 {stage = 0 : i64, view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x4xf32, copy 2>, !pcg.tensor<8x4xf32, shard [2, 1]> -> !pcg.tensor<4x8xf32, shard [1, 2]>
    %l = pcg.reduce %h kind "mean" dims [0, 1] {stage = 1 : i64, view = #pcg.view<start 2, [intra 1]>} : !pcg.tensor<4x8xf32, shard [1, 2]> -> !pcg.tensor<f32, sum 2>
    func.return %l : !pcg.tensor<f32, sum 2>
  }
}
