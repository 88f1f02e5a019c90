// RUN: unityc-opt %s -p 'apply-rules{names="add_is_sum_concat_reduce"}' | filecheck %s

// The library rule add_is_sum_concat_reduce, Unity's Add = Concat + Reduce:
//
//   add(a, b) => parallel.reduce[degree=2](parallel.sum_concat(a, b))  if type(a) == type(b)
//
// The two addends become the two partial sums of one tensor (sum_concat moves
// no data), and reduce adds them, so the addition is done by the collective
// that a parallel plan needs anyway.

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %a = pcg.input key "a" : !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %b = pcg.input key "b" : !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %[[S:.*]] = parallel.sum_concat %a, %b : !pcg.tensor<4x8xf32>, !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32, sum 2>
// CHECK-NEXT:    %s = parallel.reduce %[[S]] degree 2 : !pcg.tensor<4x8xf32, sum 2> -> !pcg.tensor<4x8xf32>
// CHECK-NEXT:    func.return %s : !pcg.tensor<4x8xf32>
func.func @main() -> !pcg.tensor<4x8xf32> {
  %a = pcg.input key "a" : !pcg.tensor<4x8xf32>
  %b = pcg.input key "b" : !pcg.tensor<4x8xf32>
  %s = pcg.add %a, %b : !pcg.tensor<4x8xf32>, !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
  func.return %s : !pcg.tensor<4x8xf32>
}
