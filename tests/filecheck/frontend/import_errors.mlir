// Bad input to unityc-import gives one line on stderr,
// `unityc-import: error: <what and where>`, exit status 1 (`not` checks it is
// non-zero; an internal error would print `unityc-import: internal error:`
// instead, which these checks reject), and no traceback. The bad factories are
// in Inputs/bad.py.

//===----------------------------------------------------------------------===//
// An op the importer has no lowering for (torch.cumprod, in the submodule
// blocks.0.scan of class Scan): the message names the ATen op, the module path
// and class, the source line, and supported ops like it, then lists the ATen
// ops that are supported, wrapped to lines of at most 100 columns.
// With -o, the output file is not written.
//===----------------------------------------------------------------------===//

// RUN: rm -f %t.mlir
// RUN: not unityc-import %S/Inputs/bad.py:unsupported -o %t.mlir 2>&1 | filecheck %s --check-prefix=UNKNOWN-OP
// RUN: test ! -e %t.mlir
// UNKNOWN-OP-NOT: Traceback
// UNKNOWN-OP:     {{^}}unityc-import: error: module 'blocks.0.scan' (Scan), {{.*}}Inputs{{/|\\}}bad.py:{{[0-9]+}}, in forward: unsupported operator aten.cumprod (supported ops like it: {{.*}}aten.sum{{.*}}); the {{[0-9]+}} supported ATen ops:{{$}}
// UNKNOWN-OP-NEXT: {{^}}  aten._adaptive_avg_pool2d, aten._assert_scalar,
// UNKNOWN-OP:      aten.addmm,
// UNKNOWN-OP:      aten.linear,
// UNKNOWN-OP:      aten.scaled_dot_product_attention,
// UNKNOWN-OP-NOT: Traceback

//===----------------------------------------------------------------------===//
// A broken factory path: a missing file, a missing function, a factory that
// raises (the message shows the call, with the overrides passed to it).
//===----------------------------------------------------------------------===//

// RUN: not unityc-import %S/Inputs/does_not_exist.py:make 2>&1 | filecheck %s --check-prefix=NO-FILE
// NO-FILE-NOT: Traceback
// NO-FILE:     {{^}}unityc-import: error: {{.*}}Inputs{{/|\\}}does_not_exist.py: no such file
// NO-FILE-NOT: Traceback

// RUN: not unityc-import %S/Inputs/bad.py:nope 2>&1 | filecheck %s --check-prefix=NO-FUNCTION
// NO-FUNCTION-NOT: Traceback
// NO-FUNCTION:     {{^}}unityc-import: error: {{.*}}Inputs{{/|\\}}bad.py: has no function 'nope'
// NO-FUNCTION-NOT: Traceback

// RUN: not unityc-import %S/Inputs/bad.py:raises size=3 2>&1 | filecheck %s --check-prefix=RAISES
// RAISES-NOT: Traceback
// RAISES:     {{^}}unityc-import: error: {{.*}}Inputs{{/|\\}}bad.py:raises(size=3) failed: RuntimeError: no such layer size
// RAISES-NOT: Traceback

//===----------------------------------------------------------------------===//
// A factory returning the wrong thing: the module alone, example inputs that
// are not tensors, more inputs than forward takes.
//===----------------------------------------------------------------------===//

// RUN: not unityc-import %S/Inputs/bad.py:not_a_pair 2>&1 | filecheck %s --check-prefix=NOT-PAIR
// NOT-PAIR-NOT: Traceback
// NOT-PAIR:     {{^}}unityc-import: error: {{.*}}bad.py:not_a_pair must return (nn.Module, example inputs), got Linear
// NOT-PAIR-NOT: Traceback

// RUN: not unityc-import %S/Inputs/bad.py:not_tensors 2>&1 | filecheck %s --check-prefix=NOT-TENSORS
// NOT-TENSORS-NOT: Traceback
// NOT-TENSORS:     {{^}}unityc-import: error: {{.*}}bad.py:not_tensors: example inputs must be tensors (a tuple or a dict by argument name)
// NOT-TENSORS-NOT: Traceback

// RUN: not unityc-import %S/Inputs/bad.py:too_many_inputs 2>&1 | filecheck %s --check-prefix=TOO-MANY
// TOO-MANY-NOT: Traceback
// TOO-MANY:     {{^}}unityc-import: error: {{.*}}bad.py:too_many_inputs: 3 example inputs, but forward takes only 1
// TOO-MANY-NOT: Traceback

//===----------------------------------------------------------------------===//
// Example inputs of the wrong shape for the model (a Linear(8, 4) fed [2, 5]):
// torch.export fails and its reason is passed on. (torch also logs the
// traceback of its own shape check on stderr first: known_bug_torch_log.mlir.)
//===----------------------------------------------------------------------===//

// RUN: not unityc-import %S/Inputs/bad.py:wrong_shape 2>&1 | filecheck %s --check-prefix=WRONG-SHAPE
// WRONG-SHAPE: {{^}}unityc-import: error: torch.export failed on the model with its example inputs: RuntimeError: a and b must have same reduction dim, but got [2, 5] X [8, 4].

//===----------------------------------------------------------------------===//
// Zoo models: an unknown name (the zoo is listed), an unknown config key (the
// settings are listed), a value of the wrong type for a setting (the expected
// type and the default are shown).
//===----------------------------------------------------------------------===//

// RUN: not unityc-import nosuchmodel 2>&1 | filecheck %s --check-prefix=UNKNOWN-MODEL
// UNKNOWN-MODEL-NOT: Traceback
// UNKNOWN-MODEL:     {{^}}unityc-import: error: unknown model 'nosuchmodel': expected a zoo name (mlp, bert, dlrm, {{.*}}), path/to/file.py:factory, or hf:<name>
// UNKNOWN-MODEL-NOT: Traceback

// RUN: not unityc-import mlp nope=3 2>&1 | filecheck %s --check-prefix=UNKNOWN-KEY
// UNKNOWN-KEY-NOT: Traceback
// UNKNOWN-KEY:     {{^}}unityc-import: error: model 'mlp' has no setting 'nope' (settings: hidden_dims, in_features)
// UNKNOWN-KEY-NOT: Traceback

// RUN: not unityc-import mlp hidden_dims=abc 2>&1 | filecheck %s --check-prefix=WRONG-TYPE
// WRONG-TYPE-NOT: Traceback
// WRONG-TYPE:     {{^}}unityc-import: error: model 'mlp' setting 'hidden_dims' expects list like [32, 32, 32, 32, 32, 32, 32, 32], got 'abc'
// WRONG-TYPE-NOT: Traceback

//===----------------------------------------------------------------------===//
// Batch norm with running statistics (eval mode) is not modelled. The importer
// puts the model in training mode, so this needs F.batch_norm(training=False);
// the message names the module and the source line.
//===----------------------------------------------------------------------===//

// RUN: not unityc-import %S/Inputs/bad.py:eval_batch_norm 2>&1 | filecheck %s --check-prefix=EVAL-BN
// EVAL-BN-NOT: Traceback
// EVAL-BN:     {{^}}unityc-import: error: module '<root>' (FrozenNorm), {{.*}}Inputs{{/|\\}}bad.py:{{[0-9]+}}, in forward: batch norm in eval mode (running statistics) is not supported: train the model
// EVAL-BN-NOT: Traceback
