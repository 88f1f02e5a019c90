// The pipeline baselines as passes: each replaces the graph with a pipelined plan (a stage on
// every op, the schedule and micro-batch count on the graph function) and prints one line.

// RUN: unityc-opt %examples/mlp.mlir -p 'pipedream{machine="summit:1" stages=2}' 2>%t.err | filecheck %s --check-prefix=PD
// RUN: filecheck %s --check-prefix=PD-ERR < %t.err
// PipeDream's DP with exactly 2 stages: the first linear and relu on device 0, the rest on 1. On
// this tiny MLP its fastest partition runs 1 micro-batch: fewer than the stages, so GPipe's
// schedule (1F1B's warm-up is then every forward; torch's 1F1B and the verifier refuse it).
// PD-ERR: pipedream (2 stages (layers 0-1 on 0; layers 2-3 on 1), gpipe, 1 micro-batches) on summit:1: iteration time
// PD:     unityc.machine = "summit:1"
// PD:     attributes {unityc.schedule = "gpipe", unityc.microbatches = 1 : i64}
// PD:     pcg.linear {{.*}}{view = #pcg.view<start 0>, stage = 0 : i64}
// PD:     pcg.relu {{.*}}{view = #pcg.view<start 0>, stage = 0 : i64}
// PD:     pcg.linear {{.*}}{view = #pcg.view<start 1>, stage = 1 : i64}
// PD:     pcg.cross_entropy {{.*}}{view = #pcg.view<start 1>, stage = 1 : i64}

// RUN: unityc-opt %examples/mlp.mlir -p 'hetero-gpipe{machine="%examples/machines/hetero_v100_m4.toml"}' 2>%t.err | filecheck %s --check-prefix=HET
// RUN: filecheck %s --check-prefix=HET-ERR < %t.err
// 002's method on 2 x V100 + 2 x M4: the two M4s merged into one stage (devices 2-3, the batch
// split over them), 3 stages, GPipe's schedule.
// HET-ERR: hetero-gpipe (3 stages ({{.*}}on 2-3), gpipe, {{[0-9]+}} micro-batches; merged devices {{\[\[}}2, 3]]) on
// HET:     attributes {unityc.schedule = "gpipe", unityc.microbatches = {{[0-9]+}} : i64}
// HET:     stage = 2 : i64} : !pcg.tensor<{{[0-9]+}}x{{[0-9]+}}xf32, shard [2, 1]>

// The estimate of a pipelined plan shows its schedule, priced again as 2BW, with a trace.
// RUN: unityc-opt %examples/mlp.mlir -p 'pipedream{machine="summit:1" stages=2},estimate{machine="summit:1" schedule="2bw" trace="%t.json"}' 2>&1 >/dev/null | filecheck %s --check-prefix=EST
// RUN: python -c "import json, sys; t = json.load(open(sys.argv[1])); print(sorted({e['cat'] for e in t['traceEvents'] if e['ph'] == 'X'}))" %t.json | filecheck %s --check-prefix=TRACE
// EST:   pipeline: 2 stages, 2bw, {{[0-9]+}} micro-batches; bubble
// EST:   group  stages  compute  bubble  in flight  in-flight activations
// EST:   note: 2bw: weights double buffered, each gradient applied one batch late
// TRACE: ['B', 'F', {{.*}}'send'{{.*}}]

// RUN: not unityc-opt %examples/mlp.mlir -p 'pipedream{machine="summit:1" stages=-1}' 2>&1 | filecheck %s --check-prefix=BAD
// BAD: error: -p pipedream: stages must be >= 0, got -1
// RUN: not unityc-opt %examples/mlp.mlir -p 'estimate{machine="summit:1" schedule="2bw"}' 2>&1 | filecheck %s --check-prefix=UNPIPED
// UNPIPED: error: -p estimate: schedule and trace are for pipelined plans (unityc.schedule)
