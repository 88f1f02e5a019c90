// The `megatron-lm` baseline (search/megatron_lm.py) on a 2-layer transformer (4 heads, batch 8,
// Adam): tensor degree 4 (a node of cpu:8, dividing the heads), micro-batch 1 per replica, ZeRO-1
// and the attention core recomputed. With the machine's memory one stage fits (data 2, 4
// micro-batches of accumulation); with 0.0001 GiB (104.86 KiB) per device it does not, and the
// fewest stages that fit are 2 (data 1, 8 micro-batches). With 0.00001 GiB nothing fits, not even
// with every op recomputed: the smallest footprint is returned, marked as not fitting.
// RUN: unityc-opt %S/Inputs/tiny_transformer.mlir -p 'megatron-lm{machine="cpu:8" optimizer="adam"}' 2>&1 >%t.one.mlir | filecheck %s --check-prefix=ONE
// RUN: filecheck %s --check-prefix=ONE-PLAN < %t.one.mlir
// ONE: megatron-lm (data 2 x tensor 4 x pipeline 1, 1f1b, 4 micro-batches of 1 per replica, ZeRO-1, selective recomputation, sequence parallel) on cpu:8: iteration time {{.*}}, peak memory {{.*}} KiB{{$}}
// ONE-PLAN-DAG: pcg.attention {{.*}}recompute
// Below, without sequence parallelism (megatron-lm's default is with it): the budgets force more stages.
// ONE-PLAN-DAG: zero = 1 : i64
// ONE-PLAN-DAG: unityc.microbatches = 4 : i64
// RUN: unityc-opt %S/Inputs/tiny_transformer.mlir -p 'megatron-lm{machine="cpu:8" optimizer="adam" memory_budget=0.0001 sequence=false}' 2>&1 >/dev/null | filecheck %s --check-prefix=TWO
// TWO: megatron-lm (data 1 x tensor 4 x pipeline 2, 1f1b, 8 micro-batches of 1 per replica, ZeRO-1, selective recomputation) on cpu:8: iteration time {{.*}}, peak memory {{.*}} KiB{{$}}
// RUN: unityc-opt %S/Inputs/tiny_transformer.mlir -p 'megatron-lm{machine="cpu:8" optimizer="adam" memory_budget=0.00001 sequence=false}' 2>&1 >/dev/null | filecheck %s --check-prefix=NONE
// NONE: megatron-lm (data 1 x tensor 4 x pipeline 2, {{.*}}full recomputation) on cpu:8: {{.*}} (does not fit)

// Degrees given by hand: 2 x 2 interleaved (2 chunks per stage group) on cpu:4.
// RUN: unityc-opt %S/Inputs/tiny_transformer.mlir -p 'megatron-lm{machine="cpu:4" tensor=2 stages=2 virtual=2 sequence=false}' 2>&1 >/dev/null | filecheck %s --check-prefix=HAND
// HAND: megatron-lm (data 1 x tensor 2 x pipeline 2, 2 chunks per stage group, interleaved-1f1b, 8 micro-batches of 1 per replica, ZeRO-1, selective recomputation) on cpu:4

// Degrees that do not tile the machine or split the batch: a clear error, nothing written.
// RUN: not unityc-opt %S/Inputs/tiny_transformer.mlir -p 'megatron-lm{machine="cpu:4" tensor=3}' -o %t.bad.mlir 2>&1 | filecheck %s --check-prefix=BAD
// RUN: not test -e %t.bad.mlir
// BAD: error: megatron-lm: tensor degree 3 does not divide 4 devices
// RUN: not unityc-opt %S/Inputs/tiny_transformer.mlir -p 'megatron-lm{machine="cpu:4" stages=7}' 2>&1 | filecheck %s --check-prefix=STAGES
// STAGES: error: megatron-lm: no pipeline of 7 stages x tensor 4 tiles the 4 devices with a data degree dividing the batch of 8
