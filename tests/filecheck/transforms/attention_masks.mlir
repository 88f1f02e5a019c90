// RUN: unityc-opt %s -p fuse-attention | filecheck %s

// fuse-attention recognizes the causal structure of an attention's additive
// mask (`passes/attention_masks.py`): the mask becomes the op's `causal`, its
// mask operand only the rest, so that the program runs SDPA with is_causal or
// a [B, 1, 1, Sk] key mask, never a materialized B x S x S float mask.

// Hugging Face's causal and padding mask as imported: key position <= query
// position (arange constants compared), and the padding mask [B, 1, 1, S],
// multiplied as 0/1 floats, then (1 - allowed) * finfo.min. The causal part is
// `causal`; the padding part is rebuilt alone, [2, 1, 1, 4], the S x S ops
// are gone.
// CHECK-LABEL: func.func @causal_and_padding()
// CHECK:         %key_mask = pcg.cast %keys dtype f32 : !pcg.tensor<2x1x1x4xi1> -> !pcg.tensor<2x1x1x4xf32>
// CHECK-NEXT:    %key_mask_1 = pcg.neg %key_mask
// CHECK-NEXT:    %key_mask_2 = pcg.scalar_add %key_mask_1 value 1.0
// CHECK-NEXT:    %key_mask_3 = pcg.scalar_mul %key_mask_2 scale -3.4028234663852886e+38 : !pcg.tensor<2x1x1x4xf32> -> !pcg.tensor<2x1x1x4xf32>
// CHECK-NEXT:    %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo mask %key_mask_3 heads 2 causal : {{.*}}, !pcg.tensor<2x1x1x4xf32> -> !pcg.tensor<2x4x8xf32>
// CHECK-NOT:     pcg.compare_tensors
// CHECK-NOT:     x4x4x
func.func @causal_and_padding() -> !pcg.tensor<2x4x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x4x8xf32>
  %ids = pcg.input key "attention_mask" : !pcg.tensor<2x4xi64>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %b = pcg.cast %ids dtype i1 : !pcg.tensor<2x4xi64> -> !pcg.tensor<2x4xi1>
  %keys = pcg.reshape %b shape [2, 1, 1, 4] : !pcg.tensor<2x4xi1> -> !pcg.tensor<2x1x1x4xi1>
  %kpos = pcg.constant value dense<[[[[0, 1, 2, 3]]]]> : tensor<1x1x1x4xi64> : !pcg.tensor<1x1x1x4xi64>
  %qpos = pcg.constant value dense<[[[[0], [1], [2], [3]]]]> : tensor<1x1x4x1xi64> : !pcg.tensor<1x1x4x1xi64>
  %causal = pcg.compare_tensors %kpos, %qpos kind "le" : !pcg.tensor<1x1x1x4xi64>, !pcg.tensor<1x1x4x1xi64> -> !pcg.tensor<1x1x4x4xi1>
  %cf = pcg.cast %causal dtype f32 : !pcg.tensor<1x1x4x4xi1> -> !pcg.tensor<1x1x4x4xf32>
  %kf = pcg.cast %keys dtype f32 : !pcg.tensor<2x1x1x4xi1> -> !pcg.tensor<2x1x1x4xf32>
  %both = pcg.mul %cf, %kf : !pcg.tensor<1x1x4x4xf32>, !pcg.tensor<2x1x1x4xf32> -> !pcg.tensor<2x1x4x4xf32>
  %allowed = pcg.cast %both dtype i1 : !pcg.tensor<2x1x4x4xf32> -> !pcg.tensor<2x1x4x4xi1>
  %af = pcg.cast %allowed dtype f32 : !pcg.tensor<2x1x4x4xi1> -> !pcg.tensor<2x1x4x4xf32>
  %neg = pcg.neg %af : !pcg.tensor<2x1x4x4xf32> -> !pcg.tensor<2x1x4x4xf32>
  %inv = pcg.scalar_add %neg value 1.0 : !pcg.tensor<2x1x4x4xf32> -> !pcg.tensor<2x1x4x4xf32>
  %mask = pcg.scalar_mul %inv scale -3.4028234663852886e+38 : !pcg.tensor<2x1x4x4xf32> -> !pcg.tensor<2x1x4x4xf32>
  %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo mask %mask heads 2 : !pcg.tensor<2x4x8xf32>, !pcg.tensor<2x4x8xf32>, !pcg.tensor<2x4x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<2x1x4x4xf32> -> !pcg.tensor<2x4x8xf32>
  func.return %attention : !pcg.tensor<2x4x8xf32>
}

// SDPA's own causal mask folded at import: a constant, 0 on and below the
// diagonal and -inf above, reshaped to [1, 1, S, S]: `causal` and no mask.
// CHECK-LABEL: func.func @constant_causal()
// CHECK-NOT:     pcg.constant
// CHECK:         %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo heads 2 causal : {{.*}} -> !pcg.tensor<2x3x8xf32>
func.func @constant_causal() -> !pcg.tensor<2x3x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %c = pcg.constant value dense<[[0.000000e+00, 0xff800000, 0xff800000], [0.000000e+00, 0.000000e+00, 0xff800000], [0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32> : !pcg.tensor<3x3xf32>
  %mask = pcg.reshape %c shape [1, 1, 3, 3] : !pcg.tensor<3x3xf32> -> !pcg.tensor<1x1x3x3xf32>
  %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo mask %mask heads 2 : !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<1x1x3x3xf32> -> !pcg.tensor<2x3x8xf32>
  func.return %attention : !pcg.tensor<2x3x8xf32>
}

// Not causal: the constant's upper triangle is 0 where it should be masked, so
// the mask stays as it is (SDPA's float attn_mask), and so does a mask read
// from an input.
// CHECK-LABEL: func.func @not_causal()
// CHECK:         %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo mask %mask heads 2 : {{.*}}, !pcg.tensor<1x1x3x3xf32> -> !pcg.tensor<2x3x8xf32>
// CHECK-NEXT:    %attention_1 = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo mask %bias heads 2 : {{.*}}, !pcg.tensor<1x2x3x3xf32> -> !pcg.tensor<2x3x8xf32>
func.func @not_causal() -> (!pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>) {
  %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
  %bias = pcg.input key "bias" : !pcg.tensor<1x2x3x3xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %c = pcg.constant value dense<[[0.000000e+00, 0.000000e+00, 0xff800000], [0.000000e+00, 0.000000e+00, 0xff800000], [0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32> : !pcg.tensor<3x3xf32>
  %mask = pcg.reshape %c shape [1, 1, 3, 3] : !pcg.tensor<3x3xf32> -> !pcg.tensor<1x1x3x3xf32>
  %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo mask %mask heads 2 : !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<1x1x3x3xf32> -> !pcg.tensor<2x3x8xf32>
  %attention_1 = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo mask %bias heads 2 : !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<1x2x3x3xf32> -> !pcg.tensor<2x3x8xf32>
  func.return %attention, %attention_1 : !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>
}
