builtin.module attributes {unityc.machine = "cpu:2"} {
  func.func @main() -> !pcg.tensor<f32> attributes {unityc.accumulation = 4 : i64} {
    %x = pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x32xf32, shard [2, 1]>
    %w1 = pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<64x32xf32, copy 2>
    %b1 = pcg.weight key "fc1.bias" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<64xf32, copy 2>
    %0 = pcg.linear %x, %w1 bias %b1 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x32xf32, shard [2, 1]>, !pcg.tensor<64x32xf32, copy 2>, !pcg.tensor<64xf32, copy 2> -> !pcg.tensor<16x64xf32, shard [2, 1]>
    %1 = pcg.relu %0 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x64xf32, shard [2, 1]> -> !pcg.tensor<16x64xf32, shard [2, 1]>
    %w2 = pcg.weight key "fc2.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<10x64xf32, copy 2>
    %b2 = pcg.weight key "fc2.bias" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<10xf32, copy 2>
    %2 = pcg.linear %1, %w2 bias %b2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x64xf32, shard [2, 1]>, !pcg.tensor<10x64xf32, copy 2>, !pcg.tensor<10xf32, copy 2> -> !pcg.tensor<16x10xf32, shard [2, 1]>
    %label = pcg.input key "label" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16xi64, shard [2]>
    %3 = pcg.cross_entropy %2, %label reduction "mean" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x10xf32, shard [2, 1]>, !pcg.tensor<16xi64, shard [2]> -> !pcg.tensor<f32, sum 2>
    %4 = parallel.reduce %3 degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<f32, sum 2> -> !pcg.tensor<f32>
    func.return %4 : !pcg.tensor<f32>
  }
}

