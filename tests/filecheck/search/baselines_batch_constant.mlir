// A broadcast over the batch spelled as a splat constant of batch size (ViT's CLS token,
// `cls_token.expand(B, -1, -1)`: the token plus a [B, 1, 1] zero) runs over the batch like the
// input: data parallelism shards the constant and the CLS tokens made from it, and the concat
// with the batch-sharded patches gathers nothing (it gathered the batch, and every op after it
// ran on the whole batch on every device).

// RUN: unityc-opt %s -p 'data-parallel{machine="cpu:4"}' 2>/dev/null | filecheck %s --check-prefix=DP
// DP:     %zeros = pcg.constant {{.*}} : !pcg.tensor<8x1x1xf32, shard [4, 1, 1]>
// DP:     pcg.add {{.*}} -> !pcg.tensor<8x1x16xf32, shard [4, 1, 1]>
// DP-NOT: parallel.all_gather
// DP:     pcg.concat {{.*}} -> !pcg.tensor<8x5x16xf32, shard [4, 1, 1]>
// DP-NOT: parallel.all_gather
// DP:     pcg.cross_entropy {{.*}} -> !pcg.tensor<f32, sum 4>

// A constant that is batch-sized by chance but no splat stays replicated.
// RUN: sed -e 's/dense<0.000000e+00> : tensor<8x1x1xf32>/dense<[[[1.0]], [[2.0]], [[3.0]], [[4.0]], [[5.0]], [[6.0]], [[7.0]], [[8.0]]]> : tensor<8x1x1xf32>/' %s | unityc-opt -p 'data-parallel{machine="cpu:4"}' 2>/dev/null | filecheck %s --check-prefix=NOSPLAT
// NOSPLAT: %zeros = pcg.constant {{.*}} : !pcg.tensor<8x1x1xf32, copy 4>

builtin.module {
  func.func @main() -> !pcg.tensor<f32> {
    %x = pcg.input key "x" : !pcg.tensor<8x4x16xf32>
    %labels = pcg.input key "labels" : !pcg.tensor<8xi64>
    %cls = pcg.weight key "cls" : !pcg.tensor<1x1x16xf32>
    %w = pcg.weight key "head.weight" : !pcg.tensor<10x80xf32>
    %zeros = pcg.constant value dense<0.000000e+00> : tensor<8x1x1xf32> : !pcg.tensor<8x1x1xf32>
    %tokens = pcg.add %cls, %zeros : !pcg.tensor<1x1x16xf32>, !pcg.tensor<8x1x1xf32> -> !pcg.tensor<8x1x16xf32>
    %cat = pcg.concat %tokens, %x dim 1 : !pcg.tensor<8x1x16xf32>, !pcg.tensor<8x4x16xf32> -> !pcg.tensor<8x5x16xf32>
    %flat = pcg.reshape %cat shape [8, 80] : !pcg.tensor<8x5x16xf32> -> !pcg.tensor<8x80xf32>
    %logits = pcg.linear %flat, %w : !pcg.tensor<8x80xf32>, !pcg.tensor<10x80xf32> -> !pcg.tensor<8x10xf32>
    %loss = pcg.cross_entropy %logits, %labels reduction "mean" : !pcg.tensor<8x10xf32>, !pcg.tensor<8xi64> -> !pcg.tensor<f32>
    func.return %loss : !pcg.tensor<f32>
  }
}
