// unityc-import on the layers of torch.nn: each factory of Inputs/ops.py is a
// tiny model whose forward returns (loss, output), imported with every degree
// 1. Weights become `pcg.weight` ops named by their state_dict key, inputs
// `pcg.input` ops named by forward's arguments, and every result type is
// inferred from the operands. The shape plumbing that torch.export leaves
// around the coarse ops (views around a 3-D linear, transposes of weights)
// folds away, so each layer is one pcg op.

//===----------------------------------------------------------------------===//
// nn.Linear with and without bias, on a 3-D input: one pcg.linear each, with
// the [out, in] weight of torch and no reshape to 2-D around it. The module
// attribute records how to rebuild the model (the spec, config and seed).
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:linear | filecheck %s --check-prefix=LINEAR
// LINEAR:      builtin.module attributes {unityc.model = {model = "{{.*}}Inputs{{/|\\}}ops.py:linear", config = "small", seed = 0 : i64}} {
// LINEAR-NEXT:   func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<2x3x4xf32>) {
// LINEAR-NEXT:     %fc1_weight = pcg.weight key "fc1.weight" : !pcg.tensor<6x8xf32>
// LINEAR-NEXT:     %fc1_bias = pcg.weight key "fc1.bias" : !pcg.tensor<6xf32>
// LINEAR-NEXT:     %fc2_weight = pcg.weight key "fc2.weight" : !pcg.tensor<4x6xf32>
// LINEAR-NEXT:     %x = pcg.input key "x" : !pcg.tensor<2x3x8xf32>
// LINEAR-NEXT:     %target = pcg.input key "target" : !pcg.tensor<2x3x4xf32>
// LINEAR-NEXT:     %linear = pcg.linear %x, %fc1_weight bias %fc1_bias : !pcg.tensor<2x3x8xf32>, !pcg.tensor<6x8xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<2x3x6xf32>
// LINEAR-NEXT:     %linear_1 = pcg.linear %linear, %fc2_weight : !pcg.tensor<2x3x6xf32>, !pcg.tensor<4x6xf32> -> !pcg.tensor<2x3x4xf32>
// LINEAR-NEXT:     %mse_loss = pcg.mse_loss %linear_1, %target reduction "mean" : !pcg.tensor<2x3x4xf32>, !pcg.tensor<2x3x4xf32> -> !pcg.tensor<f32>
// LINEAR-NEXT:     func.return %mse_loss, %linear_1 : !pcg.tensor<f32>, !pcg.tensor<2x3x4xf32>
// LINEAR-NEXT:   }
// LINEAR-NEXT: }

//===----------------------------------------------------------------------===//
// 2-D products. nn.Linear on a 2-D input stays a linear; torch.addmm(b, x, W^T)
// of a weight W is recognized as a linear too (so its parallel forms apply);
// addmm with a plain matrix is a matmul plus a broadcast add; torch.mm and a
// 2-D `@` are pcg.matmul (the transposed weight stays a pcg.transpose).
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:matmul | filecheck %s --check-prefix=MATMUL
// MATMUL-NOT:  pcg.reshape
// MATMUL:      %linear = pcg.linear %x, %fc_weight bias %fc_bias : !pcg.tensor<5x8xf32>, !pcg.tensor<6x8xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<5x6xf32>
// MATMUL-NEXT: %addmm = pcg.linear %x, %fc_weight bias %fc_bias : !pcg.tensor<5x8xf32>, !pcg.tensor<6x8xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<5x6xf32>
// MATMUL-NEXT: %add = pcg.add %linear, %addmm
// MATMUL-NEXT: %addmm_1 = pcg.matmul %add, %w : !pcg.tensor<5x6xf32>, !pcg.tensor<6x4xf32> -> !pcg.tensor<5x4xf32>
// MATMUL-NEXT: %addmm_2 = pcg.add %addmm_1, %b : !pcg.tensor<5x4xf32>, !pcg.tensor<4xf32> -> !pcg.tensor<5x4xf32>
// MATMUL-NEXT: %mm = pcg.matmul %addmm_2, %v : !pcg.tensor<5x4xf32>, !pcg.tensor<4x3xf32> -> !pcg.tensor<5x3xf32>
// MATMUL-NEXT: %permute = pcg.transpose %v perm [1, 0] : !pcg.tensor<4x3xf32> -> !pcg.tensor<3x4xf32>
// MATMUL-NEXT: %mm_1 = pcg.matmul %mm, %permute : !pcg.tensor<5x3xf32>, !pcg.tensor<3x4xf32> -> !pcg.tensor<5x4xf32>
// MATMUL-NOT:  pcg.reshape

//===----------------------------------------------------------------------===//
// Batched products. torch.bmm is a 3-D batch_matmul. A 4-D matmul exports as
// bmm between reshapes to [B*H, m, k]; canonicalization (UnflattenBatchMatmul)
// puts the [B, H] batch dims back, so no reshape is left and attention stays
// recognizable.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:bmm | filecheck %s --check-prefix=BMM
// BMM-NOT:  pcg.reshape
// BMM:      %bmm = pcg.batch_matmul %a, %b : !pcg.tensor<3x4x5xf32>, !pcg.tensor<3x5x6xf32> -> !pcg.tensor<3x4x6xf32>
// BMM-NEXT: %bmm_1 = pcg.batch_matmul %q, %k : !pcg.tensor<2x3x4x5xf32>, !pcg.tensor<2x3x5x6xf32> -> !pcg.tensor<2x3x4x6xf32>
// BMM-NEXT: %sum = pcg.reduce %bmm_1 kind "sum" dims [0] : !pcg.tensor<2x3x4x6xf32> -> !pcg.tensor<3x4x6xf32>
// BMM-NOT:  pcg.reshape

//===----------------------------------------------------------------------===//
// Conv2d: stride, padding and dilation are always spelled out; groups only
// when not 1; the bias is optional. A non-square kernel and stride keep their
// two values.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:conv | filecheck %s --check-prefix=CONV
// CONV:      %convolution = pcg.conv2d %x, %conv1_weight bias %conv1_bias stride [2, 2] padding [1, 1] dilation [1, 1] : !pcg.tensor<2x3x16x16xf32>, !pcg.tensor<8x3x3x3xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x8x8x8xf32>
// CONV-NEXT: %convolution_1 = pcg.conv2d %convolution, %conv2_weight stride [1, 1] padding [2, 2] dilation [2, 2] groups 4 : !pcg.tensor<2x8x8x8xf32>, !pcg.tensor<8x2x3x3xf32> -> !pcg.tensor<2x8x8x8xf32>
// CONV-NEXT: %convolution_2 = pcg.conv2d %convolution_1, %conv3_weight bias %conv3_bias stride [1, 2] padding [0, 0] dilation [1, 1] : !pcg.tensor<2x8x8x8xf32>, !pcg.tensor<4x8x1x3xf32>, !pcg.tensor<4xf32> -> !pcg.tensor<2x4x8x3xf32>
// CONV-NEXT: %mse_loss = pcg.mse_loss %convolution_2, %target

//===----------------------------------------------------------------------===//
// Pooling. Max pooling keeps kernel, stride and padding (its indices are
// dropped); average pooling likewise. Adaptive average pooling to 2x2 of a 4x4
// input is a 2x2 average pool; to 1x1 it is a mean over H and W (torch
// decomposes it before the importer sees it, hence dims [3, 2]), kept as
// [N, C, 1, 1] and broadcast by the add.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:pool | filecheck %s --check-prefix=POOL
// POOL:      %max_pool2d_with_indices = pcg.pool2d %x kind "max" kernel [3, 3] stride [2, 2] padding [1, 1] : !pcg.tensor<2x4x16x16xf32> -> !pcg.tensor<2x4x8x8xf32>
// POOL-NEXT: %avg_pool2d = pcg.pool2d %max_pool2d_with_indices kind "avg" kernel [2, 2] stride [2, 2] padding [0, 0] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x4x4xf32>
// POOL-NEXT: %avg_pool2d_1 = pcg.pool2d %avg_pool2d kind "avg" kernel [3, 3] stride [1, 1] padding [1, 1] : !pcg.tensor<2x4x4x4xf32> -> !pcg.tensor<2x4x4x4xf32>
// POOL-NEXT: %_adaptive_avg_pool2d = pcg.pool2d %avg_pool2d_1 kind "avg" kernel [2, 2] stride [2, 2] : !pcg.tensor<2x4x4x4xf32> -> !pcg.tensor<2x4x2x2xf32>
// POOL-NEXT: %mean = pcg.reduce %avg_pool2d_1 kind "mean" dims [3, 2] keepdim : !pcg.tensor<2x4x4x4xf32> -> !pcg.tensor<2x4x1x1xf32>
// POOL-NEXT: %add = pcg.add %_adaptive_avg_pool2d, %mean : !pcg.tensor<2x4x2x2xf32>, !pcg.tensor<2x4x1x1xf32> -> !pcg.tensor<2x4x2x2xf32>

//===----------------------------------------------------------------------===//
// Normalization. BatchNorm2d in training mode is pcg.batch_norm (its running
// statistics, buffers that export updates, are not part of the graph: the
// graph returns only the loss and the output). LayerNorm records how many
// trailing dims it normalizes and its eps; without affine it has no weights.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:norms | filecheck %s --check-prefix=NORMS
// NORMS:      func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<2x4x5x6xf32>) {
// NORMS-NOT:  running
// NORMS:      %_native_batch_norm_legit_functional = pcg.batch_norm %x weight %bn_weight bias %bn_bias eps 1.0e-05 : !pcg.tensor<2x4x5x6xf32>, !pcg.tensor<4xf32>, !pcg.tensor<4xf32> -> !pcg.tensor<2x4x5x6xf32>
// NORMS-NEXT: %layer_norm = pcg.layer_norm %_native_batch_norm_legit_functional weight %ln_weight bias %ln_bias dims 1 eps 1.0e-06 : !pcg.tensor<2x4x5x6xf32>, !pcg.tensor<6xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<2x4x5x6xf32>
// NORMS-NEXT: %layer_norm_1 = pcg.layer_norm %layer_norm dims 2 eps 1.0e-05 : !pcg.tensor<2x4x5x6xf32> -> !pcg.tensor<2x4x5x6xf32>
// NORMS-NEXT: %mse_loss = pcg.mse_loss %layer_norm_1, %target
// NORMS-NEXT: func.return %mse_loss, %layer_norm_1 : !pcg.tensor<f32>, !pcg.tensor<2x4x5x6xf32>

// RMS norm: nn.RMSNorm and F.rms_norm (aten.rms_norm; eps None is the dtype's
// epsilon) and HF Llama's RMSNorm written out in element-wise ops (fuse-norms)
// are one pcg.rms_norm each; act(gate) * up (SwiGLU's silu, GeGLU's gelu) one
// pcg.gated_activation. No decomposed op is left.
// RUN: unityc-import %S/Inputs/ops.py:rms_norms | filecheck %s --check-prefix=RMS
// RMS:      %rms_norm = pcg.rms_norm %x weight %rms_weight dims 1 eps 1.0e-06 : !pcg.tensor<2x4x5x6xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<2x4x5x6xf32>
// RMS-NEXT: %rms_norm_1 = pcg.rms_norm %rms_norm dims 2 eps 1.1920928955078125e-07 : !pcg.tensor<2x4x5x6xf32> -> !pcg.tensor<2x4x5x6xf32>
// RMS-NEXT: %rms_norm_2 = pcg.rms_norm %rms_norm_1 weight %weight dims 1 eps 1.0e-05 : !pcg.tensor<2x4x5x6xf32>, !pcg.tensor<6xf32> -> !pcg.tensor<2x4x5x6xf32>
// RMS-NEXT: %linear = pcg.linear %rms_norm_2, %gate_weight
// RMS-NEXT: %gated = pcg.gated_activation %linear, %rms_norm_2 act "silu" : !pcg.tensor<2x4x5x6xf32>, !pcg.tensor<2x4x5x6xf32> -> !pcg.tensor<2x4x5x6xf32>
// RMS-NEXT: %gated_1 = pcg.gated_activation %gated, %x act "gelu_tanh"
// RMS-NEXT: %mse_loss = pcg.mse_loss %gated_1, %target

//===----------------------------------------------------------------------===//
// Softmax and losses. F.cross_entropy, and F.log_softmax over the classes fed
// to F.nll_loss, are both pcg.cross_entropy on the logits (no log_softmax op is
// left); the reduction is kept. mse_loss keeps mean or sum.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:losses | filecheck %s --check-prefix=LOSSES
// LOSSES:      %labels = pcg.input key "labels" : !pcg.tensor<4xi64>
// LOSSES:      %linear = pcg.linear %x, %fc_weight bias %fc_bias
// LOSSES-NEXT: %_softmax = pcg.softmax %linear dim -1 : !pcg.tensor<4x5xf32> -> !pcg.tensor<4x5xf32>
// LOSSES-NEXT: %nll_loss_forward = pcg.cross_entropy %linear, %labels reduction "mean" : !pcg.tensor<4x5xf32>, !pcg.tensor<4xi64> -> !pcg.tensor<f32>
// LOSSES-NEXT: %nll_loss_forward_1 = pcg.cross_entropy %linear, %labels reduction "sum" : !pcg.tensor<4x5xf32>, !pcg.tensor<4xi64> -> !pcg.tensor<f32>
// LOSSES-NEXT: %mse_loss = pcg.mse_loss %_softmax, %target reduction "mean" : !pcg.tensor<4x5xf32>, !pcg.tensor<4x5xf32> -> !pcg.tensor<f32>
// LOSSES-NEXT: %mse_loss_1 = pcg.mse_loss %_softmax, %target reduction "sum" : !pcg.tensor<4x5xf32>, !pcg.tensor<4x5xf32> -> !pcg.tensor<f32>
// LOSSES-NEXT: %add = pcg.add %mse_loss, %mse_loss_1 : !pcg.tensor<f32>, !pcg.tensor<f32> -> !pcg.tensor<f32>
// LOSSES-NEXT: %add_1 = pcg.add %nll_loss_forward, %nll_loss_forward_1
// LOSSES-NEXT: %add_2 = pcg.add %add_1, %add
// LOSSES-NEXT: func.return %add_2, %_softmax : !pcg.tensor<f32>, !pcg.tensor<4x5xf32>

//===----------------------------------------------------------------------===//
// Dropout (training mode) is pcg.dropout with its probability, from nn.Dropout
// and F.dropout alike; a dropout with p = 0 vanishes.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:dropout | filecheck %s --check-prefix=DROPOUT
// DROPOUT:      %native_dropout = pcg.dropout %x p 0.25 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// DROPOUT-NEXT: %native_dropout_1 = pcg.dropout %native_dropout p 0.5 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// DROPOUT-NEXT: %mse_loss = pcg.mse_loss %native_dropout_1, %target

//===----------------------------------------------------------------------===//
// Embeddings. nn.Embedding maps [4, 3] ids to [4, 3, 6]; its padding_idx (torch
// turns -1 into the last row) is a property. nn.EmbeddingBag on 2-D
// indices (fixed-size bags) is pcg.embedding_bag with its mode; the offsets
// torch makes up for it are not in the graph.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:embedding | filecheck %s --check-prefix=EMBEDDING
// EMBEDDING:      %ids = pcg.input key "ids" : !pcg.tensor<4x3xi64>
// EMBEDDING-NEXT: %bags = pcg.input key "bags" : !pcg.tensor<4x5xi64>
// EMBEDDING-NOT:  pcg.constant
// EMBEDDING-NOT:  pcg.reshape
// EMBEDDING:      %embedding = pcg.embedding %ids, %tok_weight : !pcg.tensor<4x3xi64>, !pcg.tensor<10x6xf32> -> !pcg.tensor<4x3x6xf32>
// EMBEDDING-NEXT: %embedding_1 = pcg.embedding %ids, %padded_weight padding_idx 9 : !pcg.tensor<4x3xi64>, !pcg.tensor<10x6xf32> -> !pcg.tensor<4x3x6xf32>
// EMBEDDING-NEXT: %add = pcg.add %embedding, %embedding_1
// EMBEDDING-NEXT: %_embedding_bag = pcg.embedding_bag %bags, %bag_sum_weight mode "sum" : !pcg.tensor<4x5xi64>, !pcg.tensor<12x6xf32> -> !pcg.tensor<4x6xf32>
// EMBEDDING-NEXT: %_embedding_bag_1 = pcg.embedding_bag %bags, %bag_mean_weight mode "mean" : !pcg.tensor<4x5xi64>, !pcg.tensor<12x6xf32> -> !pcg.tensor<4x6xf32>
// EMBEDDING-NOT:  pcg.reshape
