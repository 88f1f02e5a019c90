// The gpipe baseline: the graph's sequential layers split evenly (by the cost model's forward +
// backward time, at cuts where one activation crosses) into stages over equal groups of consecutive devices, data
// parallel inside a group of more than one device. Every op gets its stage; the graph function
// gets the schedule and micro-batch count.

// Two stages on two processes, 1F1B over 4 micro-batches of 4 rows.
// RUN: unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:2" stages=2 microbatches=4 schedule="1f1b"}' 2>%t.err | filecheck %s --check-prefix=TWO
// RUN: filecheck %s --check-prefix=TWO-ERR < %t.err
// TWO-ERR: gpipe (2 stages, 1f1b, 4 micro-batches) on cpu:2: iteration time {{.*}} (estimated without micro-batch overlap), peak memory
// TWO:     unityc.machine = "cpu:2"
// TWO:     func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "1f1b", unityc.microbatches = 4 : i64}
// TWO:     %x = pcg.input key "x" {view = #pcg.view<start 0>, stage = 0 : i64}
// TWO:     %h = pcg.linear {{.*}} {view = #pcg.view<start 0>, stage = 0 : i64}
// TWO:     %a = pcg.relu %h {view = #pcg.view<start 0>, stage = 0 : i64}
// TWO:     %logits = pcg.linear {{.*}} {view = #pcg.view<start 1>, stage = 1 : i64}
// TWO:     %label = pcg.input key "label" {view = #pcg.view<start 1>, stage = 1 : i64}
// TWO:     pcg.cross_entropy {{.*}} {view = #pcg.view<start 1>, stage = 1 : i64}

// Two stages on four processes: each stage 2-way data parallel (the batch sharded, weights in
// copies), the loss left in partial sums (each pipeline seeds its own).
// RUN: unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:4" stages=2 microbatches=2}' 2>&1 | filecheck %s --check-prefix=HYBRID
// HYBRID:     gpipe (2 stages x 2-way data parallel, gpipe, 2 micro-batches) on cpu:4
// HYBRID:     pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>, stage = 0 : i64} : !pcg.tensor<16x32xf32, shard [2, 1]>
// HYBRID:     pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>, stage = 0 : i64} : !pcg.tensor<64x32xf32, copy 2>
// HYBRID:     pcg.linear %a, {{.*}} {view = #pcg.view<start 2, [intra 1]>, stage = 1 : i64}
// HYBRID:     pcg.cross_entropy {{.*}} -> !pcg.tensor<f32, sum 2>

// Interleaved 1F1B: 4 stages, 2 per process; stage k runs on process k mod 2.
// RUN: unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:2" stages=4 microbatches=2 schedule="interleaved-1f1b" virtual=2}' 2>&1 | filecheck %s --check-prefix=INTER
// INTER: gpipe (4 stages, 2 per rank group, interleaved-1f1b, 2 micro-batches) on cpu:2
// INTER: attributes {unityc.schedule = "interleaved-1f1b", unityc.microbatches = 2 : i64, unityc.virtual_stages = 2 : i64}
// INTER: %h = pcg.linear {{.*}} {view = #pcg.view<start 0>, stage = 0 : i64}
// INTER: %a = pcg.relu %h {view = #pcg.view<start 1>, stage = 1 : i64}
// INTER: %logits = pcg.linear {{.*}} {view = #pcg.view<start 0>, stage = 2 : i64}
// INTER: pcg.cross_entropy {{.*}} {view = #pcg.view<start 1>, stage = 3 : i64}

// What cannot be had is refused with one line.
// RUN: not unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:6" stages=6}' 2>&1 | filecheck %s --check-prefix=CUTS
// CUTS: error: -p gpipe: 6 stages need 5 cuts where one activation crosses, but the graph has 3: at most 4 stages
// RUN: not unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:3" stages=2}' 2>&1 | filecheck %s --check-prefix=GROUPS
// GROUPS: error: -p gpipe: 2 rank groups do not divide the 3 devices of the machine into equal groups
// RUN: not unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:2" schedule="zb"}' 2>&1 | filecheck %s --check-prefix=SCHEDULE
// SCHEDULE: error: -p gpipe: unknown schedule 'zb' (known: gpipe, 1f1b, interleaved-1f1b)
// RUN: not unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:2" stages=4 microbatches=2 schedule="1f1b"}' 2>&1 | filecheck %s --check-prefix=ONEFONEB
// ONEFONEB: error: -p gpipe: 1f1b needs at least as many micro-batches as stages: 2 < 4
// RUN: not unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:2" stages=2 microbatches=3}' 2>&1 | filecheck %s --check-prefix=SPLIT
// SPLIT: error: -p gpipe: 3 micro-batches on 1 device(s) per stage do not split the batch of 16 rows
