func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<16x32xf32>
  %w = pcg.weight key "fc1.weight : !pcg.tensor<64x32xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] : !pcg.tensor<16x32xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
