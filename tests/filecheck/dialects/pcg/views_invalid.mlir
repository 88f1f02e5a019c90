// RUN: unityc-opt %s --split-input-file --parsing-diagnostics | filecheck %s

// Malformed machine views do not parse. (A well-formed view that does not fit
// its op's task space is a verifier error: see ops_invalid.mlir.)

"test.op"() {view = #pcg.view<0>} : () -> ()
// CHECK: views_invalid.mlir:[[# @LINE - 1]]:31: error: Expected 'start'

// -----

"test.op"() {view = #pcg.view<start -1>} : () -> ()
// CHECK: views_invalid.mlir:[[# @LINE - 1]]:37: error: Expected integer literal

// -----

"test.op"() {view = #pcg.view<start 0, [intra 0]>} : () -> ()
// CHECK: views_invalid.mlir:[[# @LINE - 1]]:30: error: machine view strides must be positive

// -----

"test.op"() {view = #pcg.view<start 0, [intra 1, inter 0]>} : () -> ()
// CHECK: views_invalid.mlir:[[# @LINE - 1]]:30: error: machine view strides must be positive

// -----

"test.op"() {view = #pcg.view<start 0, [intra -1]>} : () -> ()
// CHECK: views_invalid.mlir:[[# @LINE - 1]]:47: error: Expected integer literal

// -----

"test.op"() {view = #pcg.view<start 0, [across 1]>} : () -> ()
// CHECK: views_invalid.mlir:[[# @LINE - 1]]:41: error: Expected one of 'inter', 'intra'

// -----

"test.op"() {view = #pcg.view<start 0, [intra]>} : () -> ()
// CHECK: views_invalid.mlir:[[# @LINE - 1]]:46: error: Expected integer literal

// -----

"test.op"() {view = #pcg.view<start 0, intra 1>} : () -> ()
// CHECK: views_invalid.mlir:[[# @LINE - 1]]:40: error: '[' expected
