// The self-attention of transforms/fuse_attention.mlir as a one-stage GPipe plan on one device,
// every op placed and staged, the projections and the attention core recomputed.
builtin.module attributes {unityc.machine = "cpu:1"} {
  func.func @main() -> !pcg.tensor<2x3x8xf32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 1 : i64} {
    %x = pcg.input key "x" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<2x3x8xf32>
    %wq = pcg.weight key "q.weight" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<8x8xf32>
    %bq = pcg.weight key "q.bias" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<8xf32>
    %wk = pcg.weight key "k.weight" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<8x8xf32>
    %bk = pcg.weight key "k.bias" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<8xf32>
    %wv = pcg.weight key "v.weight" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<8x8xf32>
    %bv = pcg.weight key "v.bias" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<8xf32>
    %wo = pcg.weight key "o.weight" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<8x8xf32>
    %bo = pcg.weight key "o.bias" {view = #pcg.view<start 0>, stage = 0 : i64} : !pcg.tensor<8xf32>
    %q0 = pcg.linear %x, %wq bias %bq {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
    %q1 = pcg.reshape %q0 shape [2, 3, 2, 4] {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
    %q = pcg.transpose %q1 perm [0, 2, 1, 3] {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
    %k0 = pcg.linear %x, %wk bias %bk {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
    %k1 = pcg.reshape %k0 shape [2, 3, 2, 4] {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
    %k = pcg.transpose %k1 perm [0, 2, 3, 1] {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x4x3xf32>
    %v0 = pcg.linear %x, %wv bias %bv {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
    %v1 = pcg.reshape %v0 shape [2, 3, 2, 4] {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
    %v = pcg.transpose %v1 perm [0, 2, 1, 3] {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
    %s = pcg.batch_matmul %q, %k {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x2x3x4xf32>, !pcg.tensor<2x2x4x3xf32> -> !pcg.tensor<2x2x3x3xf32>
    %scaled = pcg.scalar_mul %s scale 0.5 {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
    %p = pcg.softmax %scaled dim 3 {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
    %c = pcg.batch_matmul %p, %v {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x3x4xf32>
    %ct = pcg.transpose %c perm [0, 2, 1, 3] {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x3x2x4xf32>
    %cf = pcg.reshape %ct shape [2, 3, 8] {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x3x8xf32>
    %out = pcg.linear %cf, %wo bias %bo {view = #pcg.view<start 0>, recompute, stage = 0 : i64} : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
    func.return %out : !pcg.tensor<2x3x8xf32>
  }
}
