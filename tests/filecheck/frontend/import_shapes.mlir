// unityc-import on shape ops (factories of Inputs/ops.py): views and
// permutations, concatenation and splitting, slicing and constant-index
// gathers. A PCG has few shape ops (reshape, transpose, concat, split,
// gather); everything else must become one of them or vanish.

//===----------------------------------------------------------------------===//
// view, reshape, flatten, unsqueeze and squeeze are all pcg.reshape; permute
// and transpose are pcg.transpose; clone and contiguous vanish. Consecutive
// reshapes merge (here transpose -> unsqueeze -> flatten -> squeeze is one
// reshape to [2, 60]).
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:shapes | filecheck %s --check-prefix=SHAPES
// SHAPES:      %x = pcg.input key "x" : !pcg.tensor<6x20xf32>
// SHAPES:      %view = pcg.reshape %x shape [2, 3, 4, 5] : !pcg.tensor<6x20xf32> -> !pcg.tensor<2x3x4x5xf32>
// SHAPES-NEXT: %permute = pcg.transpose %view perm [0, 2, 1, 3] : !pcg.tensor<2x3x4x5xf32> -> !pcg.tensor<2x4x3x5xf32>
// SHAPES-NEXT: %view_1 = pcg.reshape %permute shape [2, 4, 15] : !pcg.tensor<2x4x3x5xf32> -> !pcg.tensor<2x4x15xf32>
// SHAPES-NEXT: %permute_1 = pcg.transpose %view_1 perm [0, 2, 1] : !pcg.tensor<2x4x15xf32> -> !pcg.tensor<2x15x4xf32>
// SHAPES-NEXT: %squeeze = pcg.reshape %permute_1 shape [2, 60] : !pcg.tensor<2x15x4xf32> -> !pcg.tensor<2x60xf32>
// SHAPES-NEXT: %mse_loss = pcg.mse_loss %squeeze, %target

//===----------------------------------------------------------------------===//
// Plumbing that cancels out leaves nothing: a view and a reshape back, two
// transposes that undo each other, unsqueeze then squeeze, contiguous.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:plumbing | filecheck %s --check-prefix=PLUMBING
// PLUMBING-NOT:  pcg.reshape
// PLUMBING-NOT:  pcg.transpose
// PLUMBING:      func.func @main() -> (!pcg.tensor<f32>, !pcg.tensor<4x8xf32>) {
// PLUMBING-NEXT:   %x = pcg.input key "x" : !pcg.tensor<4x8xf32>
// PLUMBING-NEXT:   %target = pcg.input key "target" : !pcg.tensor<4x8xf32>
// PLUMBING-NEXT:   %relu = pcg.relu %x : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x8xf32>
// PLUMBING-NEXT:   %mse_loss = pcg.mse_loss %relu, %target
// PLUMBING-NEXT:   func.return %mse_loss, %relu : !pcg.tensor<f32>, !pcg.tensor<4x8xf32>
// PLUMBING-NEXT: }

//===----------------------------------------------------------------------===//
// torch.cat is pcg.concat (a negative dim is normalized). torch.split with
// sizes, torch.chunk, and split with an uneven size (3 + 1 rows) are all
// pcg.split with explicit sizes, one result per piece.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:cat_split | filecheck %s --check-prefix=CAT
// CAT:      %cat = pcg.concat %x, %y dim 1 : !pcg.tensor<4x3xf32>, !pcg.tensor<4x5xf32> -> !pcg.tensor<4x8xf32>
// CAT-NEXT: %split_with_sizes, %split_with_sizes_1, %split_with_sizes_2 = pcg.split %cat dim 1 sizes [2, 2, 4] : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x2xf32>, !pcg.tensor<4x2xf32>, !pcg.tensor<4x4xf32>
// CAT-NEXT: %split_with_sizes_3, %split_with_sizes_4 = pcg.split %cat dim 1 sizes [4, 4] : !pcg.tensor<4x8xf32> -> !pcg.tensor<4x4xf32>, !pcg.tensor<4x4xf32>
// CAT-NEXT: %split_with_sizes_5, %split_with_sizes_6 = pcg.split %cat dim 0 sizes [3, 1] : !pcg.tensor<4x8xf32> -> !pcg.tensor<3x8xf32>, !pcg.tensor<1x8xf32>
// CAT-NEXT: %mul = pcg.mul %split_with_sizes, %split_with_sizes_1
// CAT-NEXT: %cat_1 = pcg.concat %mul, %split_with_sizes_1, %split_with_sizes_4 dim 1 : !pcg.tensor<4x2xf32>, !pcg.tensor<4x2xf32>, !pcg.tensor<4x4xf32> -> !pcg.tensor<4x8xf32>
// CAT-NEXT: %cat_2 = pcg.concat %split_with_sizes_3, %split_with_sizes_2 dim 1 : !pcg.tensor<4x4xf32>, !pcg.tensor<4x4xf32> -> !pcg.tensor<4x8xf32>

//===----------------------------------------------------------------------===//
// Slicing. A slice is the middle (or first, or last) result of a pcg.split
// along its dim; `x[:, 0]` selects a slice of size 1 and reshapes the dim
// away; a slice of the whole dim is no op. Each slice makes its own split.
// --check compares the interpreter's outputs with the module's.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:slicing --check -o %t.slicing.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=SLICING < %t.slicing.mlir
// MATCHES: check: the imported graph matches the module
// SLICING:      %select, %select_1 = pcg.split %x dim 1 sizes [1, 5] : !pcg.tensor<4x6x8xf32> -> !pcg.tensor<4x1x8xf32>, !pcg.tensor<4x5x8xf32>
// SLICING-NEXT: %select_2 = pcg.reshape %select shape [4, 8] : !pcg.tensor<4x1x8xf32> -> !pcg.tensor<4x8xf32>
// SLICING-NEXT: %slice, %slice_1, %slice_2 = pcg.split %x dim 1 sizes [2, 3, 1] : !pcg.tensor<4x6x8xf32> -> !pcg.tensor<4x2x8xf32>, !pcg.tensor<4x3x8xf32>, !pcg.tensor<4x1x8xf32>
// SLICING-NEXT: %sum = pcg.reduce %slice_1 kind "sum" dims [1] : !pcg.tensor<4x3x8xf32> -> !pcg.tensor<4x8xf32>
// SLICING-NEXT: %slice_3, %slice_4 = pcg.split %x dim 2 sizes [5, 3] : !pcg.tensor<4x6x8xf32> -> !pcg.tensor<4x6x5xf32>, !pcg.tensor<4x6x3xf32>
// SLICING-NEXT: %sum_1 = pcg.reduce %slice_4 kind "sum" dims [2] keepdim : !pcg.tensor<4x6x3xf32> -> !pcg.tensor<4x6x1xf32>
// SLICING-NEXT: %add = pcg.add %select_2, %sum
// SLICING-NEXT: %select_3, %select_4, %select_5 = pcg.split %sum_1 dim 1 sizes [1, 1, 4] : !pcg.tensor<4x6x1xf32> -> !pcg.tensor<4x1x1xf32>, !pcg.tensor<4x1x1xf32>, !pcg.tensor<4x4x1xf32>
// SLICING-NEXT: %select_6 = pcg.reshape %select_4 shape [4, 1] : !pcg.tensor<4x1x1xf32> -> !pcg.tensor<4x1xf32>
// SLICING-NEXT: %add_1 = pcg.add %add, %select_6 : !pcg.tensor<4x8xf32>, !pcg.tensor<4x1xf32> -> !pcg.tensor<4x8xf32>
// SLICING-NEXT: %select_7, %select_8 = pcg.split %x dim 1 sizes [5, 1] : !pcg.tensor<4x6x8xf32> -> !pcg.tensor<4x5x8xf32>, !pcg.tensor<4x1x8xf32>
// SLICING-NEXT: %select_9 = pcg.reshape %select_8 shape [4, 8] : !pcg.tensor<4x1x8xf32> -> !pcg.tensor<4x8xf32>
// SLICING-NEXT: %add_2 = pcg.add %add_1, %select_9
// SLICING-NEXT: %mse_loss = pcg.mse_loss %add_2, %target

//===----------------------------------------------------------------------===//
// Advanced indexing with constant index buffers, `x[:, li, lj]` (DLRM's
// pairwise interaction): the indexed dims are flattened by a reshape and the
// pairs (li * 4 + lj, here the strict lower triangle of 4x4) become the fixed
// indices of a pcg.gather. The index buffers leave no pcg.constant behind.
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:gather --check -o %t.gather.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=GATHER < %t.gather.mlir
// GATHER:      %x = pcg.input key "x" : !pcg.tensor<2x4x4xf32>
// GATHER-NOT:  pcg.constant
// GATHER:      %index = pcg.reshape %x shape [2, 16] : !pcg.tensor<2x4x4xf32> -> !pcg.tensor<2x16xf32>
// GATHER-NEXT: %index_1 = pcg.gather %index dim 1 indices [4, 8, 9, 12, 13, 14] : !pcg.tensor<2x16xf32> -> !pcg.tensor<2x6xf32>
// GATHER-NEXT: %mse_loss = pcg.mse_loss %index_1, %target
// GATHER-NOT:  pcg.constant

//===----------------------------------------------------------------------===//
// Tensor.unfold (a strided view, its windows overlapping here): a pcg.gather of
// each window's elements along the dim, reshaped to [windows, size].
//===----------------------------------------------------------------------===//

// RUN: unityc-import %S/Inputs/ops.py:unfold --check -o %t.unfold.mlir | filecheck %s --check-prefix=MATCHES
// RUN: filecheck %s --check-prefix=UNFOLD < %t.unfold.mlir
// UNFOLD:      %unfold = pcg.gather %x dim 1 indices [0, 1, 2, 2, 3, 4] : !pcg.tensor<2x5xf32> -> !pcg.tensor<2x6xf32>
// UNFOLD-NEXT: %unfold_1 = pcg.reshape %unfold shape [2, 2, 3] : !pcg.tensor<2x6xf32> -> !pcg.tensor<2x2x3xf32>
