// The other subcommands: check-axioms runs the numeric check on the axioms, format prints
// rules canonically (and its output parses back to the same text), --help everywhere.

// RUN: unityc-rules check-axioms --trials 2 | filecheck %s --check-prefix=AXIOMS
// AXIOMS: {{^}}ok        combine_partition  (2 instances)
// AXIOMS: {{^}}ok        attention_heads  (2 instances)
// AXIOMS: {{^}}{{[0-9]+}} axioms: {{[0-9]+}} ok, 0 failed

// RUN: not unityc-rules check-axioms %S/Inputs/verify_user_axiom.rules | filecheck %s --check-prefix=FALSE
// FALSE:      {{^}}ok        exp_add  (10 instances)
// FALSE-NEXT: {{^}}FAILED    relu_is_identity: instance x: {{.*}} differs
// FALSE-NEXT: {{^}}2 axioms: 1 ok, 1 failed

// RUN: unityc-rules format %S/Inputs/verify_mixed.rules | filecheck %s --check-prefix=FORMAT
// FORMAT:      rule relu_is_additive:
// FORMAT-NEXT:     relu(add(a, b)) => add(relu(a), relu(b))
// FORMAT:      rule exp_of_sum "true, but no axiom relates exp and mul":
// FORMAT-NEXT:     exp(add(a, b)) => mul(exp(a), exp(b))
// FORMAT-NEXT:     if type(a) == type(b)
// RUN: unityc-rules format %S/Inputs/verify_mixed.rules > %t.rules
// RUN: unityc-rules format %t.rules | diff - %t.rules

// RUN: unityc-rules --help | filecheck %s --check-prefix=HELP
// HELP: usage: unityc-rules [-h] COMMAND ...
// HELP: verify{{ +}}prove or refute every rule in the files
// HELP: numerically check the axioms
// HELP: generate{{ +}}regenerate the rule library
// RUN: unityc-rules verify --help | filecheck %s --check-prefix=VERIFY
// VERIFY: usage: unityc-rules verify [-h] [--axioms FILE [FILE ...]] [--timeout S]
// VERIFY: --json OUT{{ +}}write the verdicts to this JSON file
// RUN: unityc-rules check-axioms --help | filecheck %s --check-prefix=CHECK-HELP
// CHECK-HELP: usage: unityc-rules check-axioms
// RUN: unityc-rules generate --help | filecheck %s --check-prefix=GENERATE
// GENERATE: usage: unityc-rules generate [-h] [--max-ops MAX_OPS] -o DIR
// RUN: unityc-rules format --help | filecheck %s --check-prefix=FORMAT-HELP
// FORMAT-HELP: usage: unityc-rules format [-h] FILE [FILE ...]
