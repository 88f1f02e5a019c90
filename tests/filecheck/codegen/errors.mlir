// Plans codegen cannot run are refused with one located error, exit status 1, no traceback
// and no output file.

// RUN: rm -f %t.py
// RUN: not unityc-opt %S/Inputs/no_view.mlir -t torch -o %t.py 2>&1 | filecheck %s --check-prefix=VIEW
// RUN: not test -e %t.py
// VIEW-NOT: Traceback
// VIEW:      no_view.mlir:5:5: error: pcg.relu has no machine view: every op of a plan needs one (#pcg.view) to say which ranks run its tasks
// VIEW-NEXT:     %r = pcg.relu %x : !pcg.tensor<4x16xf32> -> !pcg.tensor<4x16xf32>

// RUN: not unityc-opt %S/Inputs/no_machine.mlir -t torch -o %t.py 2>&1 | filecheck %s --check-prefix=MACHINE
// RUN: not test -e %t.py
// MACHINE: no_machine.mlir:1:1: error: the plan does not say which machine it was made for: add the module attribute unityc.machine = "cpu:2" (the search writes it) or pass -t 'torch{machine="cpu:2"}'

// RUN: not unityc-opt %S/Inputs/bad_machine.mlir -t torch 2>&1 | filecheck %s --check-prefix=PRESET
// PRESET: bad_machine.mlir:1:1: error: unknown machine 'tpu:8': expected a preset (summit:N, dgx-a100:N, dgx-h100:N, cpu:N) or a .toml spec file

// RUN: not unityc-opt %S/Inputs/no_model.mlir -t torch 2>&1 | filecheck %s --check-prefix=MODEL
// MODEL: no_model.mlir:1:1: error: the plan has no unityc.model attribute: codegen needs the model spec (a dictionary the importer records) to load weights and data and to rebuild the reference for --check

// A view that reaches past the machine's devices.
// RUN: not unityc-opt %S/Inputs/view_off_machine.mlir -t torch 2>&1 | filecheck %s --check-prefix=FIT
// FIT: view_off_machine.mlir:4:5: error: pcg.relu: its machine view does not fit cpu:2: a machine view reaches device 2 from device 1, but cpu:2 has 2 devices

// The same plan for a machine it does fit.
// RUN: unityc-opt %S/Inputs/view_off_machine.mlir -t 'torch{machine="cpu:3"}' | filecheck %s --check-prefix=THREE
// THREE: world_size=3,

// Degrees an op's parallel form does not produce (the verifier's error, located too).
// RUN: not unityc-opt %S/Inputs/inconsistent_degrees.mlir -t torch -o %t.py 2>&1 | filecheck %s --check-prefix=DEGREES
// RUN: not test -e %t.py
// DEGREES-NOT: Traceback
// DEGREES: inconsistent_degrees.mlir:4:5: error: pcg.relu: result 0 has type !pcg.tensor<4x16xf32>, but its operands give !pcg.tensor<4x16xf32, shard [2, 1]>

// RUN: not unityc-opt %S/Inputs/pipeline.mlir -t torch 2>&1 | filecheck %s --check-prefix=PIPELINE
// PIPELINE: pipeline.mlir:4:5: error: parallel.pipeline/batch (micro-batches inside the graph) are not supported by -t torch: pipeline a plan by stages instead (stage = k on every op, unityc.schedule and unityc.microbatches on the graph function)
