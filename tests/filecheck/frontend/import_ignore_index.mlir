// Cross-entropy's ignore_index: targets equal to it add nothing, and a mean divides by
// the count of the kept targets of the whole batch (pcg.cross_entropy's ignore_index; a
// row-sharded task divides by that global count).

// An ignore_index the example targets hold (HF's -100-padded labels) is kept, and the
// imported graph matches the module on outputs, loss and every gradient.
// RUN: unityc-import %S/Inputs/losses.py:classifier ignored=2 --check -o %t.mlir | filecheck %s --check-prefix=IGNORED
// RUN: filecheck %s --check-prefix=IGNORED-IR < %t.mlir
// IGNORED: check: the imported graph matches the module
// IGNORED-IR: pcg.cross_entropy %{{.*}}, %labels reduction "mean" ignore_index -100 : !pcg.tensor<6x5xf32>, !pcg.tensor<6xi64> -> !pcg.tensor<f32>

// An ignore_index that is a class is always kept (torch ignores that class).
// RUN: unityc-import %S/Inputs/losses.py:classifier ignore_index=2 | filecheck %s --check-prefix=CLASS-IR
// CLASS-IR: pcg.cross_entropy %{{.*}}, %labels reduction "mean" ignore_index 2 :

// torch's default -100 on targets that are all classes: dropped (the loss stays
// pipelineable); the op then requires classes, so a later batch holding -100 stops the
// run with an error instead of changing the mean.
// RUN: unityc-import %S/Inputs/losses.py:classifier | filecheck %s --check-prefix=DEFAULT
// DEFAULT: pcg.cross_entropy %{{.*}}, %labels reduction "mean" : !pcg.tensor<6x5xf32>

// Labels padded with ignore_index by F.pad (aten.constant_pad_nd: a concat with a constant
// block), then shifted: the targets are computed, so the declared ignore_index stays.
// RUN: unityc-import %S/Inputs/losses.py:shifted_tokens --check -o %t4.mlir | filecheck %s --check-prefix=SHIFTED
// RUN: filecheck %s --check-prefix=SHIFTED-IR < %t4.mlir
// SHIFTED: check: the imported graph matches the module
// SHIFTED-IR:      %[[PAD:.*]] = pcg.constant value dense<-100> : tensor<2x1xi64> : !pcg.tensor<2x1xi64>
// SHIFTED-IR-NEXT: %[[CAT:.*]] = pcg.concat %labels, %[[PAD]] dim 1 : !pcg.tensor<2x5xi64>, !pcg.tensor<2x1xi64> -> !pcg.tensor<2x6xi64>
// SHIFTED-IR:      pcg.cross_entropy %{{.*}}, %{{.*}} reduction "mean" ignore_index -100 : !pcg.tensor<10x7xf32>, !pcg.tensor<10xi64> -> !pcg.tensor<f32>

// A target outside the classes that is not the ignore_index: refused, naming the input.
// RUN: rm -f %t5.mlir
// RUN: not unityc-import %S/Inputs/losses.py:classifier ignored=2 label=-7 -o %t5.mlir 2>&1 | filecheck %s --check-prefix=OUTSIDE
// RUN: test ! -e %t5.mlir
// OUTSIDE-NOT: Traceback
// OUTSIDE: {{^}}unityc-import: error: input 'labels' holds -7 at [4], outside the 5 classes of the cross-entropy reading it and not its ignore_index -100
