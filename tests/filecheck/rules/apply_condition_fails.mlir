// RUN: unityc-opt %s --split-input-file -p 'apply-rules{file="%S/Inputs/parallel.rules" names="linear_column_wide"}' | filecheck %s

// A rule's conditions filter its matches. linear_column_wide is column-parallel
// linear restricted to layers with at least 8 outputs:
//
//   linear(x, w) => combine[...](linear(replicate[degree=k](x), partition[dim=0, degree=k](w)))
//     where k: degree  if k * shard(w, 0) divides size(w, 0), size(w, 0) >= 8
//
// A 6-output layer fails the condition, though its target would be well-typed:
// nothing changes (this is not an error).

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %w = pcg.weight key "w" : !pcg.tensor<6x8xf32>
// CHECK-NEXT:    %h = pcg.linear %x, %w : !pcg.tensor<4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<4x6xf32>
// CHECK-NEXT:    func.return %h : !pcg.tensor<4x6xf32>
func.func @main() -> !pcg.tensor<4x6xf32> {
  %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
  %w = pcg.weight key "w" : !pcg.tensor<6x8xf32>
  %h = pcg.linear %x, %w : !pcg.tensor<4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<4x6xf32>
  func.return %h : !pcg.tensor<4x6xf32>
}

// -----

// The first match in program order that satisfies the condition is taken: the
// 6-output layer is skipped, the 16-output layer after it is rewritten.

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %w1 = pcg.weight key "w1" : !pcg.tensor<6x8xf32>
// CHECK-NEXT:    %w2 = pcg.weight key "w2" : !pcg.tensor<16x6xf32>
// CHECK-NEXT:    %h = pcg.linear %x, %w1 : !pcg.tensor<4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<4x6xf32>
// CHECK-NEXT:    %[[X:.*]] = parallel.replicate %h degree 2 : !pcg.tensor<4x6xf32> -> !pcg.tensor<4x6xf32, copy 2>
// CHECK-NEXT:    %[[W:.*]] = parallel.partition %w2 dim 0 degree 2 : !pcg.tensor<16x6xf32> -> !pcg.tensor<16x6xf32, shard [2, 1]>
// CHECK-NEXT:    %[[Y:.*]] = pcg.linear %[[X]], %[[W]] : {{.*}} -> !pcg.tensor<4x16xf32, shard [1, 2]>
// CHECK-NEXT:    %y = parallel.combine %[[Y]] dim 1 degree 2 : !pcg.tensor<4x16xf32, shard [1, 2]> -> !pcg.tensor<4x16xf32>
// CHECK-NEXT:    func.return %y : !pcg.tensor<4x16xf32>
func.func @main() -> !pcg.tensor<4x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
  %w1 = pcg.weight key "w1" : !pcg.tensor<6x8xf32>
  %w2 = pcg.weight key "w2" : !pcg.tensor<16x6xf32>
  %h = pcg.linear %x, %w1 : !pcg.tensor<4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<4x6xf32>
  %y = pcg.linear %h, %w2 : !pcg.tensor<4x6xf32>, !pcg.tensor<16x6xf32> -> !pcg.tensor<4x16xf32>
  func.return %y : !pcg.tensor<4x16xf32>
}
