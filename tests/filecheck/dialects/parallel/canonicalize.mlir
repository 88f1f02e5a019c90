// RUN: unityc-opt %s -p canonicalize | filecheck %s

// Canonicalization of the parallel dialect: an op and its inverse cancel, and
// two ops of one kind in a row merge into one with the product of the degrees.
// Ops left without uses are removed. Pairs that act on different dims, or by
// different degrees, stay as they are.

//===----------------------------------------------------------------------===//
// Inverse pairs cancel.
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @combine_of_partition
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    func.return %x : !pcg.tensor<8x16xf32>
// CHECK-NEXT:  }
func.func @combine_of_partition() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %p = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  %c = parallel.combine %p dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
  func.return %c : !pcg.tensor<8x16xf32>
}

// CHECK-LABEL: func.func @partition_of_combine
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [4, 2], sum 2>
// CHECK-NEXT:    func.return %x : !pcg.tensor<8x16xf32, shard [4, 2], sum 2>
// CHECK-NEXT:  }
func.func @partition_of_combine() -> !pcg.tensor<8x16xf32, shard [4, 2], sum 2> {
  %x = "test.op"() : () -> !pcg.tensor<8x16xf32, shard [4, 2], sum 2>
  %c = parallel.combine %x dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [4, 2], sum 2> -> !pcg.tensor<8x16xf32, shard [4, 1], sum 2>
  %p = parallel.partition %c dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [4, 1], sum 2> -> !pcg.tensor<8x16xf32, shard [4, 2], sum 2>
  func.return %p : !pcg.tensor<8x16xf32, shard [4, 2], sum 2>
}

// CHECK-LABEL: func.func @batch_of_pipeline
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %x : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @batch_of_pipeline() -> !pcg.tensor<8x16xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
  %m = parallel.pipeline %x dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<2x16xf32, shard [2, 1]>
  %b = parallel.batch %m dim 0 degree 4 : !pcg.tensor<2x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  func.return %b : !pcg.tensor<8x16xf32, shard [2, 1]>
}

// CHECK-LABEL: func.func @pipeline_of_batch
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x16xf32>
// CHECK-NEXT:    func.return %x : !pcg.tensor<2x16xf32>
// CHECK-NEXT:  }
func.func @pipeline_of_batch() -> !pcg.tensor<2x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x16xf32>
  %b = parallel.batch %x dim 0 degree 4 : !pcg.tensor<2x16xf32> -> !pcg.tensor<8x16xf32>
  %m = parallel.pipeline %b dim 0 degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<2x16xf32>
  func.return %m : !pcg.tensor<2x16xf32>
}

// The inner op stays when something else still uses it.
// CHECK-LABEL: func.func @cancel_with_other_use
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %p = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %x, %p : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @cancel_with_other_use() -> (!pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32, shard [2, 1]>) {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %p = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  %c = parallel.combine %p dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
  func.return %c, %p : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32, shard [2, 1]>
}

//===----------------------------------------------------------------------===//
// Repeated ops merge.
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @merge_partitions
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %p3 = parallel.partition %x dim 0 degree 8 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [8, 1]>
// CHECK-NEXT:    func.return %p3 : !pcg.tensor<8x16xf32, shard [8, 1]>
// CHECK-NEXT:  }
func.func @merge_partitions() -> !pcg.tensor<8x16xf32, shard [8, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %p1 = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  %p2 = parallel.partition %p1 dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [4, 1]>
  %p3 = parallel.partition %p2 dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32, shard [8, 1]>
  func.return %p3 : !pcg.tensor<8x16xf32, shard [8, 1]>
}

// CHECK-LABEL: func.func @merge_combines
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 16]>
// CHECK-NEXT:    %c2 = parallel.combine %x dim 1 degree 8 : !pcg.tensor<8x16xf32, shard [1, 16]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:    func.return %c2 : !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:  }
func.func @merge_combines() -> !pcg.tensor<8x16xf32, shard [1, 2]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 16]>
  %c1 = parallel.combine %x dim 1 degree 4 : !pcg.tensor<8x16xf32, shard [1, 16]> -> !pcg.tensor<8x16xf32, shard [1, 4]>
  %c2 = parallel.combine %c1 dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [1, 4]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
  func.return %c2 : !pcg.tensor<8x16xf32, shard [1, 2]>
}

// CHECK-LABEL: func.func @merge_replicates
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    %r2 = parallel.replicate %x degree 6 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1], copy 6>
// CHECK-NEXT:    func.return %r2 : !pcg.tensor<8x16xf32, shard [2, 1], copy 6>
// CHECK-NEXT:  }
func.func @merge_replicates() -> !pcg.tensor<8x16xf32, shard [2, 1], copy 6> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
  %r1 = parallel.replicate %x degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1], copy 2>
  %r2 = parallel.replicate %r1 degree 3 : !pcg.tensor<8x16xf32, shard [2, 1], copy 2> -> !pcg.tensor<8x16xf32, shard [2, 1], copy 6>
  func.return %r2 : !pcg.tensor<8x16xf32, shard [2, 1], copy 6>
}

// CHECK-LABEL: func.func @merge_reduces
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 8>
// CHECK-NEXT:    %r2 = parallel.reduce %x degree 8 : !pcg.tensor<8x16xf32, sum 8> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:    func.return %r2 : !pcg.tensor<8x16xf32>
// CHECK-NEXT:  }
func.func @merge_reduces() -> !pcg.tensor<8x16xf32> {
  %x = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 8>
  %r1 = parallel.reduce %x degree 2 : !pcg.tensor<8x16xf32, sum 8> -> !pcg.tensor<8x16xf32, sum 4>
  %r2 = parallel.reduce %r1 degree 4 : !pcg.tensor<8x16xf32, sum 4> -> !pcg.tensor<8x16xf32>
  func.return %r2 : !pcg.tensor<8x16xf32>
}

// Rewrites compose: the two partitions merge into one by 4, which the combine
// by 4 then cancels.
// CHECK-LABEL: func.func @merge_then_cancel
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    func.return %x : !pcg.tensor<8x16xf32>
// CHECK-NEXT:  }
func.func @merge_then_cancel() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %p1 = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  %p2 = parallel.partition %p1 dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [4, 1]>
  %c = parallel.combine %p2 dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32>
  func.return %c : !pcg.tensor<8x16xf32>
}

// A merge keeps the first op when it has another use.
// CHECK-LABEL: func.func @merge_with_other_use
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %r1 = parallel.replicate %x degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT:    %r2 = parallel.replicate %x degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 4>
// CHECK-NEXT:    func.return %r1, %r2 : !pcg.tensor<8x16xf32, copy 2>, !pcg.tensor<8x16xf32, copy 4>
// CHECK-NEXT:  }
func.func @merge_with_other_use() -> (!pcg.tensor<8x16xf32, copy 2>, !pcg.tensor<8x16xf32, copy 4>) {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %r1 = parallel.replicate %x degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 2>
  %r2 = parallel.replicate %r1 degree 2 : !pcg.tensor<8x16xf32, copy 2> -> !pcg.tensor<8x16xf32, copy 4>
  func.return %r1, %r2 : !pcg.tensor<8x16xf32, copy 2>, !pcg.tensor<8x16xf32, copy 4>
}

// Nested pairs cancel from the inside out.
// CHECK-LABEL: func.func @nested_pairs
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    func.return %x : !pcg.tensor<8x16xf32>
// CHECK-NEXT:  }
func.func @nested_pairs() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %p1 = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  %p2 = parallel.partition %p1 dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 2]>
  %c1 = parallel.combine %p2 dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [2, 2]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  %c2 = parallel.combine %c1 dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
  func.return %c2 : !pcg.tensor<8x16xf32>
}

//===----------------------------------------------------------------------===//
// Pairs that must not fold.
//===----------------------------------------------------------------------===//

// Combining another dim than the one partitioned.
// CHECK-LABEL: func.func @combine_other_dim
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:    %p = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [2, 2]>
// CHECK-NEXT:    %c = parallel.combine %p dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [2, 2]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %c : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @combine_other_dim() -> !pcg.tensor<8x16xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
  %p = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [2, 2]>
  %c = parallel.combine %p dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [2, 2]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  func.return %c : !pcg.tensor<8x16xf32, shard [2, 1]>
}

// Combining by a smaller degree than the one partitioned.
// CHECK-LABEL: func.func @combine_other_degree
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %p = parallel.partition %x dim 0 degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [4, 1]>
// CHECK-NEXT:    %c = parallel.combine %p dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %c : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @combine_other_degree() -> !pcg.tensor<8x16xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %p = parallel.partition %x dim 0 degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [4, 1]>
  %c = parallel.combine %p dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  func.return %c : !pcg.tensor<8x16xf32, shard [2, 1]>
}

// CHECK-LABEL: func.func @partition_other_dim_than_combined
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    %c = parallel.combine %x dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %p = parallel.partition %c dim 1 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:    func.return %p : !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:  }
func.func @partition_other_dim_than_combined() -> !pcg.tensor<8x16xf32, shard [1, 2]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
  %c = parallel.combine %x dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
  %p = parallel.partition %c dim 1 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [1, 2]>
  func.return %p : !pcg.tensor<8x16xf32, shard [1, 2]>
}

// CHECK-LABEL: func.func @partition_other_degree_than_combined
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [4, 1]>
// CHECK-NEXT:    %c = parallel.combine %x dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %p = parallel.partition %c dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %p : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @partition_other_degree_than_combined() -> !pcg.tensor<8x16xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [4, 1]>
  %c = parallel.combine %x dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32>
  %p = parallel.partition %c dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  func.return %p : !pcg.tensor<8x16xf32, shard [2, 1]>
}

// CHECK-LABEL: func.func @batch_other_dim
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %m = parallel.pipeline %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<4x16xf32>
// CHECK-NEXT:    %b = parallel.batch %m dim 1 degree 2 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x32xf32>
// CHECK-NEXT:    func.return %b : !pcg.tensor<4x32xf32>
// CHECK-NEXT:  }
func.func @batch_other_dim() -> !pcg.tensor<4x32xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %m = parallel.pipeline %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<4x16xf32>
  %b = parallel.batch %m dim 1 degree 2 : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x32xf32>
  func.return %b : !pcg.tensor<4x32xf32>
}

// CHECK-LABEL: func.func @batch_other_degree
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %m = parallel.pipeline %x dim 0 degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<2x16xf32>
// CHECK-NEXT:    %b = parallel.batch %m dim 0 degree 2 : !pcg.tensor<2x16xf32> -> !pcg.tensor<4x16xf32>
// CHECK-NEXT:    func.return %b : !pcg.tensor<4x16xf32>
// CHECK-NEXT:  }
func.func @batch_other_degree() -> !pcg.tensor<4x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %m = parallel.pipeline %x dim 0 degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<2x16xf32>
  %b = parallel.batch %m dim 0 degree 2 : !pcg.tensor<2x16xf32> -> !pcg.tensor<4x16xf32>
  func.return %b : !pcg.tensor<4x16xf32>
}

// Partitions of different dims do not merge.
// CHECK-LABEL: func.func @partitions_of_two_dims
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %p1 = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    %p2 = parallel.partition %p1 dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 2]>
// CHECK-NEXT:    func.return %p2 : !pcg.tensor<8x16xf32, shard [2, 2]>
// CHECK-NEXT:  }
func.func @partitions_of_two_dims() -> !pcg.tensor<8x16xf32, shard [2, 2]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %p1 = parallel.partition %x dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  %p2 = parallel.partition %p1 dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 2]>
  func.return %p2 : !pcg.tensor<8x16xf32, shard [2, 2]>
}

// Nor do combines of different dims.
// CHECK-LABEL: func.func @combines_of_two_dims
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 2]>
// CHECK-NEXT:    %c1 = parallel.combine %x dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:    %c2 = parallel.combine %c1 dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:    func.return %c2 : !pcg.tensor<8x16xf32>
// CHECK-NEXT:  }
func.func @combines_of_two_dims() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 2]>
  %c1 = parallel.combine %x dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
  %c2 = parallel.combine %c1 dim 1 degree 2 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32>
  func.return %c2 : !pcg.tensor<8x16xf32>
}

// reduce then replicate is not an identity (fuse-collectives makes it an
// all_reduce), and replicate then reduce is not a valid pair at all.
// CHECK-LABEL: func.func @reduce_then_replicate
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>
// CHECK-NEXT:    %r = parallel.reduce %x degree 2 : !pcg.tensor<8x16xf32, sum 2> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %c = parallel.replicate %r degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT:    func.return %c : !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT:  }
func.func @reduce_then_replicate() -> !pcg.tensor<8x16xf32, copy 2> {
  %x = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>
  %r = parallel.reduce %x degree 2 : !pcg.tensor<8x16xf32, sum 2> -> !pcg.tensor<8x16xf32>
  %c = parallel.replicate %r degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, copy 2>
  func.return %c : !pcg.tensor<8x16xf32, copy 2>
}

// Collectives are left alone: a reduce_scatter followed by an all_gather
// computes an all_reduce, but is not rewritten into one.
// CHECK-LABEL: func.func @collectives
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>
// CHECK-NEXT:    %s = parallel.reduce_scatter %x dim 0 degree 2 : !pcg.tensor<8x16xf32, sum 2> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    %g = parallel.all_gather %s dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT:    func.return %g : !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT:  }
func.func @collectives() -> !pcg.tensor<8x16xf32, copy 2> {
  %x = "test.op"() : () -> !pcg.tensor<8x16xf32, sum 2>
  %s = parallel.reduce_scatter %x dim 0 degree 2 : !pcg.tensor<8x16xf32, sum 2> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  %g = parallel.all_gather %s dim 0 degree 2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, copy 2>
  func.return %g : !pcg.tensor<8x16xf32, copy 2>
}
