// RUN: unityc-opt %s --split-input-file --verify-diagnostics | filecheck %s

// A pipelined plan is checked as a whole: each error is located at the op (or
// the graph function) at fault.

// A stage reads only values of its own or earlier stages.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64} {
  %x = pcg.input key "x" {stage = 1 : i64} : !pcg.tensor<8x4xf32>
  %y = pcg.relu %x {stage = 0 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<8x4xf32>
  %l = pcg.reduce %y kind "mean" dims [0, 1] {stage = 1 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 4]]:3: error: pcg.relu of stage 0 reads %x of stage 1: a stage reads only values of its own or earlier stages

// -----

// Every op carries a stage.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %y = pcg.relu %x : !pcg.tensor<8x4xf32> -> !pcg.tensor<8x4xf32>
  %l = pcg.reduce %y kind "mean" dims [0, 1] {stage = 1 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 4]]:3: error: pcg.relu has no stage: every op of a pipelined plan needs 'stage = k : i64'

// -----

// Stages need a schedule.
func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 0 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 4]]:3: error: pcg.input has a stage but the graph function names no 'unityc.schedule'

// -----

// The micro-batches divide each piece's rows of every input's dim 0.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "1f1b", unityc.microbatches = 3 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 0 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 4]]:3: error: 3 micro-batches do not divide the batch of input 'x': its pieces hold 8 rows of dim 0 (8 in 1 shards)

// -----

// A known schedule.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "zero-bubble", unityc.microbatches = 2 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 0 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 5]]:1: error: unknown schedule 'zero-bubble' (known: gpipe, 1f1b, interleaved-1f1b)

// -----

// Interleaved 1F1B needs virtual stages that divide the stages.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "interleaved-1f1b", unityc.microbatches = 2 : i64, unityc.virtual_stages = 2 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %y = pcg.relu %x {stage = 1 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<8x4xf32>
  %l = pcg.reduce %y kind "mean" dims [0, 1] {stage = 2 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 6]]:1: error: unityc.virtual_stages = 2 does not divide the 3 stages: each rank group holds the same number of stages

// -----

func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "interleaved-1f1b", unityc.microbatches = 2 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 0 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 5]]:1: error: the interleaved-1f1b schedule needs unityc.virtual_stages = v : i64 with v >= 2 stages per rank group

// -----

// Stages of different rank groups run on different devices (stage 1 runs on
// device 1; stage 0 may not use it).
func.func @main() -> !pcg.tensor<f32, sum 2> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64, view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x4xf32, shard [2, 1]>
  %y = pcg.relu %x {stage = 0 : i64, view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<8x4xf32, shard [2, 1]> -> !pcg.tensor<8x4xf32, shard [2, 1]>
  %l = pcg.reduce %y kind "mean" dims [0, 1] {stage = 1 : i64, view = #pcg.view<start 1, [intra 1]>} : !pcg.tensor<8x4xf32, shard [2, 1]> -> !pcg.tensor<f32, sum 2>
  func.return %l : !pcg.tensor<f32, sum 2>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 3]]:3: error: pcg.reduce of stage 1 runs on device 1, which the pcg.input of stage 0 uses: each rank group's stages run on devices of their own (stage k on group k mod the rank groups)

// -----

// A stage number is a non-negative i64.
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64} {
  %x = pcg.input key "x" {stage = -1 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 0 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 4]]:3: error: pcg.input: stage -1 is negative: stages count from 0

// -----

func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = "2"} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 0 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 5]]:1: error: 'unityc.microbatches' must be an integer (unityc.microbatches = N : i64), got "2"

// -----

// 1F1B runs at least as many micro-batches as stages (torch.distributed.pipelining's limit).
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "1f1b", unityc.microbatches = 1 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 1 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 5]]:1: error: 1f1b needs at least as many micro-batches as stages: 1 < 2

// -----

// Every stage below the last holds an op (a huge stage number is no problem to check).
func.func @main() -> !pcg.tensor<f32> attributes {unityc.schedule = "gpipe", unityc.microbatches = 2 : i64} {
  %x = pcg.input key "x" {stage = 0 : i64} : !pcg.tensor<8x4xf32>
  %l = pcg.reduce %x kind "mean" dims [0, 1] {stage = 9223372036854775807 : i64} : !pcg.tensor<8x4xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
// CHECK: pipeline_invalid.mlir:[[# @LINE - 5]]:1: error: stage 1 holds no op: the stages of 9223372036854775808 are 0 to 9223372036854775807
