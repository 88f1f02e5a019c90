func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
  %w1 = pcg.weight key "fc.weight[0:8, :]" frozen : !pcg.tensor<8x8xf32>
  %w2 = pcg.weight key "fc.weight[8:16, :]" : !pcg.tensor<8x8xf32>
  %h = pcg.linear %x, %w1 : !pcg.tensor<4x8xf32>, !pcg.tensor<8x8xf32> -> !pcg.tensor<4x8xf32>
  %o = pcg.linear %h, %w2 : !pcg.tensor<4x8xf32>, !pcg.tensor<8x8xf32> -> !pcg.tensor<4x8xf32>
  %l = pcg.reduce %o kind "mean" dims [0, 1] : !pcg.tensor<4x8xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
