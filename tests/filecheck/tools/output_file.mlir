// `-o FILE` is written only when the whole run succeeds: on an error the file
// is neither created nor truncated.

// RUN: rm -f %t
// RUN: not unityc-opt %S/Inputs/wrong_type.mlir -o %t
// RUN: not test -e %t
// RUN: not unityc-opt %S/Inputs/malformed.mlir -o %t
// RUN: not test -e %t
// RUN: not unityc-opt %S/Inputs/impossible_degrees.mlir -o %t
// RUN: not test -e %t

// A failing run leaves an existing file as it was.
// RUN: echo "previous contents" > %t
// RUN: not unityc-opt %S/Inputs/wrong_type.mlir -o %t
// RUN: filecheck %s --check-prefix=KEPT --input-file %t
// KEPT: {{^previous contents$}}

// A successful run writes the module, and nothing to stdout.
// RUN: unityc-opt %s -o %t > %t.stdout
// RUN: not test -s %t.stdout
// RUN: filecheck %s --input-file %t
// CHECK:      builtin.module {
// CHECK-NEXT:   func.func @main() -> !pcg.tensor<8x16xf32, shard [2, 1]> {
// CHECK-NEXT:     %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:     %r = pcg.relu %x : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:     func.return %r : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:   }
// CHECK-NEXT: }

func.func @main() -> !pcg.tensor<8x16xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
  %r = pcg.relu %x : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  func.return %r : !pcg.tensor<8x16xf32, shard [2, 1]>
}
