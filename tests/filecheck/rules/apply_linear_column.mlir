// RUN: unityc-opt %s -p 'apply-rules{names="linear_column_parallel"}' | filecheck %s

// The library rule linear_column_parallel (Megatron's first FFN matmul): the
// weight's rows (the output features) are partitioned over k devices and the
// input is replicated, so each device computes a slice of the output columns;
// combine gathers them. Only the first linear in program order is rewritten
// (limit defaults to 1).

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %w1 = pcg.weight key "w1" : !pcg.tensor<6x8xf32>
// CHECK-NEXT:    %w2 = pcg.weight key "w2" : !pcg.tensor<8x6xf32>
// CHECK-NEXT:    %[[X:.*]] = parallel.replicate %x degree 2 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32, copy 2>
// CHECK-NEXT:    %[[W:.*]] = parallel.partition %w1 dim 0 degree 2 : !pcg.tensor<6x8xf32> -> !pcg.tensor<6x8xf32, shard [2, 1]>
// CHECK-NEXT:    %[[H:.*]] = pcg.linear %[[X]], %[[W]] : !pcg.tensor<4x8xf32, copy 2>, !pcg.tensor<6x8xf32, shard [2, 1]> -> !pcg.tensor<4x6xf32, shard [1, 2]>
// CHECK-NEXT:    %h = parallel.combine %[[H]] dim 1 degree 2 : !pcg.tensor<4x6xf32, shard [1, 2]> -> !pcg.tensor<4x6xf32>
// CHECK-NEXT:    %y = pcg.linear %h, %w2 : !pcg.tensor<4x6xf32>, !pcg.tensor<8x6xf32> -> !pcg.tensor<4x8xf32>
// CHECK-NEXT:    func.return %y : !pcg.tensor<4x8xf32>
func.func @main() -> !pcg.tensor<4x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
  %w1 = pcg.weight key "w1" : !pcg.tensor<6x8xf32>
  %w2 = pcg.weight key "w2" : !pcg.tensor<8x6xf32>
  %h = pcg.linear %x, %w1 : !pcg.tensor<4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<4x6xf32>
  %y = pcg.linear %h, %w2 : !pcg.tensor<4x6xf32>, !pcg.tensor<8x6xf32> -> !pcg.tensor<4x8xf32>
  func.return %y : !pcg.tensor<4x8xf32>
}
