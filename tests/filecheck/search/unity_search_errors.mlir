// Bad search input: one located `error:` line, exit status 1, no traceback, no output file.

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine summit:9x 2>&1 | filecheck %s --check-prefix=MACHINE
// MACHINE-NOT: Traceback
// MACHINE: error: machine 'summit:9x': the count after ':' must be a positive integer, got '9x'

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine nowhere:2 2>&1 | filecheck %s --check-prefix=PRESET
// PRESET: error: {{.*}}nowhere{{.*}}

// RUN: not unityc-opt %examples/mlp.mlir --machine cpu:2 2>&1 | filecheck %s --check-prefix=FLAG
// FLAG: error: --machine needs --unity-search

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --memory-check maybe 2>&1 | filecheck %s --check-prefix=CHECK-MEM
// CHECK-MEM: error: --memory-check: expected on or off, got 'maybe'

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --baselines fastest 2>&1 | filecheck %s --check-prefix=BASELINE
// BASELINE: error: unknown baseline 'fastest' (known: data-parallel, megatron, megatron-lm, sequential, exhaustive, gpipe, pipedream, hetero-gpipe, zero, galvatron, spatial)

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --degrees 2,one 2>&1 | filecheck %s --check-prefix=DEGREES
// DEGREES: error: degrees: expected comma-separated integers, got '2,one'

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --rules %t.missing.rules 2>&1 | filecheck %s --check-prefix=RULES
// RULES: error: rules: no such file or directory: '{{.*}}missing.rules'

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --cost magic 2>&1 | filecheck %s --check-prefix=COST
// COST: error: unknown cost model 'magic' (known: roofline, profile)

// A plan that cannot fit: 1 KiB devices. The search says so and writes nothing.
// RUN: rm -f %t.plan.mlir
// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine %S/Inputs/tiny_memory.toml --rules %S/../../search/Inputs/search.rules -o %t.plan.mlir 2>&1 | filecheck %s --check-prefix=MEMORY
// RUN: not test -e %t.plan.mlir
// MEMORY: plan ({{.*}}): iteration time
// MEMORY: (DOES NOT FIT)
// MEMORY: error: no plan fits the memory of {{.*}}tiny_memory.toml: the smallest footprint found needs {{.*}} KiB on device {{[0-9]}} (1.00 KiB available)

// A preset without its count, degrees the machine cannot use, a rules directory with no rule,
// a machine too big to enumerate: refused before any search (issue 14).
// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine summit -o %t.bare.mlir 2>&1 | filecheck %s --check-prefix=BARE
// RUN: not test -e %t.bare.mlir
// BARE-NOT: Traceback
// BARE: error: machine 'summit': give the number of nodes, e.g. 'summit:1'

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --degrees 3 2>&1 | filecheck %s --check-prefix=DEGREE3
// DEGREE3: error: degrees: 3 is more than the 2 device(s) of cpu:2
// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine cpu:4 --degrees 2,3 2>&1 | filecheck %s --check-prefix=DIVIDE
// DIVIDE: error: degrees: 3 does not divide the 4 devices of cpu:4

// RUN: rm -rf %t.norules && mkdir -p %t.norules
// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --rules %t.norules 2>&1 | filecheck %s --check-prefix=NORULES
// NORULES: error: rules: no .rules file in directory '{{.*}}norules'
// RUN: echo "# nothing but a comment" > %t.norules/empty.rules
// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --rules %t.norules 2>&1 | filecheck %s --check-prefix=EMPTYRULES
// EMPTYRULES: error: rules: '{{.*}}norules' holds no rewrite rule

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine dgx-a100:125000 --time-limit 5 2>&1 | filecheck %s --check-prefix=MILLION
// MILLION-NOT: Traceback
// MILLION: error: dgx-a100:125000: 1,000,000 devices; at most 65,536 are supported

// Zero budgets and time limits have no second meaning: refused like negative ones (leave the
// option out for the machine's own memory, or the default time limit of 600 s), in the flags and the pass options alike.
// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --memory-budget 0 2>&1 | filecheck %s --check-prefix=BUDGET0
// BUDGET0-NOT: Traceback
// BUDGET0: error: memory-budget must be a positive number of GiB, got 0 (leave it out for the machine's own device memory)
// RUN: not unityc-opt %examples/mlp.mlir -p 'galvatron{machine="cpu:2" memory_budget=0.0}' 2>&1 | filecheck %s --check-prefix=BUDGET0
// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --time-limit 0 2>&1 | filecheck %s --check-prefix=LIMIT0
// LIMIT0: error: time-limit must be a positive number of seconds, got 0 (leave it out for the default 600 s)

// An unwritable --report is refused before the search (it was found after it, and -o was lost).
// RUN: rm -f %t.blocked %t.report-plan.mlir && touch %t.blocked
// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --report %t.blocked/r.json -o %t.report-plan.mlir 2>&1 | filecheck %s --check-prefix=REPORT
// RUN: not test -e %t.report-plan.mlir
// REPORT-NOT: unity-search
// REPORT: error: --report {{.*}}blocked/r.json: the folder {{.*}}blocked does not exist
// RUN: not unityc-opt %examples/mlp.mlir -p 'unity-search{machine="cpu:2" report="%t.blocked/r.json"}' 2>&1 | filecheck %s --check-prefix=REPORT-PASS
// REPORT-PASS: error: report {{.*}}blocked/r.json: the folder {{.*}}blocked does not exist
