// RUN: unityc-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// Errors in the custom syntax of pcg (and parallel) ops:
//   %r = pcg.op %operands, optional %operand, property value {attrs} : operand types -> result types
// are parse errors, located at the op's operands.

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.relu %x, %x : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:15: error: wrong number of operands for pcg.relu
// CHECK-NEXT: %r = pcg.relu %x, %x : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT: {{^              \^+$}}

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.linear %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:17: error: wrong number of operands for pcg.linear

// -----

// Every operand needs a type, and only operands have one.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.relu %x : !pcg.tensor<8x16xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:15: error: pcg.relu has 1 operands but 0 operand types

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.relu %x : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:15: error: pcg.relu has 1 operands but 2 operand types

// -----

// The number of result types must be the op's.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.relu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:15: error: pcg.relu: Expected 1 result, but got 2
// CHECK-NEXT: %r = pcg.relu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32>
// CHECK-NEXT: {{^              \^+$}}

// -----

%w = pcg.weight key "w" : !pcg.tensor<8xf32>, !pcg.tensor<8xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:17: error: pcg.weight: Expected 1 result, but got 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s:2 = pcg.split %x dim 1 sizes [8, 8] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x8xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:1: error: Operation has 1 results, but was given 2 to bind.

// -----

// Properties are keywords of the op; values have the property's kind.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.softmax %x axis 1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:21: error: Expected ':'

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.softmax %x dim "1" : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:25: error: Expected integer literal

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.reshape %x shape 128 : !pcg.tensor<8x16xf32> -> !pcg.tensor<128xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:27: error: '[' expected

// -----

%x = pcg.input key x : !pcg.tensor<8x16xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:20: error: string literal expected

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = parallel.partition %x dim 0 degree two : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:41: error: Expected integer literal

// -----

// Optional operands are named by their keyword.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32>
%b = pcg.weight key "b" : !pcg.tensor<32xf32>
%r = pcg.linear %x, %w, %b : !pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x32xf32>
// CHECK: syntax_invalid.mlir:[[# @LINE - 1]]:17: error: wrong number of operands for pcg.linear
