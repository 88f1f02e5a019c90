// The baselines as passes: each replaces the graph with its mapped plan and prints one line.

// RUN: unityc-opt %examples/mlp.mlir -p 'data-parallel{machine="cpu:4"}' 2>%t.err | filecheck %s --check-prefix=DP
// RUN: filecheck %s --check-prefix=DP-ERR < %t.err
// Data parallel over 4 processes: the batch of 16 sharded 4 ways, weights held in 4 copies
// (their gradients all-reduced), the loss's partial sums reduced.
// DP-ERR: data-parallel (4-way) on cpu:4: iteration time {{.*}}, peak memory {{.*}}
// DP:     unityc.machine = "cpu:4"
// DP:     %x = pcg.input key "x" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<16x32xf32, shard [4, 1]>
// DP:     pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<64x32xf32, copy 4>
// DP:     pcg.linear {{.*}} -> !pcg.tensor<16x64xf32, shard [4, 1]>
// DP:     pcg.cross_entropy {{.*}} -> !pcg.tensor<f32, sum 4>
// DP:     parallel.reduce {{.*}} degree 4

// RUN: unityc-opt %examples/mlp.mlir -p 'megatron{machine="dgx-a100:1"}' 2>%t.err | filecheck %s --check-prefix=MEGATRON
// RUN: filecheck %s --check-prefix=MEGATRON-ERR < %t.err
// Megatron on 8 GPUs: fc1 column-parallel, fc2 row-parallel, their partial sums all-reduced.
// MEGATRON-ERR: megatron (data {{[0-9]+}} x tensor {{[0-9]+}}) on dgx-a100:1: iteration time
// MEGATRON:     pcg.linear {{.*}} -> !pcg.tensor<16x64xf32, shard [{{[0-9]+}}, {{[0-9]+}}]>
// MEGATRON:     pcg.linear {{.*}} -> !pcg.tensor<16x10xf32, {{.*}}sum {{[0-9]+}}>
// MEGATRON:     parallel.all_reduce

// RUN: unityc-opt %examples/mlp.mlir -p 'exhaustive{machine="cpu:2" rules="%S/../../search/Inputs/search.rules"}' 2>&1 | filecheck %s --check-prefix=EXHAUSTIVE
// EXHAUSTIVE: exhaustive ({{[0-9]+}} graphs) on cpu:2: iteration time
