// The `megatron` baseline is Megatron-LM's layout on Hugging Face models: per transformer
// block one all-reduce after the attention (heads split, by KV groups for grouped-query
// attention) and one after the MLP (column- then row-parallel, the gated SwiGLU product on the
// sharded hidden dim); the embedding vocabulary-parallel (its partial sums all-reduced); the
// output head column-parallel into the vocabulary-parallel cross-entropy, whose partial losses
// are reduced once, the logits never gathered. (Backward runs the duals: one all-reduce per
// block each way.)

// Llama, 2 layers, 4 query heads reading 2 KV heads: 1 + 2 x 2 all-reduces, the loss's reduce.
// RUN: unityc-import hf:llama -o %t.llama.mlir
// RUN: unityc-opt %t.llama.mlir -p 'megatron{machine="cpu:2"}' -o %t.llama.plan.mlir
// RUN: grep -o "= parallel\.[a-z_]*" %t.llama.plan.mlir | sort | uniq -c | filecheck %s --check-prefix=LLAMA
// RUN: filecheck %s --check-prefix=LLAMA-IR < %t.llama.plan.mlir
// LLAMA:      {{^ *}}5 = parallel.all_reduce
// LLAMA-NEXT: {{^ *}}1 = parallel.reduce
// LLAMA-NOT:  parallel
// LLAMA-IR:   pcg.embedding %input_ids, %{{.*}} padding_idx 0 {{.*}} !pcg.tensor<128x32xf32, shard [2, 1]> -> !pcg.tensor<2x16x32xf32, sum 2>
// LLAMA-IR-COUNT-2: pcg.attention {{.*}} kv_heads 2 {{.*}} -> !pcg.tensor<2x16x32xf32, sum 2>
// LLAMA-IR:   pcg.cross_entropy {{.*}} : !pcg.tensor<30x128xf32, shard [1, 2]>, !pcg.tensor<30xi64, copy 2> -> !pcg.tensor<f32, sum 2>

// GPT-2, 2 layers: like Llama, 1 + 2 x 2 all-reduces and the loss's reduce. Its packed QKV
// weight (Conv1D c_attn, one [E, 3E] state_dict tensor) is read as three parts, its column
// boxes, each transposed: each part is column-split by heads (the transpose of a weight is
// placed with the weight, so the weight itself is loaded sharded), c_proj row-parallel.
// RUN: unityc-import hf:gpt2 -o %t.gpt2.mlir
// RUN: unityc-opt %t.gpt2.mlir -p 'megatron{machine="cpu:2"}' -o %t.gpt2.plan.mlir
// RUN: grep -o "= parallel\.[a-z_]*" %t.gpt2.plan.mlir | sort | uniq -c | filecheck %s --check-prefix=GPT2
// RUN: filecheck %s --check-prefix=GPT2-IR < %t.gpt2.plan.mlir
// GPT2:      {{^ *}}5 = parallel.all_reduce
// GPT2-NEXT: {{^ *}}1 = parallel.reduce
// GPT2-IR:   pcg.weight key "model.transformer.h.0.attn.c_attn.weight[:, 0:32]" {{.*}} : !pcg.tensor<32x32xf32, shard [1, 2]>
// GPT2-IR:   pcg.weight key "model.transformer.h.0.attn.c_proj.weight" {{.*}} : !pcg.tensor<32x32xf32, shard [2, 1]>
// GPT2-IR:   pcg.weight key "model.transformer.h.0.attn.c_attn.bias[64:96]" {{.*}} : !pcg.tensor<32xf32, shard [2]>
// GPT2-IR-COUNT-2: pcg.attention {{.*}} -> !pcg.tensor<2x16x32xf32, sum 2>
// GPT2-NOT:  parallel

// torch's nn.MultiheadAttention: its packed in_proj [3E, E] is read as three row boxes, each
// split by heads (rows), out_proj row-parallel: one all-reduce after the attention.
// RUN: unityc-import %S/../frontend/Inputs/multihead.py:make -o %t.mha.mlir
// RUN: unityc-opt %t.mha.mlir -p 'megatron{machine="cpu:2"}' | filecheck %s --check-prefix=MHA
// MHA:      pcg.weight key "attn.in_proj_weight[0:16, :]" {{.*}} : !pcg.tensor<16x16xf32, shard [2, 1]>
// MHA:      pcg.weight key "attn.in_proj_weight[32:48, :]" {{.*}} : !pcg.tensor<16x16xf32, shard [2, 1]>
// MHA:      pcg.weight key "attn.in_proj_bias[32:48]" {{.*}} : !pcg.tensor<16xf32, shard [2]>
// MHA:      pcg.attention {{.*}} -> !pcg.tensor<2x6x16xf32, sum 2>
// MHA-NEXT: parallel.all_reduce
