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

// GPT-2, 2 layers: the embedding's and each MLP's all-reduce, the loss's reduce. Its attention
// stays replicated: the fused QKV weight (Conv1D c_attn, one [E, 3E] state_dict tensor) would
// need a strided head split that no PCG type describes yet.
// RUN: unityc-import hf:gpt2 -o %t.gpt2.mlir
// RUN: unityc-opt %t.gpt2.mlir -p 'megatron{machine="cpu:2"}' | grep -o "= parallel\.[a-z_]*" | sort | uniq -c | filecheck %s --check-prefix=GPT2
// GPT2:      {{^ *}}3 = parallel.all_reduce
// GPT2-NEXT: {{^ *}}1 = parallel.reduce
// GPT2-NOT:  parallel
