// RUN: unityc-opt %s -p fuse-attention | filecheck %s
// RUN: unityc-opt %s -p canonicalize,fuse-attention | filecheck %s --check-prefix=CANON

// fuse-attention turns multi-head attention written as separate ops into one
// pcg.attention, so that head parallelism is a rewrite of a single op. The
// recognized form (eager BERT, the zoo's BERT, and SDPA after import):
//
//   q = transpose(reshape(linear(xq, wq, bq), [B, Sq, H, D]), [0, 2, 1, 3])
//   k = transpose(reshape(linear(xk, wk, bk), [B, Sk, H, D]), [0, 2, 3, 1])
//   v = transpose(reshape(linear(xv, wv, bv), [B, Sk, H, D]), [0, 2, 1, 3])
//   p = softmax(scalar_mul(batch_matmul(q, k), 1/sqrt(D)) [+ mask], -1) [-> dropout]
//   out = linear(reshape(transpose(batch_matmul(p, v), [0, 2, 1, 3]), [B, Sq, H*D]), wo, bo)
//
// Every intermediate must have that one use, the scale must be 1/sqrt(D), and
// the mask must have a shape pcg.attention takes ([B|1, 1, Sq|1, Sk]);
// otherwise the graph is left as it is. Biases, mask and dropout are optional.
// Here B = 2, Sq = 3, E = 8, H = 2, D = 4 (scale 0.5) unless said otherwise.

//===----------------------------------------------------------------------===//
// Graphs that fuse.
//===----------------------------------------------------------------------===//

// Self-attention with biases, no mask, no dropout: query, key and value are
// the same input; everything between the projections and the output linear
// is gone, and the fused op takes the output linear's place.
// CHECK-LABEL: func.func @self_attention()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
// CHECK-NEXT:    %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
// CHECK-NEXT:    %bq = pcg.weight key "q.bias" : !pcg.tensor<8xf32>
// CHECK-NEXT:    %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
// CHECK-NEXT:    %bk = pcg.weight key "k.bias" : !pcg.tensor<8xf32>
// CHECK-NEXT:    %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
// CHECK-NEXT:    %bv = pcg.weight key "v.bias" : !pcg.tensor<8xf32>
// CHECK-NEXT:    %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
// CHECK-NEXT:    %bo = pcg.weight key "o.bias" : !pcg.tensor<8xf32>
// CHECK-NEXT:    %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo bq %bq bk %bk bv %bv bo %bo heads 2 : !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32>, !pcg.tensor<8xf32>, !pcg.tensor<8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
// CHECK-NEXT:    func.return %attention : !pcg.tensor<2x3x8xf32>
// CHECK-NEXT:  }
func.func @self_attention() -> !pcg.tensor<2x3x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %bq = pcg.weight key "q.bias" : !pcg.tensor<8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %bk = pcg.weight key "k.bias" : !pcg.tensor<8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %bv = pcg.weight key "v.bias" : !pcg.tensor<8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %bo = pcg.weight key "o.bias" : !pcg.tensor<8xf32>
  %q0 = pcg.linear %x, %wq bias %bq : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %q1 = pcg.reshape %q0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %q = pcg.transpose %q1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %k0 = pcg.linear %x, %wk bias %bk : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %k1 = pcg.reshape %k0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %k = pcg.transpose %k1 perm [0, 2, 3, 1] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x4x3xf32>
  %v0 = pcg.linear %x, %wv bias %bv : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %v1 = pcg.reshape %v0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %v = pcg.transpose %v1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %s = pcg.batch_matmul %q, %k : !pcg.tensor<2x2x3x4xf32>, !pcg.tensor<2x2x4x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %scaled = pcg.scalar_mul %s scale 0.5 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %p = pcg.softmax %scaled dim 3 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %c = pcg.batch_matmul %p, %v : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %ct = pcg.transpose %c perm [0, 2, 1, 3] : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x3x2x4xf32>
  %cf = pcg.reshape %ct shape [2, 3, 8] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x3x8xf32>
  %out = pcg.linear %cf, %wo bias %bo : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  func.return %out : !pcg.tensor<2x3x8xf32>
}

// Cross-attention (keys and values from a [2, 5, 8] memory) without biases,
// with an additive [B, 1, 1, Sk] mask and dropout on the probabilities (the
// softmax over dim -1, as exported): the mask becomes the op's `mask` operand
// and the dropout its `dropout` property.
// CHECK-LABEL: func.func @cross_attention_with_mask_and_dropout()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
// CHECK-NEXT:    %mask = pcg.input key "mask" : !pcg.tensor<2x1x1x5xf32>
// CHECK-NEXT:    %m = pcg.input key "memory" : !pcg.tensor<2x5x8xf32>
// CHECK-NEXT:    %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
// CHECK-NEXT:    %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
// CHECK-NEXT:    %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
// CHECK-NEXT:    %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
// CHECK-NEXT:    %attention = pcg.attention %x, %m, %m, %wq, %wk, %wv, %wo mask %mask heads 2 dropout 0.1 : !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x5x8xf32>, !pcg.tensor<2x5x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<2x1x1x5xf32> -> !pcg.tensor<2x3x8xf32>
// CHECK-NEXT:    func.return %attention : !pcg.tensor<2x3x8xf32>
// CHECK-NEXT:  }
func.func @cross_attention_with_mask_and_dropout() -> !pcg.tensor<2x3x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
  %mask = pcg.input key "mask" : !pcg.tensor<2x1x1x5xf32>
  %m = pcg.input key "memory" : !pcg.tensor<2x5x8xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %q0 = pcg.linear %x, %wq : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32> -> !pcg.tensor<2x3x8xf32>
  %q1 = pcg.reshape %q0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %q = pcg.transpose %q1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %k0 = pcg.linear %m, %wk : !pcg.tensor<2x5x8xf32>, !pcg.tensor<8x8xf32> -> !pcg.tensor<2x5x8xf32>
  %k1 = pcg.reshape %k0 shape [2, 5, 2, 4] : !pcg.tensor<2x5x8xf32> -> !pcg.tensor<2x5x2x4xf32>
  %k = pcg.transpose %k1 perm [0, 2, 3, 1] : !pcg.tensor<2x5x2x4xf32> -> !pcg.tensor<2x2x4x5xf32>
  %v0 = pcg.linear %m, %wv : !pcg.tensor<2x5x8xf32>, !pcg.tensor<8x8xf32> -> !pcg.tensor<2x5x8xf32>
  %v1 = pcg.reshape %v0 shape [2, 5, 2, 4] : !pcg.tensor<2x5x8xf32> -> !pcg.tensor<2x5x2x4xf32>
  %v = pcg.transpose %v1 perm [0, 2, 1, 3] : !pcg.tensor<2x5x2x4xf32> -> !pcg.tensor<2x2x5x4xf32>
  %s = pcg.batch_matmul %q, %k : !pcg.tensor<2x2x3x4xf32>, !pcg.tensor<2x2x4x5xf32> -> !pcg.tensor<2x2x3x5xf32>
  %scaled = pcg.scalar_mul %s scale 0.5 : !pcg.tensor<2x2x3x5xf32> -> !pcg.tensor<2x2x3x5xf32>
  %masked = pcg.add %scaled, %mask : !pcg.tensor<2x2x3x5xf32>, !pcg.tensor<2x1x1x5xf32> -> !pcg.tensor<2x2x3x5xf32>
  %p = pcg.softmax %masked dim -1 : !pcg.tensor<2x2x3x5xf32> -> !pcg.tensor<2x2x3x5xf32>
  %pd = pcg.dropout %p p 0.1 : !pcg.tensor<2x2x3x5xf32> -> !pcg.tensor<2x2x3x5xf32>
  %c = pcg.batch_matmul %pd, %v : !pcg.tensor<2x2x3x5xf32>, !pcg.tensor<2x2x5x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %ct = pcg.transpose %c perm [0, 2, 1, 3] : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x3x2x4xf32>
  %cf = pcg.reshape %ct shape [2, 3, 8] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x3x8xf32>
  %out = pcg.linear %cf, %wo : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32> -> !pcg.tensor<2x3x8xf32>
  func.return %out : !pcg.tensor<2x3x8xf32>
}

// The key as SDPA's lowering (and Llama's eager attention) leaves it: heads
// transposed [0, 2, 1, 3], then the last two dims swapped. fuse-attention
// takes it as it is, and also after canonicalize has composed the two
// transposes into [0, 2, 3, 1] (as the importer runs it).
// CHECK-LABEL: func.func @key_transposed_twice()
// CHECK-NOT:     pcg.transpose
// CHECK:         %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo bq %bq bk %bk bv %bv bo %bo heads 2 :
// CHECK-NEXT:    func.return %attention : !pcg.tensor<2x3x8xf32>
// CANON-LABEL: func.func @key_transposed_twice()
// CANON-NOT:     pcg.transpose
// CANON:         %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo bq %bq bk %bk bv %bv bo %bo heads 2 :
// CANON-NEXT:    func.return %attention : !pcg.tensor<2x3x8xf32>
func.func @key_transposed_twice() -> !pcg.tensor<2x3x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %bq = pcg.weight key "q.bias" : !pcg.tensor<8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %bk = pcg.weight key "k.bias" : !pcg.tensor<8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %bv = pcg.weight key "v.bias" : !pcg.tensor<8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %bo = pcg.weight key "o.bias" : !pcg.tensor<8xf32>
  %q0 = pcg.linear %x, %wq bias %bq : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %q1 = pcg.reshape %q0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %q = pcg.transpose %q1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %k0 = pcg.linear %x, %wk bias %bk : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %k1 = pcg.reshape %k0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %kh = pcg.transpose %k1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %k = pcg.transpose %kh perm [0, 1, 3, 2] : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x4x3xf32>
  %v0 = pcg.linear %x, %wv bias %bv : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %v1 = pcg.reshape %v0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %v = pcg.transpose %v1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %s = pcg.batch_matmul %q, %k : !pcg.tensor<2x2x3x4xf32>, !pcg.tensor<2x2x4x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %scaled = pcg.scalar_mul %s scale 0.5 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %p = pcg.softmax %scaled dim 3 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %c = pcg.batch_matmul %p, %v : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %ct = pcg.transpose %c perm [0, 2, 1, 3] : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x3x2x4xf32>
  %cf = pcg.reshape %ct shape [2, 3, 8] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x3x8xf32>
  %out = pcg.linear %cf, %wo bias %bo : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  func.return %out : !pcg.tensor<2x3x8xf32>
}

//===----------------------------------------------------------------------===//
// Graphs that must NOT fuse: the output is unchanged.
//===----------------------------------------------------------------------===//

// (An exception to this section since issue 26.) The scores are scaled by
// 0.25, not 1/sqrt(D) = 0.5, as Gemma-2's query_pre_attn_scalar does: the
// fused op carries the scale as a property, so it computes the same thing.
// CHECK-LABEL: func.func @other_scale()
// CHECK:         %attention = pcg.attention {{.*}} heads 2 scale 0.25 :
// CHECK-NOT:     pcg.softmax
// CHECK:         func.return %attention : !pcg.tensor<2x3x8xf32>
func.func @other_scale() -> !pcg.tensor<2x3x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %bq = pcg.weight key "q.bias" : !pcg.tensor<8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %bk = pcg.weight key "k.bias" : !pcg.tensor<8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %bv = pcg.weight key "v.bias" : !pcg.tensor<8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %bo = pcg.weight key "o.bias" : !pcg.tensor<8xf32>
  %q0 = pcg.linear %x, %wq bias %bq : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %q1 = pcg.reshape %q0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %q = pcg.transpose %q1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %k0 = pcg.linear %x, %wk bias %bk : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %k1 = pcg.reshape %k0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %k = pcg.transpose %k1 perm [0, 2, 3, 1] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x4x3xf32>
  %v0 = pcg.linear %x, %wv bias %bv : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %v1 = pcg.reshape %v0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %v = pcg.transpose %v1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %s = pcg.batch_matmul %q, %k : !pcg.tensor<2x2x3x4xf32>, !pcg.tensor<2x2x4x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %scaled = pcg.scalar_mul %s scale 0.25 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %p = pcg.softmax %scaled dim 3 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %c = pcg.batch_matmul %p, %v : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %ct = pcg.transpose %c perm [0, 2, 1, 3] : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x3x2x4xf32>
  %cf = pcg.reshape %ct shape [2, 3, 8] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x3x8xf32>
  %out = pcg.linear %cf, %wo bias %bo : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  func.return %out : !pcg.tensor<2x3x8xf32>
}

// The attention probabilities are also returned: fusing would lose a value
// that something else reads.
// CHECK-LABEL: func.func @probabilities_used_twice()
// CHECK-NOT:     pcg.attention
// CHECK:         %p = pcg.softmax %scaled dim 3
// CHECK-NEXT:    %c = pcg.batch_matmul %p, %v
// CHECK:         %out = pcg.linear %cf, %wo bias %bo
// CHECK-NEXT:    func.return %out, %p : !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x2x3x3xf32>
func.func @probabilities_used_twice() -> (!pcg.tensor<2x3x8xf32>, !pcg.tensor<2x2x3x3xf32>) {
  %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %bq = pcg.weight key "q.bias" : !pcg.tensor<8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %bk = pcg.weight key "k.bias" : !pcg.tensor<8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %bv = pcg.weight key "v.bias" : !pcg.tensor<8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %bo = pcg.weight key "o.bias" : !pcg.tensor<8xf32>
  %q0 = pcg.linear %x, %wq bias %bq : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %q1 = pcg.reshape %q0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %q = pcg.transpose %q1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %k0 = pcg.linear %x, %wk bias %bk : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %k1 = pcg.reshape %k0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %k = pcg.transpose %k1 perm [0, 2, 3, 1] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x4x3xf32>
  %v0 = pcg.linear %x, %wv bias %bv : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %v1 = pcg.reshape %v0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %v = pcg.transpose %v1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %s = pcg.batch_matmul %q, %k : !pcg.tensor<2x2x3x4xf32>, !pcg.tensor<2x2x4x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %scaled = pcg.scalar_mul %s scale 0.5 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %p = pcg.softmax %scaled dim 3 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %c = pcg.batch_matmul %p, %v : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %ct = pcg.transpose %c perm [0, 2, 1, 3] : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x3x2x4xf32>
  %cf = pcg.reshape %ct shape [2, 3, 8] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x3x8xf32>
  %out = pcg.linear %cf, %wo bias %bo : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  func.return %out, %p : !pcg.tensor<2x3x8xf32>, !pcg.tensor<2x2x3x3xf32>
}

// The query is not transposed to [B, H, S, D] (identity permutation; with
// S = H = 2 the types still agree): the scores would mix heads, not positions.
// CHECK-LABEL: func.func @wrong_permutation()
// CHECK-NOT:     pcg.attention
// CHECK:         %q = pcg.transpose %q1 perm [0, 1, 2, 3]
// CHECK:         %out = pcg.linear %cf, %wo bias %bo
// CHECK-NEXT:    func.return %out : !pcg.tensor<2x2x8xf32>
func.func @wrong_permutation() -> !pcg.tensor<2x2x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x2x8xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %bq = pcg.weight key "q.bias" : !pcg.tensor<8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %bk = pcg.weight key "k.bias" : !pcg.tensor<8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %bv = pcg.weight key "v.bias" : !pcg.tensor<8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %bo = pcg.weight key "o.bias" : !pcg.tensor<8xf32>
  %q0 = pcg.linear %x, %wq bias %bq : !pcg.tensor<2x2x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x2x8xf32>
  %q1 = pcg.reshape %q0 shape [2, 2, 2, 4] : !pcg.tensor<2x2x8xf32> -> !pcg.tensor<2x2x2x4xf32>
  %q = pcg.transpose %q1 perm [0, 1, 2, 3] : !pcg.tensor<2x2x2x4xf32> -> !pcg.tensor<2x2x2x4xf32>
  %k0 = pcg.linear %x, %wk bias %bk : !pcg.tensor<2x2x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x2x8xf32>
  %k1 = pcg.reshape %k0 shape [2, 2, 2, 4] : !pcg.tensor<2x2x8xf32> -> !pcg.tensor<2x2x2x4xf32>
  %k = pcg.transpose %k1 perm [0, 2, 3, 1] : !pcg.tensor<2x2x2x4xf32> -> !pcg.tensor<2x2x4x2xf32>
  %v0 = pcg.linear %x, %wv bias %bv : !pcg.tensor<2x2x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x2x8xf32>
  %v1 = pcg.reshape %v0 shape [2, 2, 2, 4] : !pcg.tensor<2x2x8xf32> -> !pcg.tensor<2x2x2x4xf32>
  %v = pcg.transpose %v1 perm [0, 2, 1, 3] : !pcg.tensor<2x2x2x4xf32> -> !pcg.tensor<2x2x2x4xf32>
  %s = pcg.batch_matmul %q, %k : !pcg.tensor<2x2x2x4xf32>, !pcg.tensor<2x2x4x2xf32> -> !pcg.tensor<2x2x2x2xf32>
  %scaled = pcg.scalar_mul %s scale 0.5 : !pcg.tensor<2x2x2x2xf32> -> !pcg.tensor<2x2x2x2xf32>
  %p = pcg.softmax %scaled dim 3 : !pcg.tensor<2x2x2x2xf32> -> !pcg.tensor<2x2x2x2xf32>
  %c = pcg.batch_matmul %p, %v : !pcg.tensor<2x2x2x2xf32>, !pcg.tensor<2x2x2x4xf32> -> !pcg.tensor<2x2x2x4xf32>
  %ct = pcg.transpose %c perm [0, 2, 1, 3] : !pcg.tensor<2x2x2x4xf32> -> !pcg.tensor<2x2x2x4xf32>
  %cf = pcg.reshape %ct shape [2, 2, 8] : !pcg.tensor<2x2x2x4xf32> -> !pcg.tensor<2x2x8xf32>
  %out = pcg.linear %cf, %wo bias %bo : !pcg.tensor<2x2x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x2x8xf32>
  func.return %out : !pcg.tensor<2x2x8xf32>
}

// A [Sq, Sk] mask (the shape the importer gives SDPA's causal mask) is reshaped
// to [1, 1, Sq, Sk], the broadcastable mask pcg.attention takes, and the graph fuses.
// CHECK-LABEL: func.func @mask_of_rank_2()
// CHECK:         %{{.*}} = pcg.reshape %mask shape [1, 1, 3, 3] : !pcg.tensor<3x3xf32> -> !pcg.tensor<1x1x3x3xf32>
// CHECK-NEXT:    %{{.*}} = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo bq %bq bk %bk bv %bv bo %bo mask %{{.*}} heads 2 :
// CHECK-NOT:     pcg.softmax
// CHECK:         func.return
func.func @mask_of_rank_2() -> !pcg.tensor<2x3x8xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
  %mask = pcg.input key "mask" : !pcg.tensor<3x3xf32>
  %wq = pcg.weight key "q.weight" : !pcg.tensor<8x8xf32>
  %bq = pcg.weight key "q.bias" : !pcg.tensor<8xf32>
  %wk = pcg.weight key "k.weight" : !pcg.tensor<8x8xf32>
  %bk = pcg.weight key "k.bias" : !pcg.tensor<8xf32>
  %wv = pcg.weight key "v.weight" : !pcg.tensor<8x8xf32>
  %bv = pcg.weight key "v.bias" : !pcg.tensor<8xf32>
  %wo = pcg.weight key "o.weight" : !pcg.tensor<8x8xf32>
  %bo = pcg.weight key "o.bias" : !pcg.tensor<8xf32>
  %q0 = pcg.linear %x, %wq bias %bq : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %q1 = pcg.reshape %q0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %q = pcg.transpose %q1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %k0 = pcg.linear %x, %wk bias %bk : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %k1 = pcg.reshape %k0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %k = pcg.transpose %k1 perm [0, 2, 3, 1] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x4x3xf32>
  %v0 = pcg.linear %x, %wv bias %bv : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  %v1 = pcg.reshape %v0 shape [2, 3, 2, 4] : !pcg.tensor<2x3x8xf32> -> !pcg.tensor<2x3x2x4xf32>
  %v = pcg.transpose %v1 perm [0, 2, 1, 3] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %s = pcg.batch_matmul %q, %k : !pcg.tensor<2x2x3x4xf32>, !pcg.tensor<2x2x4x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %scaled = pcg.scalar_mul %s scale 0.5 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %masked = pcg.add %scaled, %mask : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %p = pcg.softmax %masked dim 3 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
  %c = pcg.batch_matmul %p, %v : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x3x4xf32>
  %ct = pcg.transpose %c perm [0, 2, 1, 3] : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x3x2x4xf32>
  %cf = pcg.reshape %ct shape [2, 3, 8] : !pcg.tensor<2x3x2x4xf32> -> !pcg.tensor<2x3x8xf32>
  %out = pcg.linear %cf, %wo bias %bo : !pcg.tensor<2x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x3x8xf32>
  func.return %out : !pcg.tensor<2x3x8xf32>
}
