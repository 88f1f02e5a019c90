// RUN: unityc-opt %s -p 'apply-rules{names="linear_row_parallel"}' | filecheck %s

// The library rule linear_row_parallel (Megatron's second FFN matmul): the
// contraction dim is partitioned in both the input (its last dim) and the
// weight (dim 1), so each device holds a partial sum of the whole output
// (`sum 2`); reduce adds them.

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x4x8xf32>
// CHECK-NEXT:    %w = pcg.weight key "w" : !pcg.tensor<6x8xf32>
// CHECK-NEXT:    %[[X:.*]] = parallel.partition %x dim 2 degree 2 : !pcg.tensor<2x4x8xf32> -> !pcg.tensor<2x4x8xf32, shard [1, 1, 2]>
// CHECK-NEXT:    %[[W:.*]] = parallel.partition %w dim 1 degree 2 : !pcg.tensor<6x8xf32> -> !pcg.tensor<6x8xf32, shard [1, 2]>
// CHECK-NEXT:    %[[H:.*]] = pcg.linear %[[X]], %[[W]] : !pcg.tensor<2x4x8xf32, shard [1, 1, 2]>, !pcg.tensor<6x8xf32, shard [1, 2]> -> !pcg.tensor<2x4x6xf32, sum 2>
// CHECK-NEXT:    %h = parallel.reduce %[[H]] degree 2 : !pcg.tensor<2x4x6xf32, sum 2> -> !pcg.tensor<2x4x6xf32>
// CHECK-NEXT:    func.return %h : !pcg.tensor<2x4x6xf32>
func.func @main() -> !pcg.tensor<2x4x6xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x4x8xf32>
  %w = pcg.weight key "w" : !pcg.tensor<6x8xf32>
  %h = pcg.linear %x, %w : !pcg.tensor<2x4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<2x4x6xf32>
  func.return %h : !pcg.tensor<2x4x6xf32>
}
