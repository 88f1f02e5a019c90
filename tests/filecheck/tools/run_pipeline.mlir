// unityc-run runs a pipelined plan in its micro-batches (the loss their mean): the gpipe plan
// of the example MLP on 4 processes (2 stages x 2-way data parallel, 4 micro-batches) computes
// the example's loss.

// RUN: unityc-run %examples/mlp.mlir --float64 > %t.txt
// RUN: unityc-opt %examples/mlp.mlir -p 'gpipe{machine="cpu:4" stages=2 microbatches=4 schedule="1f1b"}' -o %t.mlir 2>/dev/null
// RUN: unityc-run %t.mlir --float64 >> %t.txt
// RUN: filecheck %s < %t.txt
// CHECK: output 0: !pcg.tensor<f32>  shape []  sum=[[LOSS:[0-9.]+]]
// CHECK: output 0: !pcg.tensor<f32, sum 2>  shape []  sum=[[LOSS]]

// A summed loss cannot be pipelined: located, exit status 1.
// RUN: sed 's/reduction "mean"/reduction "sum"/' %t.mlir > %t.sum.mlir
// RUN: not unityc-run %t.sum.mlir 2>&1 | filecheck %s --check-prefix=SUM
// SUM: sum.mlir:{{[0-9]+}}:5: error: pcg.cross_entropy cannot run in micro-batches: its reduction is 'sum': the loss of a pipelined plan is the mean over micro-batches
