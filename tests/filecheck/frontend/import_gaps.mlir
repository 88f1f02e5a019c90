// unityc-import on the ops and patterns of issue 26 that used to stop an import:
// comparisons and integer arithmetic on ids (RoBERTa's position ids), clamps
// (ReLU6 / hardtanh), Conv1d and 1-D pooling, strided and empty slices,
// as_strided, in-place copies into slices (T5), and attention written the way
// Phi-3, OPT, Qwen3, Gemma-2, T5 and GPT-NeoX write it. Each
// import runs --check (outputs, loss and every gradient against the module).

//===----------------------------------------------------------------------===//
// RoBERTa: position ids = cumsum(ids != pad) * (ids != pad) + pad, computed
// from the input ids: pcg.compare gives the mask (i1), pcg.cumsum the running
// count, and the int32/int64 arithmetic stays integral (an add of a one-element
// integer constant). The token type ids, a zero buffer gathered at the position
// ids, fold to one zero id looked up once and broadcast. The attention still fuses.
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:roberta --check -o %t.roberta.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=ROBERTA < %t.roberta.mlir
// MATCHES:       check: the imported graph matches the module
// ROBERTA:       %ne = pcg.compare %input_ids kind "ne" value 1.0 : !pcg.tensor<2x16xi64> -> !pcg.tensor<2x16xi1>
// ROBERTA-NEXT:  %_to_copy = pcg.cast %ne dtype i32 : !pcg.tensor<2x16xi1> -> !pcg.tensor<2x16xi32>
// ROBERTA-NEXT:  %cumsum = pcg.cast %_to_copy dtype i64
// ROBERTA-NEXT:  %cumsum_1 = pcg.cumsum %cumsum dim 1 : !pcg.tensor<2x16xi64> -> !pcg.tensor<2x16xi64>
// ROBERTA-NEXT:  %_to_copy_1 = pcg.cast %cumsum_1 dtype i32
// ROBERTA-NEXT:  %mul = pcg.mul %_to_copy_1, %_to_copy : !pcg.tensor<2x16xi32>, !pcg.tensor<2x16xi32> -> !pcg.tensor<2x16xi32>
// ROBERTA-NEXT:  %_to_copy_2 = pcg.cast %mul dtype i64
// ROBERTA-NEXT:  %scalar = pcg.constant value dense<1> : tensor<1x1xi64> : !pcg.tensor<1x1xi64>
// ROBERTA-NEXT:  %add = pcg.add %_to_copy_2, %scalar : !pcg.tensor<2x16xi64>, !pcg.tensor<1x1xi64> -> !pcg.tensor<2x16xi64>
// ROBERTA:       %embedding_1 = pcg.constant value dense<0> : tensor<1x1xi64>
// ROBERTA:       pcg.embedding %add, %model_roberta_embeddings_position_embeddings_weight padding_idx 1
// ROBERTA-COUNT-2: pcg.attention
// ROBERTA-NOT:   pcg.softmax

//===----------------------------------------------------------------------===//
// A Conv1d front-end: each Conv1d is a conv2d over a height of 1 (input and
// weight reshaped, stride/padding/dilation on the width, groups kept), so it
// keeps conv2d's parallel forms; ReLU6 and clamp(-1, 1) are pcg.clamp; 1-D
// max and average pooling come as 2-D pooling over a height of 1; x[:, :, ::2]
// gathers every other position.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/../../codegen/vision_models.py:conv1d --check -o %t.conv1d.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=CONV1D < %t.conv1d.mlir
// CONV1D:      %convolution = pcg.reshape %signal shape [4, 4, 1, 32]
// CONV1D-NEXT: %convolution_1 = pcg.reshape %front_0_weight shape [16, 4, 1, 5] : !pcg.tensor<16x4x5xf32> -> !pcg.tensor<16x4x1x5xf32>
// CONV1D-NEXT: %convolution_2 = pcg.conv2d %convolution, %convolution_1 stride [1, 1] padding [0, 2] dilation [1, 1]
// CONV1D:      %hardtanh = pcg.clamp %{{.*}} low 0.0 high 6.0 : !pcg.tensor<4x16x32xf32> -> !pcg.tensor<4x16x32xf32>
// CONV1D:      pcg.conv2d %{{.*}} stride [1, 1] padding [0, 2] dilation [1, 2] groups 2
// CONV1D:      pcg.pool2d %{{.*}} kind "max" kernel [1, 2] stride [1, 2]
// CONV1D:      pcg.pool2d %{{.*}} kind "avg" kernel [1, 2] stride [1, 2]
// CONV1D:      %slice = pcg.gather %relu dim 2 indices [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30] : !pcg.tensor<4x16x32xf32> -> !pcg.tensor<4x16x16xf32>
// CONV1D-NEXT: %clamp = pcg.clamp %slice low -1.0 high 1.0

//===----------------------------------------------------------------------===//
// MobileNet-V2's inverted residuals: every nn.ReLU6 is one pcg.clamp.
// ConvNeXt: AdaptiveAvgPool2d(1) exports a mean and an `aten.as_strided`
// restride of it to channels-last; read through the input's strides it keeps
// every element in place, so it is no op at all (a gather otherwise).
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/../../codegen/vision_models.py:mobilenet --check -o %t.mobilenet.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=MOBILENET < %t.mobilenet.mlir
// MOBILENET-COUNT-8: pcg.clamp %{{.*}} low 0.0 high 6.0
// MOBILENET-NOT:     pcg.clamp

// RUN: unityc-import %S/../../codegen/vision_models.py:convnext --check -o %t.convnext.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=CONVNEXT < %t.convnext.mlir
// CONVNEXT:      %mean = pcg.reduce %add_1 kind "mean" dims [3, 2] keepdim : !pcg.tensor<4x16x4x4xf32> -> !pcg.tensor<4x16x1x1xf32>
// CONVNEXT-NEXT: %permute_8 = pcg.transpose %mean perm [0, 2, 3, 1]

//===----------------------------------------------------------------------===//
// Phi-3 at its default (full) rotary: q_rot = q[..., :d] is q, q_pass =
// q[..., d:] is empty and drops out of the concatenation, so the rotary is
// Llama's. Its packed projections (qkv_proj [3E, E] read through three slices,
// gate_up_proj [2F, E] through a chunk) become one linear per part, each on a
// weight of its own (a row box of the stored tensor): the attention is one op
// that heads can split, and the MLP's gate and up are column-parallel apart.
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:Phi3Config pad=0 --check -o %t.phi3.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=PHI3 < %t.phi3.mlir
// PHI3:      %[[WQ:.*]] = pcg.weight key "model.model.layers.0.self_attn.qkv_proj.weight[0:32, :]" : !pcg.tensor<32x32xf32>
// PHI3-NEXT: %[[WK:.*]] = pcg.weight key "model.model.layers.0.self_attn.qkv_proj.weight[32:64, :]" : !pcg.tensor<32x32xf32>
// PHI3-NEXT: %[[WV:.*]] = pcg.weight key "model.model.layers.0.self_attn.qkv_proj.weight[64:96, :]" : !pcg.tensor<32x32xf32>
// PHI3:      %attention = pcg.attention %rms_norm, %rms_norm, %rms_norm, %[[WQ]], %[[WK]], %[[WV]], %model_model_layers_0_self_attn_o_proj_weight mask %{{.*}} cos %cos sin %sin heads 4 :
// PHI3:      %[[GATE:.*]] = pcg.weight key "model.model.layers.0.mlp.gate_up_proj.weight[0:64, :]" : !pcg.tensor<64x32xf32>
// PHI3-NEXT: %[[UP:.*]] = pcg.weight key "model.model.layers.0.mlp.gate_up_proj.weight[64:128, :]" : !pcg.tensor<64x32xf32>
// PHI3-NEXT: pcg.linear %rms_norm_1, %[[GATE]] : !pcg.tensor<2x16x32xf32>, !pcg.tensor<64x32xf32> -> !pcg.tensor<2x16x64xf32>
// PHI3-NEXT: pcg.linear %rms_norm_1, %[[UP]] : !pcg.tensor<2x16x32xf32>, !pcg.tensor<64x32xf32> -> !pcg.tensor<2x16x64xf32>
// PHI3-NOT:  pcg.softmax
// PHI3-NOT:  pcg.batch_matmul
// PHI3-NOT:  pcg.split %{{[a-z0-9_]*}} dim 2

//===----------------------------------------------------------------------===//
// OPT scales the query projection (q · d^-1/2) instead of the scores; Qwen3
// RMS-normalizes each query and key head (q_norm, k_norm: weights [d]) before
// the rotary. Both fuse: the scale folds into the op's own 1/sqrt(d), the norms
// become the op's q_norm / k_norm operands with norm_eps.
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:OPTConfig --check -o %t.opt.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=OPT < %t.opt.mlir
// OPT:      %attention = pcg.attention %layer_norm, %layer_norm, %layer_norm, %model_model_decoder_layers_0_self_attn_q_proj_weight, %model_model_decoder_layers_0_self_attn_k_proj_weight, %model_model_decoder_layers_0_self_attn_v_proj_weight, %model_model_decoder_layers_0_self_attn_out_proj_weight bq {{.*}} heads 4 :
// OPT-NOT:  pcg.softmax
// OPT-NOT:  pcg.scalar_mul

// RUN: unityc-import hf:Qwen3Config --check -o %t.qwen3.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=QWEN3 < %t.qwen3.mlir
// QWEN3:      %attention = pcg.attention %rms_norm, %rms_norm, %rms_norm, %model_model_layers_0_self_attn_q_proj_weight, %model_model_layers_0_self_attn_k_proj_weight, %model_model_layers_0_self_attn_v_proj_weight, %model_model_layers_0_self_attn_o_proj_weight mask %{{.*}} cos %cos sin %sin q_norm %model_model_layers_0_self_attn_q_norm_weight k_norm %model_model_layers_0_self_attn_k_norm_weight heads 4 norm_eps 1.0e-06 :
// QWEN3-NOT:  pcg.softmax
// QWEN3-NOT:  pcg.reduce %{{.*}} dims [3]

//===----------------------------------------------------------------------===//
// Gemma-2 scales the scores by query_pre_attn_scalar^-1/2 (256: 0.0625, not
// 1/sqrt(8)) and soft-caps them, 50 · tanh(s / 50), before the mask: both
// become properties of the fused op (scale, softcap).
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:Gemma2Config --check -o %t.gemma2.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=GEMMA2 < %t.gemma2.mlir
// GEMMA2:     %attention = pcg.attention {{.*}} cos %cos sin %sin heads 4 scale 0.0625 softcap 50.0 :
// GEMMA2-NOT: pcg.softmax
// GEMMA2-NOT: pcg.tanh %{{.*}} : !pcg.tensor<2x4x16x16xf32>

//===----------------------------------------------------------------------===//
// T5 trained on its own `labels=` loss (the default of an encoder-decoder
// config): `_shift_right` writes the labels into a zero tensor one step to the
// right (an in-place copy into a slice: aten.copy + slice_scatter, here a concat
// of the start id and the labels' first 15 columns) and replaces -100 by the pad
// id (masked_fill on integers: exact 0/1 integer arithmetic).
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:T5Config --batch 4 --check -o %t.t5.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=T5 < %t.t5.mlir
// T5:      %labels = pcg.input key "labels" : !pcg.tensor<4x16xi64>
// T5:      %slice, %{{.*}} = pcg.split %labels dim 1 sizes [15, 1] : !pcg.tensor<4x16xi64> -> !pcg.tensor<4x15xi64>, !pcg.tensor<4x1xi64>
// T5-NEXT: %[[START:.*]] = pcg.constant value dense<0> : tensor<4x1xi64> : !pcg.tensor<4x1xi64>
// T5-NEXT: %{{[a-z_0-9]+}} = pcg.concat %[[START]], %slice dim 1 : !pcg.tensor<4x1xi64>, !pcg.tensor<4x15xi64> -> !pcg.tensor<4x16xi64>
// T5:      %eq = pcg.compare %[[SHIFTED:.*]] kind "eq" value -100.0 : !pcg.tensor<4x16xi64> -> !pcg.tensor<4x16xi1>
// T5:      %[[IDS:.*]] = pcg.mul %{{.*}}, %[[SHIFTED]] : !pcg.tensor<4x16xi64>, !pcg.tensor<4x16xi64> -> !pcg.tensor<4x16xi64>
// T5-NEXT: pcg.embedding %[[IDS]], %model_decoder_embed_tokens_weight
// T5:      pcg.cross_entropy %{{.*}}, %{{.*}} reduction "mean" ignore_index -100

//===----------------------------------------------------------------------===//
// T5's attention fuses too. Its scores are q·k^T unscaled (scale 1.0) plus the
// relative position bias, [1, heads, Sq, Sk] from each stack's first layer and
// shared by its later layers: the bias is the op's per-head mask operand, so a
// head split splits it with the heads. The decoder adds the causal mask after
// the bias, (s + bias) + causal: the two terms become one mask (bias + causal,
// [1, 4, 16, 16]). Encoder self-attention, decoder self-attention and
// cross-attention (no bias: T5's zero bias folds away): all 6 fuse, no
// batch_matmul or softmax is left.
//===----------------------------------------------------------------------===//

// RUN: filecheck %s --check-prefix=T5FUSED < %t.t5.mlir
// T5FUSED:     %[[BIAS:.*]] = pcg.reshape %{{.*}} shape [1, 4, 16, 16] : !pcg.tensor<4x16x16xf32> -> !pcg.tensor<1x4x16x16xf32>
// T5FUSED:     %attention = pcg.attention %rms_norm, %rms_norm, %rms_norm, %model_encoder_block_0_layer_0_SelfAttention_q_weight, {{.*}} mask %[[BIAS]] heads 4 dropout 0.1 scale 1.0 :
// T5FUSED:     %attention_1 = pcg.attention {{.*}}, %model_encoder_block_1_layer_0_SelfAttention_q_weight, {{.*}} mask %[[BIAS]] heads 4
// T5FUSED:     %[[DBIAS:.*]] = pcg.reshape %{{.*}} shape [1, 4, 16, 16]
// T5FUSED:     %mask = pcg.add %[[DBIAS]], %{{.*}} : !pcg.tensor<1x4x16x16xf32>, !pcg.tensor<1x1x16x16xf32> -> !pcg.tensor<1x4x16x16xf32>
// T5FUSED-NEXT: %attention_2 = pcg.attention {{.*}}_decoder_block_0_layer_0_SelfAttention_q_weight, {{.*}} mask %mask heads 4 dropout 0.1 scale 1.0 :
// T5FUSED:     %attention_3 = pcg.attention {{.*}}_decoder_block_0_layer_1_EncDecAttention_q_weight, {{.*}}_EncDecAttention_o_weight heads 4 dropout 0.1 scale 1.0 :
// T5FUSED:     %attention_5 = pcg.attention {{.*}}_decoder_block_1_layer_1_EncDecAttention_q_weight,
// T5FUSED-NOT: pcg.batch_matmul
// T5FUSED-NOT: pcg.softmax

//===----------------------------------------------------------------------===//
// GPT-NeoX packs q, k and v in one query_key_value projection interleaved by
// head (its weight [H·3·D, E] holds head 0's q, k, v rows, then head 1's, ...:
// viewed as [H, 3·D, E], not Phi-3's [3, H·D, E]) and rotates only the first
// rotary_pct of each head's dims (here 2 of 8: cat(rotary(x[..., :2]),
// x[..., 2:])). Both fuse exactly: the op's wq/wk/wv and biases are views of
// the packed tensor that keep the heads on dim 0 (so Megatron splits it by its
// rows, head by head), and cos/sin are 2 wide (the op rotates the first r dims
// of each head; the folded one-frequency table, [1, 1, 16, 1], is widened).
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:GPTNeoXConfig --check -o %t.neox.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=NEOX < %t.neox.mlir
// NEOX:      %wqkv = pcg.reshape %model_gpt_neox_layers_0_attention_query_key_value_weight shape [4, 24, 32] : !pcg.tensor<96x32xf32> -> !pcg.tensor<4x24x32xf32>
// NEOX-NEXT: %wq_heads, %wk_heads, %wv_heads = pcg.split %wqkv dim 1 sizes [8, 8, 8] : !pcg.tensor<4x24x32xf32> -> !pcg.tensor<4x8x32xf32>, !pcg.tensor<4x8x32xf32>, !pcg.tensor<4x8x32xf32>
// NEOX-NEXT: %wq = pcg.reshape %wq_heads shape [32, 32] : !pcg.tensor<4x8x32xf32> -> !pcg.tensor<32x32xf32>
// NEOX:      %bqkv = pcg.reshape %model_gpt_neox_layers_0_attention_query_key_value_bias shape [4, 24]
// NEOX:      %cos = pcg.constant value dense<[{{\[\[}}[1.000000e+00, 1.000000e+00], [0.540302336, 0.540302336], {{.*}} : !pcg.tensor<1x1x16x2xf32>
// NEOX:      %attention = pcg.attention %layer_norm, %layer_norm, %layer_norm, %wq, %wk, %wv, %model_gpt_neox_layers_0_attention_dense_weight bq %bq bk %bk bv %bv bo %model_gpt_neox_layers_0_attention_dense_bias mask %{{.*}} cos %cos sin %sin heads 4 :
// NEOX:      %attention_1 = pcg.attention %layer_norm_2, {{.*}} cos %cos sin %sin heads 4 :
// NEOX-NOT:  pcg.softmax
// NEOX-NOT:  pcg.batch_matmul
