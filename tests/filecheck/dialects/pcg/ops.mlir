// RUN: unityc-opt %s | filecheck %s
// RUN: %roundtrip-generic
// RUN: unityc-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every op of the pcg dialect in its custom syntax, first unparallelized and
// then in one or more parallel forms. An op's result type is inferred from
// its operand types (and checked by the verifier), so each line documents one
// parallelization rule: which operand dims may be sharded together, where
// partial sums (`sum n`) appear, and which operands must be copied (`copy n`)
// to every task that reads them.
//
// Custom syntax: operands, optional operands as `keyword %value`, properties
// as `keyword value`, the machine view in the attribute dictionary, then the
// operand types `->` the result types. The GENERIC lines show how properties
// are stored.

// CHECK:      builtin.module {
//===----------------------------------------------------------------------===//
// Sources. A graph's inputs, weights and folded constants have no operands;
// their result type alone says how the value is held (here unsharded, or
// sharded / replicated). Sources never hold partial sums.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%label = pcg.input key "label" : !pcg.tensor<8xi64>
// CHECK-NEXT:   %label = pcg.input key "label" : !pcg.tensor<8xi64>
%w = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32>
// CHECK-NEXT:   %w = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32>
%b = pcg.weight key "fc.bias" : !pcg.tensor<32xf32>
// CHECK-NEXT:   %b = pcg.weight key "fc.bias" : !pcg.tensor<32xf32>
// A weight the model does not train (`requires_grad=False`) is `frozen`: no gradient, no
// optimizer state, never updated.
%wfz = pcg.weight key "embed.weight" frozen : !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %wfz = pcg.weight key "embed.weight" frozen : !pcg.tensor<8x16xf32>
%y = pcg.input key "y" : !pcg.tensor<16xf32>
// CHECK-NEXT:   %y = pcg.input key "y" : !pcg.tensor<16xf32>

// Batch-sharded input, replicated weights, and an input split on its feature dim.
%xb = pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %xb = pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]>
// GENERIC: %xb = "pcg.input"() <{key = "x"}> {view = #pcg.view<start 0, [intra 1]>} : () -> !pcg.tensor<8x16xf32, shard [2, 1]>
%xf = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:   %xf = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%wc = pcg.weight key "fc.weight" {view = #pcg.view<start 4, [intra 2]>} : !pcg.tensor<32x16xf32, copy 2>
// CHECK-NEXT:   %wc = pcg.weight key "fc.weight" {view = #pcg.view<start 4, [intra 2]>} : !pcg.tensor<32x16xf32, copy 2>
%bc = pcg.weight key "fc.bias" : !pcg.tensor<32xf32, copy 2>
// CHECK-NEXT:   %bc = pcg.weight key "fc.bias" : !pcg.tensor<32xf32, copy 2>
%yc = pcg.input key "y" : !pcg.tensor<16xf32, copy 2>
// CHECK-NEXT:   %yc = pcg.input key "y" : !pcg.tensor<16xf32, copy 2>

// A constant holds a dense literal of the same shape and element type.
%c = pcg.constant value dense<[[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32> : !pcg.tensor<2x2xf32>
// CHECK-NEXT:   %c = pcg.constant value dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32> : !pcg.tensor<2x2xf32>
// GENERIC: %c = "pcg.constant"() <{value = dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>}> : () -> !pcg.tensor<2x2xf32>
%cs = pcg.constant value dense<[0, 1, 2, 3]> : tensor<4xi64> : !pcg.tensor<4xi64, shard [2]>
// CHECK-NEXT:   %cs = pcg.constant value dense<[0, 1, 2, 3]> : tensor<4xi64> : !pcg.tensor<4xi64, shard [2]>
%c0 = pcg.constant value dense<1.500000e+00> : tensor<f32> : !pcg.tensor<f32, copy 4>
// CHECK-NEXT:   %c0 = pcg.constant value dense<1.500000e+00> : tensor<f32> : !pcg.tensor<f32, copy 4>

//===----------------------------------------------------------------------===//
// Element-wise unary ops keep the operand's shape and shards. Nonlinear ops
// need whole values (sum 1); the linear ones (identity, neg, scalar_mul) also
// carry partial sums through.
//===----------------------------------------------------------------------===//

%relu = pcg.relu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %relu = pcg.relu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%relu_b = pcg.relu %xb {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %relu_b = pcg.relu %xb {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%gelu = pcg.gelu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %gelu = pcg.gelu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%gelu_tanh = pcg.gelu %xb tanh : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %gelu_tanh = pcg.gelu %xb tanh : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// GENERIC: %gelu_tanh = "pcg.gelu"(%xb) <{tanh}> : (!pcg.tensor<8x16xf32, shard [2, 1]>) -> !pcg.tensor<8x16xf32, shard [2, 1]>
%sigmoid = pcg.sigmoid %xf : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:   %sigmoid = pcg.sigmoid %xf : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
%tanh = pcg.tanh %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %tanh = pcg.tanh %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%tanh_b = pcg.tanh %xb : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %tanh_b = pcg.tanh %xb : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%exp = pcg.exp %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %exp = pcg.exp %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%exp_b = pcg.exp %xb : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %exp_b = pcg.exp %xb : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%sqrt = pcg.sqrt %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %sqrt = pcg.sqrt %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%sqrt_c = pcg.sqrt %wc : !pcg.tensor<32x16xf32, copy 2> -> !pcg.tensor<32x16xf32, copy 2>
// CHECK-NEXT:   %sqrt_c = pcg.sqrt %wc : !pcg.tensor<32x16xf32, copy 2> -> !pcg.tensor<32x16xf32, copy 2>
%log1p = pcg.log1p %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %log1p = pcg.log1p %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%log = pcg.log %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %log = pcg.log %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%abs = pcg.abs %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %abs = pcg.abs %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%pow = pcg.pow %x exponent 2.0 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %pow = pcg.pow %x exponent 2.0 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%pow_b = pcg.pow %xb exponent -0.5 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %pow_b = pcg.pow %xb exponent -0.5 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%scalar_add = pcg.scalar_add %x value 1.0 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %scalar_add = pcg.scalar_add %x value 1.0 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%scalar_add_b = pcg.scalar_add %xb value 1.0e-05 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %scalar_add_b = pcg.scalar_add %xb value 1.0e-05 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%dropout = pcg.dropout %x p 0.1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %dropout = pcg.dropout %x p 0.1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%dropout_b = pcg.dropout %xb p 0.1 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %dropout_b = pcg.dropout %xb p 0.1 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>

// Reduction-parallel linear: the contracted dim is sharded on both operands,
// so each of the 2 tasks holds a partial sum of the result.
%wf = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32, shard [1, 2]>
// CHECK-NEXT:   %wf = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32, shard [1, 2]>
%partial = pcg.linear %xf, %wf : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %partial = pcg.linear %xf, %wf : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>

%identity = pcg.identity %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %identity = pcg.identity %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%identity_s = pcg.identity %partial : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %identity_s = pcg.identity %partial : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
%stop_s = pcg.stop_gradient %partial : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %stop_s = pcg.stop_gradient %partial : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
%neg = pcg.neg %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %neg = pcg.neg %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%neg_s = pcg.neg %partial : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %neg_s = pcg.neg %partial : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
%scalar_mul = pcg.scalar_mul %x scale 0.125 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %scalar_mul = pcg.scalar_mul %x scale 0.125 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// GENERIC: %scalar_mul = "pcg.scalar_mul"(%x) <{scale = 1.250000e-01 : f64}> : (!pcg.tensor<8x16xf32>) -> !pcg.tensor<8x16xf32>
%scalar_mul_s = pcg.scalar_mul %partial scale 2.0 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %scalar_mul_s = pcg.scalar_mul %partial scale 2.0 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>

// cast converts the element type (also of integers) and keeps the degrees.
%cast = pcg.cast %x dtype f16 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf16>
// CHECK-NEXT:   %cast = pcg.cast %x dtype f16 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf16>
%cast_b = pcg.cast %xb dtype bf16 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xbf16, shard [2, 1]>
// CHECK-NEXT:   %cast_b = pcg.cast %xb dtype bf16 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xbf16, shard [2, 1]>
// GENERIC: %cast_b = "pcg.cast"(%xb) <{dtype = bf16}> : (!pcg.tensor<8x16xf32, shard [2, 1]>) -> !pcg.tensor<8x16xbf16, shard [2, 1]>
%cast_i = pcg.cast %label dtype f32 : !pcg.tensor<8xi64> -> !pcg.tensor<8xf32>
// CHECK-NEXT:   %cast_i = pcg.cast %label dtype f32 : !pcg.tensor<8xi64> -> !pcg.tensor<8xf32>

//===----------------------------------------------------------------------===//
// Element-wise binary ops broadcast like numpy. A broadcast operand is not
// sharded along the broadcast dim: it is copied to every task instead.
//===----------------------------------------------------------------------===//

%add = pcg.add %x, %x : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %add = pcg.add %x, %x : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%add_bcast = pcg.add %x, %y : !pcg.tensor<8x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %add_bcast = pcg.add %x, %y : !pcg.tensor<8x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32>
%add_b = pcg.add %xb, %yc : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16xf32, copy 2> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %add_b = pcg.add %xb, %yc : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16xf32, copy 2> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%add_s = pcg.add %partial, %partial : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %add_s = pcg.add %partial, %partial : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
%sub = pcg.sub %x, %y : !pcg.tensor<8x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %sub = pcg.sub %x, %y : !pcg.tensor<8x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32>
%sub_b = pcg.sub %xb, %xb : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %sub_b = pcg.sub %xb, %xb : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%col = pcg.input key "col" : !pcg.tensor<8x1xf32>
// CHECK-NEXT:   %col = pcg.input key "col" : !pcg.tensor<8x1xf32>
%mul = pcg.mul %x, %col : !pcg.tensor<8x16xf32>, !pcg.tensor<8x1xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %mul = pcg.mul %x, %col : !pcg.tensor<8x16xf32>, !pcg.tensor<8x1xf32> -> !pcg.tensor<8x16xf32>
%mul_f = pcg.mul %xf, %xf : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:   %mul_f = pcg.mul %xf, %xf : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
%div = pcg.div %y, %x : !pcg.tensor<16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %div = pcg.div %y, %x : !pcg.tensor<16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%i = pcg.input key "i" : !pcg.tensor<8xi64>
// CHECK-NEXT:   %i = pcg.input key "i" : !pcg.tensor<8xi64>
%add_i = pcg.add %label, %i : !pcg.tensor<8xi64>, !pcg.tensor<8xi64> -> !pcg.tensor<8xi64>
// CHECK-NEXT:   %add_i = pcg.add %label, %i : !pcg.tensor<8xi64>, !pcg.tensor<8xi64> -> !pcg.tensor<8xi64>

// mul is bilinear and div is linear in its dividend: partial sums of one
// operand pass through when the other operand is a whole value.
%p32 = pcg.input key "p" : !pcg.tensor<8x32xf32, copy 2>
// CHECK-NEXT:   %p32 = pcg.input key "p" : !pcg.tensor<8x32xf32, copy 2>
%mul_s = pcg.mul %partial, %p32 : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32, copy 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %mul_s = pcg.mul %partial, %p32 : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32, copy 2> -> !pcg.tensor<8x32xf32, sum 2>
%div_s = pcg.div %partial, %p32 : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32, copy 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %div_s = pcg.div %partial, %p32 : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32, copy 2> -> !pcg.tensor<8x32xf32, sum 2>

//===----------------------------------------------------------------------===//
// linear: x @ weight^T + bias, weight [out, in] as in torch.nn.Linear.
//===----------------------------------------------------------------------===//

%linear = pcg.linear %x, %w : !pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:   %linear = pcg.linear %x, %w : !pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32> -> !pcg.tensor<8x32xf32>
%linear_bias = pcg.linear %x, %w bias %b : !pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:   %linear_bias = pcg.linear %x, %w bias %b : !pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x32xf32>
// GENERIC: %linear_bias = "pcg.linear"(%x, %w, %b) : (!pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32>, !pcg.tensor<32xf32>) -> !pcg.tensor<8x32xf32>
%x3 = pcg.input key "x3" : !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %x3 = pcg.input key "x3" : !pcg.tensor<2x8x16xf32>
%linear_3d = pcg.linear %x3, %w bias %b : !pcg.tensor<2x8x16xf32>, !pcg.tensor<32x16xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<2x8x32xf32>
// CHECK-NEXT:   %linear_3d = pcg.linear %x3, %w bias %b : !pcg.tensor<2x8x16xf32>, !pcg.tensor<32x16xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<2x8x32xf32>

// Data parallel: batch-sharded input, weight and bias copied to both tasks.
%linear_dp = pcg.linear %xb, %wc bias %bc {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<32x16xf32, copy 2>, !pcg.tensor<32xf32, copy 2> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:   %linear_dp = pcg.linear %xb, %wc bias %bc {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<32x16xf32, copy 2>, !pcg.tensor<32xf32, copy 2> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// GENERIC: %linear_dp = "pcg.linear"(%xb, %wc, %bc) {view = #pcg.view<start 0, [intra 1]>} : (!pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<32x16xf32, copy 2>, !pcg.tensor<32xf32, copy 2>) -> !pcg.tensor<8x32xf32, shard [2, 1]>

// Tensor (column) parallel: weight rows and bias sharded, the input copied.
%wo = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32, shard [2, 1]>
// CHECK-NEXT:   %wo = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32, shard [2, 1]>
%bo = pcg.weight key "fc.bias" : !pcg.tensor<32xf32, shard [2]>
// CHECK-NEXT:   %bo = pcg.weight key "fc.bias" : !pcg.tensor<32xf32, shard [2]>
%xc = pcg.input key "x" : !pcg.tensor<8x16xf32, copy 2>
// CHECK-NEXT:   %xc = pcg.input key "x" : !pcg.tensor<8x16xf32, copy 2>
%linear_col = pcg.linear %xc, %wo bias %bo : !pcg.tensor<8x16xf32, copy 2>, !pcg.tensor<32x16xf32, shard [2, 1]>, !pcg.tensor<32xf32, shard [2]> -> !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK-NEXT:   %linear_col = pcg.linear %xc, %wo bias %bo : !pcg.tensor<8x16xf32, copy 2>, !pcg.tensor<32x16xf32, shard [2, 1]>, !pcg.tensor<32xf32, shard [2]> -> !pcg.tensor<8x32xf32, shard [1, 2]>

// Reduction parallel with a bias: the bias (copied) is added by partial sum 0 only.
%linear_red = pcg.linear %xf, %wf bias %bc : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]>, !pcg.tensor<32xf32, copy 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK-NEXT:   %linear_red = pcg.linear %xf, %wf bias %bc : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]>, !pcg.tensor<32xf32, copy 2> -> !pcg.tensor<8x32xf32, sum 2>

// Batch and reduction parallel at once: a 2-dimensional task space (shard
// dim 0, then sum), placed on two nodes of two devices each.
%x22 = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 2]>
// CHECK-NEXT:   %x22 = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 2]>
%wf2 = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32, shard [1, 2], copy 2>
// CHECK-NEXT:   %wf2 = pcg.weight key "fc.weight" : !pcg.tensor<32x16xf32, shard [1, 2], copy 2>
%linear_2d = pcg.linear %x22, %wf2 {view = #pcg.view<start 0, [intra 1, inter 1]>} : !pcg.tensor<8x16xf32, shard [2, 2]>, !pcg.tensor<32x16xf32, shard [1, 2], copy 2> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2>
// CHECK-NEXT:   %linear_2d = pcg.linear %x22, %wf2 {view = #pcg.view<start 0, [intra 1, inter 1]>} : !pcg.tensor<8x16xf32, shard [2, 2]>, !pcg.tensor<32x16xf32, shard [1, 2], copy 2> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2>

//===----------------------------------------------------------------------===//
// matmul [m, k] @ [k, n] and batch_matmul [..., m, k] @ [..., k, n].
//===----------------------------------------------------------------------===//

%a = pcg.input key "a" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %a = pcg.input key "a" : !pcg.tensor<8x16xf32>
%bm = pcg.input key "b" : !pcg.tensor<16x4xf32>
// CHECK-NEXT:   %bm = pcg.input key "b" : !pcg.tensor<16x4xf32>
%matmul = pcg.matmul %a, %bm : !pcg.tensor<8x16xf32>, !pcg.tensor<16x4xf32> -> !pcg.tensor<8x4xf32>
// CHECK-NEXT:   %matmul = pcg.matmul %a, %bm : !pcg.tensor<8x16xf32>, !pcg.tensor<16x4xf32> -> !pcg.tensor<8x4xf32>

// Row parallel (m sharded, rhs copied) and a sharded k giving partial sums.
%am = pcg.input key "a" : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %am = pcg.input key "a" : !pcg.tensor<8x16xf32, shard [2, 1]>
%bmc = pcg.input key "b" : !pcg.tensor<16x4xf32, copy 2>
// CHECK-NEXT:   %bmc = pcg.input key "b" : !pcg.tensor<16x4xf32, copy 2>
%matmul_m = pcg.matmul %am, %bmc : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16x4xf32, copy 2> -> !pcg.tensor<8x4xf32, shard [2, 1]>
// CHECK-NEXT:   %matmul_m = pcg.matmul %am, %bmc : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16x4xf32, copy 2> -> !pcg.tensor<8x4xf32, shard [2, 1]>
%ak = pcg.input key "a" : !pcg.tensor<8x16xf32, shard [1, 4]>
// CHECK-NEXT:   %ak = pcg.input key "a" : !pcg.tensor<8x16xf32, shard [1, 4]>
%bkk = pcg.input key "b" : !pcg.tensor<16x4xf32, shard [4, 1]>
// CHECK-NEXT:   %bkk = pcg.input key "b" : !pcg.tensor<16x4xf32, shard [4, 1]>
%matmul_k = pcg.matmul %ak, %bkk : !pcg.tensor<8x16xf32, shard [1, 4]>, !pcg.tensor<16x4xf32, shard [4, 1]> -> !pcg.tensor<8x4xf32, sum 4>
// CHECK-NEXT:   %matmul_k = pcg.matmul %ak, %bkk : !pcg.tensor<8x16xf32, shard [1, 4]>, !pcg.tensor<16x4xf32, shard [4, 1]> -> !pcg.tensor<8x4xf32, sum 4>

%q3 = pcg.input key "q" : !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %q3 = pcg.input key "q" : !pcg.tensor<2x8x16xf32>
%k3 = pcg.input key "k" : !pcg.tensor<2x16x8xf32>
// CHECK-NEXT:   %k3 = pcg.input key "k" : !pcg.tensor<2x16x8xf32>
%bmm = pcg.batch_matmul %q3, %k3 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x16x8xf32> -> !pcg.tensor<2x8x8xf32>
// CHECK-NEXT:   %bmm = pcg.batch_matmul %q3, %k3 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x16x8xf32> -> !pcg.tensor<2x8x8xf32>
%q4 = pcg.input key "q" : !pcg.tensor<2x4x8x16xf32, shard [2, 2, 1, 1]>
// CHECK-NEXT:   %q4 = pcg.input key "q" : !pcg.tensor<2x4x8x16xf32, shard [2, 2, 1, 1]>
%k4 = pcg.input key "k" : !pcg.tensor<2x4x16x8xf32, shard [2, 2, 1, 1]>
// CHECK-NEXT:   %k4 = pcg.input key "k" : !pcg.tensor<2x4x16x8xf32, shard [2, 2, 1, 1]>
%bmm_b = pcg.batch_matmul %q4, %k4 : !pcg.tensor<2x4x8x16xf32, shard [2, 2, 1, 1]>, !pcg.tensor<2x4x16x8xf32, shard [2, 2, 1, 1]> -> !pcg.tensor<2x4x8x8xf32, shard [2, 2, 1, 1]>
// CHECK-NEXT:   %bmm_b = pcg.batch_matmul %q4, %k4 : !pcg.tensor<2x4x8x16xf32, shard [2, 2, 1, 1]>, !pcg.tensor<2x4x16x8xf32, shard [2, 2, 1, 1]> -> !pcg.tensor<2x4x8x8xf32, shard [2, 2, 1, 1]>

//===----------------------------------------------------------------------===//
// conv2d (NCHW input, OIHW weight) and pool2d.
//===----------------------------------------------------------------------===//

%img = pcg.input key "img" : !pcg.tensor<2x4x8x8xf32>
// CHECK-NEXT:   %img = pcg.input key "img" : !pcg.tensor<2x4x8x8xf32>
%kw = pcg.weight key "conv.weight" : !pcg.tensor<6x4x3x3xf32>
// CHECK-NEXT:   %kw = pcg.weight key "conv.weight" : !pcg.tensor<6x4x3x3xf32>
%kb = pcg.weight key "conv.bias" : !pcg.tensor<6xf32>
// CHECK-NEXT:   %kb = pcg.weight key "conv.bias" : !pcg.tensor<6xf32>
%conv = pcg.conv2d %img, %kw : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x6x6xf32>
// CHECK-NEXT:   %conv = pcg.conv2d %img, %kw : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x6x6xf32>
%conv_pad = pcg.conv2d %img, %kw bias %kb padding [1, 1] : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<2x6x8x8xf32>
// CHECK-NEXT:   %conv_pad = pcg.conv2d %img, %kw bias %kb padding [1, 1] : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<2x6x8x8xf32>
%conv_stride = pcg.conv2d %img, %kw stride [2, 2] padding [1, 1] dilation [1, 1] : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x4x4xf32>
// CHECK-NEXT:   %conv_stride = pcg.conv2d %img, %kw stride [2, 2] padding [1, 1] dilation [1, 1] : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x4x4xf32>
%kg = pcg.weight key "conv.weight" : !pcg.tensor<6x2x3x3xf32>
// CHECK-NEXT:   %kg = pcg.weight key "conv.weight" : !pcg.tensor<6x2x3x3xf32>
%conv_groups = pcg.conv2d %img, %kg bias %kb padding [1, 1] groups 2 : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x2x3x3xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<2x6x8x8xf32>
// CHECK-NEXT:   %conv_groups = pcg.conv2d %img, %kg bias %kb padding [1, 1] groups 2 : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x2x3x3xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<2x6x8x8xf32>
// GENERIC: %conv_groups = "pcg.conv2d"(%img, %kg, %kb) <{padding = array<i64: 1, 1>, groups = 2 : i64}> : (!pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x2x3x3xf32>, !pcg.tensor<6xf32>) -> !pcg.tensor<2x6x8x8xf32>

// Batch parallel; input-channel parallel (partial sums); channel-group parallel.
%img_b = pcg.input key "img" : !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]>
// CHECK-NEXT:   %img_b = pcg.input key "img" : !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]>
%kw_c = pcg.weight key "conv.weight" : !pcg.tensor<6x4x3x3xf32, copy 2>
// CHECK-NEXT:   %kw_c = pcg.weight key "conv.weight" : !pcg.tensor<6x4x3x3xf32, copy 2>
%conv_b = pcg.conv2d %img_b, %kw_c : !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]>, !pcg.tensor<6x4x3x3xf32, copy 2> -> !pcg.tensor<2x6x6x6xf32, shard [2, 1, 1, 1]>
// CHECK-NEXT:   %conv_b = pcg.conv2d %img_b, %kw_c : !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]>, !pcg.tensor<6x4x3x3xf32, copy 2> -> !pcg.tensor<2x6x6x6xf32, shard [2, 1, 1, 1]>
%img_c = pcg.input key "img" : !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>
// CHECK-NEXT:   %img_c = pcg.input key "img" : !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>
%kw_i = pcg.weight key "conv.weight" : !pcg.tensor<6x4x3x3xf32, shard [1, 2, 1, 1]>
// CHECK-NEXT:   %kw_i = pcg.weight key "conv.weight" : !pcg.tensor<6x4x3x3xf32, shard [1, 2, 1, 1]>
%conv_c = pcg.conv2d %img_c, %kw_i : !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>, !pcg.tensor<6x4x3x3xf32, shard [1, 2, 1, 1]> -> !pcg.tensor<2x6x6x6xf32, sum 2>
// CHECK-NEXT:   %conv_c = pcg.conv2d %img_c, %kw_i : !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>, !pcg.tensor<6x4x3x3xf32, shard [1, 2, 1, 1]> -> !pcg.tensor<2x6x6x6xf32, sum 2>
%kg_s = pcg.weight key "conv.weight" : !pcg.tensor<6x2x3x3xf32, shard [2, 1, 1, 1]>
// CHECK-NEXT:   %kg_s = pcg.weight key "conv.weight" : !pcg.tensor<6x2x3x3xf32, shard [2, 1, 1, 1]>
%kb_s = pcg.weight key "conv.bias" : !pcg.tensor<6xf32, shard [2]>
// CHECK-NEXT:   %kb_s = pcg.weight key "conv.bias" : !pcg.tensor<6xf32, shard [2]>
%conv_g = pcg.conv2d %img_c, %kg_s bias %kb_s padding [1, 1] groups 2 : !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>, !pcg.tensor<6x2x3x3xf32, shard [2, 1, 1, 1]>, !pcg.tensor<6xf32, shard [2]> -> !pcg.tensor<2x6x8x8xf32, shard [1, 2, 1, 1]>
// CHECK-NEXT:   %conv_g = pcg.conv2d %img_c, %kg_s bias %kb_s padding [1, 1] groups 2 : !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>, !pcg.tensor<6x2x3x3xf32, shard [2, 1, 1, 1]>, !pcg.tensor<6xf32, shard [2]> -> !pcg.tensor<2x6x8x8xf32, shard [1, 2, 1, 1]>

// pool2d: the stride defaults to the kernel.
%maxpool = pcg.pool2d %img kind "max" kernel [2, 2] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x4x4xf32>
// CHECK-NEXT:   %maxpool = pcg.pool2d %img kind "max" kernel [2, 2] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x4x4xf32>
%avgpool = pcg.pool2d %img kind "avg" kernel [3, 3] stride [1, 1] padding [1, 1] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x8x8xf32>
// CHECK-NEXT:   %avgpool = pcg.pool2d %img kind "avg" kernel [3, 3] stride [1, 1] padding [1, 1] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x8x8xf32>
%maxpool_b = pcg.pool2d %img_b kind "max" kernel [2, 2] : !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<2x4x4x4xf32, shard [2, 1, 1, 1]>
// CHECK-NEXT:   %maxpool_b = pcg.pool2d %img_b kind "max" kernel [2, 2] : !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<2x4x4x4xf32, shard [2, 1, 1, 1]>
%avgpool_s = pcg.pool2d %conv_c kind "avg" kernel [2, 2] : !pcg.tensor<2x6x6x6xf32, sum 2> -> !pcg.tensor<2x6x3x3xf32, sum 2>
// CHECK-NEXT:   %avgpool_s = pcg.pool2d %conv_c kind "avg" kernel [2, 2] : !pcg.tensor<2x6x6x6xf32, sum 2> -> !pcg.tensor<2x6x3x3xf32, sum 2>

//===----------------------------------------------------------------------===//
// Normalization and softmax: the normalized dims stay whole.
//===----------------------------------------------------------------------===//

%bn_w = pcg.weight key "bn.weight" : !pcg.tensor<4xf32>
// CHECK-NEXT:   %bn_w = pcg.weight key "bn.weight" : !pcg.tensor<4xf32>
%bn_b = pcg.weight key "bn.bias" : !pcg.tensor<4xf32>
// CHECK-NEXT:   %bn_b = pcg.weight key "bn.bias" : !pcg.tensor<4xf32>
%bn = pcg.batch_norm %img weight %bn_w bias %bn_b eps 1.0e-05 : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<4xf32>, !pcg.tensor<4xf32> -> !pcg.tensor<2x4x8x8xf32>
// CHECK-NEXT:   %bn = pcg.batch_norm %img weight %bn_w bias %bn_b eps 1.0e-05 : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<4xf32>, !pcg.tensor<4xf32> -> !pcg.tensor<2x4x8x8xf32>
%bn_plain = pcg.batch_norm %img eps 0.001 : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x8x8xf32>
// CHECK-NEXT:   %bn_plain = pcg.batch_norm %img eps 0.001 : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x8x8xf32>
// GENERIC: %bn_plain = "pcg.batch_norm"(%img) <{eps = 1.000000e-03 : f64, operandSegmentSizes = array<i32: 1, 0, 0>}> : (!pcg.tensor<2x4x8x8xf32>) -> !pcg.tensor<2x4x8x8xf32>
%bn_w_s = pcg.weight key "bn.weight" : !pcg.tensor<4xf32, shard [2]>
// CHECK-NEXT:   %bn_w_s = pcg.weight key "bn.weight" : !pcg.tensor<4xf32, shard [2]>
%bn_b_s = pcg.weight key "bn.bias" : !pcg.tensor<4xf32, shard [2]>
// CHECK-NEXT:   %bn_b_s = pcg.weight key "bn.bias" : !pcg.tensor<4xf32, shard [2]>
%bn_c = pcg.batch_norm %img_c weight %bn_w_s bias %bn_b_s eps 1.0e-05 : !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>, !pcg.tensor<4xf32, shard [2]>, !pcg.tensor<4xf32, shard [2]> -> !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>
// CHECK-NEXT:   %bn_c = pcg.batch_norm %img_c weight %bn_w_s bias %bn_b_s eps 1.0e-05 : !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>, !pcg.tensor<4xf32, shard [2]>, !pcg.tensor<4xf32, shard [2]> -> !pcg.tensor<2x4x8x8xf32, shard [1, 2, 1, 1]>

%ln_w = pcg.weight key "ln.weight" : !pcg.tensor<16xf32>
// CHECK-NEXT:   %ln_w = pcg.weight key "ln.weight" : !pcg.tensor<16xf32>
%ln_b = pcg.weight key "ln.bias" : !pcg.tensor<16xf32>
// CHECK-NEXT:   %ln_b = pcg.weight key "ln.bias" : !pcg.tensor<16xf32>
%ln = pcg.layer_norm %x weight %ln_w bias %ln_b dims 1 eps 1.0e-05 : !pcg.tensor<8x16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %ln = pcg.layer_norm %x weight %ln_w bias %ln_b dims 1 eps 1.0e-05 : !pcg.tensor<8x16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32>
%ln_plain = pcg.layer_norm %x3 dims 2 eps 1.0e-05 : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %ln_plain = pcg.layer_norm %x3 dims 2 eps 1.0e-05 : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x16xf32>
%ln_w_c = pcg.weight key "ln.weight" : !pcg.tensor<16xf32, copy 2>
// CHECK-NEXT:   %ln_w_c = pcg.weight key "ln.weight" : !pcg.tensor<16xf32, copy 2>
%ln_b_c = pcg.weight key "ln.bias" : !pcg.tensor<16xf32, copy 2>
// CHECK-NEXT:   %ln_b_c = pcg.weight key "ln.bias" : !pcg.tensor<16xf32, copy 2>
%ln_b2 = pcg.layer_norm %xb weight %ln_w_c bias %ln_b_c dims 1 eps 1.0e-05 : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16xf32, copy 2>, !pcg.tensor<16xf32, copy 2> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %ln_b2 = pcg.layer_norm %xb weight %ln_w_c bias %ln_b_c dims 1 eps 1.0e-05 : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16xf32, copy 2>, !pcg.tensor<16xf32, copy 2> -> !pcg.tensor<8x16xf32, shard [2, 1]>

// rms_norm: every dim but the normalized ones shards (Llama's, Gemma's `1 + weight` as
// `offset 1.0`, HF Llama's order `weight_after_cast`).
%rms_w = pcg.weight key "rms.weight" : !pcg.tensor<16xf32>
// CHECK-NEXT:   %rms_w = pcg.weight key "rms.weight" : !pcg.tensor<16xf32>
%rms = pcg.rms_norm %x weight %rms_w dims 1 eps 1.0e-06 weight_after_cast : !pcg.tensor<8x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %rms = pcg.rms_norm %x weight %rms_w dims 1 eps 1.0e-06 weight_after_cast : !pcg.tensor<8x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32>
// GENERIC: %rms = "pcg.rms_norm"(%x, %rms_w) <{dims = 1 : i64, eps = 1.000000e-06 : f64, weight_after_cast, operandSegmentSizes = array<i32: 1, 1>}> : (!pcg.tensor<8x16xf32>, !pcg.tensor<16xf32>) -> !pcg.tensor<8x16xf32>
%rms_plain = pcg.rms_norm %x3 dims 2 eps 1.0e-05 : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %rms_plain = pcg.rms_norm %x3 dims 2 eps 1.0e-05 : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x16xf32>
%rms_w_c = pcg.weight key "rms.weight" : !pcg.tensor<16xf32, copy 2>
// CHECK-NEXT:   %rms_w_c = pcg.weight key "rms.weight" : !pcg.tensor<16xf32, copy 2>
%rms_b = pcg.rms_norm %xb weight %rms_w_c dims 1 eps 1.0e-06 offset 1.0 : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16xf32, copy 2> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %rms_b = pcg.rms_norm %xb weight %rms_w_c dims 1 eps 1.0e-06 offset 1.0 : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16xf32, copy 2> -> !pcg.tensor<8x16xf32, shard [2, 1]>

// gated_activation: act(gate) * up (SwiGLU, GeGLU); both operands shard alike on every dim.
%glu = pcg.gated_activation %x, %x act "silu" : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %glu = pcg.gated_activation %x, %x act "silu" : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// GENERIC: %glu = "pcg.gated_activation"(%x, %x) <{act = "silu"}> : (!pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32>) -> !pcg.tensor<8x16xf32>
%glu_b = pcg.gated_activation %xb, %xb act "gelu_tanh" : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %glu_b = pcg.gated_activation %xb, %xb act "gelu_tanh" : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>

// gather: fixed indices along an unsharded dim (DLRM's interaction pairs); other dims shard.
%gather = pcg.gather %x dim 1 indices [3, 0, 3] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x3xf32>
// CHECK-NEXT:   %gather = pcg.gather %x dim 1 indices [3, 0, 3] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x3xf32>
%gather_b = pcg.gather %xb dim 1 indices [15] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x1xf32, shard [2, 1]>
// CHECK-NEXT:   %gather_b = pcg.gather %xb dim 1 indices [15] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x1xf32, shard [2, 1]>
%softmax = pcg.softmax %x dim 1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %softmax = pcg.softmax %x dim 1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%softmax_neg = pcg.softmax %x dim -1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:   %softmax_neg = pcg.softmax %x dim -1 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
%softmax_b = pcg.softmax %xb dim 1 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   %softmax_b = pcg.softmax %xb dim 1 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%softmax_f = pcg.softmax %xf dim 0 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT:   %softmax_f = pcg.softmax %xf dim 0 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>

//===----------------------------------------------------------------------===//
// Shape ops: concat, split, reshape, transpose, reduce.
//===----------------------------------------------------------------------===//

%concat = pcg.concat %x, %x dim 1 : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x32xf32>
// CHECK-NEXT:   %concat = pcg.concat %x, %x dim 1 : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x32xf32>
%concat3 = pcg.concat %x, %relu, %gelu dim 0 : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<24x16xf32>
// CHECK-NEXT:   %concat3 = pcg.concat %x, %relu, %gelu dim 0 : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<24x16xf32>
%concat_b = pcg.concat %xb, %relu_b dim 1 : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT:   %concat_b = pcg.concat %xb, %relu_b dim 1 : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32, shard [2, 1]>
%concat_s = pcg.concat %partial, %neg_s dim 0 : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<16x32xf32, sum 2>
// CHECK-NEXT:   %concat_s = pcg.concat %partial, %neg_s dim 0 : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<16x32xf32, sum 2>

%split:2 = pcg.split %x dim 1 sizes [4, 12] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x4xf32>, !pcg.tensor<8x12xf32>
// CHECK-NEXT:   %split, %split_1 = pcg.split %x dim 1 sizes [4, 12] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x4xf32>, !pcg.tensor<8x12xf32>
// GENERIC: %split, %split_1 = "pcg.split"(%x) <{dim = 1 : i64, sizes = array<i64: 4, 12>}> : (!pcg.tensor<8x16xf32>) -> (!pcg.tensor<8x4xf32>, !pcg.tensor<8x12xf32>)
%split_b:3 = pcg.split %xb dim 1 sizes [8, 4, 4] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x8xf32, shard [2, 1]>, !pcg.tensor<8x4xf32, shard [2, 1]>, !pcg.tensor<8x4xf32, shard [2, 1]>
// CHECK-NEXT:   %split_b, %split_b_1, %split_b_2 = pcg.split %xb dim 1 sizes [8, 4, 4] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x8xf32, shard [2, 1]>, !pcg.tensor<8x4xf32, shard [2, 1]>, !pcg.tensor<8x4xf32, shard [2, 1]>

%reshape = pcg.reshape %x shape [8, 4, 4] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x4x4xf32>
// CHECK-NEXT:   %reshape = pcg.reshape %x shape [8, 4, 4] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x4x4xf32>
%reshape_flat = pcg.reshape %xb shape [128] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<128xf32, shard [2]>
// CHECK-NEXT:   %reshape_flat = pcg.reshape %xb shape [128] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<128xf32, shard [2]>
%reshape_f = pcg.reshape %xf shape [8, 4, 4] : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x4x4xf32, shard [1, 2, 1]>
// CHECK-NEXT:   %reshape_f = pcg.reshape %xf shape [8, 4, 4] : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x4x4xf32, shard [1, 2, 1]>
%reshape_s = pcg.reshape %partial shape [256] : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<256xf32, sum 2>
// CHECK-NEXT:   %reshape_s = pcg.reshape %partial shape [256] : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<256xf32, sum 2>

%transpose = pcg.transpose %x perm [1, 0] : !pcg.tensor<8x16xf32> -> !pcg.tensor<16x8xf32>
// CHECK-NEXT:   %transpose = pcg.transpose %x perm [1, 0] : !pcg.tensor<8x16xf32> -> !pcg.tensor<16x8xf32>
%transpose_b = pcg.transpose %xb perm [1, 0] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<16x8xf32, shard [1, 2]>
// CHECK-NEXT:   %transpose_b = pcg.transpose %xb perm [1, 0] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<16x8xf32, shard [1, 2]>
%transpose_perm = pcg.transpose %x3 perm [0, 2, 1] : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x16x8xf32>
// CHECK-NEXT:   %transpose_perm = pcg.transpose %x3 perm [0, 2, 1] : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x16x8xf32>

%sum = pcg.reduce %x kind "sum" dims [1] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8xf32>
// CHECK-NEXT:   %sum = pcg.reduce %x kind "sum" dims [1] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8xf32>
%sum_keep = pcg.reduce %x kind "sum" dims [1] keepdim : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x1xf32>
// CHECK-NEXT:   %sum_keep = pcg.reduce %x kind "sum" dims [1] keepdim : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x1xf32>
// GENERIC: %sum_keep = "pcg.reduce"(%x) <{kind = "sum", dims = array<i64: 1>, keepdim}> : (!pcg.tensor<8x16xf32>) -> !pcg.tensor<8x1xf32>
%mean = pcg.reduce %x3 kind "mean" dims [0, 2] : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<8xf32>
// CHECK-NEXT:   %mean = pcg.reduce %x3 kind "mean" dims [0, 2] : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<8xf32>
%mean_keep = pcg.reduce %x3 kind "mean" dims [-1] keepdim : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x1xf32>
// CHECK-NEXT:   %mean_keep = pcg.reduce %x3 kind "mean" dims [-1] keepdim : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x1xf32>
%mean_all = pcg.reduce %x kind "mean" dims [0, 1] : !pcg.tensor<8x16xf32> -> !pcg.tensor<f32>
// CHECK-NEXT:   %mean_all = pcg.reduce %x kind "mean" dims [0, 1] : !pcg.tensor<8x16xf32> -> !pcg.tensor<f32>
// A sharded dim that is kept stays sharded; a sharded dim that is reduced gives
// partial sums.
%sum_b = pcg.reduce %xb kind "sum" dims [1] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8xf32, shard [2]>
// CHECK-NEXT:   %sum_b = pcg.reduce %xb kind "sum" dims [1] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8xf32, shard [2]>
%sum_f = pcg.reduce %xf kind "sum" dims [1] : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8xf32, sum 2>
// CHECK-NEXT:   %sum_f = pcg.reduce %xf kind "sum" dims [1] : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8xf32, sum 2>
%mean_f = pcg.reduce %xf kind "mean" dims [1] keepdim : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x1xf32, sum 2>
// CHECK-NEXT:   %mean_f = pcg.reduce %xf kind "mean" dims [1] keepdim : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x1xf32, sum 2>
// Max and min pick an element: a kept dim shards, the reduced one stays whole; the indices
// are i64.
%max = pcg.reduce %xb kind "max" dims [1] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8xf32, shard [2]>
// CHECK-NEXT:   %max = pcg.reduce %xb kind "max" dims [1] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8xf32, shard [2]>
%argmin = pcg.reduce %x3 kind "argmin" dims [-1] keepdim : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x1xi64>
// CHECK-NEXT:   %argmin = pcg.reduce %x3 kind "argmin" dims [-1] keepdim : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<2x8x1xi64>
%amax = pcg.reduce %x3 kind "amax" dims [0, 2] : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<8xf32>
// CHECK-NEXT:   %amax = pcg.reduce %x3 kind "amax" dims [0, 2] : !pcg.tensor<2x8x16xf32> -> !pcg.tensor<8xf32>

//===----------------------------------------------------------------------===//
// Embeddings: weight [vocabulary, dim] looked up with i64 indices.
//===----------------------------------------------------------------------===//

%ids = pcg.input key "ids" : !pcg.tensor<4x8xi64>
// CHECK-NEXT:   %ids = pcg.input key "ids" : !pcg.tensor<4x8xi64>
%table = pcg.weight key "emb.weight" : !pcg.tensor<100x16xf32>
// CHECK-NEXT:   %table = pcg.weight key "emb.weight" : !pcg.tensor<100x16xf32>
%emb = pcg.embedding %ids, %table : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x8x16xf32>
// CHECK-NEXT:   %emb = pcg.embedding %ids, %table : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x8x16xf32>
// Vocabulary parallel: each task looks up the ids in its half of the table.
%ids_c = pcg.input key "ids" : !pcg.tensor<4x8xi64, copy 2>
// CHECK-NEXT:   %ids_c = pcg.input key "ids" : !pcg.tensor<4x8xi64, copy 2>
%table_v = pcg.weight key "emb.weight" : !pcg.tensor<100x16xf32, shard [2, 1]>
// CHECK-NEXT:   %table_v = pcg.weight key "emb.weight" : !pcg.tensor<100x16xf32, shard [2, 1]>
%emb_v = pcg.embedding %ids_c, %table_v : !pcg.tensor<4x8xi64, copy 2>, !pcg.tensor<100x16xf32, shard [2, 1]> -> !pcg.tensor<4x8x16xf32, sum 2>
// CHECK-NEXT:   %emb_v = pcg.embedding %ids_c, %table_v : !pcg.tensor<4x8xi64, copy 2>, !pcg.tensor<100x16xf32, shard [2, 1]> -> !pcg.tensor<4x8x16xf32, sum 2>
// Batch parallel and embedding-dim parallel.
%ids_b = pcg.input key "ids" : !pcg.tensor<4x8xi64, shard [2, 1]>
// CHECK-NEXT:   %ids_b = pcg.input key "ids" : !pcg.tensor<4x8xi64, shard [2, 1]>
%table_c = pcg.weight key "emb.weight" : !pcg.tensor<100x16xf32, copy 2>
// CHECK-NEXT:   %table_c = pcg.weight key "emb.weight" : !pcg.tensor<100x16xf32, copy 2>
%emb_b = pcg.embedding %ids_b, %table_c : !pcg.tensor<4x8xi64, shard [2, 1]>, !pcg.tensor<100x16xf32, copy 2> -> !pcg.tensor<4x8x16xf32, shard [2, 1, 1]>
// CHECK-NEXT:   %emb_b = pcg.embedding %ids_b, %table_c : !pcg.tensor<4x8xi64, shard [2, 1]>, !pcg.tensor<100x16xf32, copy 2> -> !pcg.tensor<4x8x16xf32, shard [2, 1, 1]>
%table_e = pcg.weight key "emb.weight" : !pcg.tensor<100x16xf32, shard [1, 2]>
// CHECK-NEXT:   %table_e = pcg.weight key "emb.weight" : !pcg.tensor<100x16xf32, shard [1, 2]>
%emb_e = pcg.embedding %ids_c, %table_e : !pcg.tensor<4x8xi64, copy 2>, !pcg.tensor<100x16xf32, shard [1, 2]> -> !pcg.tensor<4x8x16xf32, shard [1, 1, 2]>
// CHECK-NEXT:   %emb_e = pcg.embedding %ids_c, %table_e : !pcg.tensor<4x8xi64, copy 2>, !pcg.tensor<100x16xf32, shard [1, 2]> -> !pcg.tensor<4x8x16xf32, shard [1, 1, 2]>
// padding_idx (torch's): the forward reads the row; the lookup adds nothing to its gradient.
// A vocabulary-parallel lookup keeps the global row (the shard holding it applies it).
%emb_p = pcg.embedding %ids, %table padding_idx 0 : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x8x16xf32>
// CHECK-NEXT:   %emb_p = pcg.embedding %ids, %table padding_idx 0 : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x8x16xf32>
// GENERIC:      "pcg.embedding"(%{{.*}}, %{{.*}}) <{padding_idx = 0 : i64}> : (!pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32>) -> !pcg.tensor<4x8x16xf32>
%emb_pv = pcg.embedding %ids_c, %table_v padding_idx 99 : !pcg.tensor<4x8xi64, copy 2>, !pcg.tensor<100x16xf32, shard [2, 1]> -> !pcg.tensor<4x8x16xf32, sum 2>
// CHECK-NEXT:   %emb_pv = pcg.embedding %ids_c, %table_v padding_idx 99 : !pcg.tensor<4x8xi64, copy 2>, !pcg.tensor<100x16xf32, shard [2, 1]> -> !pcg.tensor<4x8x16xf32, sum 2>

%bag = pcg.embedding_bag %ids, %table mode "sum" : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x16xf32>
// CHECK-NEXT:   %bag = pcg.embedding_bag %ids, %table mode "sum" : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x16xf32>
%bag_mean = pcg.embedding_bag %ids, %table mode "mean" : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x16xf32>
// CHECK-NEXT:   %bag_mean = pcg.embedding_bag %ids, %table mode "mean" : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x16xf32>
// Bag parallel (the bag dim L sharded) and vocabulary parallel both give partial sums.
%ids_l = pcg.input key "ids" : !pcg.tensor<4x8xi64, shard [1, 2]>
// CHECK-NEXT:   %ids_l = pcg.input key "ids" : !pcg.tensor<4x8xi64, shard [1, 2]>
%bag_l = pcg.embedding_bag %ids_l, %table_c mode "mean" : !pcg.tensor<4x8xi64, shard [1, 2]>, !pcg.tensor<100x16xf32, copy 2> -> !pcg.tensor<4x16xf32, sum 2>
// CHECK-NEXT:   %bag_l = pcg.embedding_bag %ids_l, %table_c mode "mean" : !pcg.tensor<4x8xi64, shard [1, 2]>, !pcg.tensor<100x16xf32, copy 2> -> !pcg.tensor<4x16xf32, sum 2>
%bag_v = pcg.embedding_bag %ids_c, %table_v mode "sum" : !pcg.tensor<4x8xi64, copy 2>, !pcg.tensor<100x16xf32, shard [2, 1]> -> !pcg.tensor<4x16xf32, sum 2>
// CHECK-NEXT:   %bag_v = pcg.embedding_bag %ids_c, %table_v mode "sum" : !pcg.tensor<4x8xi64, copy 2>, !pcg.tensor<100x16xf32, shard [2, 1]> -> !pcg.tensor<4x16xf32, sum 2>

//===----------------------------------------------------------------------===//
// attention: query [B, Sq, E], key/value [B, Sk, E], four [E, E] projections;
// optional biases bq bk bv bo [E] and an additive mask [B|1, 1, Sq|1, Sk].
//===----------------------------------------------------------------------===//

%q = pcg.input key "q" : !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %q = pcg.input key "q" : !pcg.tensor<2x8x16xf32>
%kv = pcg.input key "kv" : !pcg.tensor<2x6x16xf32>
// CHECK-NEXT:   %kv = pcg.input key "kv" : !pcg.tensor<2x6x16xf32>
%wq = pcg.weight key "attn.wq" : !pcg.tensor<16x16xf32>
// CHECK-NEXT:   %wq = pcg.weight key "attn.wq" : !pcg.tensor<16x16xf32>
%wk = pcg.weight key "attn.wk" : !pcg.tensor<16x16xf32>
// CHECK-NEXT:   %wk = pcg.weight key "attn.wk" : !pcg.tensor<16x16xf32>
%wv = pcg.weight key "attn.wv" : !pcg.tensor<16x16xf32>
// CHECK-NEXT:   %wv = pcg.weight key "attn.wv" : !pcg.tensor<16x16xf32>
%wout = pcg.weight key "attn.wo" : !pcg.tensor<16x16xf32>
// CHECK-NEXT:   %wout = pcg.weight key "attn.wo" : !pcg.tensor<16x16xf32>
%bq = pcg.weight key "attn.bq" : !pcg.tensor<16xf32>
// CHECK-NEXT:   %bq = pcg.weight key "attn.bq" : !pcg.tensor<16xf32>
%bk = pcg.weight key "attn.bk" : !pcg.tensor<16xf32>
// CHECK-NEXT:   %bk = pcg.weight key "attn.bk" : !pcg.tensor<16xf32>
%bv = pcg.weight key "attn.bv" : !pcg.tensor<16xf32>
// CHECK-NEXT:   %bv = pcg.weight key "attn.bv" : !pcg.tensor<16xf32>
%bout = pcg.weight key "attn.bo" : !pcg.tensor<16xf32>
// CHECK-NEXT:   %bout = pcg.weight key "attn.bo" : !pcg.tensor<16xf32>
%mask = pcg.input key "mask" : !pcg.tensor<1x1x8x6xf32>
// CHECK-NEXT:   %mask = pcg.input key "mask" : !pcg.tensor<1x1x8x6xf32>
%attn = pcg.attention %q, %kv, %kv, %wq, %wk, %wv, %wout heads 4 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %attn = pcg.attention %q, %kv, %kv, %wq, %wk, %wv, %wout heads 4 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
%attn_drop = pcg.attention %q, %kv, %kv, %wq, %wk, %wv, %wout heads 4 dropout 0.1 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %attn_drop = pcg.attention %q, %kv, %kv, %wq, %wk, %wv, %wout heads 4 dropout 0.1 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
// context parallelism: q, k, v sharded alike on the sequence (self-attention); the tasks of a
// context group exchange K/V blocks around a ring or trade rows for heads, as `context` says
%ctx_x = pcg.input key "ctx_x" : !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>
// CHECK-NEXT:   %ctx_x = pcg.input key "ctx_x" : !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>
%ctx_w = pcg.weight key "attn.ctx_w" : !pcg.tensor<16x16xf32, copy 2>
// CHECK-NEXT:   %ctx_w = pcg.weight key "attn.ctx_w" : !pcg.tensor<16x16xf32, copy 2>
%attn_ring = pcg.attention %ctx_x, %ctx_x, %ctx_x, %ctx_w, %ctx_w, %ctx_w, %ctx_w heads 4 context "ring" : !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2> -> !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>
// CHECK-NEXT:   %attn_ring = pcg.attention %ctx_x, %ctx_x, %ctx_x, %ctx_w, %ctx_w, %ctx_w, %ctx_w heads 4 context "ring" : !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2> -> !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>
%attn_a2a = pcg.attention %ctx_x, %ctx_x, %ctx_x, %ctx_w, %ctx_w, %ctx_w, %ctx_w heads 4 context "all-to-all" : !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2> -> !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>
// CHECK-NEXT:   %attn_a2a = pcg.attention %ctx_x, %ctx_x, %ctx_x, %ctx_w, %ctx_w, %ctx_w, %ctx_w heads 4 context "all-to-all" : !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2>, !pcg.tensor<16x16xf32, copy 2> -> !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>
%attn_causal = pcg.attention %q, %q, %q, %wq, %wk, %wv, %wout heads 4 causal : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %attn_causal = pcg.attention %q, %q, %q, %wq, %wk, %wv, %wout heads 4 causal : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
%attn_full = pcg.attention %q, %kv, %kv, %wq, %wk, %wv, %wout bq %bq bk %bk bv %bv bo %bout mask %mask heads 4 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<1x1x8x6xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %attn_full = pcg.attention %q, %kv, %kv, %wq, %wk, %wv, %wout bq %bq bk %bk bv %bv bo %bout mask %mask heads 4 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<16xf32>, !pcg.tensor<1x1x8x6xf32> -> !pcg.tensor<2x8x16xf32>
%attn_mask = pcg.attention %q, %kv, %kv, %wq, %wk, %wv, %wout mask %mask heads 2 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<1x1x8x6xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %attn_mask = pcg.attention %q, %kv, %kv, %wq, %wk, %wv, %wout mask %mask heads 2 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<1x1x8x6xf32> -> !pcg.tensor<2x8x16xf32>
// GENERIC: %attn_mask = "pcg.attention"(%q, %kv, %kv, %wq, %wk, %wv, %wout, %mask) <{heads = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0>}> : (!pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<2x6x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<1x1x8x6xf32>) -> !pcg.tensor<2x8x16xf32>
%attn_bo = pcg.attention %q, %q, %q, %wq, %wk, %wv, %wout bo %bout heads 1 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK-NEXT:   %attn_bo = pcg.attention %q, %q, %q, %wq, %wk, %wv, %wout bo %bout heads 1 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<2x8x16xf32>

// Head parallel: the q/k/v projection rows (and their biases) and the output
// projection's columns are split by heads; each task holds a partial sum.
%q_c = pcg.input key "q" : !pcg.tensor<2x8x16xf32, copy 2>
// CHECK-NEXT:   %q_c = pcg.input key "q" : !pcg.tensor<2x8x16xf32, copy 2>
%kv_c = pcg.input key "kv" : !pcg.tensor<2x6x16xf32, copy 2>
// CHECK-NEXT:   %kv_c = pcg.input key "kv" : !pcg.tensor<2x6x16xf32, copy 2>
%wq_h = pcg.weight key "attn.wq" : !pcg.tensor<16x16xf32, shard [2, 1]>
// CHECK-NEXT:   %wq_h = pcg.weight key "attn.wq" : !pcg.tensor<16x16xf32, shard [2, 1]>
%wk_h = pcg.weight key "attn.wk" : !pcg.tensor<16x16xf32, shard [2, 1]>
// CHECK-NEXT:   %wk_h = pcg.weight key "attn.wk" : !pcg.tensor<16x16xf32, shard [2, 1]>
%wv_h = pcg.weight key "attn.wv" : !pcg.tensor<16x16xf32, shard [2, 1]>
// CHECK-NEXT:   %wv_h = pcg.weight key "attn.wv" : !pcg.tensor<16x16xf32, shard [2, 1]>
%wo_h = pcg.weight key "attn.wo" : !pcg.tensor<16x16xf32, shard [1, 2]>
// CHECK-NEXT:   %wo_h = pcg.weight key "attn.wo" : !pcg.tensor<16x16xf32, shard [1, 2]>
%bq_h = pcg.weight key "attn.bq" : !pcg.tensor<16xf32, shard [2]>
// CHECK-NEXT:   %bq_h = pcg.weight key "attn.bq" : !pcg.tensor<16xf32, shard [2]>
%bk_h = pcg.weight key "attn.bk" : !pcg.tensor<16xf32, shard [2]>
// CHECK-NEXT:   %bk_h = pcg.weight key "attn.bk" : !pcg.tensor<16xf32, shard [2]>
%bv_h = pcg.weight key "attn.bv" : !pcg.tensor<16xf32, shard [2]>
// CHECK-NEXT:   %bv_h = pcg.weight key "attn.bv" : !pcg.tensor<16xf32, shard [2]>
%bo_c = pcg.weight key "attn.bo" : !pcg.tensor<16xf32, copy 2>
// CHECK-NEXT:   %bo_c = pcg.weight key "attn.bo" : !pcg.tensor<16xf32, copy 2>
%mask_c = pcg.input key "mask" : !pcg.tensor<1x1x8x6xf32, copy 2>
// CHECK-NEXT:   %mask_c = pcg.input key "mask" : !pcg.tensor<1x1x8x6xf32, copy 2>
%attn_h = pcg.attention %q_c, %kv_c, %kv_c, %wq_h, %wk_h, %wv_h, %wo_h bq %bq_h bk %bk_h bv %bv_h bo %bo_c mask %mask_c heads 4 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<2x8x16xf32, copy 2>, !pcg.tensor<2x6x16xf32, copy 2>, !pcg.tensor<2x6x16xf32, copy 2>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [1, 2]>, !pcg.tensor<16xf32, shard [2]>, !pcg.tensor<16xf32, shard [2]>, !pcg.tensor<16xf32, shard [2]>, !pcg.tensor<16xf32, copy 2>, !pcg.tensor<1x1x8x6xf32, copy 2> -> !pcg.tensor<2x8x16xf32, sum 2>
// CHECK-NEXT:   %attn_h = pcg.attention %q_c, %kv_c, %kv_c, %wq_h, %wk_h, %wv_h, %wo_h bq %bq_h bk %bk_h bv %bv_h bo %bo_c mask %mask_c heads 4 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<2x8x16xf32, copy 2>, !pcg.tensor<2x6x16xf32, copy 2>, !pcg.tensor<2x6x16xf32, copy 2>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [1, 2]>, !pcg.tensor<16xf32, shard [2]>, !pcg.tensor<16xf32, shard [2]>, !pcg.tensor<16xf32, shard [2]>, !pcg.tensor<16xf32, copy 2>, !pcg.tensor<1x1x8x6xf32, copy 2> -> !pcg.tensor<2x8x16xf32, sum 2>
// Batch and query-sequence parallel: projections copied to the 2 x 2 tasks.
%q_bs = pcg.input key "q" : !pcg.tensor<2x8x16xf32, shard [2, 2, 1]>
// CHECK-NEXT:   %q_bs = pcg.input key "q" : !pcg.tensor<2x8x16xf32, shard [2, 2, 1]>
%kv_b = pcg.input key "kv" : !pcg.tensor<2x6x16xf32, shard [2, 1, 1], copy 2>
// CHECK-NEXT:   %kv_b = pcg.input key "kv" : !pcg.tensor<2x6x16xf32, shard [2, 1, 1], copy 2>
%wq_c = pcg.weight key "attn.wq" : !pcg.tensor<16x16xf32, copy 4>
// CHECK-NEXT:   %wq_c = pcg.weight key "attn.wq" : !pcg.tensor<16x16xf32, copy 4>
%wk_c = pcg.weight key "attn.wk" : !pcg.tensor<16x16xf32, copy 4>
// CHECK-NEXT:   %wk_c = pcg.weight key "attn.wk" : !pcg.tensor<16x16xf32, copy 4>
%wv_c = pcg.weight key "attn.wv" : !pcg.tensor<16x16xf32, copy 4>
// CHECK-NEXT:   %wv_c = pcg.weight key "attn.wv" : !pcg.tensor<16x16xf32, copy 4>
%wo_c = pcg.weight key "attn.wo" : !pcg.tensor<16x16xf32, copy 4>
// CHECK-NEXT:   %wo_c = pcg.weight key "attn.wo" : !pcg.tensor<16x16xf32, copy 4>
%attn_bs = pcg.attention %q_bs, %kv_b, %kv_b, %wq_c, %wk_c, %wv_c, %wo_c heads 4 {view = #pcg.view<start 0, [inter 1, intra 1]>} : !pcg.tensor<2x8x16xf32, shard [2, 2, 1]>, !pcg.tensor<2x6x16xf32, shard [2, 1, 1], copy 2>, !pcg.tensor<2x6x16xf32, shard [2, 1, 1], copy 2>, !pcg.tensor<16x16xf32, copy 4>, !pcg.tensor<16x16xf32, copy 4>, !pcg.tensor<16x16xf32, copy 4>, !pcg.tensor<16x16xf32, copy 4> -> !pcg.tensor<2x8x16xf32, shard [2, 2, 1]>
// CHECK-NEXT:   %attn_bs = pcg.attention %q_bs, %kv_b, %kv_b, %wq_c, %wk_c, %wv_c, %wo_c heads 4 {view = #pcg.view<start 0, [inter 1, intra 1]>} : !pcg.tensor<2x8x16xf32, shard [2, 2, 1]>, !pcg.tensor<2x6x16xf32, shard [2, 1, 1], copy 2>, !pcg.tensor<2x6x16xf32, shard [2, 1, 1], copy 2>, !pcg.tensor<16x16xf32, copy 4>, !pcg.tensor<16x16xf32, copy 4>, !pcg.tensor<16x16xf32, copy 4>, !pcg.tensor<16x16xf32, copy 4> -> !pcg.tensor<2x8x16xf32, shard [2, 2, 1]>

//===----------------------------------------------------------------------===//
// Losses reduce to a scalar; sharded rows give partial sums.
//===----------------------------------------------------------------------===//

%logits = pcg.input key "logits" : !pcg.tensor<8x10xf32>
// CHECK-NEXT:   %logits = pcg.input key "logits" : !pcg.tensor<8x10xf32>
%ce = pcg.cross_entropy %logits, %label reduction "mean" : !pcg.tensor<8x10xf32>, !pcg.tensor<8xi64> -> !pcg.tensor<f32>
// CHECK-NEXT:   %ce = pcg.cross_entropy %logits, %label reduction "mean" : !pcg.tensor<8x10xf32>, !pcg.tensor<8xi64> -> !pcg.tensor<f32>
%ce_sum = pcg.cross_entropy %logits, %label reduction "sum" : !pcg.tensor<8x10xf32>, !pcg.tensor<8xi64> -> !pcg.tensor<f32>
// CHECK-NEXT:   %ce_sum = pcg.cross_entropy %logits, %label reduction "sum" : !pcg.tensor<8x10xf32>, !pcg.tensor<8xi64> -> !pcg.tensor<f32>
%logits_b = pcg.input key "logits" : !pcg.tensor<8x10xf32, shard [2, 1]>
// CHECK-NEXT:   %logits_b = pcg.input key "logits" : !pcg.tensor<8x10xf32, shard [2, 1]>
%label_b = pcg.input key "label" : !pcg.tensor<8xi64, shard [2]>
// CHECK-NEXT:   %label_b = pcg.input key "label" : !pcg.tensor<8xi64, shard [2]>
%ce_b = pcg.cross_entropy %logits_b, %label_b reduction "mean" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x10xf32, shard [2, 1]>, !pcg.tensor<8xi64, shard [2]> -> !pcg.tensor<f32, sum 2>
// CHECK-NEXT:   %ce_b = pcg.cross_entropy %logits_b, %label_b reduction "mean" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x10xf32, shard [2, 1]>, !pcg.tensor<8xi64, shard [2]> -> !pcg.tensor<f32, sum 2>
// ignore_index (torch's): those targets add nothing; a mean divides by the kept ones.
%ce_i = pcg.cross_entropy %logits_b, %label_b reduction "mean" ignore_index -100 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x10xf32, shard [2, 1]>, !pcg.tensor<8xi64, shard [2]> -> !pcg.tensor<f32, sum 2>
// CHECK-NEXT:   %ce_i = pcg.cross_entropy %logits_b, %label_b reduction "mean" ignore_index -100 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x10xf32, shard [2, 1]>, !pcg.tensor<8xi64, shard [2]> -> !pcg.tensor<f32, sum 2>
// Vocabulary parallel (Megatron-LM): classes sharded, targets copied; the class shards' partial
// sums add up to the loss (rows and classes: partial sums over both).
%logits_v = pcg.input key "logits" : !pcg.tensor<8x10xf32, shard [2, 2]>
// CHECK-NEXT:   %logits_v = pcg.input key "logits" : !pcg.tensor<8x10xf32, shard [2, 2]>
%label_v = pcg.input key "label" : !pcg.tensor<8xi64, shard [2], copy 2>
// CHECK-NEXT:   %label_v = pcg.input key "label" : !pcg.tensor<8xi64, shard [2], copy 2>
%ce_v = pcg.cross_entropy %logits_v, %label_v reduction "mean" ignore_index 3 : !pcg.tensor<8x10xf32, shard [2, 2]>, !pcg.tensor<8xi64, shard [2], copy 2> -> !pcg.tensor<f32, sum 4>
// CHECK-NEXT:   %ce_v = pcg.cross_entropy %logits_v, %label_v reduction "mean" ignore_index 3 : !pcg.tensor<8x10xf32, shard [2, 2]>, !pcg.tensor<8xi64, shard [2], copy 2> -> !pcg.tensor<f32, sum 4>

%mse = pcg.mse_loss %x, %relu reduction "mean" : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<f32>
// CHECK-NEXT:   %mse = pcg.mse_loss %x, %relu reduction "mean" : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<f32>
%mse_sum = pcg.mse_loss %x, %relu reduction "sum" : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<f32>
// CHECK-NEXT:   %mse_sum = pcg.mse_loss %x, %relu reduction "sum" : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<f32>
%x24 = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 4]>
// CHECK-NEXT:   %x24 = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 4]>
%mse_bf = pcg.mse_loss %x24, %x24 reduction "mean" : !pcg.tensor<8x16xf32, shard [2, 4]>, !pcg.tensor<8x16xf32, shard [2, 4]> -> !pcg.tensor<f32, sum 8>
// CHECK-NEXT:   %mse_bf = pcg.mse_loss %x24, %x24 reduction "mean" : !pcg.tensor<8x16xf32, shard [2, 4]>, !pcg.tensor<8x16xf32, shard [2, 4]> -> !pcg.tensor<f32, sum 8>
// CHECK-NEXT: }
