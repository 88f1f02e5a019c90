// A Hugging Face model's own `labels=` loss (own_loss=True): HF pads the labels with
// ignore_index -100 (aten.constant_pad_nd), shifts them, and averages the cross-entropy
// over the kept tokens; the example labels are -100 at the padding, as HF's collators
// make them. It imports exactly (outputs, loss and every gradient).
// RUN: unityc-import hf:gpt2 own_loss=True --check -o %t.mlir | filecheck %s --check-prefix=CHECKED
// RUN: filecheck %s < %t.mlir
// CHECKED: check: the imported graph matches the module (outputs, loss and gradients)

// CHECK:      %labels = pcg.input key "labels" : !pcg.tensor<2x16xi64>
// CHECK:      %[[PAD:.*]] = pcg.constant value dense<-100> : tensor<2x1xi64> : !pcg.tensor<2x1xi64>
// CHECK-NEXT: %[[CAT:.*]] = pcg.concat %labels, %[[PAD]] dim 1 : !pcg.tensor<2x16xi64>, !pcg.tensor<2x1xi64> -> !pcg.tensor<2x17xi64>
// CHECK:      pcg.cross_entropy %{{.*}}, %{{.*}} reduction "mean" ignore_index -100 : !pcg.tensor<32x128xf32>, !pcg.tensor<32xi64> -> !pcg.tensor<f32>

// Megatron's layout takes it: the output head column-parallel, its logits never gathered,
// the vocabulary-parallel cross-entropy's class shards add up their partial sums.
// RUN: unityc-opt %t.mlir -p 'megatron{machine="cpu:2"}' | filecheck %s --check-prefix=MEGATRON
// MEGATRON: pcg.cross_entropy %{{.*}}, %{{.*}} reduction "mean" ignore_index -100 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<32x128xf32, shard [1, 2]>, !pcg.tensor<32xi64, copy 2> -> !pcg.tensor<f32, sum 2>
// MEGATRON-NEXT: parallel.reduce %{{.*}} degree 2
