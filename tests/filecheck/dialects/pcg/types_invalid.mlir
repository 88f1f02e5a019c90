// RUN: unityc-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// A !pcg.tensor whose degrees are impossible for its shape does not parse:
// the error points at the type's parameters.

// One shard degree per dimension.
"test.op"() : () -> !pcg.tensor<8x16xf32, shard [2]>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: 1 shard degrees for a rank-2 tensor
// CHECK-NEXT: "test.op"() : () -> !pcg.tensor<8x16xf32, shard [2]>
// CHECK-NEXT: {{^ {31}\^+$}}

// -----

"test.op"() : () -> !pcg.tensor<8xf32, shard [2, 1]>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: 2 shard degrees for a rank-1 tensor

// -----

"test.op"() : () -> !pcg.tensor<f32, shard [1]>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: 1 shard degrees for a rank-0 tensor

// -----

// A shard degree must divide its dimension.
"test.op"() : () -> !pcg.tensor<8x16xf32, shard [3, 1]>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: shard degree 3 does not divide dimension 0 of size 8

// -----

"test.op"() : () -> !pcg.tensor<8x16xf32, shard [1, 32]>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: shard degree 32 does not divide dimension 1 of size 16

// -----

"test.op"() : () -> !pcg.tensor<8x16xf32, shard [0, 1]>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: shard degree 0 of dimension 0 must be at least 1

// -----

"test.op"() : () -> !pcg.tensor<8x16xf32, shard [1, -2]>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: shard degree -2 of dimension 1 must be at least 1

// -----

// Sizes are static and positive.
"test.op"() : () -> !pcg.tensor<8x0xf32>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: dimension 1 has size 0; sizes must be positive

// -----

"test.op"() : () -> !pcg.tensor<?x16xf32>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: dimension 0 is dynamic ('?'); sizes must be static

// -----

// Sum and copy degrees are at least 1.
"test.op"() : () -> !pcg.tensor<8x16xf32, sum 0>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: sum and copy degrees must be at least 1

// -----

"test.op"() : () -> !pcg.tensor<8x16xf32, copy 0>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: sum and copy degrees must be at least 1

// -----

"test.op"() : () -> !pcg.tensor<f32, sum -2>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: invalid !pcg.tensor: sum and copy degrees must be at least 1

// -----

// Element types are f16, bf16, f32, f64, i1, i32 and i64 only.
"test.op"() : () -> !pcg.tensor<8x16xi8>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: unsupported element type i8

// -----

"test.op"() : () -> !pcg.tensor<8xf80>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: unsupported element type f80

// -----

"test.op"() : () -> !pcg.tensor<8xindex>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: unsupported element type index

// -----

"test.op"() : () -> !pcg.tensor<8xui32>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: unsupported element type ui32

// -----

"test.op"() : () -> !pcg.tensor<8xcomplex<f32>>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: unsupported element type complex<f32>

// -----

"test.op"() : () -> !pcg.tensor<8xtensor<2xf32>>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:32: error: unsupported element type tensor<2xf32>

// -----

// Only the keywords shard, sum and copy, each after a comma.
"test.op"() : () -> !pcg.tensor<8x16xf32, split [2, 1]>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:43: error: Expected one of 'copy', 'shard', 'sum'

// -----

"test.op"() : () -> !pcg.tensor<8x16xf32 sum 2>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:42: error: '>' expected

// -----

"test.op"() : () -> !pcg.tensor<8x16xf32, shard 2>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:49: error: '[' expected

// -----

// The element type is required.
"test.op"() : () -> !pcg.tensor<8x16>
// CHECK: types_invalid.mlir:[[# @LINE - 1]]:37: error: Expected 'x' in shape delimiter, got GREATER
