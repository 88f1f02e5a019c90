// pad-images: the image padded with zero rows at the bottom (4 -> 6 rows: a 3-way height split
// of a network that pools 2x), the convolution run on the padded rows, one 0/1 row mask before
// the batch norm (its 3x3 windows give the padded rows values), the batch norm spelled out with
// its sums over the real count (2 x 4 x 4 = 32: scale 1/32) and its mean and shift masked, the
// max pool on the padded rows, and the real rows split off before the loss.

// RUN: unityc-opt %s -p 'pad-images{degree=3}' | filecheck %s
// CHECK:      %x = pcg.input key "images" : !pcg.tensor<2x1x4x4xf32>
// CHECK-NEXT: %[[ZEROS:.*]] = pcg.constant value dense<0.000000e+00> : tensor<2x1x2x4xf32>
// CHECK-NEXT: %[[PADDED:.*]] = pcg.concat %x, %[[ZEROS]] dim 2 {{.*}} -> !pcg.tensor<2x1x6x4xf32>
// CHECK:      %[[CONV:.*]] = pcg.conv2d %[[PADDED]], %w {{.*}} -> !pcg.tensor<2x2x6x4xf32>
// CHECK-NEXT: %[[MASK:.*]] = pcg.constant value dense<{{\[\[\[\[}}1.000000e+00], [1.000000e+00], [1.000000e+00], [1.000000e+00], [0.000000e+00], [0.000000e+00]]]]> : tensor<1x1x6x1xf32>
// CHECK-NEXT: %[[CLEAN:.*]] = pcg.mul %[[CONV]], %[[MASK]]
// CHECK-NEXT: %[[SUM:.*]] = pcg.reduce %[[CLEAN]] kind "sum" dims [0, 2, 3] keepdim
// CHECK-NEXT: %[[MEAN:.*]] = pcg.scalar_mul %[[SUM]] scale 0.03125
// CHECK-NEXT: %[[ROWS:.*]] = pcg.mul %[[MEAN]], %[[MASK]] {{.*}} -> !pcg.tensor<1x2x6x1xf32>
// CHECK-NEXT: %[[D:.*]] = pcg.sub %[[CLEAN]], %[[ROWS]]
// CHECK:      pcg.scalar_mul {{.*}} scale 0.03125
// CHECK:      %[[SHIFT:.*]] = pcg.mul {{.*}}, %[[MASK]] {{.*}} -> !pcg.tensor<1x2x6x1xf32>
// CHECK-NEXT: %[[Y:.*]] = pcg.add {{.*}}, %[[SHIFT]]
// CHECK-NEXT: %[[R:.*]] = pcg.relu %[[Y]]
// CHECK-NEXT: %[[P:.*]] = pcg.pool2d %[[R]] {{.*}} -> !pcg.tensor<2x2x3x2xf32>
// CHECK-NEXT: %[[REAL:.*]], %{{.*}} = pcg.split %[[P]] dim 2 sizes [2, 1]
// CHECK-NEXT: %[[LOSS:.*]] = pcg.mse_loss %[[REAL]], %t
// CHECK-NEXT: func.return %[[LOSS]]

// RUN: unityc-opt %s -p 'pad-images{rows=8}' | filecheck %s --check-prefix=EIGHT
// EIGHT: pcg.concat %x, %{{.*}} dim 2 {{.*}} -> !pcg.tensor<2x1x8x4xf32>
// EIGHT: pcg.split %{{.*}} dim 2 sizes [2, 2]

// 5 rows: the 2x2/2 max pool cannot halve them (2 x 2 != 5), so the real rows are split off
// before it and it runs unpadded.
// RUN: unityc-opt %s -p 'pad-images{rows=5}' | filecheck %s --check-prefix=FIVE
// FIVE:      %[[REAL:.*]], %{{.*}} = pcg.split %{{.*}} dim 2 sizes [4, 1] : !pcg.tensor<2x2x5x4xf32>
// FIVE-NEXT: pcg.pool2d %[[REAL]] {{.*}} : !pcg.tensor<2x2x4x4xf32> -> !pcg.tensor<2x2x2x2xf32>

// RUN: not unityc-opt %s -p 'pad-images{degree=2}' 2>&1 | filecheck %s --check-prefix=DIVIDES
// DIVIDES-NOT: Traceback
// DIVIDES: error: pad-images: 2 ways already divide the 4 rows at every down-sampling

// RUN: not unityc-opt %s -p 'pad-images{rows=4}' 2>&1 | filecheck %s --check-prefix=NOGROW
// NOGROW: error: the image has 4 rows: padding to 4 would not add any

// RUN: not unityc-opt %s -p 'pad-images' 2>&1 | filecheck %s --check-prefix=NEITHER
// NEITHER: error: pad-images: give one of degree (a height split to divide) or rows (> 0)

// A plan is made of the model's ops; padding comes before planning (no output is written).
// RUN: not unityc-opt %s -p 'data-parallel{machine="cpu:2"},pad-images{degree=3}' -o %t.mlir 2>&1 | filecheck %s --check-prefix=PLANNED
// RUN: not test -e %t.mlir
// PLANNED: error: pad-images: the graph is already planned; pad the model before planning it

func.func @main() -> !pcg.tensor<f32> {
  %w = pcg.weight key "conv.weight" : !pcg.tensor<2x1x3x3xf32>
  %g = pcg.weight key "bn.weight" : !pcg.tensor<2xf32>
  %b = pcg.weight key "bn.bias" : !pcg.tensor<2xf32>
  %x = pcg.input key "images" : !pcg.tensor<2x1x4x4xf32>
  %t = pcg.input key "target" : !pcg.tensor<2x2x2x2xf32>
  %c = pcg.conv2d %x, %w stride [1, 1] padding [1, 1] dilation [1, 1] : !pcg.tensor<2x1x4x4xf32>, !pcg.tensor<2x1x3x3xf32> -> !pcg.tensor<2x2x4x4xf32>
  %n = pcg.batch_norm %c weight %g bias %b eps 1.0e-05 : !pcg.tensor<2x2x4x4xf32>, !pcg.tensor<2xf32>, !pcg.tensor<2xf32> -> !pcg.tensor<2x2x4x4xf32>
  %r = pcg.relu %n : !pcg.tensor<2x2x4x4xf32> -> !pcg.tensor<2x2x4x4xf32>
  %p = pcg.pool2d %r kind "max" kernel [2, 2] stride [2, 2] padding [0, 0] : !pcg.tensor<2x2x4x4xf32> -> !pcg.tensor<2x2x2x2xf32>
  %l = pcg.mse_loss %p, %t reduction "mean" : !pcg.tensor<2x2x2x2xf32>, !pcg.tensor<2x2x2x2xf32> -> !pcg.tensor<f32>
  func.return %l : !pcg.tensor<f32>
}
