// `unityc-rules verify` proves the context-parallel attention rules (the sequence split of
// self-attention, with a mask's rows and rotary cos/sin at each shard's positions) from the
// shipped axioms (attention_context*), after a numeric check.

// RUN: unityc-rules verify %S/../../../unityc/rewrites/context.rules | filecheck %s
// CHECK:     {{^}}proven    self_attention_context_parallel  {{[0-9]+\.[0-9]+}} s
// CHECK:     {{^}}proven    self_attention_context_parallel_mask
// CHECK:     {{^}}proven    self_attention_rotary_context_parallel
// CHECK:     {{^}}proven    self_attention_all_to_all_context_parallel
// CHECK:     {{^}}proven    self_attention_rotary_all_to_all_context_parallel
// CHECK:     {{^}}5 rules: 5 proven, 0 unproven, 0 refuted
