// RUN: unityc-opt %s -p 'apply-rules{names="self_attention_rotary_kv_head_parallel"}' | filecheck %s
// RUN: unityc-opt %s -p 'apply-rules{names="self_attention_kv_head_parallel"}' | filecheck %s --check-prefix=PLAIN

// The library rule self_attention_rotary_kv_head_parallel (Llama's attention:
// 4 query heads read 2 KV heads, rotary cos/sin):
//
//   attention[heads=h, kv_heads=g](x, x, x, wq, wk, wv, wo, cos=c, sin=s)
//     => parallel.reduce[degree=k](attention[heads=h, kv_heads=g](replicate[degree=k](x), ...,
//          partition[dim=0, degree=k](wq), partition[dim=0, degree=k](wk), ...,
//          partition[dim=1, degree=k](wo), cos=replicate[degree=k](c), sin=replicate[degree=k](s)))
//     where k: degree  if k * shard(wk, 0) divides g
//
// Each task keeps whole KV groups: task i holds query heads 2i, 2i+1 (rows of
// wq) and KV head i (rows of wk, wv) that both read. Degree 2 is the only one
// that divides the 2 KV heads (4 would split a group: not offered). cos and
// sin are copied to both tasks.

// CHECK-LABEL: func.func @main
// CHECK:         %[[X:.*]] = parallel.replicate %x degree 2 : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x16xf32, copy 2>
// CHECK-NEXT:    %[[WQ:.*]] = parallel.partition %wq dim 0 degree 2 : !pcg.tensor<16x16xf32> -> !pcg.tensor<16x16xf32, shard [2, 1]>
// CHECK-NEXT:    %[[WK:.*]] = parallel.partition %wk dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    %[[WV:.*]] = parallel.partition %wv dim 0 degree 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    %[[WO:.*]] = parallel.partition %wo dim 1 degree 2 : !pcg.tensor<16x16xf32> -> !pcg.tensor<16x16xf32, shard [1, 2]>
// CHECK-NEXT:    %[[C:.*]] = parallel.replicate %cos degree 2 : !pcg.tensor<1x1x8x4xf32> -> !pcg.tensor<1x1x8x4xf32, copy 2>
// CHECK-NEXT:    %[[S:.*]] = parallel.replicate %sin degree 2 : !pcg.tensor<1x1x8x4xf32> -> !pcg.tensor<1x1x8x4xf32, copy 2>
// CHECK-NEXT:    %[[A:.*]] = pcg.attention %[[X]], %[[X]], %[[X]], %[[WQ]], %[[WK]], %[[WV]], %[[WO]] cos %[[C]] sin %[[S]] heads 4 kv_heads 2 : {{.*}} -> !pcg.tensor<2x8x16xf32, sum 2>
// CHECK-NEXT:    %a = parallel.reduce %[[A]] degree 2 : !pcg.tensor<2x8x16xf32, sum 2> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:    func.return %a : !pcg.tensor<2x8x16xf32>

// The rule without cos/sin does not match the rotary attention: nothing changes.
// PLAIN:     %a = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo cos %cos sin %sin heads 4 kv_heads 2 : {{.*}} -> !pcg.tensor<2x8x16xf32>
// PLAIN-NOT: parallel.
func.func @main() -> !pcg.tensor<2x8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x8x16xf32>
  %wq = pcg.weight key "wq" : !pcg.tensor<16x16xf32>
  %wk = pcg.weight key "wk" : !pcg.tensor<8x16xf32>
  %wv = pcg.weight key "wv" : !pcg.tensor<8x16xf32>
  %wo = pcg.weight key "wo" : !pcg.tensor<16x16xf32>
  %cos = pcg.input key "cos" : !pcg.tensor<1x1x8x4xf32>
  %sin = pcg.input key "sin" : !pcg.tensor<1x1x8x4xf32>
  %a = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo cos %cos sin %sin heads 4 kv_heads 2 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<1x1x8x4xf32>, !pcg.tensor<1x1x8x4xf32> -> !pcg.tensor<2x8x16xf32>
  func.return %a : !pcg.tensor<2x8x16xf32>
}
