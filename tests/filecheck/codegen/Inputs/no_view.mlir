builtin.module attributes {unityc.machine = "cpu:2", unityc.model = {model = "mlp", config = "small", seed = 0 : i64}} {
  func.func @main() -> !pcg.tensor<f32> {
    %x = pcg.input key "input1" {view = #pcg.view<start 0>} : !pcg.tensor<4x16xf32>
    %y = pcg.input key "input2" {view = #pcg.view<start 0>} : !pcg.tensor<4x16xf32>
    %r = pcg.relu %x : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>
    %l = pcg.mse_loss %r, %y reduction "mean" {view = #pcg.view<start 0>} : !pcg.tensor<4x16xf32>, !pcg.tensor<4x16xf32> -> !pcg.tensor<f32>
    func.return %l : !pcg.tensor<f32>
  }
}
