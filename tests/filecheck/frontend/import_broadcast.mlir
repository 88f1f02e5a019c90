// unityc-import on a broadcast (expand) that a non-elementwise op consumes:
// grouped-query attention's K/V repeat (HF's `repeat_kv`: expand, then
// reshape) and ViT's CLS token (expanded over the batch, then concatenated).
// The broadcast becomes `pcg.add` of the value and a zero constant that is
// size 1 except along the broadcast dims (one constant per shape, shared by
// every layer): exact (x + 0 == x; the gradient sums over the broadcast dims,
// as expand's does), and every dim the value has at full size stays shardable
// by the add's parallel forms (the KV-head dim of GQA, the feature dim of the
// CLS token), as does the batch the zero constant carries. An elementwise consumer still takes the broadcast as is (see
// import_elementwise.mlir, BROADCAST).

//===----------------------------------------------------------------------===//
// Grouped-query attention, 2 KV heads each read by 2 of 4 query heads. [B, KV, S, D] is
// unsqueezed to [B, KV, 1, S, D], broadcast to [B, KV, 2, S, D] by the add,
// and merged to [B, 4, S, D]: query head h reads KV head h // 2, and a split
// of the KV dim keeps each KV head with its query group.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:repeat_kv | filecheck %s --check-prefix=GQA
// GQA:      %q = pcg.input key "q" : !pcg.tensor<2x4x5x3xf32>
// GQA-NEXT: %kv = pcg.input key "kv" : !pcg.tensor<2x2x5x3xf32>
// GQA-NEXT: %[[KV5:.*]] = pcg.reshape %kv shape [2, 2, 1, 5, 3] : !pcg.tensor<2x2x5x3xf32> -> !pcg.tensor<2x2x1x5x3xf32>
// GQA-NEXT: %zeros = pcg.constant value dense<0.000000e+00> : tensor<1x1x2x1x1xf32> : !pcg.tensor<1x1x2x1x1xf32>
// GQA-NEXT: %[[REP:.*]] = pcg.add %[[KV5]], %zeros : !pcg.tensor<2x2x1x5x3xf32>, !pcg.tensor<1x1x2x1x1xf32> -> !pcg.tensor<2x2x2x5x3xf32>
// GQA-NEXT: %[[HEADS:.*]] = pcg.reshape %[[REP]] shape [2, 4, 5, 3] : !pcg.tensor<2x2x2x5x3xf32> -> !pcg.tensor<2x4x5x3xf32>
// GQA-NEXT: %[[KT:.*]] = pcg.transpose %[[HEADS]] perm [0, 1, 3, 2]
// GQA-NEXT: pcg.batch_matmul %q, %[[KT]] : !pcg.tensor<2x4x5x3xf32>, !pcg.tensor<2x4x3x5xf32> -> !pcg.tensor<2x4x5x5xf32>

//===----------------------------------------------------------------------===//
// ViT's CLS token: the [1, 1, 6] weight plus a [4, 1, 1] zero constant is the
// token once per image (the batch dim comes from the constant, so it splits
// with the batch), then concatenated in front of the 3 patches.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:cls_token | filecheck %s --check-prefix=CLS
// CLS:      %cls = pcg.weight key "cls" : !pcg.tensor<1x1x6xf32>
// CLS-NEXT: %x = pcg.input key "x" : !pcg.tensor<4x3x6xf32>
// CLS-NEXT: %target = pcg.input key "target"
// CLS-NEXT: %zeros = pcg.constant value dense<0.000000e+00> : tensor<4x1x1xf32> : !pcg.tensor<4x1x1xf32>
// CLS-NEXT: %[[TOKENS:.*]] = pcg.add %cls, %zeros : !pcg.tensor<1x1x6xf32>, !pcg.tensor<4x1x1xf32> -> !pcg.tensor<4x1x6xf32>
// CLS-NEXT: %[[SEQ:.*]] = pcg.concat %[[TOKENS]], %x dim 1 : !pcg.tensor<4x1x6xf32>, !pcg.tensor<4x3x6xf32> -> !pcg.tensor<4x4x6xf32>
// CLS-NEXT: pcg.mse_loss %[[SEQ]], %target

//===----------------------------------------------------------------------===//
// Only float broadcasts are materialized: integer ids expanded into an
// embedding lookup keep a located error.
//===----------------------------------------------------------------------===//

// RUN: not unityc-import %S/Inputs/ops.py:expand_ids 2>&1 | filecheck %s --check-prefix=IDS
// IDS: unityc-import: error: module 'emb' (Embedding), {{.*}}: operand is a non-float broadcast (expand): only elementwise ops may consume it
