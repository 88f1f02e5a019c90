// torch's nn.MultiheadAttention becomes one pcg.attention: its packed in_proj ([3E, E] weight,
// [3E] bias) is read as three weights, its row boxes `in_proj_weight[0:E, :]` ... (parts of the
// stored tensor, each a parameter of its own: shardable by heads) wq, wk, wv (bq, bk, bv); the
// gradient of in_proj is its parts' side by side; the seq-first layout (the default, without
// batch_first) is transposed into the op's [B, S, E] and back. Exact on outputs, loss and
// every gradient.
// RUN: unityc-import %S/Inputs/multihead.py:make --check -o %t.mlir | filecheck %s --check-prefix=CHECKED
// RUN: filecheck %s < %t.mlir
// CHECKED: gradient of 'attn.in_proj_weight' [48, 16]: relative error
// CHECKED: check: the imported graph matches the module (outputs, loss and gradients)
// CHECK:      %[[X:.*]] = pcg.transpose %x perm [1, 0, 2] : !pcg.tensor<6x2x16xf32> -> !pcg.tensor<2x6x16xf32>
// CHECK:      %wq = pcg.weight key "attn.in_proj_weight[0:16, :]" : !pcg.tensor<16x16xf32>
// CHECK-NEXT: %wk = pcg.weight key "attn.in_proj_weight[16:32, :]" : !pcg.tensor<16x16xf32>
// CHECK-NEXT: %wv = pcg.weight key "attn.in_proj_weight[32:48, :]" : !pcg.tensor<16x16xf32>
// CHECK-NEXT: %bq = pcg.weight key "attn.in_proj_bias[0:16]" : !pcg.tensor<16xf32>
// CHECK-NEXT: %bk = pcg.weight key "attn.in_proj_bias[16:32]" : !pcg.tensor<16xf32>
// CHECK-NEXT: %bv = pcg.weight key "attn.in_proj_bias[32:48]" : !pcg.tensor<16xf32>
// CHECK-NEXT: %attention = pcg.attention %[[X]], %[[X]], %[[X]], %wq, %wk, %wv, %attn_out_proj_weight bq %bq bk %bk bv %bv bo %attn_out_proj_bias heads 4 :
// CHECK-NEXT: pcg.transpose %attention perm [1, 0, 2] : !pcg.tensor<2x6x16xf32> -> !pcg.tensor<6x2x16xf32>
// CHECK-NOT:  pcg.batch_matmul
// CHECK-NOT:  pcg.softmax

// batch_first: the op reads the input as it is, nothing is transposed.
// RUN: unityc-import %S/Inputs/multihead.py:make batch_first=True bias=False | filecheck %s --check-prefix=FIRST
// FIRST-NOT:  pcg.transpose
// FIRST:      %wv = pcg.weight key "attn.in_proj_weight[32:48, :]" : !pcg.tensor<16x16xf32>
// FIRST-NEXT: %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %attn_out_proj_weight heads 4 :
// FIRST-NOT:  pcg.transpose
