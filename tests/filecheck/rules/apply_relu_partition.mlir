// RUN: unityc-opt %s -p 'apply-rules{names="relu_partition_any_dim" params="d=1"}' | filecheck %s

// The library rule relu_partition_any_dim (ReLU is partitionable on any dim):
//
//   relu(x) => combine[dim=d, degree=k](relu(partition[dim=d, degree=k](x)))
//     where d: dim(x), k: degree  if k * shard(x, d) divides size(x, d)
//
// Its parameters d and k are not bound by the source: `params` pins d to 1, and
// k ranges over `degrees` (default "2"). The relu now runs on two shards of dim 1;
// the combine gives back the unsharded tensor, so every reader of %r sees the
// same type and value.

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %[[P:.*]] = parallel.partition %x dim 1 degree 2 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32, shard [1, 2]>
// CHECK-NEXT:    %[[R:.*]] = pcg.relu %[[P]] : !pcg.tensor<4x8xf32, shard [1, 2]> -> !pcg.tensor<4x8xf32, shard [1, 2]>
// CHECK-NEXT:    %r = parallel.combine %[[R]] dim 1 degree 2 : !pcg.tensor<4x8xf32, shard [1, 2]> -> !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %e = pcg.exp %r : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// CHECK-NEXT:    func.return %e : !pcg.tensor<4x8xf32>
func.func @main() -> !pcg.tensor<4x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
  %r = pcg.relu %x : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
  %e = pcg.exp %r : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
  func.return %e : !pcg.tensor<4x8xf32>
}
