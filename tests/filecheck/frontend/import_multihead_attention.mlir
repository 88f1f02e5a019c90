// torch's nn.MultiheadAttention becomes one pcg.attention: its packed in_proj ([3E, E] weight,
// [3E] bias) is split into wq, wk, wv (bq, bk, bv); the seq-first layout (the default, without
// batch_first) is transposed into the op's [B, S, E] and back. Exact on outputs, loss and
// every gradient.
// RUN: unityc-import %S/Inputs/multihead.py:make --check -o %t.mlir | filecheck %s --check-prefix=CHECKED
// RUN: filecheck %s < %t.mlir
// CHECKED: check: the imported graph matches the module (outputs, loss and gradients)
// CHECK:      %[[X:.*]] = pcg.transpose %x perm [1, 0, 2] : !pcg.tensor<6x2x16xf32> -> !pcg.tensor<2x6x16xf32>
// CHECK:      %wq, %wk, %wv = pcg.split %attn_in_proj_weight dim 0 sizes [16, 16, 16]
// CHECK-NEXT: %bq, %bk, %bv = pcg.split %attn_in_proj_bias dim 0 sizes [16, 16, 16]
// CHECK-NEXT: %attention = pcg.attention %[[X]], %[[X]], %[[X]], %wq, %wk, %wv, %attn_out_proj_weight bq %bq bk %bk bv %bv bo %attn_out_proj_bias heads 4 :
// CHECK-NEXT: pcg.transpose %attention perm [1, 0, 2] : !pcg.tensor<2x6x16xf32> -> !pcg.tensor<6x2x16xf32>
// CHECK-NOT:  pcg.batch_matmul
// CHECK-NOT:  pcg.softmax

// batch_first: the op reads the input as it is, nothing is transposed.
// RUN: unityc-import %S/Inputs/multihead.py:make batch_first=True bias=False | filecheck %s --check-prefix=FIRST
// FIRST-NOT:  pcg.transpose
// FIRST:      %wq, %wk, %wv = pcg.split %attn_in_proj_weight dim 0 sizes [16, 16, 16]
// FIRST-NEXT: %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %attn_out_proj_weight heads 4 :
// FIRST-NOT:  pcg.transpose
