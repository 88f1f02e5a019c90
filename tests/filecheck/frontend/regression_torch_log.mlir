// Regression (was a bug): when torch.export fails on example inputs of the wrong shape (a
// Linear(8, 4) fed [2, 5]), torch's fake-tensor logger prints its own
// "failed while attempting to run meta for aten.mm.default" and a full
// Traceback to stderr (lines starting `E<date> ... fake_tensor.py:...]`)
// before unityc-import's own, clear, one-line error. The contract is one
// error line and no traceback. Expected once fixed: only the error line.

// RUN: not unityc-import %S/Inputs/bad.py:wrong_shape 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK-NOT: fake_tensor
// CHECK:     {{^}}unityc-import: error: torch.export failed on the model with its example inputs: RuntimeError: a and b must have same reduction dim, but got [2, 5] X [8, 4].
