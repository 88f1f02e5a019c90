// A 2-layer MLP training graph (forward half: the loss is the output), every degree 1.
// batch 16, 32 features -> 64 hidden (relu) -> 10 classes, cross-entropy loss.
func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<16x32xf32>
  %label = pcg.input key "label" : !pcg.tensor<16xi64>
  %w1 = pcg.weight key "fc1.weight" : !pcg.tensor<64x32xf32>
  %b1 = pcg.weight key "fc1.bias" : !pcg.tensor<64xf32>
  %w2 = pcg.weight key "fc2.weight" : !pcg.tensor<10x64xf32>
  %b2 = pcg.weight key "fc2.bias" : !pcg.tensor<10xf32>
  %h = pcg.linear %x, %w1 bias %b1 : !pcg.tensor<16x32xf32>, !pcg.tensor<64x32xf32>, !pcg.tensor<64xf32> -> !pcg.tensor<16x64xf32>
  %a = pcg.relu %h : !pcg.tensor<16x64xf32> -> !pcg.tensor<16x64xf32>
  %logits = pcg.linear %a, %w2 bias %b2 : !pcg.tensor<16x64xf32>, !pcg.tensor<10x64xf32>, !pcg.tensor<10xf32> -> !pcg.tensor<16x10xf32>
  %loss = pcg.cross_entropy %logits, %label reduction "mean" : !pcg.tensor<16x10xf32>, !pcg.tensor<16xi64> -> !pcg.tensor<f32>
  func.return %loss : !pcg.tensor<f32>
}
