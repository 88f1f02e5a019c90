// A two-stage GPipe plan on cpu:4 with every per-op plan attribute: stage 0 data parallel on
// devices 0-1 (ZeRO-2 weights, the linear and relu recomputed), stage 1 on devices 2-3 gathering
// the activation (combine + replicate: an all_gather once fused), a column-parallel linear, and
// a loss on device 2. A transpose there and back and a scalar multiply by 1 are left for the
// canonicalization and folding passes.
builtin.module attributes {unityc.machine = "cpu:4"} {
  func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64} {
    %x = pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>, stage = 0 : i64} : !pcg.tensor<16x32xf32, shard [2, 1]>
    %w1 = pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 2 : i64, stage = 0 : i64} : !pcg.tensor<64x32xf32, copy 2>
    %b1 = pcg.weight key "fc1.bias" {view = #pcg.view<start 0, [intra 1]>, zero = 2 : i64, stage = 0 : i64} : !pcg.tensor<64xf32, copy 2>
    %h = pcg.linear %x, %w1 bias %b1 {view = #pcg.view<start 0, [intra 1]>, recompute, stage = 0 : i64} : !pcg.tensor<16x32xf32, shard [2, 1]>, !pcg.tensor<64x32xf32, copy 2>, !pcg.tensor<64xf32, copy 2> -> !pcg.tensor<16x64xf32, shard [2, 1]>
    %a = pcg.relu %h {view = #pcg.view<start 0, [intra 1]>, recompute, stage = 0 : i64} : !pcg.tensor<16x64xf32, shard [2, 1]> -> !pcg.tensor<16x64xf32, shard [2, 1]>
    %c = parallel.combine %a dim 0 degree 2 {view = #pcg.view<start 2>, stage = 1 : i64} : !pcg.tensor<16x64xf32, shard [2, 1]> -> !pcg.tensor<16x64xf32>
    %r = parallel.replicate %c degree 2 {view = #pcg.view<start 2, [intra 1]>, stage = 1 : i64} : !pcg.tensor<16x64xf32> -> !pcg.tensor<16x64xf32, copy 2>
    %t = pcg.transpose %r perm [1, 0] {view = #pcg.view<start 2, [intra 1]>, recompute, stage = 1 : i64} : !pcg.tensor<16x64xf32, copy 2> -> !pcg.tensor<64x16xf32, copy 2>
    %u = pcg.transpose %t perm [1, 0] {view = #pcg.view<start 2, [intra 1]>, recompute, stage = 1 : i64} : !pcg.tensor<64x16xf32, copy 2> -> !pcg.tensor<16x64xf32, copy 2>
    %s = pcg.scalar_mul %u scale 1.0 {view = #pcg.view<start 2, [intra 1]>, recompute, stage = 1 : i64} : !pcg.tensor<16x64xf32, copy 2> -> !pcg.tensor<16x64xf32, copy 2>
    %s2 = pcg.scalar_mul %s scale 0.5 {view = #pcg.view<start 2, [intra 1]>, recompute, stage = 1 : i64} : !pcg.tensor<16x64xf32, copy 2> -> !pcg.tensor<16x64xf32, copy 2>
    %s3 = pcg.scalar_mul %s2 scale 2.0 {view = #pcg.view<start 2, [intra 1]>, recompute, stage = 1 : i64} : !pcg.tensor<16x64xf32, copy 2> -> !pcg.tensor<16x64xf32, copy 2>
    %w2 = pcg.weight key "fc2.weight" {view = #pcg.view<start 2, [intra 1]>, stage = 1 : i64} : !pcg.tensor<10x64xf32, shard [2, 1]>
    %l = pcg.linear %s3, %w2 {view = #pcg.view<start 2, [intra 1]>, stage = 1 : i64} : !pcg.tensor<16x64xf32, copy 2>, !pcg.tensor<10x64xf32, shard [2, 1]> -> !pcg.tensor<16x10xf32, shard [1, 2]>
    %logits = parallel.combine %l dim 1 degree 2 {view = #pcg.view<start 2>, stage = 1 : i64} : !pcg.tensor<16x10xf32, shard [1, 2]> -> !pcg.tensor<16x10xf32>
    %label = pcg.input key "label" {view = #pcg.view<start 2>, stage = 1 : i64} : !pcg.tensor<16xi64>
    %loss = pcg.cross_entropy %logits, %label reduction "mean" {view = #pcg.view<start 2>, stage = 1 : i64} : !pcg.tensor<16x10xf32>, !pcg.tensor<16xi64> -> !pcg.tensor<f32>
    func.return %loss : !pcg.tensor<f32>
  }
}
