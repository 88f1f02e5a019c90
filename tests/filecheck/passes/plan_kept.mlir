// Every rewrite pass keeps the per-op plan (`dialects/plan.py`: view, zero, recompute, stage) on
// the ops it builds in place of others (`carry_plan`, `OpPlan.carried_to`), so a staged, ZeRO or
// recomputed plan stays one: the estimate after each pass still finds a stage on every op.

// The staged plan (Inputs/staged_plan.mlir: 2 GPipe stages, ZeRO-2 weights, recomputed ops).
// RUN: unityc-opt %S/Inputs/staged_plan.mlir -p fuse-collectives | filecheck %s --check-prefixes=FUSE,ALL
// RUN: unityc-opt %S/Inputs/staged_plan.mlir -p canonicalize | filecheck %s --check-prefixes=CANON,ALL
// RUN: unityc-opt %S/Inputs/staged_plan.mlir -p fold-scalar-mul | filecheck %s --check-prefixes=FOLD,ALL
// RUN: unityc-opt %S/Inputs/staged_plan.mlir -p apply-rules | filecheck %s --check-prefixes=RULES,ALL
// RUN: unityc-opt %S/Inputs/staged_plan.mlir -p fuse-attention | filecheck %s --check-prefixes=ALL
// RUN: unityc-opt %S/Inputs/staged_plan.mlir -p fuse-norms | filecheck %s --check-prefixes=ALL
// RUN: unityc-opt %S/Inputs/staged_plan.mlir -p 'fuse-collectives,canonicalize,fold-scalar-mul,estimate{machine="cpu:4"}' 2>&1 >/dev/null | filecheck %s --check-prefix=EST
// RUN: unityc-opt %S/Inputs/staged_plan.mlir -p 'apply-rules,estimate{machine="cpu:4"}' 2>&1 >/dev/null | filecheck %s --check-prefix=EST

// ALL:     func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64}
// ALL:     %w1 = pcg.weight key "fc1.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 2 : i64, stage = 0 : i64}

// A rule splits the first linear: the new ops keep its stage; pcg ops keep its recomputation,
// parallel ops end a recomputed region; their views go (a new task space, placed by the search).
// RULES:   parallel.replicate %x degree 2 {stage = 0 : i64}
// RULES:   pcg.linear %{{.*}} {recompute, stage = 0 : i64}
// RULES:   %h = parallel.combine %{{.*}} {view = #pcg.view<start 0, [intra 1]>, stage = 0 : i64}

// ALL:     %a = pcg.relu %h {view = #pcg.view<start 0, [intra 1]>, recompute, stage = 0 : i64}

// The combine + replicate pair fused into one all_gather on stage 1 (its view: the replicate's).
// FUSE:    %r = parallel.all_gather %a dim 0 degree 2 {view = #pcg.view<start 2, [intra 1]>, stage = 1 : i64}
// FUSE-NOT: parallel.replicate

// The transposes there and back fold away; the scalar multiplies stay, recomputed on stage 1.
// CANON-NOT: pcg.transpose
// CANON:   %s = pcg.scalar_mul %r scale 1.0 {view = #pcg.view<start 2, [intra 1]>, recompute, stage = 1 : i64}

// scale 0.5 then 2.0 folds into 1.0, which is dropped with the other unit scale.
// FOLD-NOT: pcg.scalar_mul
// FOLD:    %l = pcg.linear %u, %w2 {view = #pcg.view<start 2, [intra 1]>, stage = 1 : i64}

// ALL:     %loss = pcg.cross_entropy %logits, %label reduction "mean" {view = #pcg.view<start 2>, stage = 1 : i64}

// EST:     note: pipelined: 2 stages, gpipe, 2 micro-batches

// The fused attention takes the place, stage and recomputation of the output linear.
// RUN: unityc-opt %S/Inputs/staged_attention.mlir -p fuse-attention | filecheck %s --check-prefix=ATTN
// ATTN:    %attention = pcg.attention %x, %x, %x, %wq, %wk, %wv, %wo {{.*}} heads 2 {view = #pcg.view<start 0>, recompute, stage = 0 : i64}

// A ZeRO-3 plan with every pcg op recomputed (the `zero` baseline) through every pass.
// RUN: unityc-opt %examples/mlp.mlir -p 'zero{machine="cpu:2" stage=3 recompute=true}' 2>/dev/null | unityc-opt -p 'fuse-collectives,canonicalize,fold-scalar-mul,fuse-attention,apply-rules' | filecheck %s --check-prefix=ZERO
// ZERO:    %w1 = pcg.weight key "fc1.weight" {{{.*}}zero = 3 : i64}
// ZERO:    pcg.relu %{{.*}} {view = #pcg.view<start 0, [intra 1]>, recompute}
// ZERO:    %w2 = pcg.weight key "fc2.weight" {view = #pcg.view<start 0, [intra 1]>, zero = 3 : i64}
