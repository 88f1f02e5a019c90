// RUN: unityc-opt %s -p 'apply-rules{names="self_attention_head_parallel"}' | filecheck %s

// The library rule self_attention_head_parallel (Megatron's attention):
//
//   attention[heads=h](x, x, x, wq, wk, wv, wo)
//     => parallel.reduce[degree=k](attention[heads=h](replicate[degree=k](x), <same>, <same>,
//          partition[dim=0, degree=k](wq), ..., partition[dim=1, degree=k](wo)))
//     where k: degree  if k * shard(wq, 0) divides h
//
// The q/k/v projections are partitioned by rows (whole heads) and the output
// projection by columns; the input is replicated once (the three equal terms are
// one op). Each device runs heads/2 heads and holds a partial sum of the output,
// which reduce adds.

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:    %wq = pcg.weight key "wq" : !pcg.tensor<16x16xf32>
// CHECK-NEXT:    %wk = pcg.weight key "wk" : !pcg.tensor<16x16xf32>
// CHECK-NEXT:    %wv = pcg.weight key "wv" : !pcg.tensor<16x16xf32>
// CHECK-NEXT:    %wo = pcg.weight key "wo" : !pcg.tensor<16x16xf32>
// CHECK-NEXT:    %[[X:.*]] = parallel.replicate %x degree 2 : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x16xf32, copy 2>
// CHECK-NEXT:    %[[WQ:.*]] = parallel.partition %wq dim 0 degree 2 : !pcg.tensor<16x16xf32> -> !pcg.tensor<16x16xf32, shard [2, 1]>
// CHECK-NEXT:    %[[WK:.*]] = parallel.partition %wk dim 0 degree 2
// CHECK-NEXT:    %[[WV:.*]] = parallel.partition %wv dim 0 degree 2
// CHECK-NEXT:    %[[WO:.*]] = parallel.partition %wo dim 1 degree 2 : !pcg.tensor<16x16xf32> -> !pcg.tensor<16x16xf32, shard [1, 2]>
// CHECK-NEXT:    %[[A:.*]] = pcg.attention %[[X]], %[[X]], %[[X]], %[[WQ]], %[[WK]], %[[WV]], %[[WO]] heads 4 : {{.*}} -> !pcg.tensor<2x8x16xf32, sum 2>
// CHECK-NEXT:    %a = parallel.reduce %[[A]] degree 2 : !pcg.tensor<2x8x16xf32, sum 2> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:    func.return %a : !pcg.tensor<2x8x16xf32>
func.func @main() -> !pcg.tensor<2x8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x8x16xf32>
  %wq = pcg.weight key "wq" : !pcg.tensor<16x16xf32>
  %wk = pcg.weight key "wk" : !pcg.tensor<16x16xf32>
  %wv = pcg.weight key "wv" : !pcg.tensor<16x16xf32>
  %wo = pcg.weight key "wo" : !pcg.tensor<16x16xf32>
  %a = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo heads 4 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
  func.return %a : !pcg.tensor<2x8x16xf32>
}
