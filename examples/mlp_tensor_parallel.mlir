// The MLP of mlp.mlir as a Megatron-style tensor-parallel plan on two devices:
// fc1 is column-parallel (weight rows sharded), fc2 row-parallel (weight columns sharded),
// so fc2 yields partial sums that one reduce (an all-reduce's first half) adds up.
func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" {view = #pcg.view<start 0>} : !pcg.tensor<16x32xf32>
  %label = pcg.input key "label" {view = #pcg.view<start 0>} : !pcg.tensor<16xi64>
  %w1 = pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<64x32xf32, shard [2, 1]>
  %b1 = pcg.weight key "fc1.bias" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<64xf32, shard [2]>
  %w2 = pcg.weight key "fc2.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<10x64xf32, shard [1, 2]>
  %b2 = pcg.weight key "fc2.bias" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<10xf32, copy 2>
  %xs = parallel.replicate %x degree 2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x32xf32> -> !pcg.tensor<16x32xf32, copy 2>
  %h = pcg.linear %xs, %w1 bias %b1 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x32xf32, copy 2>, !pcg.tensor<64x32xf32, shard [2, 1]>, !pcg.tensor<64xf32, shard [2]> -> !pcg.tensor<16x64xf32, shard [1, 2]>
  %a = pcg.relu %h {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x64xf32, shard [1, 2]> -> !pcg.tensor<16x64xf32, shard [1, 2]>
  %partial = pcg.linear %a, %w2 bias %b2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x64xf32, shard [1, 2]>, !pcg.tensor<10x64xf32, shard [1, 2]>, !pcg.tensor<10xf32, copy 2> -> !pcg.tensor<16x10xf32, sum 2>
  %logits = parallel.reduce %partial degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<16x10xf32, sum 2> -> !pcg.tensor<16x10xf32>
  %loss = pcg.cross_entropy %logits, %label reduction "mean" {view = #pcg.view<start 0>} : !pcg.tensor<16x10xf32>, !pcg.tensor<16xi64> -> !pcg.tensor<f32>
  func.return %loss : !pcg.tensor<f32>
}
