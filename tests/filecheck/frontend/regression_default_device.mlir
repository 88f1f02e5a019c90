// Regression (was a bug): a model that makes a tensor in forward without `device=` (here
// `torch.arange(4, dtype=torch.float32)`, common in eager code) imports with
// --check (real weights on the CPU) but not without it: the plain import
// builds the parameters on the meta device and moves the model there, so
// export fails with
//   torch.export failed on the model with its example inputs:
//   FakeTensorDeviceMismatchError: Expected all tensors to be on the same
//   device, but found at least two devices, meta and cpu!
// which names a device the user never chose. Expected once fixed: the arange
// folds into a pcg.constant, as it does with --check.

// RUN: unityc-import %S/Inputs/ops.py:arange_default_device | filecheck %s
// CHECK: pcg.constant value dense<[0.000000e+00, 1.000000e+00, 2.000000e+00, 3.000000e+00]> : tensor<4xf32>
