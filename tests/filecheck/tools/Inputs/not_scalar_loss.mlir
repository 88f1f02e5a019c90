func.func @main() -> !pcg.tensor<16x32xf32> {
  %x = pcg.input key "x" : !pcg.tensor<16x32xf32>
  %w = pcg.weight key "w" : !pcg.tensor<32x32xf32>
  %h = pcg.linear %x, %w : !pcg.tensor<16x32xf32>, !pcg.tensor<32x32xf32> -> !pcg.tensor<16x32xf32>
  func.return %h : !pcg.tensor<16x32xf32>
}
