// Bad machines and options give `error: ...`, exit status 1 and no traceback.

// RUN: not unityc-opt %s -p 'estimate{machine="%S/Inputs/estimate_bad_spec.toml"}' 2>&1 | filecheck %s --check-prefix=SPEC
// SPEC-NOT: Traceback
// SPEC:     error: {{.*}}estimate_bad_spec.toml: nodes.devices_per_socket: expected a positive integer, got 0

// RUN: not unityc-opt %s -p 'estimate{machine="tpu:4"}' 2>&1 | filecheck %s --check-prefix=PRESET
// PRESET-NOT: Traceback
// PRESET:     error: unknown machine 'tpu:4': expected a preset (summit:N, dgx-a100:N, dgx-h100:N, cpu:N) or a .toml spec file

// RUN: not unityc-opt %s -p 'estimate{machine="summit:0"}' 2>&1 | filecheck %s --check-prefix=COUNT
// COUNT: error: machine 'summit:0': the count after ':' must be a positive integer, got '0'

// RUN: not unityc-opt %s -p 'estimate{optimizer="lamb"}' 2>&1 | filecheck %s --check-prefix=OPT
// OPT: error: unknown optimizer 'lamb' (known: sgd, adam)

// RUN: not unityc-opt %s -p 'estimate{cost="profile"}' 2>&1 | filecheck %s --check-prefix=PROFILE
// PROFILE: error: cost="profile" needs a profile cache file (profile="cache.json")

// The view places a task on device 2, but cpu:2 has devices 0 and 1.
// RUN: not unityc-opt %s -p 'estimate{machine="cpu:2"}' 2>&1 | filecheck %s --check-prefix=VIEW
// VIEW-NOT: Traceback
// VIEW: estimate_errors.mlir:[[# @LINE + 3]]:3: error: a machine view reaches device 2 from device 1, but cpu:2 has 2 devices
// VIEW-NEXT: %x = pcg.input key "x"
func.func @main() -> !pcg.tensor<4xf32, shard [2]> {
  %x = pcg.input key "x" {view = #pcg.view<start 1, [intra 1]>} : !pcg.tensor<4xf32, shard [2]>
  func.return %x : !pcg.tensor<4xf32, shard [2]>
}
