// The estimate pass prints the cost model's report (per-op compute, communication and memory,
// totals, the busiest device, the roofline bound) on stderr, like the search's report, or to the
// file its `report` option names; stdout holds the unchanged module alone.
// On summit:1 the bundled 2-device tensor-parallel MLP is latency-bound: every kernel costs the
// 4 us launch latency, NVLink2 collectives 2 us (alpha) plus bytes at 50 GB/s.

// RUN: unityc-opt %examples/mlp_tensor_parallel.mlir -p 'estimate{machine="summit:1"}' 2>&1 >/dev/null | filecheck %s

// CHECK:      estimate: summit:1: 1 node, 6 devices (6x V100-SXM2-16GB)
// CHECK-NEXT: cost model: roofline, optimizer: sgd
// CHECK:      op        kind                   devices  fwd compute  bwd compute  fwd comm  bwd comm     memory           communication
// CHECK:      %w1       pcg.weight fc1.weight  0,1     {{.*}}  16.00 KiB
// b2 is held as copy 2 and used directly: its gradient is all-reduced (40 B: 2 alpha) in a
// bucket that starts, as the generated program starts it, once the backward has produced it
// (fc2's backward), during fc1's backward; the optimizer steps run after the backward.
// CHECK:      %b2       pcg.weight fc2.bias    0,1     {{.*}} 4.00 us      160 B  grad all_reduce 1x40 B
// x is an input: its replicate (a broadcast) has no backward.
// CHECK-NEXT: %xs       parallel.replicate     0,1     {{ +}}-{{ +}}-{{ +}}2.04 us         -   4.00 KiB    broadcast 1x2.00 KiB
// CHECK-NEXT: %h        pcg.linear             0,1          4.01 us      4.02 us
// CHECK:      %logits   parallel.reduce        0,1     {{.*}} 2.01 us   2.01 us      640 B          reduce 1x640 B
// CHECK:      total
// CHECK:      iteration time: 54.16 us (forward 20.08 us, backward 18.06 us, gradient sync + update 16.02 us)
// CHECK-NEXT: gradient sync: 1 bucket(s) of at most 25.00 MiB all-reduced during the backward, as the program does: all of it hidden behind the backward
// CHECK-NEXT: busiest device: 0 (V100-SXM2-16GB), busy 54.16 us: compute 48.09 us, communication 10.07 us
// CHECK-NEXT: roofline bound: 2.16 ns (203.73 KFLOP of training at peak on all 6 devices); plan / bound = 25042.7x
// CHECK:      device  kind             compute      comm      busy   weights     grads  optimizer  activations   buffers  peak memory  capacity
// The peak is the worst moment of the iteration (here the start of the backward), plus the GPU's
// framework reserve (CUDA context, NCCL, workspaces).
// CHECK-NEXT: 0       V100-SXM2-16GB  48.09 us  10.07 us  54.16 us  5.41 KiB  5.41 KiB          -     4.75 KiB  2.00 KiB     1.00 GiB     6.25%
// CHECK-NEXT: 1       V100-SXM2-16GB
// CHECK-NEXT: 4 other device(s) idle
// CHECK-NEXT: peak memory: the worst moment of forward and backward (activations and gradients never all coexist), with 1.00 GiB per device reserved for the framework
// CHECK-NOT:  builtin.module

// With `report`, the report goes to that file and stderr stays empty.
// RUN: unityc-opt %examples/mlp_tensor_parallel.mlir -p 'estimate{machine="summit:1" report="%t.report"}' 2>%t.err >/dev/null
// RUN: filecheck %s --check-prefix=FILE --input-file %t.report
// RUN: wc -c < %t.err | filecheck %s --check-prefix=EMPTY
// FILE:  estimate: summit:1: 1 node, 6 devices (6x V100-SXM2-16GB)
// FILE:  iteration time: 54.16 us
// EMPTY: {{^ *0$}}

// Adam keeps two state tensors per weight; the optimizer is a pass option. (Before the diff
// below: lit's diff resets PYTHONPATH for the commands after it.)
// RUN: unityc-opt %examples/mlp_tensor_parallel.mlir -p 'estimate{machine="cpu:2" optimizer="adam"}' 2>&1 | filecheck %s --check-prefix=CPU
// CPU:      estimate: cpu:2: 1 node, 2 devices (2x cpu)
// CPU-NEXT: cost model: roofline, optimizer: adam
// gloo inside a training step: alpha 190 us, 2.52 GB/s, and the default scheduler's hand-off
// between the rank's thread and gloo's on its core, 640 us a collective
// CPU:      %xs       parallel.replicate     0,1     {{.*}} 830.81 us
// CPU:      iteration time:
// CPU:      0       cpu   {{.*}}  5.41 KiB  5.41 KiB  10.83 KiB

// The module itself is printed unchanged, alone on stdout. (lit's built-in diff resets
// PYTHONPATH for the commands after it, so it comes last.)
// RUN: unityc-opt %examples/mlp_tensor_parallel.mlir -p 'estimate{machine="summit:1"}' 2>/dev/null | filecheck %s --check-prefix=MODULE
// RUN: unityc-opt %examples/mlp_tensor_parallel.mlir > %t.plain.mlir
// RUN: unityc-opt %examples/mlp_tensor_parallel.mlir -p 'estimate{machine="summit:1"}' 2>/dev/null | diff - %t.plain.mlir
// MODULE:      {{^}}builtin.module {
// MODULE:        %partial = pcg.linear %a, %w2 bias %b2
