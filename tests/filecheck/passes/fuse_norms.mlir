// RUN: unityc-opt %s -p fuse-norms | filecheck %s
// RUN: unityc-run %s | filecheck %s --check-prefix=INTERP
// RUN: unityc-opt %s -p fuse-norms -o %t.mlir && unityc-run %t.mlir | filecheck %s --check-prefix=INTERP

// fuse-norms on a bf16 model's RMS norms, written as HF writes them: Llama's
// `weight * (x.float() * rsqrt(mean(x.float()^2) + eps)).to(bf16)` is one
// pcg.rms_norm with `weight_after_cast`; Gemma's `(n * (1 + w.float())).type_as(x)`
// one with `offset 1.0` reading the bf16 weight itself. The casts, the pow, the
// mean, the eps and the rsqrt disappear; the interpreter gives the same loss.

// CHECK:      %w = pcg.weight key "w" : !pcg.tensor<16xbf16>
// CHECK-NEXT: %rms_norm = pcg.rms_norm %x weight %w dims 1 eps 1.0e-06 weight_after_cast : !pcg.tensor<4x16xbf16>, !pcg.tensor<16xbf16> -> !pcg.tensor<4x16xbf16>
// CHECK-NEXT: %rms_norm_1 = pcg.rms_norm %rms_norm weight %w dims 1 eps 1.0e-06 offset 1.0 : !pcg.tensor<4x16xbf16>, !pcg.tensor<16xbf16> -> !pcg.tensor<4x16xbf16>
// CHECK-NEXT: %loss = pcg.mse_loss %rms_norm_1, %t
// INTERP: output 0: !pcg.tensor<bf16>  shape []  sum=1.71875 abs=1.71875

func.func @main() -> (!pcg.tensor<bf16>) {
  %x = pcg.input key "x" : !pcg.tensor<4x16xbf16>
  %t = pcg.input key "t" : !pcg.tensor<4x16xbf16>
  %w = pcg.weight key "w" : !pcg.tensor<16xbf16>
  %xf = pcg.cast %x dtype f32 : !pcg.tensor<4x16xbf16> -> !pcg.tensor<4x16xf32>
  %sq = pcg.pow %xf exponent 2.0 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %mean = pcg.reduce %sq kind "mean" dims [1] keepdim : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x1xf32>
  %eps = pcg.scalar_add %mean value 1.0e-06 : !pcg.tensor<4x1xf32> -> !pcg.tensor<4x1xf32>
  %r = pcg.pow %eps exponent -0.5 : !pcg.tensor<4x1xf32> -> !pcg.tensor<4x1xf32>
  %n = pcg.mul %xf, %r : !pcg.tensor<4x16xf32>, !pcg.tensor<4x1xf32> -> !pcg.tensor<4x16xf32>
  %nb = pcg.cast %n dtype bf16 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xbf16>
  %llama = pcg.mul %w, %nb : !pcg.tensor<16xbf16>, !pcg.tensor<4x16xbf16> -> !pcg.tensor<4x16xbf16>
  %lf = pcg.cast %llama dtype f32 : !pcg.tensor<4x16xbf16> -> !pcg.tensor<4x16xf32>
  %sq2 = pcg.pow %lf exponent 2.0 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
  %mean2 = pcg.reduce %sq2 kind "mean" dims [-1] keepdim : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x1xf32>
  %eps2 = pcg.scalar_add %mean2 value 1.0e-06 : !pcg.tensor<4x1xf32> -> !pcg.tensor<4x1xf32>
  %r2 = pcg.pow %eps2 exponent -0.5 : !pcg.tensor<4x1xf32> -> !pcg.tensor<4x1xf32>
  %n2 = pcg.mul %lf, %r2 : !pcg.tensor<4x16xf32>, !pcg.tensor<4x1xf32> -> !pcg.tensor<4x16xf32>
  %wf = pcg.cast %w dtype f32 : !pcg.tensor<16xbf16> -> !pcg.tensor<16xf32>
  %w1 = pcg.scalar_add %wf value 1.0 : !pcg.tensor<16xf32> -> !pcg.tensor<16xf32>
  %g = pcg.mul %n2, %w1 : !pcg.tensor<4x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<4x16xf32>
  %gemma = pcg.cast %g dtype bf16 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xbf16>
  %loss = pcg.mse_loss %gemma, %t reduction "mean" : !pcg.tensor<4x16xbf16>, !pcg.tensor<4x16xbf16> -> !pcg.tensor<bf16>
  func.return %loss : !pcg.tensor<bf16>
}
