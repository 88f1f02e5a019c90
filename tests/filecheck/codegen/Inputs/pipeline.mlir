builtin.module attributes {unityc.machine = "cpu:2", unityc.model = {model = "mlp", config = "small", seed = 0 : i64}} {
  func.func @main() -> !pcg.tensor<4x16xf32> {
    %x = pcg.input key "input1" {view = #pcg.view<start 0>} : !pcg.tensor<4x16xf32>
    %m = parallel.pipeline %x dim 0 degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<4x16xf32> -> !pcg.tensor<2x16xf32>
    %b = parallel.batch %m dim 0 degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<2x16xf32> -> !pcg.tensor<4x16xf32>
    func.return %b : !pcg.tensor<4x16xf32>
  }
}
