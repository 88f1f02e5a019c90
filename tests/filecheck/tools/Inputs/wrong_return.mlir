// The function returns a value of another type than it declares.
func.func @main() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, copy 2>
  func.return %x : !pcg.tensor<8x16xf32, copy 2>
}
