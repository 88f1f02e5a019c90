// A hand-written plan for a tiny two-tower MLP (unityc-import mlp 'hidden_dims=[8, 6]'
// in_features=4) on two ranks. Tower 1 is Megatron-style: input1 broadcast from rank 0,
// column- then row-parallel linears, the partial sums reduced onto rank 0. Tower 2 is
// data-parallel: the batch split, weights held in copies (their gradients all-reduced), the
// rows gathered onto rank 0, where the towers are added and the loss computed.
builtin.module attributes {unityc.machine = "cpu:2", unityc.model = {model = "mlp", config = "small", seed = 0 : i64, overrides = {hidden_dims = "[8, 6]", in_features = "4"}}} {
  func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<4x6xf32>) {
    %w1 = pcg.weight key "tower1.0.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x4xf32, shard [2, 1]>
    %w2 = pcg.weight key "tower1.2.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<6x8xf32, shard [1, 2]>
    %v1 = pcg.weight key "tower2.0.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x4xf32, copy 2>
    %v2 = pcg.weight key "tower2.2.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<6x8xf32, copy 2>
    %x1 = pcg.input key "input1" {view = #pcg.view<start 0>} : !pcg.tensor<4x4xf32>
    %x2 = pcg.input key "input2" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x4xf32, shard [2, 1]>
    %labels = pcg.input key "labels" {view = #pcg.view<start 0>} : !pcg.tensor<4xi64>
    %x1r = parallel.replicate %x1 degree 2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x4xf32> -> !pcg.tensor<4x4xf32, copy 2>
    %h = pcg.linear %x1r, %w1 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x4xf32, copy 2>, !pcg.tensor<8x4xf32, shard [2, 1]> -> !pcg.tensor<4x8xf32, shard [1, 2]>
    %a = pcg.relu %h {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x8xf32, shard [1, 2]> -> !pcg.tensor<4x8xf32, shard [1, 2]>
    %p = pcg.linear %a, %w2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x8xf32, shard [1, 2]>, !pcg.tensor<6x8xf32, shard [1, 2]> -> !pcg.tensor<4x6xf32, sum 2>
    %t1 = parallel.reduce %p degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<4x6xf32, sum 2> -> !pcg.tensor<4x6xf32>
    %g = pcg.linear %x2, %v1 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x4xf32, shard [2, 1]>, !pcg.tensor<8x4xf32, copy 2> -> !pcg.tensor<4x8xf32, shard [2, 1]>
    %b = pcg.relu %g {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x8xf32, shard [2, 1]> -> !pcg.tensor<4x8xf32, shard [2, 1]>
    %q = pcg.linear %b, %v2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x8xf32, shard [2, 1]>, !pcg.tensor<6x8xf32, copy 2> -> !pcg.tensor<4x6xf32, shard [2, 1]>
    %t2 = parallel.combine %q dim 0 degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<4x6xf32, shard [2, 1]> -> !pcg.tensor<4x6xf32>
    %sum = pcg.add %t1, %t2 {view = #pcg.view<start 0>} : !pcg.tensor<4x6xf32>, !pcg.tensor<4x6xf32> -> !pcg.tensor<4x6xf32>
    %loss = pcg.cross_entropy %sum, %labels reduction "mean" {view = #pcg.view<start 0>} : !pcg.tensor<4x6xf32>, !pcg.tensor<4xi64> -> !pcg.tensor<f32>
    func.return %loss, %sum : !pcg.tensor<f32>, !pcg.tensor<4x6xf32>
  }
}
