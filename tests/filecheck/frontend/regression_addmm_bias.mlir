// Regression (was a bug): torch.addmm(c, x, W^T) of a weight W is always lowered to
// pcg.linear with `c` as its bias, but `c` may be any tensor that broadcasts
// to [N, out]. With c of shape [5, 6] (or [1, 6]) the import fails with
//   aten.addmm: pcg.linear: bias shape [5, 6] should be [6]
// although the program is valid torch. Expected once fixed: a linear without
// bias (or a matmul) plus a pcg.add of c, matching the module.

// RUN: unityc-import %S/Inputs/ops.py:addmm_matrix_bias --check -o %t.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s < %t.mlir
// MATCHES: check: the imported graph matches the module
// CHECK:   pcg.add {{.*}} -> !pcg.tensor<5x6xf32>
