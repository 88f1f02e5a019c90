// `unityc-rules verify` proves every curated library rule: a numeric check on random
// parallel tensors, then a Z3 proof from the shipped axioms. One line per rule, a summary.

// RUN: unityc-rules verify %S/../../../unityc/rewrites/library/curated.rules | filecheck %s
// CHECK:     {{^}}proven    relu_partition_any_dim  {{[0-9]+\.[0-9]+}} s
// CHECK:     {{^}}proven    linear_column_parallel
// CHECK:     {{^}}proven    linear_row_parallel
// CHECK:     {{^}}proven    megatron_mlp
// CHECK:     {{^}}proven    attention_head_parallel
// CHECK:     {{^}}proven    self_attention_kv_head_parallel
// CHECK:     {{^}}proven    self_attention_rotary_kv_head_parallel
// CHECK:     {{^}}proven    add_is_sum_concat_reduce
// CHECK:     {{^}}proven    reduce_matmul_lhs
// CHECK:     {{^}}proven    merge_linears
// CHECK:     {{^}}proven    cross_entropy_vocabulary_parallel
// CHECK:     {{^}}proven    cross_entropy_ignore_index_vocabulary_parallel
// CHECK:     {{^}}proven    embedding_vocabulary_parallel
// CHECK:     {{^}}proven    embedding_padding_vocabulary_parallel
// CHECK:     {{^}}{{[0-9]+}} rules: {{[0-9]+}} proven, 0 unproven, 0 refuted ({{[0-9]+}} axioms; Z3 per rule median {{[0-9.]+}} s, max {{[0-9.]+}} s)
// CHECK-NOT: {{REFUTED|UNPROVEN}}
