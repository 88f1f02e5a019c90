// RUN: unityc-opt %s | unityc-opt | filecheck %s
// RUN: unityc-opt %s -o %t.mlir && unityc-run %t.mlir | filecheck %s --check-prefix=VALUES
// RUN: sed -e 's/kind "le"/kind "leq"/' %s | not unityc-opt 2>&1 | filecheck %s --check-prefix=KIND

// pcg.compare_tensors: an element-wise comparison (eq, ne, lt, le, gt, ge) with an i1
// result, broadcasting like the other binary ops. It is how the importer
// records a mask too large to fold: a causal mask is `le` of the key positions
// [1, 1, 1, S] against the query positions [1, 1, S, 1] (two small constants),
// computed per piece when the program runs. Here the 3 x 3 causal mask, as
// 0/1 floats, multiplies [2, 1, 3, 3] scores: it allows 6 of the 9 pairs.

func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<1x1x3x3xf32>) {
  %x = pcg.input key "x" : !pcg.tensor<2x1x3x3xf32>
  %k = pcg.constant value dense<[[[[0, 1, 2]]]]> : tensor<1x1x1x3xi64> : !pcg.tensor<1x1x1x3xi64>
  %q = pcg.constant value dense<[[[[0], [1], [2]]]]> : tensor<1x1x3x1xi64> : !pcg.tensor<1x1x3x1xi64>
  %allowed = pcg.compare_tensors %k, %q kind "le" : !pcg.tensor<1x1x1x3xi64>, !pcg.tensor<1x1x3x1xi64> -> !pcg.tensor<1x1x3x3xi1>
  %ones = pcg.cast %allowed dtype f32 : !pcg.tensor<1x1x3x3xi1> -> !pcg.tensor<1x1x3x3xf32>
  %masked = pcg.mul %x, %ones : !pcg.tensor<2x1x3x3xf32>, !pcg.tensor<1x1x3x3xf32> -> !pcg.tensor<2x1x3x3xf32>
  %loss = pcg.reduce %masked kind "sum" dims [0, 1, 2, 3] : !pcg.tensor<2x1x3x3xf32> -> !pcg.tensor<f32>
  func.return %loss, %ones : !pcg.tensor<f32>, !pcg.tensor<1x1x3x3xf32>
}

// CHECK:      %allowed = pcg.compare_tensors %k, %q kind "le" : !pcg.tensor<1x1x1x3xi64>, !pcg.tensor<1x1x3x1xi64> -> !pcg.tensor<1x1x3x3xi1>
// CHECK-NEXT: %ones = pcg.cast %allowed dtype f32

// VALUES: output 1: !pcg.tensor<1x1x3x3xf32>  shape [1, 1, 3, 3]  sum=6 abs=6

// KIND: error: pcg.compare_tensors: kind must be one of eq, ne, lt, le, gt, ge, got 'leq'
