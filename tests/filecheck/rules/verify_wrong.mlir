// A wrong rule is REFUTED with a concrete counterexample (the instance's types and
// attributes, the first differing output, the largest difference and where); a true rule
// no axiom proves is UNPROVEN (an axiom is missing). Any of them makes the exit status 1.

// RUN: not unityc-rules verify %S/Inputs/verify_mixed.rules 2>&1 | filecheck %s
// CHECK-NOT: Traceback
// CHECK:      {{^}}REFUTED   relu_is_additive: instance a: !pcg.tensor<{{[^>]+}}>, b: !pcg.tensor<{{[^>]+}}>: output 0 differs: max abs difference {{[0-9.e-]+}} at [{{[0-9, ]*}}] (source {{[-0-9.e]+}}, target {{[-0-9.e]+}})
// CHECK-NEXT: {{^}}REFUTED   partition_combine_other_dims: instance x: !pcg.tensor<{{[^>]+}}>: output 0 types differ: source !pcg.tensor<{{.*}}shard [2, {{.*}}]>, target !pcg.tensor<{{.*}}>
// CHECK-NEXT: {{^}}UNPROVEN  exp_of_sum: no chain of axioms connects the two sides (missing axiom?); numerically checked on 6 instances
// CHECK-NEXT: {{^}}proven    relu_any_dim  {{[0-9.]+}} s
// CHECK-NEXT: {{^}}4 rules: 1 proven, 1 unproven, 2 refuted

// RUN: sh -c 'unityc-rules verify "$0" > /dev/null 2>&1; echo "exit $?"' %S/Inputs/verify_mixed.rules | filecheck %s --check-prefix=STATUS
// STATUS: {{^exit 1$}}

// The verdicts as JSON.
// RUN: not unityc-rules verify %S/Inputs/verify_mixed.rules --json %t.json > /dev/null
// RUN: cat %t.json | filecheck %s --check-prefix=JSON
// JSON:      "summary": {
// JSON-NEXT:   "proven": 1,
// JSON-NEXT:   "unproven": 1,
// JSON-NEXT:   "refuted": 2
// JSON:      "name": "relu_is_additive",
// JSON-NEXT: "file": "{{.*}}verify_mixed.rules",
// JSON-NEXT: "line": 2,
// JSON-NEXT: "status": "refuted",

// Axioms in a verified file are checked numerically; a false one is refuted and not used,
// a true one joins the shipped axioms and proves the rule that needed it.
// RUN: not unityc-rules verify %S/Inputs/verify_user_axiom.rules | filecheck %s --check-prefix=AXIOM
// AXIOM:      {{^}}checked   exp_add  (axiom, 6 instances)
// AXIOM-NEXT: {{^}}REFUTED   relu_is_identity (axiom): instance x: {{.*}} differs
// AXIOM-NEXT: {{^}}proven    exp_of_sum
// AXIOM-NEXT: {{^}}1 rule: 1 proven, 0 unproven, 0 refuted
