builtin.module {
  func.func @main() -> !pcg.tensor<f32> {
    %x = pcg.input key "x" : !pcg.tensor<f32>
    func.return %x : !pcg.tensor<f32>
  }
}
%y = pcg.input key "y" : !pcg.tensor<f32>
