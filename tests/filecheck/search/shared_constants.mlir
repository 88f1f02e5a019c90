// RUN: unityc-opt %S/Inputs/llama_mask.mlir --unity-search --machine cpu:2 --split-size 4 --baselines none --pipelines off -o %t.mlir 2>&1 | filecheck %s --check-prefix=REPORT
// RUN: filecheck %s < %t.mlir
// RUN: filecheck %s --check-prefix=MASK < %t.mlir
// RUN: unityc-opt %t.mlir -t torch | filecheck %s --check-prefix=TORCH

// hf:llama, 3 layers, sequence 48 (Inputs/llama_mask.mlir, from `unityc-import hf:llama
// layers=3 seq=48`): the attention mask is built from the padding mask (an input) and a folded
// causal mask, and every layer reads it; every attention reads the rotary tables. The mask's ops
// are side ops (computed from inputs and constants alone): they no longer join every layer to
// the first, so the graph splits into segments, and the plan computes them once, before the
// segments. Each constant is one node in the plan, printed packed, and one PACKED_ text in the
// generated program (decoded once per process).

// REPORT: search: {{[3-9]|[1-9][0-9]}} segment(s)

// CHECK-COUNT-3: pcg.constant value zlib<"
// CHECK-NOT:     pcg.constant

// The mask's two casts to i1 (padding mask, combined mask), once each.
// MASK-COUNT-2: pcg.cast %{{.*}} dtype i1
// MASK-NOT:     pcg.cast %{{.*}} dtype i1

// TORCH:      PACKED_0 = '
// TORCH-NEXT: PACKED_1 = '
// TORCH-NEXT: PACKED_2 = '
// TORCH-NOT:  PACKED_3 =
// TORCH:      constants={
// TORCH-COUNT-3: Constant((), Layout({{.*}}), packed=PACKED_{{[0-2]}}),
// TORCH-NEXT: },
