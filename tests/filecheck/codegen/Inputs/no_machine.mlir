builtin.module attributes {unityc.model = {model = "mlp", config = "small", seed = 0 : i64}} {
  func.func @main() -> !pcg.tensor<f32> {
    %x = pcg.input key "input1" {view = #pcg.view<start 0>} : !pcg.tensor<4x16xf32>
    %l = pcg.mse_loss %x, %x reduction "mean" {view = #pcg.view<start 0>} : !pcg.tensor<4x16xf32>, !pcg.tensor<4x16xf32> -> !pcg.tensor<f32>
    func.return %l : !pcg.tensor<f32>
  }
}
