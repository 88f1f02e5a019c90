// RUN: unityc-opt %s --split-input-file --verify-diagnostics | filecheck %s

// Each chunk holds one op that the verifier rejects. Most errors come from a
// parallel form the op does not have: the message names the operand and the
// dimension (or the sum / copy degree) it rejects, and why.

//===----------------------------------------------------------------------===//
// Dimensions an op needs whole may not be sharded.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%s = pcg.softmax %x dim 1 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.softmax: operand 'input' dimension 1 has shard degree 2, but softmax normalizes along it
// CHECK-NEXT: %s = pcg.softmax %x dim 1 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK-NEXT: ^^

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%g = pcg.gather %x dim 1 indices [0, 1] : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x2xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.gather: operand 'input' dimension 1 has shard degree 2, but gathered rows would not be shards of the result

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%m = pcg.reduce %x kind "max" dims [1] : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.reduce: operand 'input' dimension 1 has shard degree 2, but a max needs the whole reduced dim

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%p = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
%m = pcg.reduce %p kind "amax" dims [1] : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.reduce: operand 'input' has sum degree 2, but this operator is not linear in it: reduce the partial sums first

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%m = pcg.reduce %x kind "argmax" dims [0, 1] : !pcg.tensor<8x16xf32> -> !pcg.tensor<i64>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.reduce: a argmax reduces exactly one dim, got 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%g = pcg.gather %x dim 1 indices [16] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x1xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.gather: indices must be non-empty and within [0, 16)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%s = pcg.softmax %x dim -2 : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.softmax: operand 'input' dimension 0 has shard degree 2, but softmax normalizes along it

// -----

%x = pcg.input key "x" : !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>
%s = pcg.layer_norm %x dims 2 eps 1.0e-05 : !pcg.tensor<2x8x16xf32, shard [1, 2, 1]> -> !pcg.tensor<2x8x16xf32, shard [1, 2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.layer_norm: operand 'input' dimension 1 has shard degree 2, but it is normalized over

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]>
%s = pcg.batch_norm %x eps 1.0e-05 : !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<2x4x8x8xf32, shard [2, 1, 1, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.batch_norm: operand 'input' dimension 0 has shard degree 2, but batch statistics are computed over it

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32, shard [1, 1, 1, 4]>
%s = pcg.batch_norm %x eps 1.0e-05 : !pcg.tensor<2x4x8x8xf32, shard [1, 1, 1, 4]> -> !pcg.tensor<2x4x8x8xf32, shard [1, 1, 1, 4]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.batch_norm: operand 'input' dimension 3 has shard degree 4, but batch statistics are computed over it

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32, shard [1, 1, 2, 1]>
%w = pcg.weight key "w" : !pcg.tensor<6x4x3x3xf32>
%s = pcg.conv2d %x, %w : !pcg.tensor<2x4x8x8xf32, shard [1, 1, 2, 1]>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x6x6xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: input dimension 2 has shard degree 2, but the window's output (6) times its stride (1) is not the input size 8, so shards of the input and of the output do not line up

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32, shard [1, 1, 1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<6x4x3x3xf32>
%s = pcg.conv2d %x, %w : !pcg.tensor<2x4x8x8xf32, shard [1, 1, 1, 2]>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x6x6xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: input dimension 3 has shard degree 2, but the window's output (6) times its stride (1) is not the input size 8, so shards of the input and of the output do not line up

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%w = pcg.weight key "w" : !pcg.tensor<6x4x3x3xf32, shard [1, 1, 3, 1]>
%s = pcg.conv2d %x, %w : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32, shard [1, 1, 3, 1]> -> !pcg.tensor<2x6x6x6xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: operand 'weight' dimension 2 has shard degree 3, but this operator cannot split it

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32, shard [1, 1, 1, 2]>
%s = pcg.pool2d %x kind "max" kernel [3, 3] : !pcg.tensor<2x4x8x8xf32, shard [1, 1, 1, 2]> -> !pcg.tensor<2x4x2x2xf32, shard [1, 1, 1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.pool2d: input dimension 3 has shard degree 2, but the window's output (2) times its stride (3) is not the input size 8, so shards of the input and of the output do not line up

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%s = pcg.concat %x, %x dim 1 : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.concat: operand 'inputs#0' dimension 1 has shard degree 2, but concatenated shards would not be shards of the result

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%s:2 = pcg.split %x dim 1 sizes [8, 8] : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x8xf32, shard [1, 2]>, !pcg.tensor<8x8xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.split: operand 'input' dimension 1 has shard degree 2, but split pieces would not be shards of the results

// -----

// A sharded input dim must lead the group of dims it is reshaped with...
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%s = pcg.reshape %x shape [128] : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<128xf32, shard [2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.reshape: operand 'input' dimension 1 has shard degree 2, but it does not lead its group of reshaped dims

// -----

// ... and its degree must divide the leading result dim of that group.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 4]>
%s = pcg.reshape %x shape [8, 2, 8] : !pcg.tensor<8x16xf32, shard [1, 4]> -> !pcg.tensor<8x2x8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.reshape: shard degree 4 of dimension 1 does not divide result dimension 1 of size 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%y = pcg.input key "y" : !pcg.tensor<16xf32>
%s = pcg.add %y, %x : !pcg.tensor<16xf32>, !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.add: operand 'rhs' dimension 1 has shard degree 2, but operand 'lhs' dimension 0 has 1; they must be sharded alike

// -----

// An operand broadcast along a sharded result dim is read whole by every task
// of that dim, so it must be copied to each (here: copy 2, not 1).
%c = pcg.input key "c" : !pcg.tensor<8x1xf32>
%r = pcg.input key "r" : !pcg.tensor<1x16xf32, shard [1, 2]>
%s = pcg.mul %c, %r : !pcg.tensor<8x1xf32>, !pcg.tensor<1x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.mul: operand 'lhs' has copy degree 1, which is not a multiple of 2, the degree of the tasks it is shared by

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.input key "r" : !pcg.tensor<1x16xf32, shard [1, 2]>
%s = pcg.add %x, %r : !pcg.tensor<8x16xf32>, !pcg.tensor<1x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.add: operand 'rhs' dimension 1 has shard degree 2, but operand 'lhs' dimension 1 has 1; they must be sharded alike

// -----

%q = pcg.input key "q" : !pcg.tensor<2x8x16xf32>
%kv = pcg.input key "kv" : !pcg.tensor<2x6x16xf32, shard [1, 2, 1]>
%w = pcg.weight key "w" : !pcg.tensor<16x16xf32>
%s = pcg.attention %q, %kv, %kv, %w, %w, %w, %w heads 4 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x6x16xf32, shard [1, 2, 1]>, !pcg.tensor<2x6x16xf32, shard [1, 2, 1]>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.attention: operand 'key' dimension 1 has shard degree 2, but every query attends over the whole key sequence

// -----

%l = pcg.input key "l" : !pcg.tensor<8x10xf32, shard [1, 2]>
%t = pcg.input key "t" : !pcg.tensor<8xi64>
%s = pcg.cross_entropy %l, %t reduction "mean" : !pcg.tensor<8x10xf32, shard [1, 2]>, !pcg.tensor<8xi64> -> !pcg.tensor<f32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.cross_entropy: operand 'target' has copy degree 1, but this parallel form needs 2 (one copy per task that reads it)

// -----

//===----------------------------------------------------------------------===//
// Operands read together must be sharded alike.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 4]>
%s = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 4]> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.linear: operand 'weight' dimension 1 has shard degree 4, but operand 'input' dimension 1 has 2; they must be sharded alike

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%y = pcg.input key "y" : !pcg.tensor<8x16xf32, shard [4, 1]>
%s = pcg.add %x, %y : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32, shard [4, 1]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.add: operand 'rhs' dimension 0 has shard degree 4, but operand 'lhs' dimension 0 has 2; they must be sharded alike

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%y = pcg.input key "y" : !pcg.tensor<16x4xf32>
%s = pcg.matmul %x, %y : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<16x4xf32> -> !pcg.tensor<8x4xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.matmul: operand 'rhs' dimension 0 has shard degree 1, but operand 'lhs' dimension 1 has 2; they must be sharded alike

// -----

%q = pcg.input key "q" : !pcg.tensor<2x8x16xf32, copy 2>
%w = pcg.weight key "w" : !pcg.tensor<16x16xf32, shard [2, 1]>
%s = pcg.attention %q, %q, %q, %w, %w, %w, %w heads 2 : !pcg.tensor<2x8x16xf32, copy 2>, !pcg.tensor<2x8x16xf32, copy 2>, !pcg.tensor<2x8x16xf32, copy 2>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [2, 1]>, !pcg.tensor<16x16xf32, shard [2, 1]> -> !pcg.tensor<2x8x16xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.attention: operand 'wo' dimension 1 has shard degree 1, but operand 'wq' dimension 0 has 2; they must be sharded alike

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%y = pcg.input key "y" : !pcg.tensor<8x16xf32>
%s = pcg.concat %x, %y dim 1 : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.concat: operand 'inputs#1' dimension 0 has shard degree 1, but operand 'inputs#0' dimension 0 has 2; they must be sharded alike

// -----

//===----------------------------------------------------------------------===//
// Degrees that an op's parallel form must divide.
//===----------------------------------------------------------------------===//

%q = pcg.input key "q" : !pcg.tensor<2x8x16xf32, copy 4>
%w = pcg.weight key "w" : !pcg.tensor<16x16xf32, shard [4, 1]>
%wo = pcg.weight key "wo" : !pcg.tensor<16x16xf32, shard [1, 4]>
%s = pcg.attention %q, %q, %q, %w, %w, %w, %wo heads 2 : !pcg.tensor<2x8x16xf32, copy 4>, !pcg.tensor<2x8x16xf32, copy 4>, !pcg.tensor<2x8x16xf32, copy 4>, !pcg.tensor<16x16xf32, shard [4, 1]>, !pcg.tensor<16x16xf32, shard [4, 1]>, !pcg.tensor<16x16xf32, shard [4, 1]>, !pcg.tensor<16x16xf32, shard [1, 4]> -> !pcg.tensor<2x8x16xf32, sum 4>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.attention: head shard degree 4 does not divide 2 heads

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32, shard [1, 4, 1, 1]>
%w = pcg.weight key "w" : !pcg.tensor<8x2x3x3xf32, shard [4, 1, 1, 1]>
%s = pcg.conv2d %x, %w groups 2 : !pcg.tensor<2x4x8x8xf32, shard [1, 4, 1, 1]>, !pcg.tensor<8x2x3x3xf32, shard [4, 1, 1, 1]> -> !pcg.tensor<2x8x6x6xf32, shard [1, 4, 1, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: channel shard degree 4 does not divide 2 groups

// -----

//===----------------------------------------------------------------------===//
// Copy degrees: an operand not sharded like the tasks that read it is copied,
// once per task.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32>
%s = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<32x16xf32> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.linear: operand 'weight' has copy degree 1, but this parallel form needs 2 (one copy per task that reads it)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, copy 4>
%s = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<32x16xf32, copy 4> -> !pcg.tensor<8x32xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.linear: operand 'weight' has copy degree 4, but this parallel form needs 2 (one copy per task that reads it)

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, copy 3>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [2, 1]>
%s = pcg.linear %x, %w : !pcg.tensor<8x16xf32, copy 3>, !pcg.tensor<32x16xf32, shard [2, 1]> -> !pcg.tensor<8x32xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.linear: operand 'input' has copy degree 3, which is not a multiple of 2, the degree of the tasks it is shared by

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%w = pcg.weight key "ln.weight" : !pcg.tensor<16xf32>
%s = pcg.layer_norm %x weight %w dims 1 eps 1.0e-05 : !pcg.tensor<8x16xf32, shard [2, 1]>, !pcg.tensor<16xf32> -> !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.layer_norm: operand 'weight' has copy degree 1, but this parallel form needs 2 (one copy per task that reads it)

// -----

// Vocabulary-parallel lookups need the indices on every task.
%i = pcg.input key "i" : !pcg.tensor<8xi64>
%t = pcg.weight key "t" : !pcg.tensor<100x16xf32, shard [2, 1]>
%s = pcg.embedding %i, %t : !pcg.tensor<8xi64>, !pcg.tensor<100x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.embedding: operand 'indices' has copy degree 1, which is not a multiple of 2, the degree of the tasks it is shared by

// -----

// Two copies of each operand: the result keeps them (copy 2), and a result
// declared without them is wrong.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, copy 2>
%s = pcg.relu %x : !pcg.tensor<8x16xf32, copy 2> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: result 0 has type !pcg.tensor<8x16xf32>, but its operands give !pcg.tensor<8x16xf32, copy 2>

// -----

//===----------------------------------------------------------------------===//
// Partial sums (sum > 1) only pass through ops that are linear in them.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%p = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
%r = pcg.relu %p : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: operand 'input' has sum degree 2, but this operator is not linear in it: reduce the partial sums first

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%p = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
%r = pcg.scalar_add %p value 1.0 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.scalar_add: operand 'input' has sum degree 2, but this operator is not linear in it: reduce the partial sums first

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%p = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
%r = pcg.softmax %p dim 0 : !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.softmax: operand 'input' has sum degree 2, but this operator is not linear in it: reduce the partial sums first

// -----

// div is linear in its dividend only.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%p = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
%y = pcg.input key "y" : !pcg.tensor<8x32xf32, copy 2>
%r = pcg.div %y, %p : !pcg.tensor<8x32xf32, copy 2>, !pcg.tensor<8x32xf32, sum 2> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.div: operand 'rhs' has sum degree 2, but this operator is not linear in it: reduce the partial sums first

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%p = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
%y = pcg.input key "y" : !pcg.tensor<8x32xf32>
%a = pcg.add %p, %y : !pcg.tensor<8x32xf32, sum 2>, !pcg.tensor<8x32xf32> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.add: operands must have equal sum degrees (have 'lhs' 2, 'rhs' 1)

// -----

// Sources hold whole values.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.input cannot hold partial sums (sum degree must be 1)

// -----

%w = pcg.weight key "w" : !pcg.tensor<8x16xf32, shard [2, 1], sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.weight cannot hold partial sums (sum degree must be 1)

// -----

//===----------------------------------------------------------------------===//
// Shapes, element types and properties.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%w = pcg.weight key "w" : !pcg.tensor<32x8xf32>
%s = pcg.linear %x, %w : !pcg.tensor<8x16xf32>, !pcg.tensor<32x8xf32> -> !pcg.tensor<8x32xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.linear: input [8, 16] does not match weight [32, 8] ([out, in])

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32>
%b = pcg.weight key "b" : !pcg.tensor<16xf32>
%s = pcg.linear %x, %w bias %b : !pcg.tensor<8x16xf32>, !pcg.tensor<32x16xf32>, !pcg.tensor<16xf32> -> !pcg.tensor<8x32xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.linear: bias shape [16] should be [32]

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%y = pcg.input key "y" : !pcg.tensor<8x15xf32>
%s = pcg.add %x, %y : !pcg.tensor<8x16xf32>, !pcg.tensor<8x15xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.add: shapes [8, 16] and [8, 15] do not broadcast

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%y = pcg.input key "y" : !pcg.tensor<8x4xf32>
%s = pcg.matmul %x, %y : !pcg.tensor<8x16xf32>, !pcg.tensor<8x4xf32> -> !pcg.tensor<8x4xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.matmul: shapes [8, 16] and [8, 4] do not multiply

// -----

%x = pcg.input key "x" : !pcg.tensor<2x8x16xf32>
%y = pcg.input key "y" : !pcg.tensor<16x4xf32>
%s = pcg.batch_matmul %x, %y : !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x4xf32> -> !pcg.tensor<2x8x4xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.batch_matmul: operands of rank 3 and 2 are not supported

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%w = pcg.weight key "w" : !pcg.tensor<6x3x3x3xf32>
%s = pcg.conv2d %x, %w : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x3x3x3xf32> -> !pcg.tensor<2x6x6x6xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: 4 input channels do not match weight [6, 3, 3, 3] with 1 groups

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%w = pcg.weight key "w" : !pcg.tensor<6x4x3x3xf32>
%s = pcg.conv2d %x, %w stride [1, 1, 1] : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x6x6xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: stride needs 2 values, got [1, 1, 1]

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%s = pcg.pool2d %x kind "max" kernel [9, 9] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x1x1xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.pool2d: window 9 (stride 9, padding 0) does not fit size 8

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.pool2d %x kind "max" kernel [2, 2] : !pcg.tensor<8x16xf32> -> !pcg.tensor<4x8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.pool2d: input must be rank 4 (NCHW)

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%s = pcg.pool2d %x kind "min" kernel [2, 2] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x4x4xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.pool2d: kind must be max or avg, got 'min'

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%w = pcg.weight key "w" : !pcg.tensor<8xf32>
%s = pcg.layer_norm %x weight %w dims 1 eps 1.0e-05 : !pcg.tensor<8x16xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.layer_norm: weight shape [8] should be [16]

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.layer_norm %x dims 3 eps 1.0e-05 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.layer_norm: cannot normalize 3 dims of a rank-2 tensor

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%b = pcg.weight key "b" : !pcg.tensor<8xf32>
%s = pcg.batch_norm %x bias %b eps 1.0e-05 : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x4x8x8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.batch_norm: bias shape [8] should be [4]

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.softmax %x dim 2 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.softmax: dimension 2 is out of range for rank 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.concat %x, %x dim 2 : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x32xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.concat: dimension 2 is out of range for rank 2

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%y = pcg.input key "y" : !pcg.tensor<4x16xf32>
%s = pcg.concat %x, %y dim 1 : !pcg.tensor<8x16xf32>, !pcg.tensor<4x16xf32> -> !pcg.tensor<12x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.concat: shapes [8, 16] and [4, 16] do not concatenate on 1

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s:2 = pcg.split %x dim 1 sizes [4, 13] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x4xf32>, !pcg.tensor<8x13xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.split: sizes [4, 13] do not split dimension 1 of size 16

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.reshape %x shape [8, 15] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x15xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.reshape: cannot reshape [8, 16] to [8, 15]

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.transpose %x perm [0, 0] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.transpose: perm [0, 0] is not a permutation of 2 dims

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.reduce %x kind "prod" dims [1] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.reduce: kind must be one of sum, mean, max, min, amax, amin, argmax, argmin, got 'prod'

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.reduce %x kind "sum" dims [2] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.reduce: dimension 2 is out of range for rank 2

// -----

%i = pcg.input key "i" : !pcg.tensor<4x8xi64>
%t = pcg.weight key "t" : !pcg.tensor<100x16xf32>
%s = pcg.embedding %i, %t : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.embedding: result 0 has type !pcg.tensor<4x16xf32>, but its operands give !pcg.tensor<4x8x16xf32>

// -----

%i = pcg.input key "i" : !pcg.tensor<4x8xi64>
%t = pcg.weight key "t" : !pcg.tensor<100x16xf32>
%s = pcg.embedding %i, %t padding_idx 100 : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.embedding: padding_idx 100 is not a row of the 100-row vocabulary

// -----

%i = pcg.input key "i" : !pcg.tensor<4x8xi64>
%t = pcg.weight key "t" : !pcg.tensor<100x16xf32>
%s = pcg.embedding %i, %t padding_idx -1 : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.embedding: padding_idx -1 is not a row of the 100-row vocabulary

// -----

%i = pcg.input key "i" : !pcg.tensor<4x8xi64>
%t = pcg.weight key "t" : !pcg.tensor<100x16xf32>
%s = pcg.embedding_bag %i, %t mode "max" : !pcg.tensor<4x8xi64>, !pcg.tensor<100x16xf32> -> !pcg.tensor<4x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.embedding_bag: mode must be sum or mean, got 'max'

// -----

%q = pcg.input key "q" : !pcg.tensor<2x8x16xf32>
%w = pcg.weight key "w" : !pcg.tensor<16x16xf32>
%s = pcg.attention %q, %q, %q, %w, %w, %w, %w heads 3 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.attention: embedding 16 must match key/value and divide into 3 heads

// -----

%q = pcg.input key "q" : !pcg.tensor<2x8x16xf32>
%w = pcg.weight key "w" : !pcg.tensor<16x16xf32>
%m = pcg.input key "m" : !pcg.tensor<2x8x8xf32>
%s = pcg.attention %q, %q, %q, %w, %w, %w, %w mask %m heads 2 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<2x8x8xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.attention: mask shape [2, 8, 8] should be [2|1, 2|1, 8|1, 8]

// -----

%q = pcg.input key "q" : !pcg.tensor<2x8x16xf32>
%w = pcg.weight key "w" : !pcg.tensor<16x16xf32>
%b = pcg.weight key "b" : !pcg.tensor<8xf32>
%s = pcg.attention %q, %q, %q, %w, %w, %w, %w bk %b heads 2 : !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<2x8x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<16x16xf32>, !pcg.tensor<8xf32> -> !pcg.tensor<2x8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.attention: bk shape [8] should be [16]

// -----

%l = pcg.input key "l" : !pcg.tensor<8x10xf32>
%t = pcg.input key "t" : !pcg.tensor<10xi64>
%s = pcg.cross_entropy %l, %t reduction "mean" : !pcg.tensor<8x10xf32>, !pcg.tensor<10xi64> -> !pcg.tensor<f32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.cross_entropy: logits [8, 10] and target [10] should be [N, C], [N]

// -----

%l = pcg.input key "l" : !pcg.tensor<8x10xf32>
%t = pcg.input key "t" : !pcg.tensor<8xi64>
%s = pcg.cross_entropy %l, %t reduction "none" : !pcg.tensor<8x10xf32>, !pcg.tensor<8xi64> -> !pcg.tensor<f32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.cross_entropy: reduction must be mean or sum, got 'none'

// -----

%x = pcg.input key "x" : !pcg.tensor<8x10xf32>
%t = pcg.input key "t" : !pcg.tensor<8x10xf16>
%s = pcg.mse_loss %x, %t reduction "mean" : !pcg.tensor<8x10xf32>, !pcg.tensor<8x10xf16> -> !pcg.tensor<f32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.mse_loss: input !pcg.tensor<8x10xf32> and target !pcg.tensor<8x10xf16> must have one shape and type

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xi64>
%r = pcg.relu %x : !pcg.tensor<8x16xi64> -> !pcg.tensor<8x16xi64>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: expects a floating-point operand, got i64

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%y = pcg.input key "y" : !pcg.tensor<8x16xf16>
%s = pcg.add %x, %y : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf16> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.add: operand element types differ: f32 vs f16

// -----

%i = pcg.input key "i" : !pcg.tensor<8xi32>
%t = pcg.weight key "t" : !pcg.tensor<100x16xf32>
%s = pcg.embedding %i, %t : !pcg.tensor<8xi32>, !pcg.tensor<100x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.embedding: indices must be i64, got i32

// -----

%w = pcg.weight key "w" : !pcg.tensor<8x16xi64>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.weight: weight 'w' must be floating point

// -----

// A part of a stored tensor (`key[box]`): its box gives the extent of each dim it takes.
%w = pcg.weight key "c_attn.weight[:, 0:8]" : !pcg.tensor<16x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.weight: weight 'c_attn.weight[:, 0:8]' of shape [16, 16]: its box takes 0:8 of dim 1, the weight's dim 1 is 16

// -----

%w = pcg.weight key "c_attn.bias[0:8, :]" : !pcg.tensor<8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.weight: weight 'c_attn.bias[0:8, :]' of shape [8]: its box has 2 dims, the weight has rank 1

// -----

%w = pcg.weight key "c_attn.weight[:, :]" : !pcg.tensor<8x8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.weight: weight 'c_attn.weight[:, :]': the box of 'c_attn.weight' takes no range: write the key alone

// -----

%w = pcg.weight key "c_attn.weight[8:4]" : !pcg.tensor<4xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.weight: weight 'c_attn.weight[8:4]': 'c_attn.weight': 8:4 is no range of a dim

// -----

%c = pcg.constant value dense<[1.0, 2.0]> : tensor<2xf32> : !pcg.tensor<3xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.constant literal of type tensor<2xf32> does not match !pcg.tensor<3xf32>

// -----

%c = pcg.constant value dense<[1, 2]> : tensor<2xi64> : !pcg.tensor<2xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.constant literal of type tensor<2xi64> does not match !pcg.tensor<2xf32>

// -----

%c = pcg.constant value 1.0 : f32 : !pcg.tensor<f32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.constant value must be a dense literal

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.softmax %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.softmax: property 'dim' expected in operation 'pcg.softmax'

// -----

//===----------------------------------------------------------------------===//
// Result types must be the inferred ones.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.relu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf16>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: result 0 has type !pcg.tensor<8x16xf16>, but its operands give !pcg.tensor<8x16xf32>

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
%r = pcg.relu %x : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: result 0 has type !pcg.tensor<8x16xf32>, but its operands give !pcg.tensor<8x16xf32, shard [2, 1]>

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%s = pcg.linear %x, %w : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.linear: result 0 has type !pcg.tensor<8x32xf32>, but its operands give !pcg.tensor<8x32xf32, sum 2>

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%y = pcg.input key "y" : !pcg.tensor<16x4xf32>
%s = pcg.matmul %x, %y : !pcg.tensor<8x16xf32>, !pcg.tensor<16x4xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.matmul: result 0 has type !pcg.tensor<8x16xf32>, but its operands give !pcg.tensor<8x4xf32>

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s:2 = pcg.split %x dim 1 sizes [4, 12] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x4xf32>, !pcg.tensor<8x4xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.split: result 1 has type !pcg.tensor<8x4xf32>, but its operands give !pcg.tensor<8x12xf32>

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s:3 = pcg.split %x dim 1 sizes [4, 12] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x4xf32>, !pcg.tensor<8x12xf32>, !pcg.tensor<8x1xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.split: expected 2 results, got 3

// -----

//===----------------------------------------------------------------------===//
// Machine views: one (stride, placement) per task-space dimension of degree
// > 1, in the order shard dims, sum, copy; no two tasks on one device.
//===----------------------------------------------------------------------===//

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.relu %x {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: machine view has 1 dimensions but the op's task space has 0 of degree > 1 ([1, 1, 1, 1])

// -----

%x = pcg.input key "x" {view = #pcg.view<start 0>} : !pcg.tensor<8x16xf32, shard [2, 1], copy 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.input: machine view has 0 dimensions but the op's task space has 2 of degree > 1 ([2, 1, 1, 2])

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%w = pcg.weight key "w" : !pcg.tensor<32x16xf32, shard [1, 2]>
%s = pcg.linear %x, %w {view = #pcg.view<start 0, [intra 1, intra 2]>} : !pcg.tensor<8x16xf32, shard [1, 2]>, !pcg.tensor<32x16xf32, shard [1, 2]> -> !pcg.tensor<8x32xf32, sum 2>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.linear: machine view has 2 dimensions but the op's task space has 1 of degree > 1 ([1, 1, 2, 1])

// -----

// Two task dims with stride 1 within one node: tasks (0, 1) and (1, 0) would
// both run on device 1.
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 2]>
%r = pcg.relu %x {view = #pcg.view<start 0, [intra 1, intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 2]> -> !pcg.tensor<8x16xf32, shard [2, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: machine view places two tasks on one device (task [1, 0])

// -----

// Device start + 2*i + j for task (i, j) of a 2 x 4 task space: task (1, 0)
// lands on device 2, like task (0, 2).
%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 4]>
%r = pcg.relu %x {view = #pcg.view<start 0, [intra 2, intra 1]>} : !pcg.tensor<8x16xf32, shard [2, 4]> -> !pcg.tensor<8x16xf32, shard [2, 4]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: machine view places two tasks on one device (task [1, 0])

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%r = pcg.relu %x {view = 3} : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.relu: 'view' must be a #pcg.view, got 3 : i64

// -----

//===----------------------------------------------------------------------===//
// Graph structure.
//===----------------------------------------------------------------------===//

// Ops run in order: an operand must be defined above its use.
func.func @use_before_def() -> !pcg.tensor<8x16xf32> {
  %r = pcg.relu %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:3: error: pcg.relu: operand 0 (%x) is used before it is defined
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  func.return %r : !pcg.tensor<8x16xf32>
}

// -----

// Windows the kernels cannot run are refused (a zero stride divided by zero in the verifier).
%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%w = pcg.weight key "w" : !pcg.tensor<6x4x3x3xf32>
%s = pcg.conv2d %x, %w stride [0, 0] : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x6x6xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: window 3 (stride 0, padding 0): kernel, stride and dilation must be positive, padding not negative

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%w = pcg.weight key "w" : !pcg.tensor<6x4x3x3xf32>
%s = pcg.conv2d %x, %w padding [-1, -1] : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x4x4xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: window 3 (stride 1, padding -1): kernel, stride and dilation must be positive, padding not negative

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%w = pcg.weight key "w" : !pcg.tensor<6x4x3x3xf32>
%s = pcg.conv2d %x, %w dilation [0, 1] : !pcg.tensor<2x4x8x8xf32>, !pcg.tensor<6x4x3x3xf32> -> !pcg.tensor<2x6x6x6xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.conv2d: window 3 (stride 1, padding 0, dilation 0): kernel, stride and dilation must be positive, padding not negative

// -----

%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%s = pcg.pool2d %x kind "max" kernel [0, 0] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x8x8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.pool2d: window 0 (stride 0, padding 0): kernel, stride and dilation must be positive, padding not negative

// -----

// torch refuses pooling padded by more than half the kernel.
%x = pcg.input key "x" : !pcg.tensor<2x4x8x8xf32>
%s = pcg.pool2d %x kind "avg" kernel [2, 2] padding [2, 2] : !pcg.tensor<2x4x8x8xf32> -> !pcg.tensor<2x4x6x6xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.pool2d: padding [2, 2] is more than half the kernel [2, 2]

// -----

// Dropout takes a probability (torch refuses others).
%x = pcg.input key "x" : !pcg.tensor<4x8xf32>
%d = pcg.dropout %x p 5.0 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.dropout: p must be a probability in [0, 1), got 5.0

// -----

%x = pcg.input key "x" : !pcg.tensor<4x8xf32>
%d = pcg.layer_norm %x dims 1 eps -1.0 : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.layer_norm: eps must be a non-negative number, got -1.0

// -----

// Training-mode batch statistics of one value per channel are undefined (torch refuses them).
%x = pcg.input key "x" : !pcg.tensor<1x3x1x1xf32>
%b = pcg.batch_norm %x eps 1.0e-05 : !pcg.tensor<1x3x1x1xf32> -> !pcg.tensor<1x3x1x1xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.batch_norm: training statistics need more than 1 value per channel, got 1

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [1, 2]>
%s = pcg.rms_norm %x dims 1 eps 1.0e-06 : !pcg.tensor<8x16xf32, shard [1, 2]> -> !pcg.tensor<8x16xf32, shard [1, 2]>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.rms_norm: operand 'input' dimension 1 has shard degree 2, but it is normalized over

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.rms_norm %x dims 1 eps 1.0e-06 offset 1.0 : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.rms_norm: offset and weight_after_cast need a weight

// -----

%x = pcg.input key "x" : !pcg.tensor<8x16xf32>
%s = pcg.gated_activation %x, %x act "swish" : !pcg.tensor<8x16xf32>, !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// CHECK: ops_invalid.mlir:[[# @LINE - 1]]:1: error: pcg.gated_activation: act must be one of silu, gelu, gelu_tanh, got 'swish'
