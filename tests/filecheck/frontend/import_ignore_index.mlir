// Cross-entropy's ignore_index. pcg.cross_entropy counts every target: its
// mean divides by the row count, which stays exact when the rows are sharded
// (each task divides by the global count). Ignoring targets would need the
// global count of the kept ones, which the op does not model, so the importer
// refuses what it cannot make exact instead of changing the loss silently:
// torch's default (-100, no class) is fine while no target holds it.

// RUN: unityc-import %S/Inputs/losses.py:classifier --check | filecheck %s --check-prefix=DEFAULT
// DEFAULT: check: the imported graph matches the module

// Targets holding ignore_index (HF's padded labels): refused, naming the input,
// the value and where it is. No -o file is written.
// RUN: rm -f %t.mlir
// RUN: not unityc-import %S/Inputs/losses.py:classifier ignored=2 -o %t.mlir 2>&1 | filecheck %s --check-prefix=IGNORED
// RUN: test ! -e %t.mlir
// IGNORED-NOT: Traceback
// IGNORED:     {{^}}unityc-import: error: input 'labels' holds -100 at [4], outside the 5 classes of the cross-entropy reading it; ignored targets (ignore_index) are not supported: give every target a class
// IGNORED-NOT: Traceback

// An ignore_index that is a class: refused at the loss, with its source line.
// RUN: not unityc-import %S/Inputs/losses.py:classifier ignore_index=2 2>&1 | filecheck %s --check-prefix=CLASS
// CLASS-NOT: Traceback
// CLASS:     {{^}}unityc-import: error: module '<root>' (Classifier), {{.*}}Inputs{{/|\\}}losses.py:{{[0-9]+}}, in forward: cross-entropy ignoring class 2 (ignore_index) is not supported: targets are classes, all of them counted
// CLASS-NOT: Traceback
