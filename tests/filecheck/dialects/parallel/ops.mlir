// RUN: unityc-opt %s | filecheck %s
// RUN: %roundtrip-generic
// RUN: unityc-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// The ops of the parallel dialect change how a tensor is held (its shard, sum
// and copy degrees, or its micro-batch size) without changing its logical
// value. Each takes one !pcg.tensor and returns one; the result type follows
// from the operand type and the properties.

// CHECK:      builtin.module {
// Sources used below: an unsharded activation, a batch-sharded one, one split
// on its feature dim, and the partial sums of a reduction-parallel linear.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%xb = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %xb = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%xf = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:   %xf = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
// CHECK-NEXT:   %w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%partial = pcg.linear %xf, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %partial = pcg.linear %xf, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>

//===----------------------------------------------------------------------===//
// partition dim d, degree n: shard[d] *= n (each piece cut into n chunks).
//===----------------------------------------------------------------------===//

%partition = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %partition = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// GENERIC: %partition = "parallel.partition"(%x) <{dim = 0 : i64, degree = 2 : i64}> : (!pcg.tensor<8x16xf32>) -> !pcg.tensor<8x16xf32, shard [2, 1]>
%partition_again = parallel.partition %partition dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [8, 1]>
// CHECK-NEXT:   %partition_again = parallel.partition %partition dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [8, 1]>
%partition_other = parallel.partition %xb dim 1 degree 16 {view = #pcg.view<start 0, [inter 1, intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 16]>
// CHECK-NEXT:   %partition_other = parallel.partition %xb dim 1 degree 16 {view = #pcg.view<start 0, [inter 1, intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 16]>
%partition_sum = parallel.partition %partial dim 0 degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2>
// CHECK-NEXT:   %partition_sum = parallel.partition %partial dim 0 degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2>

//===----------------------------------------------------------------------===//
// combine dim d, degree n: shard[d] /= n (groups of n adjacent shards joined).
//===----------------------------------------------------------------------===//

%combine = parallel.combine %xb dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %combine = parallel.combine %xb dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
%combine_part = parallel.combine %partition_again dim 0 degree 2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32, shard [8, 1]> -> !pcg.tensor<8x16xf32, shard [4, 1]>
// CHECK-NEXT:   %combine_part = parallel.combine %partition_again dim 0 degree 2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32, shard [8, 1]> -> !pcg.tensor<8x16xf32, shard [4, 1]>

//===----------------------------------------------------------------------===//
// replicate degree n: copy *= n.
//===----------------------------------------------------------------------===//

%replicate = parallel.replicate %x degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT:   %replicate = parallel.replicate %x degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 2>
// GENERIC: %replicate = "parallel.replicate"(%x) <{degree = 2 : i64}> : (!pcg.tensor<8x16xf32>) -> !pcg.tensor<8x16xf32, copy 2>
%replicate_b = parallel.replicate %xb degree 3 {view = #pcg.view<start 0, [intra 3, intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1], copy 3>
// CHECK-NEXT:   %replicate_b = parallel.replicate %xb degree 3 {view = #pcg.view<start 0, [intra 3, intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1], copy 3>

//===----------------------------------------------------------------------===//
// reduce degree n: sum /= n (groups of n partial sums added).
//===----------------------------------------------------------------------===//

%reduce = parallel.reduce %partial degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:   %reduce = parallel.reduce %partial degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
// GENERIC: %reduce = "parallel.reduce"(%partial) <{degree = 2 : i64}> {view = #pcg.view<start 0>} : (!pcg.tensor<8x32xf32, sum 2>) -> !pcg.tensor<8x32xf32>
%reduce_half = parallel.reduce %partition_sum degree 2 : !pcg.tensor<8x32xf32, shard [2, 1], sum 2> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:   %reduce_half = parallel.reduce %partition_sum degree 2 : !pcg.tensor<8x32xf32, shard [2, 1], sum 2> -> !pcg.tensor<8x32xf32, shard [2, 1]>

//===----------------------------------------------------------------------===//
// pipeline dim d, degree n: shape[d] /= n (n micro-batches), and its inverse
// batch dim d, degree n: shape[d] *= n. Degrees are kept.
//===----------------------------------------------------------------------===//

%pipeline = parallel.pipeline %x dim 0 degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<2x16xf32>
// CHECK-NEXT:   %pipeline = parallel.pipeline %x dim 0 degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<2x16xf32>
%batch = parallel.batch %pipeline dim 0 degree 4 : !pcg.tensor<2x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %batch = parallel.batch %pipeline dim 0 degree 4 : !pcg.tensor<2x16xf32> -> !pcg.tensor<8x16xf32>
%pipeline_b = parallel.pipeline %xb dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<4x16xf32, shard [2, 1]>
// CHECK-NEXT:   %pipeline_b = parallel.pipeline %xb dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<4x16xf32, shard [2, 1]>
%batch_b = parallel.batch %pipeline_b dim 0 degree 2 : !pcg.tensor<4x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %batch_b = parallel.batch %pipeline_b dim 0 degree 2 : !pcg.tensor<4x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%pipeline_f = parallel.pipeline %xf dim 0 degree 8 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<1x16xf32, shard [1, 2]>
// CHECK-NEXT:   %pipeline_f = parallel.pipeline %xf dim 0 degree 8 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<1x16xf32, shard [1, 2]>

//===----------------------------------------------------------------------===//
// Collectives: each does the work of two of the ops above at once.
//===----------------------------------------------------------------------===//

// all_reduce degree n = reduce n, then replicate n: sum /= n, copy *= n.
%all_reduce = parallel.all_reduce %partial degree 2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:   %all_reduce = parallel.all_reduce %partial degree 2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, copy 2>
// reduce_scatter dim d, degree n = reduce n, then partition d by n.
%reduce_scatter = parallel.reduce_scatter %partial dim 1 degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:   %reduce_scatter = parallel.reduce_scatter %partial dim 1 degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, shard [1, 2]>
// all_gather dim d, degree n = combine d by n, then replicate n.
%all_gather = parallel.all_gather %xf dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT:   %all_gather = parallel.all_gather %xf dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, copy 2>
// all_to_all src a, dst b, degree n = combine a by n, then partition b by n.
%all_to_all = parallel.all_to_all %xf src 1 dst 0 degree 2 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %all_to_all = parallel.all_to_all %xf src 1 dst 0 degree 2 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// GENERIC: %all_to_all = "parallel.all_to_all"(%xf) <{src = 1 : i64, dst = 0 : i64, degree = 2 : i64}> : (!pcg.tensor<8x16xf32, shard [1, 2]>) -> !pcg.tensor<8x16xf32, shard [2, 1]>
%all_to_all_part = parallel.all_to_all %partition_other src 1 dst 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 16]> -> !pcg.tensor<8x16xf32, shard [4, 8]>
// CHECK-NEXT:   %all_to_all_part = parallel.all_to_all %partition_other src 1 dst 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 16]> -> !pcg.tensor<8x16xf32, shard [4, 8]>
// sum_concat a, b holds a's partial sums and then b's: its logical value is
// a + b and nothing moves (Unity's "concat on the replica dim").
%sum_concat = parallel.sum_concat %xb, %xb : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1], sum 2>
// CHECK-NEXT:   %sum_concat = parallel.sum_concat %xb, %xb : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1], sum 2>
// GENERIC: %sum_concat = "parallel.sum_concat"(%xb, %xb) : (!pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]>) -> !pcg.tensor<8x16xf32, shard [2, 1], sum 2>
// CHECK-NEXT: }
