// unityc-import on attention, folded constants and tied weights (factories of
// Inputs/ops.py). After the FX walk the importer canonicalizes and runs
// fuse-attention, so multi-head attention written as separate ops (the way
// eager BERT does) becomes one pcg.attention, whose head parallelism is then a
// rewrite of a single op.

//===----------------------------------------------------------------------===//
// Eager BERT-style self-attention: q/k/v nn.Linear, view + permute to heads,
// q @ k^T * (1 / sqrt(D)), softmax, dropout, @ v, permute back, reshape,
// output nn.Linear. All of it is ONE pcg.attention (heads, and the dropout on
// the probabilities, as properties); no matmul, softmax or shape op is left.
//
// Factory overrides (key=value), --batch and --seed reach the factory and are
// recorded in the `unityc.model` attribute, so the model can be rebuilt: here
// 4 heads of width 2, batch 3. --check compares the interpreter's outputs on
// the fused graph with the module's (dropout off on both sides).
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:attention heads=4 --batch 3 --seed 7 --check -o %t.attention.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=ATTENTION < %t.attention.mlir
// MATCHES:        check: the imported graph matches the module
// ATTENTION:      builtin.module attributes {unityc.model = {model = "{{.*}}Inputs{{/|\\}}ops.py:attention", config = "small", seed = 7 : i64, batch = 3 : i64, overrides = {heads = "4"}}} {
// ATTENTION-NEXT:   func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<3x3x8xf32>) {
// ATTENTION-NEXT:     %attn_query_weight = pcg.weight key "attn.query.weight" : !pcg.tensor<8x8xf32>
// ATTENTION-NEXT:     %attn_query_bias = pcg.weight key "attn.query.bias" : !pcg.tensor<8xf32>
// ATTENTION-NEXT:     %attn_key_weight = pcg.weight key "attn.key.weight" : !pcg.tensor<8x8xf32>
// ATTENTION-NEXT:     %attn_key_bias = pcg.weight key "attn.key.bias" : !pcg.tensor<8xf32>
// ATTENTION-NEXT:     %attn_value_weight = pcg.weight key "attn.value.weight" : !pcg.tensor<8x8xf32>
// ATTENTION-NEXT:     %attn_value_bias = pcg.weight key "attn.value.bias" : !pcg.tensor<8xf32>
// ATTENTION-NEXT:     %attn_output_weight = pcg.weight key "attn.output.weight" : !pcg.tensor<8x8xf32>
// ATTENTION-NEXT:     %attn_output_bias = pcg.weight key "attn.output.bias" : !pcg.tensor<8xf32>
// ATTENTION-NEXT:     %x = pcg.input key "x" : !pcg.tensor<3x3x8xf32>
// ATTENTION-NEXT:     %target = pcg.input key "target" : !pcg.tensor<3x3x8xf32>
// ATTENTION-NEXT:     %attention = pcg.attention %x, %x, %x, %attn_query_weight, %attn_key_weight, %attn_value_weight, %attn_output_weight bq %attn_query_bias bk %attn_key_bias bv %attn_value_bias bo %attn_output_bias heads 4 dropout 0.1 : !pcg.tensor<3x3x8xf32>, !pcg.tensor<3x3x8xf32>, !pcg.tensor<3x3x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8x8xf32>, !pcg.tensor<8xf32>, !pcg.tensor<8xf32>, !pcg.tensor<8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<3x3x8xf32>
// ATTENTION-NEXT:     %mse_loss = pcg.mse_loss %attention, %target reduction "mean" : !pcg.tensor<3x3x8xf32>, !pcg.tensor<3x3x8xf32> -> !pcg.tensor<f32>
// ATTENTION-NEXT:     func.return %mse_loss, %attention : !pcg.tensor<f32>, !pcg.tensor<3x3x8xf32>
// ATTENTION-NEXT:   }
// ATTENTION-NEXT: }

//===----------------------------------------------------------------------===//
// The same layer with F.scaled_dot_product_attention at its core (dropout_p
// 0.1): SDPA is lowered to the eager pattern, so it fuses the same way.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:attention sdpa=True | filecheck %s --check-prefix=SDPA
// SDPA:      overrides = {sdpa = "True"}
// SDPA-NOT:  pcg.softmax
// SDPA-NOT:  pcg.batch_matmul
// SDPA:      %attention = pcg.attention %x, %x, %x, %attn_query_weight, %attn_key_weight, %attn_value_weight, %attn_output_weight bq %attn_query_bias bk %attn_key_bias bv %attn_value_bias bo %attn_output_bias heads 2 dropout 0.1 : {{.*}} -> !pcg.tensor<2x3x8xf32>
// SDPA-NEXT: %mse_loss = pcg.mse_loss %attention, %target
// SDPA-NEXT: func.return %mse_loss, %attention

//===----------------------------------------------------------------------===//
// Causal SDPA alone (no projections to fuse with) on [B, H, S, D] = [2, 2, 3, 4]:
// k transposed, batch_matmul, scale 1/sqrt(4), plus the causal mask as a
// constant (0 on and below the diagonal, -inf above), softmax over the keys,
// batch_matmul with v. The [3, 3] mask broadcasts over [B, H].
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:sdpa_causal --check -o %t.causal.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=CAUSAL < %t.causal.mlir
// CAUSAL:      %[[KT:.+]] = pcg.transpose %k perm [0, 1, 3, 2] : !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x4x3xf32>
// CAUSAL-NEXT: %[[S:.+]] = pcg.batch_matmul %q, %[[KT]] : !pcg.tensor<2x2x3x4xf32>, !pcg.tensor<2x2x4x3xf32> -> !pcg.tensor<2x2x3x3xf32>
// CAUSAL-NEXT: %[[SCALED:.+]] = pcg.scalar_mul %[[S]] scale 0.5 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
// CAUSAL-NEXT: %[[MASK:.+]] = pcg.constant value dense<{{\[\[}}0.000000e+00, 0xff800000, 0xff800000], [0.000000e+00, 0.000000e+00, 0xff800000], [0.000000e+00, 0.000000e+00, 0.000000e+00]]> : tensor<3x3xf32> : !pcg.tensor<3x3xf32>
// CAUSAL-NEXT: %[[MASKED:.+]] = pcg.add %[[SCALED]], %[[MASK]] : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
// CAUSAL-NEXT: %[[P:.+]] = pcg.softmax %[[MASKED]] dim 3 : !pcg.tensor<2x2x3x3xf32> -> !pcg.tensor<2x2x3x3xf32>
// CAUSAL-NEXT: %[[OUT:.+]] = pcg.batch_matmul %[[P]], %v : !pcg.tensor<2x2x3x3xf32>, !pcg.tensor<2x2x3x4xf32> -> !pcg.tensor<2x2x3x4xf32>
// CAUSAL-NEXT: %mse_loss = pcg.mse_loss %[[OUT]], %target

//===----------------------------------------------------------------------===//
// Hugging Face's padding mask, built the way transformers builds it. The input
// mask read at broadcast arange indices (`mask.bool()[b, k]`) is a reshape;
// and with an all-true constant is nothing; and with the (folded) causal mask
// is a product of 0/1 floats; `where(allowed, 0, finfo.min)` is
// (1 - allowed) * min. Every step is exact (--check compares the outputs).
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:padding_mask --check -o %t.padding.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=PADDING < %t.padding.mlir
// PADDING:      %mask = pcg.input key "mask" : !pcg.tensor<2x4xi64>
// PADDING:      %[[BOOL:.+]] = pcg.cast %mask dtype i1 : !pcg.tensor<2x4xi64> -> !pcg.tensor<2x4xi1>
// PADDING-NEXT: %[[KEYS:.+]] = pcg.reshape %[[BOOL]] shape [2, 1, 1, 4] : !pcg.tensor<2x4xi1> -> !pcg.tensor<2x1x1x4xi1>
// PADDING-NEXT: %[[TRIL:.+]] = pcg.constant value dense<{{\[\[\[\[}}1.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00], {{.*}} : tensor<1x1x4x4xf32> : !pcg.tensor<1x1x4x4xf32>
// PADDING-NEXT: %[[KEYSF:.+]] = pcg.cast %[[KEYS]] dtype f32 : !pcg.tensor<2x1x1x4xi1> -> !pcg.tensor<2x1x1x4xf32>
// PADDING-NEXT: %[[BOTH:.+]] = pcg.mul %[[TRIL]], %[[KEYSF]] : !pcg.tensor<1x1x4x4xf32>, !pcg.tensor<2x1x1x4xf32> -> !pcg.tensor<2x1x4x4xf32>
// PADDING-NEXT: %[[ALLOWED:.+]] = pcg.cast %[[BOTH]] dtype i1 : !pcg.tensor<2x1x4x4xf32> -> !pcg.tensor<2x1x4x4xi1>
// PADDING-NEXT: %[[ONE:.+]] = pcg.cast %[[ALLOWED]] dtype f32 : !pcg.tensor<2x1x4x4xi1> -> !pcg.tensor<2x1x4x4xf32>
// PADDING-NEXT: %[[NEG:.+]] = pcg.neg %[[ONE]]
// PADDING-NEXT: %[[BLOCKED:.+]] = pcg.scalar_add %[[NEG]] value 1.0
// PADDING-NEXT: %[[ADDITIVE:.+]] = pcg.scalar_mul %[[BLOCKED]] scale -3.4028234663852886e+38 : !pcg.tensor<2x1x4x4xf32> -> !pcg.tensor<2x1x4x4xf32>
// PADDING-NOT:  pcg.gather
// PADDING:      pcg.add %{{.+}}, %[[ADDITIVE]] : !pcg.tensor<2x1x4x4xf32>, !pcg.tensor<2x1x4x4xf32> -> !pcg.tensor<2x1x4x4xf32>

//===----------------------------------------------------------------------===//
// Constant folding. Whatever depends on no input and no weight is evaluated at
// import: a slice of a position-id buffer (`position_ids[:, :seq]`) becomes a
// pcg.constant of the ids the embedding looks up, and torch.arange a constant
// of its values. No arange, slice or split op is left.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:positions | filecheck %s --check-prefix=POSITIONS
// POSITIONS:      %target = pcg.input key "target" : !pcg.tensor<2x3x4xf32>
// POSITIONS-NEXT: %[[IDS:.+]] = pcg.constant value dense<{{\[\[}}0, 1, 2]]> : tensor<1x3xi64> : !pcg.tensor<1x3xi64>
// POSITIONS-NEXT: %[[POS:.+]] = pcg.embedding %[[IDS]], %pos_weight : !pcg.tensor<1x3xi64>, !pcg.tensor<5x4xf32> -> !pcg.tensor<1x3x4xf32>
// POSITIONS-NEXT: %add = pcg.add %x, %[[POS]] : !pcg.tensor<2x3x4xf32>, !pcg.tensor<1x3x4xf32> -> !pcg.tensor<2x3x4xf32>
// POSITIONS-NEXT: %[[RANGE:.+]] = pcg.constant value dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<4xf32> : !pcg.tensor<4xf32>
// POSITIONS-NEXT: %{{.+}} = pcg.add %add, %[[RANGE]] : !pcg.tensor<2x3x4xf32>, !pcg.tensor<4xf32> -> !pcg.tensor<2x3x4xf32>
// POSITIONS-NOT:  pcg.split

//===----------------------------------------------------------------------===//
// Tied weights: an embedding and an output projection sharing one Parameter
// read ONE pcg.weight, named by the parameter's first state_dict key.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:tied | filecheck %s --check-prefix=TIED
// TIED:      func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<6x10xf32>) {
// TIED-NEXT:   %embed_weight = pcg.weight key "embed.weight" : !pcg.tensor<10x4xf32>
// TIED-NOT:    pcg.weight
// TIED:        %embedding = pcg.embedding %ids, %embed_weight : !pcg.tensor<6xi64>, !pcg.tensor<10x4xf32> -> !pcg.tensor<6x4xf32>
// TIED-NEXT:   %linear = pcg.linear %embedding, %embed_weight : !pcg.tensor<6x4xf32>, !pcg.tensor<10x4xf32> -> !pcg.tensor<6x10xf32>
// TIED-NEXT:   %nll_loss_forward = pcg.cross_entropy %linear, %labels reduction "mean"

//===----------------------------------------------------------------------===//
// Hugging Face families, each ONE pcg.attention per layer (2 layers here);
// `unityc-import hf:<x> --check` compares loss and every gradient (pytest:
// tests/frontend/test_import_equivalence.py).
//
// GPT-2: Conv1D projections (addmm with a [in, out] weight) and one fused QKV
// projection split in three. The packed weight c_attn.weight [E, 3E] is read
// as three weights, its column boxes `c_attn.weight[:, 0:E]` ... (each a part
// of the stored tensor, a parameter of its own: shardable by heads), each
// transposed to torch Linear layout as wq, wk, wv; its bias as bq, bk, bv;
// c_proj's weight transposed is wo. HF's mask (finfo.min where a key is
// masked: causal and padding) is `causal` and the padding part alone, an
// additive [B, 1, 1, S] key mask (`passes/attention_masks.py`).
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:gpt2 | filecheck %s --check-prefix=GPT2
// GPT2-NOT:  pcg.batch_matmul
// GPT2-NOT:  pcg.split
// GPT2:      %wo = pcg.transpose %model_transformer_h_0_attn_c_proj_weight perm [1, 0] : !pcg.tensor<32x32xf32> -> !pcg.tensor<32x32xf32>
// GPT2-NEXT: %wq_t = pcg.weight key "model.transformer.h.0.attn.c_attn.weight[:, 0:32]" : !pcg.tensor<32x32xf32>
// GPT2-NEXT: %wq = pcg.transpose %wq_t perm [1, 0] : !pcg.tensor<32x32xf32> -> !pcg.tensor<32x32xf32>
// GPT2-NEXT: %wk_t = pcg.weight key "model.transformer.h.0.attn.c_attn.weight[:, 32:64]" : !pcg.tensor<32x32xf32>
// GPT2-NEXT: %wk = pcg.transpose %wk_t perm [1, 0]
// GPT2-NEXT: %wv_t = pcg.weight key "model.transformer.h.0.attn.c_attn.weight[:, 64:96]" : !pcg.tensor<32x32xf32>
// GPT2-NEXT: %wv = pcg.transpose %wv_t perm [1, 0]
// GPT2-NEXT: %bq = pcg.weight key "model.transformer.h.0.attn.c_attn.bias[0:32]" : !pcg.tensor<32xf32>
// GPT2-NEXT: %bk = pcg.weight key "model.transformer.h.0.attn.c_attn.bias[32:64]" : !pcg.tensor<32xf32>
// GPT2-NEXT: %bv = pcg.weight key "model.transformer.h.0.attn.c_attn.bias[64:96]" : !pcg.tensor<32xf32>
// GPT2-NEXT: %attention = pcg.attention %layer_norm, %layer_norm, %layer_norm, %wq, %wk, %wv, %wo bq %bq bk %bk bv %bv bo %model_transformer_h_0_attn_c_proj_bias mask %key_mask_3 heads 4 dropout 0.1 causal : {{.*}}, !pcg.tensor<2x1x1x16xf32> -> !pcg.tensor<2x16x32xf32>
// GPT2:      %attention_1 = pcg.attention
// GPT2-NOT:  pcg.split {{.*}}c_attn
// GPT2-NOT:  pcg.softmax

//===----------------------------------------------------------------------===//
// Llama (eager, and SDPA whose boolean mask becomes the same additive mask,
// then `causal` and its padding part, a [B, 1, 1, S] key mask):
// RMSNorm, rotary embeddings between the projections and the attention, and
// grouped-query attention: 4 query heads read 2 KV heads (wk, wv [16, 32]),
// `kv_heads 2`. The rotary tables cos/sin [1, 1, S, D] are folded constants,
// stored once and read by every layer.
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:llama | filecheck %s --check-prefix=LLAMA
// RUN: unityc-import hf:llama attn=sdpa | filecheck %s --check-prefix=LLAMA
// LLAMA-NOT:  pcg.batch_matmul
// LLAMA:      %cos = pcg.constant value dense<{{.*}}> : tensor<1x1x16x8xf32> : !pcg.tensor<1x1x16x8xf32>
// LLAMA-NEXT: %sin = pcg.constant value dense<{{.*}}> : tensor<1x1x16x8xf32> : !pcg.tensor<1x1x16x8xf32>
// LLAMA:      %attention = pcg.attention %[[X:[a-z_0-9]+]], %[[X]], %[[X]], %model_model_layers_0_self_attn_q_proj_weight, %model_model_layers_0_self_attn_k_proj_weight, %model_model_layers_0_self_attn_v_proj_weight, %model_model_layers_0_self_attn_o_proj_weight mask %{{[a-z_0-9]+}} cos %cos sin %sin heads 4 kv_heads 2 causal : {{.*}}, !pcg.tensor<32x32xf32>, !pcg.tensor<16x32xf32>, !pcg.tensor<16x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<2x1x1x16xf32>, !pcg.tensor<1x1x16x8xf32>, !pcg.tensor<1x1x16x8xf32> -> !pcg.tensor<2x16x32xf32>
// LLAMA:      %attention_1 = pcg.attention {{.*}} mask %{{[a-z_0-9]+}} cos %cos sin %sin heads 4 kv_heads 2 causal
// LLAMA-NOT:  pcg.constant
// LLAMA-NOT:  pcg.softmax

//===----------------------------------------------------------------------===//
// ViT (16 patches and the CLS token) and BERT (padding mask [B, 1, 1, S]).
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:vit | filecheck %s --check-prefix=VIT
// VIT-NOT: pcg.softmax
// VIT:     %attention = pcg.attention {{.*}} heads 4 dropout 0.1 : {{.*}} -> !pcg.tensor<2x17x32xf32>
// VIT:     %attention_1 = pcg.attention
// RUN: unityc-import hf:bert | filecheck %s --check-prefix=BERT
// BERT-NOT: pcg.softmax
// BERT:     %attention = pcg.attention {{.*}} mask %{{.+}} heads 4 dropout 0.1 : {{.*}}, !pcg.tensor<2x1x1x16xf32> -> !pcg.tensor<2x16x32xf32>
// BERT:     %attention_1 = pcg.attention
