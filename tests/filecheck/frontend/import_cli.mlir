// unityc-import's command line: what it checks before importing, what it says
// when it changes the model, and names that MLIR cannot spell bare. Errors are
// one line on stderr, exit status != 0, no traceback. Factories: Inputs/cli.py.

//===----------------------------------------------------------------------===//
// An -o path that cannot be written is refused before the import (which can
// take minutes): the factory below would fail if it were called.
//===----------------------------------------------------------------------===//

// RUN: not unityc-import %S/Inputs/bad.py:raises -o %t.missing/x.mlir 2>&1 | filecheck %s --check-prefix=NO-DIR
// NO-DIR-NOT: Traceback
// NO-DIR-NOT: raises
// NO-DIR:     {{^}}unityc-import: error: -o {{.*}}.missing/x.mlir: the folder {{.*}}.missing does not exist
// NO-DIR-NOT: Traceback

// RUN: mkdir -p %t.dir
// RUN: not unityc-import %S/Inputs/bad.py:raises -o %t.dir 2>&1 | filecheck %s --check-prefix=IS-DIR
// IS-DIR: {{^}}unityc-import: error: -o {{.*}}.dir: is a directory

//===----------------------------------------------------------------------===//
// A batch must hold at least one sample (--batch 0 used to fall back silently
// to the config's batch for zoo models).
//===----------------------------------------------------------------------===//

// RUN: not unityc-import mlp --batch 0 2>&1 | filecheck %s --check-prefix=BATCH
// BATCH-NOT: Traceback
// BATCH:     {{^}}unityc-import: error: --batch must be at least 1, got 0

//===----------------------------------------------------------------------===//
// A model the factory returns in eval mode is imported and checked in training
// mode (the mode it trains in); the change is said, naming the outermost
// modules in eval mode.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/cli.py:in_eval --check 2>&1 | filecheck %s --check-prefix=EVAL
// EVAL-DAG: {{^}}unityc-import: warning: {{.*}}cli.py:in_eval returned the model in eval mode (the whole model); unityc imports and checks it in training mode, the mode it trains in (batch norm on batch statistics, dropout on), so its outputs differ from the eval-mode model's
// EVAL-DAG: check: the imported graph matches the module

// RUN: unityc-import %S/Inputs/cli.py:bn_in_eval 2>&1 >/dev/null | filecheck %s --check-prefix=EVAL-BN
// EVAL-BN: {{^}}unityc-import: warning: {{.*}}cli.py:bn_in_eval returned the model in eval mode (bn); unityc imports

//===----------------------------------------------------------------------===//
// A factory that calls sys.exit is an error naming it, not a silent exit.
//===----------------------------------------------------------------------===//

// RUN: not unityc-import %S/Inputs/cli.py:exits 2>&1 | filecheck %s --check-prefix=EXITS
// EXITS: {{^}}unityc-import: error: {{.*}}cli.py:exits() failed: SystemExit: 3

//===----------------------------------------------------------------------===//
// A state_dict key that is not ASCII (`couche_é.weight`) keeps its key (the
// program loads weights by it), with an ASCII SSA name; the file reads back,
// and the generated program indexes the weights by the real key.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/cli.py:accented -o %t.mlir
// RUN: unityc-opt %t.mlir | filecheck %s --check-prefix=ACCENT
// ACCENT: %couche___weight = pcg.weight key "couche_\C3\A9.weight" : !pcg.tensor<4x8xf32>
// ACCENT: %couche___bias = pcg.weight key "couche_\C3\A9.bias" : !pcg.tensor<4xf32>

// RUN: unityc-opt %t.mlir -p 'data-parallel{machine="cpu:2"}' -t torch 2>/dev/null | filecheck %s --check-prefix=ACCENT-PROGRAM
// ACCENT-PROGRAM: "couche_é.weight": Layout((4, 8), "float32"
// ACCENT-PROGRAM: = w["couche_é.weight"]
