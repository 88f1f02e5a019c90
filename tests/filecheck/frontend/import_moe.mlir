// unityc-import of mixture-of-experts models (issue 40), exact and with static shapes: the
// router is ordinary ops around pcg.topk (indices, not differentiated) and pcg.take (the chosen
// scores, differentiated); Hugging Face's data-dependent experts loop becomes one pcg.experts
// (dropless: every token reaches its k experts). Small configs: 4 experts, top-2. Each import
// runs --check (outputs, loss and every gradient in float64 against the module).

//===----------------------------------------------------------------------===//
// Mixtral: softmax router, top-2 renormalized (the take divided by its sum).
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:MixtralConfig --check -o %t.mixtral.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=MIXTRAL < %t.mixtral.mlir
// MATCHES:       check: the imported graph matches the module
// the router's own `router_logits.float()`, kept for bf16-mixed (frontend/widening.py)
// MIXTRAL:       %[[L:.*]] = pcg.cast %{{.*}} dtype f32 : !pcg.tensor<32x4xf32> -> !pcg.tensor<32x4xf32>
// MIXTRAL-NEXT:  %[[P:.*]] = pcg.softmax %[[L]] dim -1 : !pcg.tensor<32x4xf32> -> !pcg.tensor<32x4xf32>
// MIXTRAL-NEXT:  %[[I:.*]] = pcg.topk %[[P]] k 2 : !pcg.tensor<32x4xf32> -> !pcg.tensor<32x2xi64>
// MIXTRAL-NEXT:  %[[V:.*]] = pcg.take %[[P]], %[[I]] dim 1 : !pcg.tensor<32x4xf32>, !pcg.tensor<32x2xi64> -> !pcg.tensor<32x2xf32>
// MIXTRAL:       pcg.div %[[V]]
// MIXTRAL:       pcg.experts %{{.*}}, %[[I]], %{{.*}}, %model_model_layers_0_mlp_experts_gate_up_proj, %model_model_layers_0_mlp_experts_down_proj activation "silu" : !pcg.tensor<32x32xf32>, !pcg.tensor<32x2xi64>, !pcg.tensor<32x2xf32>, !pcg.tensor<4x128x32xf32>, !pcg.tensor<4x32x64xf32> -> !pcg.tensor<32x32xf32>
// MIXTRAL-COUNT-1: pcg.experts

//===----------------------------------------------------------------------===//
// Qwen2-MoE: the shared expert beside the routed ones, under its sigmoid gate.
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:Qwen2MoeConfig --check -o %t.qwen.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=QWEN < %t.qwen.mlir
// QWEN:          %[[E:.*]] = pcg.experts
// QWEN:          %[[G:.*]] = pcg.sigmoid %{{.*}} : !pcg.tensor<32x1xf32> -> !pcg.tensor<32x1xf32>
// QWEN-NEXT:     %[[S:.*]] = pcg.mul %[[G]], %{{.*}} : !pcg.tensor<32x1xf32>, !pcg.tensor<32x32xf32> -> !pcg.tensor<32x32xf32>
// QWEN-NEXT:     pcg.add %[[E]], %[[S]]

//===----------------------------------------------------------------------===//
// DeepSeek-V3: sigmoid scores; the experts chosen by score + e_score_correction_bias within
// the best of 2 groups (a group-limited pcg.topk); their weights the scores without the bias
// (a take of the sigmoid), renormalized and scaled; the first layer dense, the second MoE
// with a shared expert. Multi-head latent attention (low-rank q and kv projections, rope/nope
// split; the packed kv_a_proj_with_mqa read as its latent and rope-key parts) imports as its
// matmuls and softmax (not fused into pcg.attention).
//===----------------------------------------------------------------------===//

// RUN: unityc-import hf:DeepseekV3Config --check -o %t.deepseek.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=DEEPSEEK < %t.deepseek.mlir
// DEEPSEEK:      pcg.weight key "model.model.layers.1.self_attn.q_a_proj.weight"
// DEEPSEEK:      pcg.weight key "model.model.layers.1.self_attn.kv_b_proj.weight" : !pcg.tensor<48x16xf32>
// DEEPSEEK:      pcg.weight key "model.model.layers.1.self_attn.kv_a_proj_with_mqa.weight[0:16, :]"
// DEEPSEEK-NEXT: pcg.weight key "model.model.layers.1.self_attn.kv_a_proj_with_mqa.weight[16:20, :]"
// DEEPSEEK:      %[[S:.*]] = pcg.sigmoid %{{.*}} : !pcg.tensor<32x4xf32> -> !pcg.tensor<32x4xf32>
// (the bias, all zero at the start, folds away but not its fp32: under bf16-mixed the scores
// (bf16) plus the fp32 bias select in fp32, so the sum keeps a widening of the scores)
// DEEPSEEK-NEXT: %[[W:.*]] = pcg.cast %[[S]] dtype f32 : !pcg.tensor<32x4xf32> -> !pcg.tensor<32x4xf32>
// DEEPSEEK-NEXT: %[[I:.*]] = pcg.topk %[[W]] k 2 groups 2 group_k 1 group_top 2 : !pcg.tensor<32x4xf32> -> !pcg.tensor<32x2xi64>
// DEEPSEEK-NEXT: pcg.take %[[S]], %[[I]] dim 1
// DEEPSEEK:      pcg.experts %{{.*}}, %[[I]]
// DEEPSEEK-NOT:  pcg.experts
