// unityc-import on element-wise ops and reductions (factories of
// Inputs/ops.py). Each forward returns (loss, output); the loss is an
// mse_loss against a `target` input unless the factory is about the loss.

//===----------------------------------------------------------------------===//
// Unary ops map one to one: relu, gelu (exact, and tanh-approximated with the
// `tanh` flag), sigmoid, tanh, exp, sqrt, neg. rsqrt has no op of its own: it
// is pcg.pow with exponent -0.5.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:unary | filecheck %s --check-prefix=UNARY
// UNARY:      %relu = pcg.relu %x : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %gelu = pcg.gelu %relu : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %gelu_1 = pcg.gelu %gelu tanh : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %sigmoid = pcg.sigmoid %gelu_1 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %tanh = pcg.tanh %sigmoid : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %exp = pcg.exp %tanh : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %sqrt = pcg.sqrt %exp : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %rsqrt = pcg.pow %sqrt exponent -0.5 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %neg = pcg.neg %rsqrt : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// UNARY-NEXT: %mse_loss = pcg.mse_loss %neg, %target

//===----------------------------------------------------------------------===//
// Binary ops. Between tensors: add, sub, mul, div. With a Python scalar:
//   x + s -> scalar_add s        x * s -> scalar_mul s
//   x - s -> scalar_add -s       x / s -> scalar_mul 1/s
//   s - x -> neg, scalar_add s   s / x -> pow -1, scalar_mul s
// and x + 0, x * 1 vanish. --check compares the interpreter on this graph
// with the module itself, so the rewrites are also checked to be exact.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:binary --check -o %t.binary.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=BINARY < %t.binary.mlir
// MATCHES: check: the imported graph matches the module
// BINARY:      %add = pcg.add %x, %y : !pcg.tensor<4x8xf32>, !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %sub = pcg.sub %x, %y : !pcg.tensor<4x8xf32>, !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %mul = pcg.mul %add, %sub : !pcg.tensor<4x8xf32>, !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %div = pcg.div %mul, %y : !pcg.tensor<4x8xf32>, !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %add_1 = pcg.scalar_add %div value 2.0 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %mul_1 = pcg.scalar_mul %add_1 scale 3.0 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %sub_1 = pcg.scalar_add %mul_1 value -0.5 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %sub_2 = pcg.neg %sub_1 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %sub_3 = pcg.scalar_add %sub_2 value 1.0 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %reciprocal = pcg.pow %sub_3 exponent -1.0 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %mul_2 = pcg.scalar_mul %reciprocal scale 4.0 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %div_1 = pcg.scalar_mul %mul_2 scale 0.125 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// BINARY-NEXT: %mse_loss = pcg.mse_loss %div_1, %target
// BINARY-NEXT: func.return %mse_loss, %div_1

//===----------------------------------------------------------------------===//
// Broadcasting. An explicit `row.expand(4, 8)` feeding an add leaves no op:
// the add takes the [1, 8] row and broadcasts it itself (numpy rules). A [8]
// weight multiplies a [4, 8] tensor the same way.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:broadcast | filecheck %s --check-prefix=BROADCAST
// BROADCAST:      %row = pcg.input key "row" : !pcg.tensor<1x8xf32>
// BROADCAST-NOT:  pcg.reshape
// BROADCAST:      %add = pcg.add %x, %row : !pcg.tensor<4x8xf32>, !pcg.tensor<1x8xf32> -> !pcg.tensor<4x8xf32>
// BROADCAST-NEXT: %mul = pcg.mul %add, %scale : !pcg.tensor<4x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<4x8xf32>
// BROADCAST-NEXT: %mse_loss = pcg.mse_loss %mul, %target

//===----------------------------------------------------------------------===//
// Reductions: sum and mean over one or several dims (negative dims counted
// from the end), with keepdim or without. Squeezing the kept dims is a
// reshape. A full `out.sum()` (the loss here) reduces every dim to a scalar.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:reduce | filecheck %s --check-prefix=REDUCE
// REDUCE:      %x = pcg.input key "x" : !pcg.tensor<2x3x4xf32>
// REDUCE-NEXT: %sum = pcg.reduce %x kind "sum" dims [1] : !pcg.tensor<2x3x4xf32> -> !pcg.tensor<2x4xf32>
// REDUCE-NEXT: %mean = pcg.reduce %x kind "mean" dims [1, 2] keepdim : !pcg.tensor<2x3x4xf32> -> !pcg.tensor<2x1x1xf32>
// REDUCE-NEXT: %sum_1 = pcg.reduce %x kind "sum" dims [2] keepdim : !pcg.tensor<2x3x4xf32> -> !pcg.tensor<2x3x1xf32>
// REDUCE-NEXT: %mean_1 = pcg.reduce %sum kind "mean" dims [1] : !pcg.tensor<2x4xf32> -> !pcg.tensor<2xf32>
// REDUCE-NEXT: %squeeze = pcg.reshape %mean shape [2] : !pcg.tensor<2x1x1xf32> -> !pcg.tensor<2xf32>
// REDUCE-NEXT: %add = pcg.add %mean_1, %squeeze
// REDUCE-NEXT: %mean_2 = pcg.reduce %sum_1 kind "mean" dims [1, 2] : !pcg.tensor<2x3x1xf32> -> !pcg.tensor<2xf32>
// REDUCE-NEXT: %add_1 = pcg.add %add, %mean_2
// REDUCE-NEXT: %sum_2 = pcg.reduce %add_1 kind "sum" dims [0] : !pcg.tensor<2xf32> -> !pcg.tensor<f32>
// REDUCE-NEXT: func.return %sum_2, %add_1 : !pcg.tensor<f32>, !pcg.tensor<2xf32>
