// apply-rules proves a user's rules (with the shipped axioms) before applying
// them, and refuses, with the reason and exit status 1, a rule it cannot prove.

// A wrong rule: the numeric check on random tensors refutes it.
// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/unproven.rules" names="relu_is_identity"}' 2>&1 | filecheck %s --check-prefix=REFUTED
// REFUTED-NOT: Traceback
// REFUTED:     error: apply-rules: rule 'relu_is_identity' ({{.*}}unproven.rules:4:1) is refuted: {{.+}}; not applied

// A true rule that no axiom proves is refused as well: never apply what is not proven.
// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/unproven.rules" names="tanh_by_sigmoid"}' 2>&1 | filecheck %s --check-prefix=UNPROVEN
// UNPROVEN-NOT: Traceback
// UNPROVEN:     error: apply-rules: rule 'tanh_by_sigmoid' ({{.*}}unproven.rules:9:1) is not proven from the axioms: {{.+}}; not applied
func.func @main() -> !pcg.tensor<4xf32> {
  %x = pcg.input key "x" : !pcg.tensor<4xf32>
  %r = pcg.relu %x : !pcg.tensor<4xf32> -> !pcg.tensor<4xf32>
  func.return %r : !pcg.tensor<4xf32>
}
