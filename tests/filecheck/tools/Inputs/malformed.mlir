// Malformed: the operand list of pcg.relu is missing its type separator.
func.func @main() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %r = pcg.relu %x !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
  func.return %r : !pcg.tensor<8x16xf32>
}
