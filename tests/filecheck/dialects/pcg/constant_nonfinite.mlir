// RUN: unityc-opt %s | unityc-opt | filecheck %s
// RUN: unityc-opt %s --print-op-generic | unityc-opt | filecheck %s
// RUN: unityc-opt %s -o %t.mlir && unityc-run %t.mlir | filecheck %s --check-prefix=VALUES

// Non-finite float elements of a constant (an SDPA causal mask holds -inf) are
// printed as their bit patterns, MLIR's hexadecimal float literals, and read back
// as the same values, not as the integers the hex digits spell (xDSL 0.74 reads
// 0xff800000 as 4286578688.0; unityc.dialects.float_literals fixes that).

func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<2xf32>, !pcg.tensor<1xf32>, !pcg.tensor<1xf32>, !pcg.tensor<3xf64>) {
  %x = pcg.input key "x" : !pcg.tensor<2xf32>
  %loss = pcg.reduce %x kind "sum" dims [0] : !pcg.tensor<2xf32> -> !pcg.tensor<f32>
  %ninf = pcg.constant value dense<[0.000000e+00, 0xff800000]> : tensor<2xf32> : !pcg.tensor<2xf32>
  %pinf = pcg.constant value dense<0x7F800000> : tensor<1xf32> : !pcg.tensor<1xf32>
  %nan = pcg.constant value dense<[0x7fc00000]> : tensor<1xf32> : !pcg.tensor<1xf32>
  %f64 = pcg.constant value dense<0xFFF0000000000000> : tensor<3xf64> : !pcg.tensor<3xf64>
  func.return %loss, %ninf, %pinf, %nan, %f64 : !pcg.tensor<f32>, !pcg.tensor<2xf32>, !pcg.tensor<1xf32>, !pcg.tensor<1xf32>, !pcg.tensor<3xf64>
}

// CHECK:      %ninf = pcg.constant value dense<[0.000000e+00, 0xff800000]> : tensor<2xf32> : !pcg.tensor<2xf32>
// CHECK-NEXT: %pinf = pcg.constant value dense<0x7f800000> : tensor<1xf32> : !pcg.tensor<1xf32>
// CHECK-NEXT: %nan = pcg.constant value dense<0x7fc00000> : tensor<1xf32> : !pcg.tensor<1xf32>
// CHECK-NEXT: %f64 = pcg.constant value dense<0xfff0000000000000> : tensor<3xf64> : !pcg.tensor<3xf64>

// VALUES-LABEL: output 1: !pcg.tensor<2xf32>  shape [2]  sum=-inf abs=inf
// VALUES-NEXT: output 2: !pcg.tensor<1xf32>  shape [1]  sum=inf abs=inf
// VALUES-NEXT: output 3: !pcg.tensor<1xf32>  shape [1]  sum=nan abs=nan
// VALUES-NEXT: output 4: !pcg.tensor<3xf64>  shape [3]  sum=-inf abs=inf
