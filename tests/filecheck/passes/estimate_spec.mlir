// estimate on a machine spec file: 2 nodes x 2 devices with round numbers (1 TFLOP/s,
// 100 GB/s memory; links 100 GB/s + 1 us within a node, 10 GB/s + 5 us between nodes).

// RUN: unityc-opt %s -p 'estimate{machine="%S/Inputs/estimate_two_nodes.toml"}' 2>&1 | filecheck %s

// Replicating 1 MB from device 0 to device 2 (node 1) broadcasts it across nodes:
// 5 us + 1 MB / 10 GB/s = 105 us forward; its backward reduces the copies' gradients, the
// weight-gradient synchronization of data parallelism (105 us).
// CHECK:      estimate: two-nodes: 2 nodes, 4 devices (4x unit)
// CHECK:      %wr {{ +}}parallel.replicate {{ +}}0,2 {{.*}} 105.00 us  105.00 us  {{.*}} broadcast 1x976.56 KiB
// The batch-sharded linear is memory-bound: 2*2*1000*250 FLOPs per task at 1 TFLOP/s = 1 us,
// but 8 KB + 1 MB + 2 KB at 100 GB/s = 10.10 us; its backward computes only dW (x is an input).
// CHECK-NEXT: %y {{ +}}pcg.linear {{ +}}0,2 {{ +}}10.10 us     20.20 us
// CHECK:      busiest device: 0
// CHECK:      0       unit
// CHECK-NEXT: 2       unit
// CHECK-NEXT: 2 other device(s) idle
func.func @main() -> !pcg.tensor<f32> {
  %x = pcg.input key "x" {view = #pcg.view<start 0, [inter 1]>} : !pcg.tensor<4x1000xf32, shard [2, 1]>
  %w = pcg.weight key "w" {view = #pcg.view<start 0>} : !pcg.tensor<250x1000xf32>
  %wr = parallel.replicate %w degree 2 {view = #pcg.view<start 0, [inter 1]>} : !pcg.tensor<250x1000xf32> -> !pcg.tensor<250x1000xf32, copy 2>
  %y = pcg.linear %x, %wr {view = #pcg.view<start 0, [inter 1]>} : !pcg.tensor<4x1000xf32, shard [2, 1]>, !pcg.tensor<250x1000xf32, copy 2> -> !pcg.tensor<4x250xf32, shard [2, 1]>
  %s = pcg.reduce %y kind "sum" dims [0, 1] {view = #pcg.view<start 0, [inter 1]>} : !pcg.tensor<4x250xf32, shard [2, 1]> -> !pcg.tensor<f32, sum 2>
  %loss = parallel.reduce %s degree 2 {view = #pcg.view<start 0>} : !pcg.tensor<f32, sum 2> -> !pcg.tensor<f32>
  func.return %loss : !pcg.tensor<f32>
}
