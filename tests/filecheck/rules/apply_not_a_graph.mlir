// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/parallel.rules" names="relu_partition"}' 2>&1 | filecheck %s

// apply-rules works on a graph: one func.func of pcg and parallel ops.
// CHECK-NOT: Traceback
// CHECK:      apply_not_a_graph.mlir:8:3: error: 'test.op' is not a pcg or parallel op; the graph holds only those
// CHECK-NEXT: %x = "test.op"()
func.func @main() -> !pcg.tensor<4xf32> {
  %x = "test.op"() : () -> !pcg.tensor<4xf32>
  %r = pcg.relu %x : !pcg.tensor<4xf32> -> !pcg.tensor<4xf32>
  func.return %r : !pcg.tensor<4xf32>
}
