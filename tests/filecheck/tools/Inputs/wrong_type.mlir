// A batch-sharded relu whose declared result type lost the shard.
func.func @main() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
  %r = pcg.relu %x : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
  func.return %r : !pcg.tensor<8x16xf32>
}
