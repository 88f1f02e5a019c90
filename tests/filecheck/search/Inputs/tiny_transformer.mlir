// A 2-layer pre-norm transformer (hidden 32, 4 heads, FFN 64, vocab 128, seq 16, batch 8), from
// benchmarks/transformer_shapes.py: weights keyed layers.N. as the galvatron baseline groups them.
builtin.module {
  func.func @main() -> !pcg.tensor<f32> {
    %input_ids = pcg.input key "input_ids" : !pcg.tensor<8x16xi64>
    %labels = pcg.input key "labels" : !pcg.tensor<8x16xi64>
    %embed_weight = pcg.weight key "embed.weight" : !pcg.tensor<128x32xf32>
    %0 = pcg.embedding %input_ids, %embed_weight : !pcg.tensor<8x16xi64>, !pcg.tensor<128x32xf32> -> !pcg.tensor<8x16x32xf32>
    %layers_0_norm1_weight = pcg.weight key "layers.0.norm1.weight" : !pcg.tensor<32xf32>
    %layers_0_norm1_bias = pcg.weight key "layers.0.norm1.bias" : !pcg.tensor<32xf32>
    %1 = pcg.layer_norm %0 weight %layers_0_norm1_weight bias %layers_0_norm1_bias dims 1 eps 1.0e-05 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %layers_0_attn_wq = pcg.weight key "layers.0.attn.wq" : !pcg.tensor<32x32xf32>
    %layers_0_attn_wk = pcg.weight key "layers.0.attn.wk" : !pcg.tensor<32x32xf32>
    %layers_0_attn_wv = pcg.weight key "layers.0.attn.wv" : !pcg.tensor<32x32xf32>
    %layers_0_attn_wo = pcg.weight key "layers.0.attn.wo" : !pcg.tensor<32x32xf32>
    %layers_0_attn_bq = pcg.weight key "layers.0.attn.bq" : !pcg.tensor<32xf32>
    %layers_0_attn_bk = pcg.weight key "layers.0.attn.bk" : !pcg.tensor<32xf32>
    %layers_0_attn_bv = pcg.weight key "layers.0.attn.bv" : !pcg.tensor<32xf32>
    %layers_0_attn_bo = pcg.weight key "layers.0.attn.bo" : !pcg.tensor<32xf32>
    %2 = pcg.attention %1, %1, %1, %layers_0_attn_wq, %layers_0_attn_wk, %layers_0_attn_wv, %layers_0_attn_wo bq %layers_0_attn_bq bk %layers_0_attn_bk bv %layers_0_attn_bv bo %layers_0_attn_bo heads 4 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<8x16x32xf32>, !pcg.tensor<8x16x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %3 = pcg.add %0, %2 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<8x16x32xf32> -> !pcg.tensor<8x16x32xf32>
    %layers_0_norm2_weight = pcg.weight key "layers.0.norm2.weight" : !pcg.tensor<32xf32>
    %layers_0_norm2_bias = pcg.weight key "layers.0.norm2.bias" : !pcg.tensor<32xf32>
    %4 = pcg.layer_norm %3 weight %layers_0_norm2_weight bias %layers_0_norm2_bias dims 1 eps 1.0e-05 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %layers_0_mlp_fc1_weight = pcg.weight key "layers.0.mlp.fc1.weight" : !pcg.tensor<64x32xf32>
    %layers_0_mlp_fc1_bias = pcg.weight key "layers.0.mlp.fc1.bias" : !pcg.tensor<64xf32>
    %5 = pcg.linear %4, %layers_0_mlp_fc1_weight bias %layers_0_mlp_fc1_bias : !pcg.tensor<8x16x32xf32>, !pcg.tensor<64x32xf32>, !pcg.tensor<64xf32> -> !pcg.tensor<8x16x64xf32>
    %6 = pcg.gelu %5 : !pcg.tensor<8x16x64xf32> -> !pcg.tensor<8x16x64xf32>
    %layers_0_mlp_fc2_weight = pcg.weight key "layers.0.mlp.fc2.weight" : !pcg.tensor<32x64xf32>
    %layers_0_mlp_fc2_bias = pcg.weight key "layers.0.mlp.fc2.bias" : !pcg.tensor<32xf32>
    %7 = pcg.linear %6, %layers_0_mlp_fc2_weight bias %layers_0_mlp_fc2_bias : !pcg.tensor<8x16x64xf32>, !pcg.tensor<32x64xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %8 = pcg.add %3, %7 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<8x16x32xf32> -> !pcg.tensor<8x16x32xf32>
    %layers_1_norm1_weight = pcg.weight key "layers.1.norm1.weight" : !pcg.tensor<32xf32>
    %layers_1_norm1_bias = pcg.weight key "layers.1.norm1.bias" : !pcg.tensor<32xf32>
    %9 = pcg.layer_norm %8 weight %layers_1_norm1_weight bias %layers_1_norm1_bias dims 1 eps 1.0e-05 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %layers_1_attn_wq = pcg.weight key "layers.1.attn.wq" : !pcg.tensor<32x32xf32>
    %layers_1_attn_wk = pcg.weight key "layers.1.attn.wk" : !pcg.tensor<32x32xf32>
    %layers_1_attn_wv = pcg.weight key "layers.1.attn.wv" : !pcg.tensor<32x32xf32>
    %layers_1_attn_wo = pcg.weight key "layers.1.attn.wo" : !pcg.tensor<32x32xf32>
    %layers_1_attn_bq = pcg.weight key "layers.1.attn.bq" : !pcg.tensor<32xf32>
    %layers_1_attn_bk = pcg.weight key "layers.1.attn.bk" : !pcg.tensor<32xf32>
    %layers_1_attn_bv = pcg.weight key "layers.1.attn.bv" : !pcg.tensor<32xf32>
    %layers_1_attn_bo = pcg.weight key "layers.1.attn.bo" : !pcg.tensor<32xf32>
    %10 = pcg.attention %9, %9, %9, %layers_1_attn_wq, %layers_1_attn_wk, %layers_1_attn_wv, %layers_1_attn_wo bq %layers_1_attn_bq bk %layers_1_attn_bk bv %layers_1_attn_bv bo %layers_1_attn_bo heads 4 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<8x16x32xf32>, !pcg.tensor<8x16x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<32x32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %11 = pcg.add %8, %10 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<8x16x32xf32> -> !pcg.tensor<8x16x32xf32>
    %layers_1_norm2_weight = pcg.weight key "layers.1.norm2.weight" : !pcg.tensor<32xf32>
    %layers_1_norm2_bias = pcg.weight key "layers.1.norm2.bias" : !pcg.tensor<32xf32>
    %12 = pcg.layer_norm %11 weight %layers_1_norm2_weight bias %layers_1_norm2_bias dims 1 eps 1.0e-05 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %layers_1_mlp_fc1_weight = pcg.weight key "layers.1.mlp.fc1.weight" : !pcg.tensor<64x32xf32>
    %layers_1_mlp_fc1_bias = pcg.weight key "layers.1.mlp.fc1.bias" : !pcg.tensor<64xf32>
    %13 = pcg.linear %12, %layers_1_mlp_fc1_weight bias %layers_1_mlp_fc1_bias : !pcg.tensor<8x16x32xf32>, !pcg.tensor<64x32xf32>, !pcg.tensor<64xf32> -> !pcg.tensor<8x16x64xf32>
    %14 = pcg.gelu %13 : !pcg.tensor<8x16x64xf32> -> !pcg.tensor<8x16x64xf32>
    %layers_1_mlp_fc2_weight = pcg.weight key "layers.1.mlp.fc2.weight" : !pcg.tensor<32x64xf32>
    %layers_1_mlp_fc2_bias = pcg.weight key "layers.1.mlp.fc2.bias" : !pcg.tensor<32xf32>
    %15 = pcg.linear %14, %layers_1_mlp_fc2_weight bias %layers_1_mlp_fc2_bias : !pcg.tensor<8x16x64xf32>, !pcg.tensor<32x64xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %16 = pcg.add %11, %15 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<8x16x32xf32> -> !pcg.tensor<8x16x32xf32>
    %norm_weight = pcg.weight key "norm.weight" : !pcg.tensor<32xf32>
    %norm_bias = pcg.weight key "norm.bias" : !pcg.tensor<32xf32>
    %17 = pcg.layer_norm %16 weight %norm_weight bias %norm_bias dims 1 eps 1.0e-05 : !pcg.tensor<8x16x32xf32>, !pcg.tensor<32xf32>, !pcg.tensor<32xf32> -> !pcg.tensor<8x16x32xf32>
    %lm_head_weight = pcg.weight key "lm_head.weight" : !pcg.tensor<128x32xf32>
    %18 = pcg.linear %17, %lm_head_weight : !pcg.tensor<8x16x32xf32>, !pcg.tensor<128x32xf32> -> !pcg.tensor<8x16x128xf32>
    %19 = pcg.reshape %18 shape [128, 128] : !pcg.tensor<8x16x128xf32> -> !pcg.tensor<128x128xf32>
    %20 = pcg.reshape %labels shape [128] : !pcg.tensor<8x16xi64> -> !pcg.tensor<128xi64>
    %21 = pcg.cross_entropy %19, %20 reduction "mean" : !pcg.tensor<128x128xf32>, !pcg.tensor<128xi64> -> !pcg.tensor<f32>
    func.return %21 : !pcg.tensor<f32>
  }
}
