// 16 rows cannot be cut into 3 equal shards.
func.func @main() -> !pcg.tensor<16x32xf32, shard [3, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<16x32xf32, shard [3, 1]>
  func.return %x : !pcg.tensor<16x32xf32, shard [3, 1]>
}
