// Regression (was a bug): `x + zeros` where the all-zero constant is LARGER than x
// (x [4] + zeros [3, 4] = [3, 4]) is imported as x itself. The lowering of add
// drops "adding an all-zero mask" without checking that the result has x's
// shape, so the graph's output is [4] instead of [3, 4] and the loss sums 4
// values instead of 12: a silently wrong graph (plain import exits 0). With
// --check the mismatch surfaces as `internal error: AssertionError: output 1:
// shape [4] != module's [3, 4]` (exit 2) rather than as a clean error.
// Now: the output keeps the broadcast shape and the graph
// matches the module.

// RUN: unityc-import %S/Inputs/ops.py:zero_broadcast --check -o %t.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s < %t.mlir
// MATCHES: check: the imported graph matches the module
// CHECK:   func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<3x4xf32>)
