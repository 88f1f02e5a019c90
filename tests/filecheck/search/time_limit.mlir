// --time-limit counts from the start of the command: a limit already spent when the search
// begins still gives a valid plan (the graph on one device, had without the DP), and the report
// says the search stopped early; the plan verifies and reads back (issue 14).

// RUN: unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --time-limit 0.001 -o %t.plan.mlir 2>%t.err
// RUN: filecheck %s --check-prefix=REPORT < %t.err
// RUN: unityc-opt %t.plan.mlir | filecheck %s --check-prefix=PLAN
// REPORT-NOT: Traceback
// REPORT: {{^}}search: {{.*}}
// REPORT-NEXT: stopped early (time limit): the plan is the best one completed by then
// REPORT: plan (one device (device 0)): iteration time
// REPORT: data-parallel {{.*}} not priced: the time limit (0.001 s) ran out
// PLAN: builtin.module attributes {unityc.machine = "cpu:2"}
// PLAN: pcg.linear {{.*}} {view = #pcg.view<start 0>}

// A search given time enough finishes and says nothing of stopping.
// RUN: unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --time-limit 600 -o %t.full.mlir 2>&1 | filecheck %s --check-prefix=FULL
// FULL-NOT: stopped early
// FULL: plan (search): iteration time
