// A machine spec given by a relative path is read from the current directory and recorded in
// the plan as an absolute path, so the plan can be used from anywhere; errors name the path as
// given (issue 14).

// RUN: cd %S/../../machine && unityc-opt %examples/mlp.mlir --unity-search --machine two_nodes.toml --time-limit 0.001 -o %t.plan.mlir 2>/dev/null
// RUN: filecheck %s --check-prefix=PLAN < %t.plan.mlir
// PLAN: unityc.machine = "/{{.*}}tests/machine/two_nodes.toml"

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine nowhere/missing.toml 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING: error: nowhere/missing.toml: no such machine spec file

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine %S 2>&1 | filecheck %s --check-prefix=DIR
// DIR-NOT: Traceback
// DIR: error: {{.*}}search: is a directory, not a machine spec file
