// Hostile input gets a located error (`file:line:col: error: ...`), exit status 1 and no
// traceback from every entry point, and nothing hangs. Each case below once hung or crashed.

// A string that is never closed: xDSL 0.74's string regex backtracks exponentially on it (it
// hung forever); our parser lexes strings in linear time. (`timeout` only guards the suite.)
// RUN: not timeout 300 unityc-opt %S/Inputs/unclosed_string.mlir 2>&1 | filecheck %s --check-prefix=STRING
// RUN: not timeout 300 unityc-run %S/Inputs/unclosed_string.mlir 2>&1 | filecheck %s --check-prefix=STRING
// STRING-NOT: Traceback
// STRING:      unclosed_string.mlir:3:23: error: this string is not closed on its line
// STRING-NEXT: %w = pcg.weight key "fc1.weight : !pcg.tensor<64x32xf32>

// A function without a body is valid MLIR, but not a graph: every stage that reads the graph
// says so at the function (it was an AssertionError inside xDSL's func.func).
// RUN: unityc-opt %S/Inputs/declaration.mlir | filecheck %s --check-prefix=DECL-OK
// RUN: not unityc-opt %S/Inputs/declaration.mlir -t dot 2>&1 | filecheck %s --check-prefix=DECL
// RUN: not unityc-opt %S/Inputs/declaration.mlir -p apply-rules 2>&1 | filecheck %s --check-prefix=DECL
// RUN: not unityc-opt %S/Inputs/declaration.mlir --unity-search --machine cpu:2 2>&1 | filecheck %s --check-prefix=DECL
// RUN: not unityc-opt %S/Inputs/declaration.mlir -p 'data-parallel{machine="cpu:2"}' 2>&1 | filecheck %s --check-prefix=DECL
// RUN: not unityc-opt %S/Inputs/declaration.mlir -p 'megatron{machine="cpu:2"}' 2>&1 | filecheck %s --check-prefix=DECL
// RUN: not unityc-opt %S/Inputs/declaration.mlir -p 'estimate{machine="cpu:2"}' 2>&1 | filecheck %s --check-prefix=DECL
// RUN: not unityc-run %S/Inputs/declaration.mlir 2>&1 | filecheck %s --check-prefix=DECL
// DECL-OK:     func.func @main() -> ()
// DECL-NOT:    Traceback
// DECL:        declaration.mlir:1:1: error: @main has no body: the graph lists its ops and ends in func.return
// DECL-NEXT:   func.func @main()
// DECL-NOT:    Traceback

// A body that does not end in func.return.
// RUN: not unityc-opt %S/Inputs/no_terminator.mlir 2>&1 | filecheck %s --check-prefix=TERMINATOR
// TERMINATOR: no_terminator.mlir:2:3: error: pcg.input: it ends the body of func.func but is not a terminator (func.return)

// The first output is the loss: a search or baseline plans training, so it must be a scalar
// (it was accepted until -t torch).
// RUN: not unityc-opt %S/Inputs/not_scalar_loss.mlir --unity-search --machine cpu:2 2>&1 | filecheck %s --check-prefix=LOSS
// RUN: not unityc-opt %S/Inputs/not_scalar_loss.mlir -p 'data-parallel{machine="cpu:2"}' 2>&1 | filecheck %s --check-prefix=LOSS
// LOSS:      not_scalar_loss.mlir:5:3: error: the first output is the loss and must be a floating-point scalar, got !pcg.tensor<16x32xf32>
// LOSS-NEXT: func.return %h

// Inputs and weights are fed by key: one key, one shape (it passed verification, estimate and search).
// RUN: not unityc-opt %S/Inputs/duplicate_key.mlir 2>&1 | filecheck %s --check-prefix=KEY
// KEY:      duplicate_key.mlir:4:3: error: pcg.weight 'fc.weight' has shape [2, 8] x f32, but the pcg.weight of that key at line 3 has [8, 8] x f32

// Parts of one stored tensor (`key[box]`) may not overlap: each element is trained as one weight.
// RUN: not unityc-opt %S/Inputs/overlapping_parts.mlir 2>&1 | filecheck %s --check-prefix=PARTS
// PARTS: overlapping_parts.mlir:4:3: error: pcg.weight 'fc.weight[6:14, :]' overlaps the pcg.weight 'fc.weight[0:8, :]' at line 3

// A parameter is trained whole or not at all (`requires_grad` is per parameter): its parts agree on `frozen`.
// RUN: not unityc-opt %S/Inputs/frozen_parts.mlir 2>&1 | filecheck %s --check-prefix=FROZEN
// FROZEN: frozen_parts.mlir:4:3: error: pcg.weight 'fc.weight[8:16, :]' is trained but the pcg.weight 'fc.weight[0:8, :]' of the same stored tensor at line 3 is frozen: a parameter is trained whole or not at all
// KEY-NEXT: %w2 = pcg.weight key "fc.weight"

// Sizes are checked before anything proportional to them is built: a splat literal is not
// expanded (it was a MemoryError while parsing; now it stays one value, `dialects/literals.py`,
// and 10^10 elements parse and print as one); a tensor is at most 2^48 elements; the
// interpreter refuses what it cannot hold (it tried to allocate 2 PB).
// RUN: unityc-opt %S/Inputs/huge_splat.mlir 2>&1 | filecheck %s --check-prefix=SPLAT
// SPLAT: %c = pcg.constant value dense<1.000000e+00> : tensor<100000x100000xf32> : !pcg.tensor<100000x100000xf32>
// RUN: not unityc-opt %S/Inputs/too_many_elements.mlir 2>&1 | filecheck %s --check-prefix=ELEMENTS
// ELEMENTS: too_many_elements.mlir:2:39: error: invalid !pcg.tensor: 10000000000000000000000 elements are too many (at most 2^48 = 281474976710656)
// RUN: not unityc-run %S/Inputs/too_big_to_run.mlir 2>&1 | filecheck %s --check-prefix=RUN-SIZE
// RUN-SIZE:      too_big_to_run.mlir:2:3: error: the graph's values take 2.1e+06 GiB in the interpreter (8 bytes an element; this value 2.1e+06 GiB), more than it may hold
// RUN-SIZE-NEXT: %x = pcg.input key "x"

// Integers too large for a property, numbers of thousands of digits, brackets nested thousands
// deep and bytes that are not UTF-8 are refused where they stand.
// RUN: not unityc-opt %S/Inputs/big_integer.mlir 2>&1 | filecheck %s --check-prefix=I64
// I64: big_integer.mlir:3:30: error: 1000000000000000000000000000000 does not fit in a 64-bit integer
// RUN: python -c "print('func.func @main() -> !pcg.tensor<f32> {\n  %%x = pcg.input key \"x\" : !pcg.tensor<' + '9' * 5000 + 'xf32>\n}')" > %t.digits.mlir
// RUN: not unityc-opt %t.digits.mlir 2>&1 | filecheck %s --check-prefix=DIGITS
// DIGITS: digits.mlir:2:40: error: a number of 5000 digits is too long (at most 100)
// RUN: python -c "print('func.func @main() -> !pcg.tensor<f32> {\n  %%x = pcg.input key \"x\" : !pcg.tensor<' + '[' * 2000 + '>\n}')" > %t.nested.mlir
// RUN: not unityc-opt %t.nested.mlir 2>&1 | filecheck %s --check-prefix=NESTED
// NESTED: nested.mlir:2:86: error: brackets nested more than 48 deep
// RUN: python -c "import sys; sys.stdout.buffer.write(b'func.func @main() -> !pcg.tensor<f32> {\n  %%x = pcg.input key \"x\\xff\" : !pcg.tensor<f32>\n}\n')" > %t.bytes.mlir
// RUN: not unityc-opt %t.bytes.mlir 2>&1 | filecheck %s --check-prefix=UTF8
// RUN: not unityc-run %t.bytes.mlir 2>&1 | filecheck %s --check-prefix=UTF8
// UTF8: bytes.mlir:2:24: error: the input is not UTF-8

// A malformed pass or target spec, an unknown option and an option of the wrong type name
// the flag, the pass and what was expected (the first was a traceback).
// RUN: not unityc-opt %S/Inputs/not_scalar_loss.mlir -p 'estimate{' 2>&1 | filecheck %s --check-prefix=SPEC
// SPEC-NOT: Traceback
// SPEC:     error: Error parsing pass pipeline specification:
// SPEC:     Expected argument name here
// RUN: not unityc-opt %S/Inputs/not_scalar_loss.mlir -p 'data-parallel{budget=nan}' 2>&1 | filecheck %s --check-prefix=OPTION
// OPTION: error: -p data-parallel: option 'budget' expects an integer, got 'nan'
// RUN: not unityc-opt %S/Inputs/not_scalar_loss.mlir -p 'estimate{machin="cpu:2"}' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// UNKNOWN: error: -p estimate: unknown option 'machin' (options: machine, cost, profile, optimizer, memory-budget, report, schedule, trace)
// Target options are checked before the passes run, not when the output is written.
// RUN: not unityc-opt %S/Inputs/not_scalar_loss.mlir -p 'estimate{machine="cpu:2"}' -t 'torch{machine=2}' 2>&1 | filecheck %s --check-prefix=TARGET
// TARGET-NOT: estimate:
// TARGET:     error: -t torch: option 'machine' expects a string in quotes ("..."), got 2

// An -o file that cannot be written is refused before any pass runs (a search may take minutes).
// RUN: not unityc-opt %S/Inputs/not_scalar_loss.mlir -p 'estimate{machine="cpu:2"}' -o %t.missing/plan.mlir 2>&1 | filecheck %s --check-prefix=OUT
// OUT-NOT: estimate:
// OUT:     error: -o {{.*}}missing/plan.mlir: the folder {{.*}}missing does not exist

// An op after the module's closing brace makes the parser wrap both in a module: the graph
// function is no longer at the top (unityc-run said "Could not find symbol main").
// RUN: not unityc-run %S/Inputs/stray_op.mlir 2>&1 | filecheck %s --check-prefix=STRAY
// RUN: not unityc-opt %S/Inputs/stray_op.mlir -t dot 2>&1 | filecheck %s --check-prefix=STRAY
// STRAY: stray_op.mlir:7:1: error: 'pcg.input' is outside the graph function: a module holds the graph alone
