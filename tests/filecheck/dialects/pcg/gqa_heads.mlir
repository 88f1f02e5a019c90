// RUN: unityc-opt %s --split-input-file --verify-diagnostics | filecheck %s

// The imported form of grouped-query attention (see
// frontend/import_broadcast.mlir) under head parallelism: 2 KV heads, each
// read by 2 of 4 query heads (query head h reads KV head h // 2). Splitting
// the KV-head dim in two keeps each KV head with its query group: the zero
// constant that broadcasts it is copied to both tasks, the merge to 4 heads
// splits the heads alike, and the scores are computed per head shard.

func.func @main() -> !pcg.tensor<2x4x5x5xf32, shard [1, 2, 1, 1]> {
  %q = pcg.input key "q" : !pcg.tensor<2x4x5x3xf32, shard [1, 2, 1, 1]>
  %kv = pcg.input key "kv" : !pcg.tensor<2x2x5x3xf32, shard [1, 2, 1, 1]>
  %kv5 = pcg.reshape %kv shape [2, 2, 1, 5, 3] : !pcg.tensor<2x2x5x3xf32, shard [1, 2, 1, 1]> -> !pcg.tensor<2x2x1x5x3xf32, shard [1, 2, 1, 1, 1]>
  %zeros = pcg.constant value dense<0.000000e+00> : tensor<1x1x2x1x1xf32> : !pcg.tensor<1x1x2x1x1xf32, copy 2>
  %rep = pcg.add %kv5, %zeros : !pcg.tensor<2x2x1x5x3xf32, shard [1, 2, 1, 1, 1]>, !pcg.tensor<1x1x2x1x1xf32, copy 2> -> !pcg.tensor<2x2x2x5x3xf32, shard [1, 2, 1, 1, 1]>
  %heads = pcg.reshape %rep shape [2, 4, 5, 3] : !pcg.tensor<2x2x2x5x3xf32, shard [1, 2, 1, 1, 1]> -> !pcg.tensor<2x4x5x3xf32, shard [1, 2, 1, 1]>
  %kt = pcg.transpose %heads perm [0, 1, 3, 2] : !pcg.tensor<2x4x5x3xf32, shard [1, 2, 1, 1]> -> !pcg.tensor<2x4x3x5xf32, shard [1, 2, 1, 1]>
  %s = pcg.batch_matmul %q, %kt : !pcg.tensor<2x4x5x3xf32, shard [1, 2, 1, 1]>, !pcg.tensor<2x4x3x5xf32, shard [1, 2, 1, 1]> -> !pcg.tensor<2x4x5x5xf32, shard [1, 2, 1, 1]>
  func.return %s : !pcg.tensor<2x4x5x5xf32, shard [1, 2, 1, 1]>
}
// CHECK:      %heads = pcg.reshape %rep shape [2, 4, 5, 3] : !pcg.tensor<2x2x2x5x3xf32, shard [1, 2, 1, 1, 1]> -> !pcg.tensor<2x4x5x3xf32, shard [1, 2, 1, 1]>
// CHECK:      pcg.batch_matmul %q, %kt : !pcg.tensor<2x4x5x3xf32, shard [1, 2, 1, 1]>, !pcg.tensor<2x4x3x5xf32, shard [1, 2, 1, 1]> -> !pcg.tensor<2x4x5x5xf32, shard [1, 2, 1, 1]>

// -----

// Splitting the repeat dim instead would put query heads 0 and 2 (KV heads 0
// and 1) on one task: the merge to heads has no such form.
%r = pcg.input key "r" : !pcg.tensor<2x2x2x5x3xf32, shard [1, 1, 2, 1, 1]>
%heads = pcg.reshape %r shape [2, 4, 5, 3] : !pcg.tensor<2x2x2x5x3xf32, shard [1, 1, 2, 1, 1]> -> !pcg.tensor<2x4x5x3xf32, shard [1, 2, 1, 1]>
// CHECK: gqa_heads.mlir:[[# @LINE - 1]]:1: error: pcg.reshape: operand 'input' dimension 2 has shard degree 2, but it does not lead its group of reshaped dims
