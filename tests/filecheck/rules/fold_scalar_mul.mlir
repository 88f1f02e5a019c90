// RUN: unityc-opt %s --split-input-file -p fold-scalar-mul | filecheck %s

// fold-scalar-mul is the hand-written example of a rewrite pass: plain xDSL
// RewritePatterns (unityc/passes/fold_scalar_mul.py) registered in unityc-opt.
//
//   scalar_mul(scalar_mul(x, a), b) -> scalar_mul(x, a * b)   (inner one used once)
//   scalar_mul(x, 1.0)              -> x

// A chain folds into one scaling; the folded op keeps the last op's name.
// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
// CHECK-NEXT:    %c = pcg.scalar_mul %x scale 1.5 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// CHECK-NEXT:    func.return %c : !pcg.tensor<4x8xf32>
func.func @main() -> !pcg.tensor<4x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
  %a = pcg.scalar_mul %x scale 0.5 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
  %b = pcg.scalar_mul %a scale 2.0 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
  %c = pcg.scalar_mul %b scale 1.5 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
  func.return %c : !pcg.tensor<4x8xf32>
}

// -----

// Scalings that cancel disappear. Scaling is linear, so partial sums are fine.
// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<4x8xf32, shard [2, 1]>
// CHECK-NEXT:    %r = pcg.relu %x : !pcg.tensor<4x8xf32, shard [2, 1]> -> !pcg.tensor<4x8xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %r : !pcg.tensor<4x8xf32, shard [2, 1]>
func.func @main() -> !pcg.tensor<4x8xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<4x8xf32, shard [2, 1]>
  %a = pcg.scalar_mul %x scale 4.0 : !pcg.tensor<4x8xf32, shard [2, 1]> -> !pcg.tensor<4x8xf32, shard [2, 1]>
  %b = pcg.scalar_mul %a scale 0.25 : !pcg.tensor<4x8xf32, shard [2, 1]> -> !pcg.tensor<4x8xf32, shard [2, 1]>
  %r = pcg.relu %b : !pcg.tensor<4x8xf32, shard [2, 1]> -> !pcg.tensor<4x8xf32, shard [2, 1]>
  func.return %r : !pcg.tensor<4x8xf32, shard [2, 1]>
}

// -----

// The inner scaling is also returned, so it stays; the machine view stays too.
// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<4x8xf32, sum 2>
// CHECK-NEXT:    %a = pcg.scalar_mul %x scale 3.0 : !pcg.tensor<4x8xf32, sum 2> -> !pcg.tensor<4x8xf32, sum 2>
// CHECK-NEXT:    %b = pcg.scalar_mul %a scale 2.0 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x8xf32, sum 2> -> !pcg.tensor<4x8xf32, sum 2>
// CHECK-NEXT:    func.return %a, %b : !pcg.tensor<4x8xf32, sum 2>, !pcg.tensor<4x8xf32, sum 2>
func.func @main() -> (!pcg.tensor<4x8xf32, sum 2>, !pcg.tensor<4x8xf32, sum 2>) {
  %x = "test.op"() : () -> !pcg.tensor<4x8xf32, sum 2>
  %a = pcg.scalar_mul %x scale 3.0 : !pcg.tensor<4x8xf32, sum 2> -> !pcg.tensor<4x8xf32, sum 2>
  %b = pcg.scalar_mul %a scale 2.0 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<4x8xf32, sum 2> -> !pcg.tensor<4x8xf32, sum 2>
  func.return %a, %b : !pcg.tensor<4x8xf32, sum 2>, !pcg.tensor<4x8xf32, sum 2>
}
