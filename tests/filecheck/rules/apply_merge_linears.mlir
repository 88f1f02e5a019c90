// RUN: unityc-opt %s -p 'apply-rules{names="merge_linears"}' | filecheck %s

// The library's multi-output rule merge_linears: two linears that read the
// same input %x become one linear on the concatenated weights, split back into
// the two results:
//
//   linear(x, w1), linear(x, w2) => y.0, y.1
//     let y = split[dim=-1, sizes=[size(w1, 0), size(w2, 0)]](linear(x, concat[dim=0](w1, w2)))
//     if shard(w1, 0) == 1, shard(w2, 0) == 1, sum(w1) == sum(w2)
//
// The first output maps to the first result, the second to the second; the
// relu that read %a now reads the split's first result.

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %w1 = pcg.weight key "w1" : !pcg.tensor<6x8xf32>
// CHECK-NEXT:    %w2 = pcg.weight key "w2" : !pcg.tensor<10x8xf32>
// CHECK-NEXT:    %[[W:.*]] = pcg.concat %w1, %w2 dim 0 : !pcg.tensor<6x8xf32>, !pcg.tensor<10x8xf32> -> !pcg.tensor<16x8xf32>
// CHECK-NEXT:    %[[H:.*]] = pcg.linear %x, %[[W]] : !pcg.tensor<4x8xf32>, !pcg.tensor<16x8xf32> -> !pcg.tensor<4x16xf32>
// CHECK-NEXT:    %[[A:.*]], %[[B:.*]] = pcg.split %[[H]] dim -1 sizes [6, 10] : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x6xf32>, !pcg.tensor<4x10xf32>
// CHECK-NEXT:    %r = pcg.relu %[[A]] : !pcg.tensor<4x6xf32> -> !pcg.tensor<4x6xf32>
// CHECK-NEXT:    func.return %r, %[[B]] : !pcg.tensor<4x6xf32>, !pcg.tensor<4x10xf32>
func.func @main() -> (!pcg.tensor<4x6xf32>, !pcg.tensor<4x10xf32>) {
  %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
  %w1 = pcg.weight key "w1" : !pcg.tensor<6x8xf32>
  %w2 = pcg.weight key "w2" : !pcg.tensor<10x8xf32>
  %a = pcg.linear %x, %w1 : !pcg.tensor<4x8xf32>, !pcg.tensor<6x8xf32> -> !pcg.tensor<4x6xf32>
  %b = pcg.linear %x, %w2 : !pcg.tensor<4x8xf32>, !pcg.tensor<10x8xf32> -> !pcg.tensor<4x10xf32>
  %r = pcg.relu %a : !pcg.tensor<4x6xf32> -> !pcg.tensor<4x6xf32>
  func.return %r, %b : !pcg.tensor<4x6xf32>, !pcg.tensor<4x10xf32>
}
