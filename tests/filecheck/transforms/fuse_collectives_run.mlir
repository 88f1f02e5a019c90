// The collectives that fuse-collectives introduces compute what the pairs they
// replace computed: run the graph in the reference interpreter before and after
// the pass and compare. Each output is the same logical value (a
// reduction-parallel linear's result, or a column-parallel one's), moved by a
// different pair, so all four checksums agree too.

// RUN: unityc-run %s > %t.pairs
// RUN: unityc-opt %s -p fuse-collectives -o %t.mlir
// RUN: unityc-run %t.mlir > %t.fused
// RUN: diff %t.pairs %t.fused
// RUN: filecheck %s --input-file %t.fused
// RUN: filecheck %s --input-file %t.mlir --check-prefix=FUSED

// CHECK:      output 0: !pcg.tensor<8x32xf32, copy 2>  shape [8, 32]  sum=[[SUM:[^ ]+]] abs=[[ABS:[^ ]+]]{{$}}
// CHECK-NEXT: output 1: !pcg.tensor<8x32xf32, shard [1, 2]>  shape [8, 32]  sum=[[SUM]] abs=[[ABS]]{{$}}
// CHECK-NEXT: output 2: !pcg.tensor<8x32xf32, copy 2>  shape [8, 32]  sum=[[SUM]] abs=[[ABS]]{{$}}
// CHECK-NEXT: output 3: !pcg.tensor<8x32xf32, shard [2, 1]>  shape [8, 32]  sum=[[SUM]] abs=[[ABS]]{{$}}

// FUSED-NOT: parallel.{{(reduce|replicate|combine|partition) }}
// FUSED:     parallel.all_reduce %s1 degree 2
// FUSED-NOT: parallel.{{(reduce|replicate|combine|partition) }}
// FUSED:     parallel.reduce_scatter %s2 dim 1 degree 2
// FUSED-NOT: parallel.{{(reduce|replicate|combine|partition) }}
// FUSED:     parallel.all_gather %col dim 1 degree 2
// FUSED-NOT: parallel.{{(reduce|replicate|combine|partition) }}
// FUSED:     parallel.all_to_all %col src 1 dst 0 degree 2
// FUSED-NOT: parallel.{{(reduce|replicate|combine|partition) }}

func.func @main() -> (!pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32, shard [1, 2]>, !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32, shard [2, 1]>) {
  // Reduction parallel: partial sums, reduced then replicated / partitioned.
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
  %w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
  %s1 = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
  %r1 = parallel.reduce %s1 degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
  %ar = parallel.replicate %r1 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
  %s2 = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
  %r2 = parallel.reduce %s2 degree 2 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32>
  %rs = parallel.partition %r2 dim 1 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [1, 2]>
  // Column parallel: output features sharded, combined then replicated / repartitioned.
  %wo = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [2, 1]>
  %xc = pcg.input key "x" : !pcg.tensor<8x16xf32, copy 2>
  %col = pcg.linear %xc, %wo : !pcg.tensor<8x16xf32, copy 2>, !pcg.tensor<32x16xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32, shard [1, 2]>
  %c1 = parallel.combine %col dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
  %ag = parallel.replicate %c1 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, copy 2>
  %c2 = parallel.combine %col dim 1 degree 2 : !pcg.tensor<8x32xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
  %a2a = parallel.partition %c2 dim 0 degree 2 : !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
  func.return %ar, %rs, %ag, %a2a : !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32, shard [1, 2]>, !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32, shard [2, 1]>
}
