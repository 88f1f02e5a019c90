func.func @main() -> !pcg.tensor<8x16xf32> {
  %r = pcg.relu %nope : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
  func.return %r : !pcg.tensor<8x16xf32>
}
