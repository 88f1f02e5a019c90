// RUN: unityc-opt %s -p fuse-collectives | filecheck %s

// fuse-collectives rewrites a pair of parallel ops into the one collective
// that does both at once:
//
//   reduce n       -> replicate n       = all_reduce n
//   reduce n       -> partition d, n    = reduce_scatter d, n
//   combine d, n   -> replicate n       = all_gather d, n
//   combine a, n   -> partition b, n    = all_to_all a -> b, n   (a != b)
//
// The pair fuses only when both ops have the same degree and the first op's
// result has no other use (so no value is lost). The fused op keeps the second
// op's result name and type.

// CHECK-LABEL: func.func @all_reduce
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:    %rep = parallel.all_reduce %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:    func.return %rep : !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:  }
func.func @all_reduce() -> !pcg.tensor<8x32xf32, copy 2> {
  %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
  %red = parallel.reduce %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
  %rep = parallel.replicate %red degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
  func.return %rep : !pcg.tensor<8x32xf32, copy 2>
}

// The other degrees are kept: here a batch shard and half of four partial sums.
// CHECK-LABEL: func.func @all_reduce_partly
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x32xf32, shard [2, 1], sum 4>
// CHECK-NEXT:    %rep = parallel.all_reduce %x degree 2 : !pcg.tensor<8x32xf32, shard [2, 1], sum 4> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2, copy 2>
// CHECK-NEXT:    func.return %rep : !pcg.tensor<8x32xf32, shard [2, 1], sum 2, copy 2>
// CHECK-NEXT:  }
func.func @all_reduce_partly() -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2, copy 2> {
  %x = "test.op"() : () -> !pcg.tensor<8x32xf32, shard [2, 1], sum 4>
  %red = parallel.reduce %x degree 2 : !pcg.tensor<8x32xf32, shard [2, 1], sum 4> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2>
  %rep = parallel.replicate %red degree 2 : !pcg.tensor<8x32xf32, shard [2, 1], sum 2> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2, copy 2>
  func.return %rep : !pcg.tensor<8x32xf32, shard [2, 1], sum 2, copy 2>
}

// CHECK-LABEL: func.func @reduce_scatter
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 4>
// CHECK-NEXT:    %part = parallel.reduce_scatter %x dim 1 degree 4 : !pcg.tensor<8x32xf32, sum 4> -> !pcg.tensor<8x32xf32, shard [1, 4]>
// CHECK-NEXT:    func.return %part : !pcg.tensor<8x32xf32, shard [1, 4]>
// CHECK-NEXT:  }
func.func @reduce_scatter() -> !pcg.tensor<8x32xf32, shard [1, 4]> {
  %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 4>
  %red = parallel.reduce %x degree 4 : !pcg.tensor<8x32xf32, sum 4> -> !pcg.tensor<8x32xf32>
  %part = parallel.partition %red dim 1 degree 4 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [1, 4]>
  func.return %part : !pcg.tensor<8x32xf32, shard [1, 4]>
}

// CHECK-LABEL: func.func @all_gather
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:    %rep = parallel.all_gather %x dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:    func.return %rep : !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:  }
func.func @all_gather() -> !pcg.tensor<8x32xf32, copy 2> {
  %x = pcg.input key "x" : !pcg.tensor<8x32xf32, shard [1, 2]>
  %comb = parallel.combine %x dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
  %rep = parallel.replicate %comb degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
  func.return %rep : !pcg.tensor<8x32xf32, copy 2>
}

// CHECK-LABEL: func.func @all_to_all
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:    %part = parallel.all_to_all %x src 1 dst 0 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %part : !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @all_to_all() -> !pcg.tensor<8x32xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<8x32xf32, shard [1, 2]>
  %comb = parallel.combine %x dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
  %part = parallel.partition %comb dim 0 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
  func.return %part : !pcg.tensor<8x32xf32, shard [2, 1]>
}

// Each pair of a chain fuses on its own.
// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:    %p = parallel.reduce_scatter %x dim 0 degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:    %r = parallel.all_gather %p dim 0 degree 2 : !pcg.tensor<8x32xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:    func.return %r : !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:  }
func.func @chain() -> !pcg.tensor<8x32xf32, copy 2> {
  %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
  %s = parallel.reduce %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
  %p = parallel.partition %s dim 0 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
  %c = parallel.combine %p dim 0 degree 2 : !pcg.tensor<8x32xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32>
  %r = parallel.replicate %c degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
  func.return %r : !pcg.tensor<8x32xf32, copy 2>
}

//===----------------------------------------------------------------------===//
// Pairs that must not fuse.
//===----------------------------------------------------------------------===//

// The reduced value is also returned: fusing would lose it.
// CHECK-LABEL: func.func @second_use
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:    %red = parallel.reduce %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:    %rep = parallel.replicate %red degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:    func.return %rep, %red : !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32>
// CHECK-NEXT:  }
func.func @second_use() -> (!pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32>) {
  %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
  %red = parallel.reduce %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
  %rep = parallel.replicate %red degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
  func.return %rep, %red : !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32>
}

// Two consumers of one combine: neither fuses.
// CHECK-LABEL: func.func @two_consumers
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:    %comb = parallel.combine %x dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:    %rep = parallel.replicate %comb degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:    %part = parallel.partition %comb dim 0 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %rep, %part : !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @two_consumers() -> (!pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32, shard [2, 1]>) {
  %x = pcg.input key "x" : !pcg.tensor<8x32xf32, shard [1, 2]>
  %comb = parallel.combine %x dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
  %rep = parallel.replicate %comb degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
  %part = parallel.partition %comb dim 0 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
  func.return %rep, %part : !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32, shard [2, 1]>
}

// CHECK-LABEL: func.func @degrees_differ
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:    %red = parallel.reduce %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:    %rep = parallel.replicate %red degree 4 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 4>
// CHECK-NEXT:    %y = pcg.input key "y" : !pcg.tensor<8x32xf32, shard [4, 1]>
// CHECK-NEXT:    %comb = parallel.combine %y dim 0 degree 4 : !pcg.tensor<8x32xf32, shard [4, 1]> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:    %part = parallel.partition %comb dim 1 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:    func.return %rep, %part : !pcg.tensor<8x32xf32, copy 4>, !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:  }
func.func @degrees_differ() -> (!pcg.tensor<8x32xf32, copy 4>, !pcg.tensor<8x32xf32, shard [1, 2]>) {
  %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
  %red = parallel.reduce %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
  %rep = parallel.replicate %red degree 4 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 4>
  %y = pcg.input key "y" : !pcg.tensor<8x32xf32, shard [4, 1]>
  %comb = parallel.combine %y dim 0 degree 4 : !pcg.tensor<8x32xf32, shard [4, 1]> -> !pcg.tensor<8x32xf32>
  %part = parallel.partition %comb dim 1 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [1, 2]>
  func.return %rep, %part : !pcg.tensor<8x32xf32, copy 4>, !pcg.tensor<8x32xf32, shard [1, 2]>
}

// Combine then partition of the same dim is an identity (canonicalize removes
// it), not an all_to_all.
// CHECK-LABEL: func.func @same_dim
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:    %comb = parallel.combine %x dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:    %part = parallel.partition %comb dim 1 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:    func.return %part : !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:  }
func.func @same_dim() -> !pcg.tensor<8x32xf32, shard [1, 2]> {
  %x = pcg.input key "x" : !pcg.tensor<8x32xf32, shard [1, 2]>
  %comb = parallel.combine %x dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
  %part = parallel.partition %comb dim 1 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [1, 2]>
  func.return %part : !pcg.tensor<8x32xf32, shard [1, 2]>
}

// Pairs in the other order are not collectives.
// CHECK-LABEL: func.func @other_order
// CHECK-NEXT:    %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:    %rep = parallel.replicate %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2, copy 2>
// CHECK-NEXT:    %red = parallel.reduce %rep degree 2 : !pcg.tensor<8x32xf32, sum 2, copy 2> -> !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:    %y = pcg.input key "y" : !pcg.tensor<8x32xf32>
// CHECK-NEXT:    %part = parallel.partition %y dim 0 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:    %comb = parallel.combine %part dim 0 degree 2 : !pcg.tensor<8x32xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:    func.return %red, %comb : !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32>
// CHECK-NEXT:  }
func.func @other_order() -> (!pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32>) {
  %x = "test.op"() : () -> !pcg.tensor<8x32xf32, sum 2>
  %rep = parallel.replicate %x degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2, copy 2>
  %red = parallel.reduce %rep degree 2 : !pcg.tensor<8x32xf32, sum 2, copy 2> -> !pcg.tensor<8x32xf32, copy 2>
  %y = pcg.input key "y" : !pcg.tensor<8x32xf32>
  %part = parallel.partition %y dim 0 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
  %comb = parallel.combine %part dim 0 degree 2 : !pcg.tensor<8x32xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32>
  func.return %red, %comb : !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32>
}
