// RUN: unityc-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Each chunk holds one parallel op that the verifier rejects. ("test.op"
// stands for any producer, e.g. of partial sums.)

//===----------------------------------------------------------------------===//
// Degrees are at least 2 (a degree of 1 would do nothing).
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.partition %x dim 0 degree 1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.partition: degree must be at least 2, got 1
// CHECK-NEXT: %p = parallel.partition %x dim 0 degree 1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT: ^^

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.replicate %x degree 0 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.replicate: degree must be at least 2, got 0

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.combine %x dim 0 degree -2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.combine: degree must be at least 2, got -2

// -----

%x = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>
%p = parallel.all_reduce %x degree 1 : !pcg.tensor<8x16xf32, sum 2> -> !pcg.tensor<8x16xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_reduce: degree must be at least 2, got 1

// -----

//===----------------------------------------------------------------------===//
// The degree must divide what it splits or merges.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.partition %x dim 0 degree 3 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.partition: degree 3 does not divide the piece size of dimension 0 (8)

// -----

// Pieces of 8x16 cut 4 ways on dim 0 have 2 rows: they cannot be cut 4 ways again.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [4, 1]>
%p = parallel.partition %x dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.partition: degree 4 does not divide the piece size of dimension 0 (2)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.combine %x dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.combine: degree 4 does not divide the shard degree of dimension 0 (2)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.combine %x dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.combine: degree 2 does not divide the shard degree of dimension 1 (1)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.reduce %x degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.reduce: degree 2 does not divide the sum degree (1)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, copy 2>
%l = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<32x16xf32, copy 2> -> !pcg.tensor<8x32xf32, shard [2, 1]>
%p = parallel.reduce %l degree 2 : !pcg.tensor<8x32xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.reduce: degree 2 does not divide the sum degree (1)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.pipeline %x dim 0 degree 3 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.pipeline: degree 3 does not divide the size of dimension 0 (8)

// -----

// Micro-batches of 4 rows cannot keep 8 shards.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [8, 1]>
%p = parallel.pipeline %x dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [8, 1]> -> !pcg.tensor<4x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.pipeline: cannot apply to !pcg.tensor<8x16xf32, shard [8, 1]>: shard degree 8 does not divide dimension 0 of size 4

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.all_reduce %x degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_reduce: degree 2 does not divide the sum degree (1)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%l = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
%p = parallel.reduce_scatter %l dim 0 degree 4 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, shard [4, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.reduce_scatter: degree 4 does not divide the sum degree (2)

// -----

%x = "test.op"() : () -> !pcg.tensor<3x16xf32, sum 2>
%p = parallel.reduce_scatter %x dim 0 degree 2 : !pcg.tensor<3x16xf32, sum 2> -> !pcg.tensor<3x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.reduce_scatter: degree 2 does not divide the piece size of dimension 0 (3)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.all_gather %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_gather: degree 2 does not divide the shard degree of dimension 0 (1)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.all_to_all %x src 0 dst 1 degree 4 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_to_all: degree 4 does not divide the shard degree of dimension 0 (2)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x3xf32, shard [2, 1]>
%p = parallel.all_to_all %x src 0 dst 1 degree 2 : !pcg.tensor<8x3xf32, shard [2, 1]> -> !pcg.tensor<8x3xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_to_all: degree 2 does not divide the piece size of dimension 1 (3)

// -----

//===----------------------------------------------------------------------===//
// Dimensions must exist (no negative indexing).
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.partition %x dim 2 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.partition: dim 2 is out of range for rank 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.partition %x dim -1 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.partition: dim -1 is out of range for rank 2

// -----

%x = pcg.input key "x" : !pcg.tensor<f32, copy 2>
%p = parallel.combine %x dim 0 degree 2 : !pcg.tensor<f32, copy 2> -> !pcg.tensor<f32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.combine: dim 0 is out of range for rank 0

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.pipeline %x dim 5 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.pipeline: dim 5 is out of range for rank 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.batch %x dim 3 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.batch: dim 3 is out of range for rank 2

// -----

%x = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>
%p = parallel.reduce_scatter %x dim 2 degree 2 : !pcg.tensor<8x16xf32, sum 2> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.reduce_scatter: dim 2 is out of range for rank 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.all_gather %x dim 2 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_gather: dim 2 is out of range for rank 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.all_to_all %x src 2 dst 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_to_all: src 2 is out of range for rank 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.all_to_all %x src 0 dst 2 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_to_all: dst 2 is out of range for rank 2

// -----

//===----------------------------------------------------------------------===//
// all_to_all moves shards between two different dims.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.all_to_all %x src 0 dst 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.all_to_all: src and dst must differ

// -----

//===----------------------------------------------------------------------===//
// Result types, properties and machine views.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.partition: result 0 has type !pcg.tensor<8x16xf32, shard [1, 2]>, but its operands give !pcg.tensor<8x16xf32, shard [2, 1]>

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.replicate %x degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.replicate: result 0 has type !pcg.tensor<8x16xf32, sum 2>, but its operands give !pcg.tensor<8x16xf32, copy 2>

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.pipeline %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.pipeline: result 0 has type !pcg.tensor<8x16xf32>, but its operands give !pcg.tensor<4x16xf32>

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.partition %x degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.partition: property 'dim' expected in operation 'parallel.partition'

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%p = parallel.partition %x dim 0 degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.partition: machine view has 0 dimensions but the op's task space has 1 of degree > 1 ([2, 1, 1, 1])

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%p = parallel.replicate %x degree 2 {view = #pcg.view<start 0, [intra 1, intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1], copy 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.replicate: machine view places two tasks on one device (task [1, 0])

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%y = pcg.input key "y" : !pcg.tensor<8x16xf32>
%s = parallel.sum_concat %x, %y : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: parallel.sum_concat: operands must have one type, got !pcg.tensor<8x16xf32, shard [2, 1]> and !pcg.tensor<8x16xf32>
