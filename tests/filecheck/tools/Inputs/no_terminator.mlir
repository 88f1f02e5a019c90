func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" : !pcg.tensor<f32>
}
