// RUN: unityc-opt %s | filecheck %s
// RUN: %roundtrip-generic

// The parallel tensor type `!pcg.tensor<SHAPE x ELEMENT, shard [..], sum n, copy n>`:
// a logical tensor held as prod(shard) * sum * copy pieces. `shard` gives the
// number of equal parts each dimension is cut into, `sum` the number of
// partial values that add up to the logical value, `copy` the number of
// identical copies of each piece. Every degree defaults to 1, and degrees of 1
// are not printed.

// CHECK: builtin.module {

//===----------------------------------------------------------------------===//
// Rank 0: a scalar has no shard list, but may hold partial sums and copies.
//===----------------------------------------------------------------------===//

%scalar = "test.op"() : () -> !pcg.tensor<f32>
// CHECK-NEXT: %scalar = "test.op"() : () -> !pcg.tensor<f32>
%scalar_sum = "test.op"() : () -> !pcg.tensor<f32, sum 4>
// CHECK-NEXT: %scalar_sum = "test.op"() : () -> !pcg.tensor<f32, sum 4>
%scalar_copy = "test.op"() : () -> !pcg.tensor<f64, copy 3>
// CHECK-NEXT: %scalar_copy = "test.op"() : () -> !pcg.tensor<f64, copy 3>
%scalar_both = "test.op"() : () -> !pcg.tensor<f32, sum 2, copy 8>
// CHECK-NEXT: %scalar_both = "test.op"() : () -> !pcg.tensor<f32, sum 2, copy 8>
%scalar_no_shards = "test.op"() : () -> !pcg.tensor<f32, shard []>
// CHECK-NEXT: %scalar_no_shards = "test.op"() : () -> !pcg.tensor<f32>

//===----------------------------------------------------------------------===//
// Shard only: one degree per dimension, each dividing its dimension.
//===----------------------------------------------------------------------===//

%vector = "test.op"() : () -> !pcg.tensor<16xf32, shard [4]>
// CHECK-NEXT: %vector = "test.op"() : () -> !pcg.tensor<16xf32, shard [4]>
%rows = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT: %rows = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [2, 1]>
%cols = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [1, 16]>
// CHECK-NEXT: %cols = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [1, 16]>
%grid = "test.op"() : () -> !pcg.tensor<2x3x4x5xf32, shard [2, 3, 4, 5]>
// CHECK-NEXT: %grid = "test.op"() : () -> !pcg.tensor<2x3x4x5xf32, shard [2, 3, 4, 5]>
%big = "test.op"() : () -> !pcg.tensor<1024x4096xbf16, shard [8, 64]>
// CHECK-NEXT: %big = "test.op"() : () -> !pcg.tensor<1024x4096xbf16, shard [8, 64]>

//===----------------------------------------------------------------------===//
// Sum only (partial sums, as produced by a reduction-parallel op) and copy only
// (replicas, as read by data-parallel tasks).
//===----------------------------------------------------------------------===//

%partial = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>
// CHECK-NEXT: %partial = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>
%partial_odd = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 3>
// CHECK-NEXT: %partial_odd = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 3>
%replicas = "test.op"() : () -> !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT: %replicas = "test.op"() : () -> !pcg.tensor<8x16xf32, copy 2>
%replicas_odd = "test.op"() : () -> !pcg.tensor<7xf32, copy 5>
// CHECK-NEXT: %replicas_odd = "test.op"() : () -> !pcg.tensor<7xf32, copy 5>

//===----------------------------------------------------------------------===//
// All degrees together, printed in the order shard, sum, copy whatever the
// order they were written in; explicit degrees of 1 are dropped.
//===----------------------------------------------------------------------===//

%all = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [2, 1], sum 2, copy 2>
// CHECK-NEXT: %all = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [2, 1], sum 2, copy 2>
%shard_sum = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [2, 4], sum 2>
// CHECK-NEXT: %shard_sum = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [2, 4], sum 2>
%shard_copy = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [1, 2], copy 4>
// CHECK-NEXT: %shard_copy = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [1, 2], copy 4>
%sum_copy = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2, copy 2>
// CHECK-NEXT: %sum_copy = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2, copy 2>
%reordered = "test.op"() : () -> !pcg.tensor<8x16xf32, copy 3, sum 2, shard [2, 4]>
// CHECK-NEXT: %reordered = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [2, 4], sum 2, copy 3>
%explicit_ones = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [1, 1], sum 1, copy 1>
// CHECK-NEXT: %explicit_ones = "test.op"() : () -> !pcg.tensor<8x16xf32>
%some_ones = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [1, 1], sum 2, copy 1>
// CHECK-NEXT: %some_ones = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>

//===----------------------------------------------------------------------===//
// Element types: f16, bf16, f32, f64, i1, i32, i64.
//===----------------------------------------------------------------------===//

%f16 = "test.op"() : () -> !pcg.tensor<4x8xf16, shard [2, 1]>
// CHECK-NEXT: %f16 = "test.op"() : () -> !pcg.tensor<4x8xf16, shard [2, 1]>
%bf16 = "test.op"() : () -> !pcg.tensor<4x8xbf16, sum 2>
// CHECK-NEXT: %bf16 = "test.op"() : () -> !pcg.tensor<4x8xbf16, sum 2>
%f32 = "test.op"() : () -> !pcg.tensor<4x8xf32, copy 2>
// CHECK-NEXT: %f32 = "test.op"() : () -> !pcg.tensor<4x8xf32, copy 2>
%f64 = "test.op"() : () -> !pcg.tensor<4x8xf64, shard [4, 8], sum 2, copy 2>
// CHECK-NEXT: %f64 = "test.op"() : () -> !pcg.tensor<4x8xf64, shard [4, 8], sum 2, copy 2>
%i1 = "test.op"() : () -> !pcg.tensor<4x8xi1>
// CHECK-NEXT: %i1 = "test.op"() : () -> !pcg.tensor<4x8xi1>
%i32 = "test.op"() : () -> !pcg.tensor<4x8xi32, shard [1, 2]>
// CHECK-NEXT: %i32 = "test.op"() : () -> !pcg.tensor<4x8xi32, shard [1, 2]>
%i64 = "test.op"() : () -> !pcg.tensor<4xi64, shard [2], copy 2>
// CHECK-NEXT: %i64 = "test.op"() : () -> !pcg.tensor<4xi64, shard [2], copy 2>
%scalars:7 = "test.op"() : () -> (!pcg.tensor<f16>, !pcg.tensor<bf16>, !pcg.tensor<f32>, !pcg.tensor<f64>, !pcg.tensor<i1>, !pcg.tensor<i32>, !pcg.tensor<i64>)
// CHECK-NEXT: %scalars, %scalars_1, %scalars_2, %scalars_3, %scalars_4, %scalars_5, %scalars_6 = "test.op"() : () -> (!pcg.tensor<f16>, !pcg.tensor<bf16>, !pcg.tensor<f32>, !pcg.tensor<f64>, !pcg.tensor<i1>, !pcg.tensor<i32>, !pcg.tensor<i64>)

//===----------------------------------------------------------------------===//
// The type anywhere a type may appear: attributes, block arguments, signatures.
//===----------------------------------------------------------------------===//

"test.op"() {type = !pcg.tensor<8x16xf32, shard [2, 1], sum 2, copy 2>, types = [!pcg.tensor<f32>, !pcg.tensor<2xi64, copy 2>]} : () -> ()
// CHECK-NEXT: "test.op"() {type = !pcg.tensor<8x16xf32, shard [2, 1], sum 2, copy 2>, types = [!pcg.tensor<f32>, !pcg.tensor<2xi64, copy 2>]} : () -> ()

func.func @signature(%a: !pcg.tensor<4x4xi32, shard [4, 1]>, %b: !pcg.tensor<f16, sum 2>) -> (!pcg.tensor<f16, sum 2>, !pcg.tensor<4x4xi32, shard [4, 1]>) {
  func.return %b, %a : !pcg.tensor<f16, sum 2>, !pcg.tensor<4x4xi32, shard [4, 1]>
}
// CHECK-NEXT: func.func @signature(%a: !pcg.tensor<4x4xi32, shard [4, 1]>, %b: !pcg.tensor<f16, sum 2>) -> (!pcg.tensor<f16, sum 2>, !pcg.tensor<4x4xi32, shard [4, 1]>) {
// CHECK-NEXT:   func.return %b, %a : !pcg.tensor<f16, sum 2>, !pcg.tensor<4x4xi32, shard [4, 1]>
// CHECK-NEXT: }
// CHECK-NEXT: }
