// RUN: unityc-opt %s | filecheck %s
// RUN: %roundtrip-generic

// The machine view attribute `#pcg.view<start S, [PLACEMENT STRIDE, ...]>`
// places an op's tasks: one entry per task-space dimension of degree > 1 (shard
// dims in order, then sum, then copy). Task (i, j, ...) runs on node
// sum(i * stride) over the `inter` entries and on device sum(i * stride) over
// the `intra` entries, both counted from the start device. Ops check their view
// against their task space (see ops_invalid.mlir); the attribute alone only
// needs a start and positive strides.

// CHECK: builtin.module {

// One task: no entries.
"test.op"() {view = #pcg.view<start 0>} : () -> ()
// CHECK-NEXT: "test.op"() {view = #pcg.view<start 0>} : () -> ()
"test.op"() {view = #pcg.view<start 7, []>} : () -> ()
// CHECK-NEXT: "test.op"() {view = #pcg.view<start 7>} : () -> ()

// One task dimension, on consecutive devices or every other device of a node,
// or one task per node.
"test.op"() {view = #pcg.view<start 0, [intra 1]>} : () -> ()
// CHECK-NEXT: "test.op"() {view = #pcg.view<start 0, [intra 1]>} : () -> ()
"test.op"() {view = #pcg.view<start 1, [intra 2]>} : () -> ()
// CHECK-NEXT: "test.op"() {view = #pcg.view<start 1, [intra 2]>} : () -> ()
"test.op"() {view = #pcg.view<start 4, [inter 1]>} : () -> ()
// CHECK-NEXT: "test.op"() {view = #pcg.view<start 4, [inter 1]>} : () -> ()

// Several task dimensions, mixing placements.
"test.op"() {view = #pcg.view<start 0, [inter 1, intra 1]>} : () -> ()
// CHECK-NEXT: "test.op"() {view = #pcg.view<start 0, [inter 1, intra 1]>} : () -> ()
"test.op"() {view = #pcg.view<start 8, [intra 4, inter 2, intra 1]>} : () -> ()
// CHECK-NEXT: "test.op"() {view = #pcg.view<start 8, [intra 4, inter 2, intra 1]>} : () -> ()

// On an op: a batch-sharded relu on devices 2 and 3, and a 2 x 2 task space
// (batch shard, then partial sums) over two nodes.
%x = pcg.input key "x" {view = #pcg.view<start 2, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT: %x = pcg.input key "x" {view = #pcg.view<start 2, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]>
%r = pcg.relu %x {view = #pcg.view<start 2, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT: %r = pcg.relu %x {view = #pcg.view<start 2, [intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
%xs = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 2]>
// CHECK-NEXT: %xs = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2], copy 2>
// CHECK-NEXT: %w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2], copy 2>
%p = pcg.linear %xs, %w {view = #pcg.view<start 0, [intra 1, inter 1]>} : !pcg.tensor<8x16xf32, shard [2, 2]>, !pcg.tensor<32x16xf32, shard [1, 2], copy 2> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2>
// CHECK-NEXT: %p = pcg.linear %xs, %w {view = #pcg.view<start 0, [intra 1, inter 1]>} : !pcg.tensor<8x16xf32, shard [2, 2]>, !pcg.tensor<32x16xf32, shard [1, 2], copy 2> -> !pcg.tensor<8x32xf32, shard [2, 1], sum 2>
%s = parallel.reduce %p degree 2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x32xf32, shard [2, 1], sum 2> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK-NEXT: %s = parallel.reduce %p degree 2 {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x32xf32, shard [2, 1], sum 2> -> !pcg.tensor<8x32xf32, shard [2, 1]>

// CHECK-NEXT: }
