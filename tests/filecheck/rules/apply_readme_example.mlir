// RUN: unityc-opt %s -p 'apply-rules{file="%S/Inputs/my_rules.rules" names="gelu_partition" params="d=0,k=4" degrees="2,4"}' | filecheck %s

// The example of README.md, "Write a rewrite pattern": a user's rule in
// Inputs/my_rules.rules, proven with the shipped axioms and then applied with
// its parameters pinned (d=0, k=4): GELU runs on four batch shards.

// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    %[[P:.*]] = parallel.partition %x dim 0 degree 4 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32, shard [4, 1]>
// CHECK-NEXT:    %[[G:.*]] = pcg.gelu %[[P]] : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32, shard [4, 1]>
// CHECK-NEXT:    %g = parallel.combine %[[G]] dim 0 degree 4 : !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32>
// CHECK-NEXT:    func.return %g : !pcg.tensor<8x16xf32>
func.func @main() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %g = pcg.gelu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
  func.return %g : !pcg.tensor<8x16xf32>
}
