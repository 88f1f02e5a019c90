func.func @main() -> !pcg.tensor<f32> {
  %c = pcg.constant value dense<1.0> : tensor<100000x100000xf32> : !pcg.tensor<100000x100000xf32>
  %l = pcg.reduce %c kind "sum" dims [0, 1] : !pcg.tensor<100000x100000xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
