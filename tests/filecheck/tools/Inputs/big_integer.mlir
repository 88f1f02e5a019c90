func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<4xf32>
  %r = pcg.reshape %x shape [1000000000000000000000000000000] : !pcg.tensor<4xf32> -> !pcg.tensor<4xf32>
  %l = pcg.reduce %x kind "sum" dims [0] : !pcg.tensor<4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
