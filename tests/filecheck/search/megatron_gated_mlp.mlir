// The megatron baseline pairs column- and row-parallel linears through the ops between them:
// a gated (SwiGLU) MLP, x * sigmoid(x) of the gate times the up projection, then the down
// projection. Gate and up are column-parallel (their weights' rows sharded), the sigmoid and both
// products run on the sharded hidden dim, the down projection is row-parallel (its weight's
// columns sharded, partial sums): one all-reduce, nothing gathered. The classifier after it is
// column-parallel and the cross-entropy vocabulary-parallel (Megatron-LM's): the class shards'
// partial sums are reduced, the logits never gathered.

// RUN: unityc-opt %s -p 'megatron{machine="cpu:2"}' 2>%t.err | filecheck %s
// RUN: filecheck %s --check-prefix=NOTE < %t.err
// NOTE: megatron (data 1 x tensor 2) on cpu:2: iteration time

// CHECK:      pcg.weight key "gate.weight" {{.*}} : !pcg.tensor<64x32xf32, shard [2, 1]>
// CHECK-NEXT: pcg.linear {{.*}} -> !pcg.tensor<16x64xf32, shard [1, 2]>
// CHECK-NEXT: pcg.sigmoid {{.*}} -> !pcg.tensor<16x64xf32, shard [1, 2]>
// CHECK-NEXT: pcg.mul {{.*}} -> !pcg.tensor<16x64xf32, shard [1, 2]>
// CHECK-NEXT: pcg.weight key "up.weight" {{.*}} : !pcg.tensor<64x32xf32, shard [2, 1]>
// CHECK-NEXT: pcg.linear {{.*}} -> !pcg.tensor<16x64xf32, shard [1, 2]>
// CHECK-NEXT: pcg.mul {{.*}} -> !pcg.tensor<16x64xf32, shard [1, 2]>
// CHECK-NEXT: pcg.weight key "down.weight" {{.*}} : !pcg.tensor<32x64xf32, shard [1, 2]>
// CHECK-NEXT: pcg.linear {{.*}} -> !pcg.tensor<16x32xf32, sum 2>
// CHECK-NEXT: parallel.all_reduce {{.*}} -> !pcg.tensor<16x32xf32, copy 2>
// CHECK-NEXT: pcg.weight key "head.weight" {{.*}} : !pcg.tensor<10x32xf32, shard [2, 1]>
// CHECK-NEXT: pcg.linear {{.*}} -> !pcg.tensor<16x10xf32, shard [1, 2]>
// CHECK-NOT:  parallel.
// CHECK:      pcg.cross_entropy {{.*}} : !pcg.tensor<16x10xf32, shard [1, 2]>, !pcg.tensor<16xi64, copy 2> -> !pcg.tensor<f32, sum 2>
// CHECK-NEXT: parallel.reduce {{.*}} degree 2
func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<16x32xf32>
  %label = pcg.input key "label" : !pcg.tensor<16xi64>
  %wg = pcg.weight key "gate.weight" : !pcg.tensor<64x32xf32>
  %wu = pcg.weight key "up.weight" : !pcg.tensor<64x32xf32>
  %wd = pcg.weight key "down.weight" : !pcg.tensor<32x64xf32>
  %wh = pcg.weight key "head.weight" : !pcg.tensor<10x32xf32>
  %g = pcg.linear %x, %wg : !pcg.tensor<16x32xf32>, !pcg.tensor<64x32xf32> -> !pcg.tensor<16x64xf32>
  %s = pcg.sigmoid %g : !pcg.tensor<16x64xf32> -> !pcg.tensor<16x64xf32>
  %silu = pcg.mul %g, %s : !pcg.tensor<16x64xf32>, !pcg.tensor<16x64xf32> -> !pcg.tensor<16x64xf32>
  %u = pcg.linear %x, %wu : !pcg.tensor<16x32xf32>, !pcg.tensor<64x32xf32> -> !pcg.tensor<16x64xf32>
  %h = pcg.mul %silu, %u : !pcg.tensor<16x64xf32>, !pcg.tensor<16x64xf32> -> !pcg.tensor<16x64xf32>
  %y = pcg.linear %h, %wd : !pcg.tensor<16x64xf32>, !pcg.tensor<32x64xf32> -> !pcg.tensor<16x32xf32>
  %logits = pcg.linear %y, %wh : !pcg.tensor<16x32xf32>, !pcg.tensor<10x32xf32> -> !pcg.tensor<16x10xf32>
  %loss = pcg.cross_entropy %logits, %label reduction "mean" : !pcg.tensor<16x10xf32>, !pcg.tensor<16xi64> -> !pcg.tensor<f32>
  func.return %loss : !pcg.tensor<f32>
}
