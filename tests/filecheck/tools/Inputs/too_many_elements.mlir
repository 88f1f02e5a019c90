func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<100000000000x100000000000xf32>
  %l = pcg.reduce %x kind "sum" dims [0, 1] : !pcg.tensor<100000000000x100000000000xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
