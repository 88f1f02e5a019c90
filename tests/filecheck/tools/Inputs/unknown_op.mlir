// pcg has no frobnicate op.
func.func @main() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %r = pcg.frobnicate %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
  func.return %r : !pcg.tensor<8x16xf32>
}
