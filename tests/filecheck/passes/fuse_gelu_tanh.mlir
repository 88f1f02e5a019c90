// RUN: unityc-opt %s -p fuse-norms | filecheck %s
// RUN: unityc-run %s | filecheck %s --check-prefix=INTERP
// RUN: unityc-opt %s -p fuse-norms -o %t.mlir && unityc-run %t.mlir | filecheck %s --check-prefix=INTERP

// fuse-norms on GPT-2's `gelu_new` as HF writes it element by element,
// 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))): one pcg.gelu with `tanh`
// (the second copy with the operands of the add and the muls swapped). The eight ops
// disappear; the interpreter gives the same loss.

// CHECK:      %gelu = pcg.gelu %x tanh : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
// CHECK-NEXT: %gelu_1 = pcg.gelu %gelu tanh : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
// CHECK-NEXT: %loss = pcg.mse_loss %gelu_1, %t
// CHECK-NOT:  pcg.tanh
// INTERP: output 0: !pcg.tensor<f32>  shape []  sum=0.0219924 abs=0.0219924

func.func @main() -> (!pcg.tensor<f32>) {
  %x = pcg.input key "x" : !pcg.tensor<4x16xf32>
  %t = pcg.input key "t" : !pcg.tensor<4x16xf32>
  %h = pcg.scalar_mul %x scale 0.5 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %c = pcg.pow %x exponent 3.0 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %cs = pcg.scalar_mul %c scale 0.044715 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %a = pcg.add %x, %cs : !pcg.tensor<4x16xf32>, !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %as = pcg.scalar_mul %a scale 0.7978845608028654 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %th = pcg.tanh %as : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %p = pcg.scalar_add %th value 1.0 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %y = pcg.mul %h, %p : !pcg.tensor<4x16xf32>, !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %h2 = pcg.scalar_mul %y scale 0.5 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %c2 = pcg.pow %y exponent 3.0 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %cs2 = pcg.scalar_mul %c2 scale 0.044715 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %a2 = pcg.add %cs2, %y : !pcg.tensor<4x16xf32>, !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %as2 = pcg.scalar_mul %a2 scale 0.7978845608028654 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %th2 = pcg.tanh %as2 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %p2 = pcg.scalar_add %th2 value 1.0 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %y2 = pcg.mul %p2, %h2 : !pcg.tensor<4x16xf32>, !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %loss = pcg.mse_loss %y2, %t reduction "mean" : !pcg.tensor<4x16xf32>, !pcg.tensor<4x16xf32> -> !pcg.tensor<f32>
  func.return %loss : !pcg.tensor<f32>
}
