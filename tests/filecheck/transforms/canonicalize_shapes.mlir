// RUN: unityc-opt %s -p canonicalize | filecheck %s

// Canonicalization of the pcg shape ops, which cleans up the plumbing
// torch.export leaves around the coarse ops (see unityc/dialects/
// canonicalization/pcg.py):
//
//   FoldReshape           reshape(x) to x's own type = x
//                         reshape(reshape(x)) = reshape(x)
//   FoldTranspose         transpose(x, identity) = x
//                         transpose(transpose(x, p), q) = transpose(x, p∘q)
//   UnflattenBatchMatmul  bmm(reshape(a, [B·H, m, k]), reshape(b, [B·H, k, n]))
//                           = reshape(bmm(a, b), [B·H, m, n])   (a: [B, H, m, k])
//
// A rewrite keeps the result type (degrees included) and the machine view of
// the op it replaces; ops left without uses are removed.

//===----------------------------------------------------------------------===//
// Reshapes.
//===----------------------------------------------------------------------===//

// Two reshapes in a row are one reshape from the first input.
// CHECK-LABEL: func.func @reshape_of_reshape()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x3x4xf32>
// CHECK-NEXT:    %b = pcg.reshape %x shape [4, 6] : !pcg.tensor<2x3x4xf32> -> !pcg.tensor<4x6xf32>
// CHECK-NEXT:    func.return %b : !pcg.tensor<4x6xf32>
// CHECK-NEXT:  }
func.func @reshape_of_reshape() -> !pcg.tensor<4x6xf32> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x4xf32>
  %a = pcg.reshape %x shape [6, 4] : !pcg.tensor<2x3x4xf32> -> !pcg.tensor<6x4xf32>
  %b = pcg.reshape %a shape [4, 6] : !pcg.tensor<6x4xf32> -> !pcg.tensor<4x6xf32>
  func.return %b : !pcg.tensor<4x6xf32>
}

// A reshape to the input's own shape (and degrees) vanishes.
// CHECK-LABEL: func.func @identity_reshape()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    func.return %x : !pcg.tensor<8x16xf32>
// CHECK-NEXT:  }
func.func @identity_reshape() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %a = pcg.reshape %x shape [8, 16] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
  func.return %a : !pcg.tensor<8x16xf32>
}

// Flattening a batch-sharded tensor and reshaping it back: both vanish.
// CHECK-LABEL: func.func @reshape_and_back_sharded()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %x : !pcg.tensor<8x16xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @reshape_and_back_sharded() -> !pcg.tensor<8x16xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32, shard [2, 1]>
  %a = pcg.reshape %x shape [128] : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<128xf32, shard [2]>
  %b = pcg.reshape %a shape [8, 16] : !pcg.tensor<128xf32, shard [2]> -> !pcg.tensor<8x16xf32, shard [2, 1]>
  func.return %b : !pcg.tensor<8x16xf32, shard [2, 1]>
}

// Sharded reshapes merge when the merged reshape gives the same degrees (the
// shard of dim 0 leads its group in both); the outer op's view is kept.
// CHECK-LABEL: func.func @sharded_reshapes_merge()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<6x4xf32, shard [2, 1]>
// CHECK-NEXT:    %b = pcg.reshape %x shape [2, 12] {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<6x4xf32, shard [2, 1]> -> !pcg.tensor<2x12xf32, shard [2, 1]>
// CHECK-NEXT:    func.return %b : !pcg.tensor<2x12xf32, shard [2, 1]>
// CHECK-NEXT:  }
func.func @sharded_reshapes_merge() -> !pcg.tensor<2x12xf32, shard [2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<6x4xf32, shard [2, 1]>
  %a = pcg.reshape %x shape [2, 3, 4] : !pcg.tensor<6x4xf32, shard [2, 1]> -> !pcg.tensor<2x3x4xf32, shard [2, 1, 1]>
  %b = pcg.reshape %a shape [2, 12] {view = #pcg.view<start 0, [intra 1]>} : !pcg.tensor<2x3x4xf32, shard [2, 1, 1]> -> !pcg.tensor<2x12xf32, shard [2, 1]>
  func.return %b : !pcg.tensor<2x12xf32, shard [2, 1]>
}

// When the inner reshape has another use, the outer one still reads the
// original input, and the inner one stays for its other user.
// CHECK-LABEL: func.func @reshape_with_two_uses()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x3x4xf32>
// CHECK-NEXT:    %a = pcg.reshape %x shape [6, 4] : !pcg.tensor<2x3x4xf32> -> !pcg.tensor<6x4xf32>
// CHECK-NEXT:    %b = pcg.reshape %x shape [4, 6] : !pcg.tensor<2x3x4xf32> -> !pcg.tensor<4x6xf32>
// CHECK-NEXT:    %r = pcg.relu %a : !pcg.tensor<6x4xf32> -> !pcg.tensor<6x4xf32>
// CHECK-NEXT:    func.return %b, %r : !pcg.tensor<4x6xf32>, !pcg.tensor<6x4xf32>
// CHECK-NEXT:  }
func.func @reshape_with_two_uses() -> (!pcg.tensor<4x6xf32>, !pcg.tensor<6x4xf32>) {
  %x = pcg.input key "x" : !pcg.tensor<2x3x4xf32>
  %a = pcg.reshape %x shape [6, 4] : !pcg.tensor<2x3x4xf32> -> !pcg.tensor<6x4xf32>
  %b = pcg.reshape %a shape [4, 6] : !pcg.tensor<6x4xf32> -> !pcg.tensor<4x6xf32>
  %r = pcg.relu %a : !pcg.tensor<6x4xf32> -> !pcg.tensor<6x4xf32>
  func.return %b, %r : !pcg.tensor<4x6xf32>, !pcg.tensor<6x4xf32>
}

//===----------------------------------------------------------------------===//
// Transposes.
//===----------------------------------------------------------------------===//

// The identity permutation vanishes.
// CHECK-LABEL: func.func @identity_transpose()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
// CHECK-NEXT:    func.return %x : !pcg.tensor<8x16xf32>
// CHECK-NEXT:  }
func.func @identity_transpose() -> !pcg.tensor<8x16xf32> {
  %x = pcg.input key "x" : !pcg.tensor<8x16xf32>
  %a = pcg.transpose %x perm [0, 1] : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
  func.return %a : !pcg.tensor<8x16xf32>
}

// Two transposes compose: result dim i of the pair is input dim p[q[i]].
// CHECK-LABEL: func.func @transpose_of_transpose()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<3x4x5xf32>
// CHECK-NEXT:    %b = pcg.transpose %x perm [2, 0, 1] : !pcg.tensor<3x4x5xf32> -> !pcg.tensor<5x3x4xf32>
// CHECK-NEXT:    func.return %b : !pcg.tensor<5x3x4xf32>
// CHECK-NEXT:  }
func.func @transpose_of_transpose() -> !pcg.tensor<5x3x4xf32> {
  %x = pcg.input key "x" : !pcg.tensor<3x4x5xf32>
  %a = pcg.transpose %x perm [1, 0, 2] : !pcg.tensor<3x4x5xf32> -> !pcg.tensor<4x3x5xf32>
  %b = pcg.transpose %a perm [2, 1, 0] : !pcg.tensor<4x3x5xf32> -> !pcg.tensor<5x3x4xf32>
  func.return %b : !pcg.tensor<5x3x4xf32>
}

// Shards move with their dims, so a sharded transpose pair composes too; the
// outer op's view is kept.
// CHECK-LABEL: func.func @sharded_transposes_compose()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x3x4xf32, shard [2, 1, 2]>
// CHECK-NEXT:    %b = pcg.transpose %x perm [2, 0, 1] {view = #pcg.view<start 0, [intra 1, intra 2]>} : !pcg.tensor<2x3x4xf32, shard [2, 1, 2]> -> !pcg.tensor<4x2x3xf32, shard [2, 2, 1]>
// CHECK-NEXT:    func.return %b : !pcg.tensor<4x2x3xf32, shard [2, 2, 1]>
// CHECK-NEXT:  }
func.func @sharded_transposes_compose() -> !pcg.tensor<4x2x3xf32, shard [2, 2, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x4xf32, shard [2, 1, 2]>
  %a = pcg.transpose %x perm [0, 2, 1] : !pcg.tensor<2x3x4xf32, shard [2, 1, 2]> -> !pcg.tensor<2x4x3xf32, shard [2, 2, 1]>
  %b = pcg.transpose %a perm [1, 0, 2] {view = #pcg.view<start 0, [intra 1, intra 2]>} : !pcg.tensor<2x4x3xf32, shard [2, 2, 1]> -> !pcg.tensor<4x2x3xf32, shard [2, 2, 1]>
  func.return %b : !pcg.tensor<4x2x3xf32, shard [2, 2, 1]>
}

// A transpose and its inverse (the heads permutation of attention, twice)
// vanish, here on a batch-sharded tensor.
// CHECK-LABEL: func.func @transpose_and_inverse()
// CHECK-NEXT:    %x = pcg.input key "x" : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]>
// CHECK-NEXT:    func.return %x : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]>
// CHECK-NEXT:  }
func.func @transpose_and_inverse() -> !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]> {
  %x = pcg.input key "x" : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]>
  %a = pcg.transpose %x perm [0, 2, 1, 3] : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<2x4x3x5xf32, shard [2, 1, 1, 1]>
  %b = pcg.transpose %a perm [0, 2, 1, 3] : !pcg.tensor<2x4x3x5xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]>
  func.return %b : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]>
}

//===----------------------------------------------------------------------===//
// UnflattenBatchMatmul: torch.matmul on [B, H, m, k] x [B, H, k, n] exports as
// a bmm of [B·H, ...] reshapes. The bmm moves onto the 4-D operands, so the
// [B, H] dims survive (head parallelism needs H).
//===----------------------------------------------------------------------===//

// The flattened result is now a reshape of the 4-D product.
// CHECK-LABEL: func.func @unflatten_batch_matmul()
// CHECK-NEXT:    %a = pcg.input key "a" : !pcg.tensor<2x3x4x5xf32>
// CHECK-NEXT:    %b = pcg.input key "b" : !pcg.tensor<2x3x5x6xf32>
// CHECK-NEXT:    %c = pcg.batch_matmul %a, %b : !pcg.tensor<2x3x4x5xf32>, !pcg.tensor<2x3x5x6xf32> -> !pcg.tensor<2x3x4x6xf32>
// CHECK-NEXT:    %c_1 = pcg.reshape %c shape [6, 4, 6] : !pcg.tensor<2x3x4x6xf32> -> !pcg.tensor<6x4x6xf32>
// CHECK-NEXT:    func.return %c_1 : !pcg.tensor<6x4x6xf32>
// CHECK-NEXT:  }
func.func @unflatten_batch_matmul() -> !pcg.tensor<6x4x6xf32> {
  %a = pcg.input key "a" : !pcg.tensor<2x3x4x5xf32>
  %b = pcg.input key "b" : !pcg.tensor<2x3x5x6xf32>
  %fa = pcg.reshape %a shape [6, 4, 5] : !pcg.tensor<2x3x4x5xf32> -> !pcg.tensor<6x4x5xf32>
  %fb = pcg.reshape %b shape [6, 5, 6] : !pcg.tensor<2x3x5x6xf32> -> !pcg.tensor<6x5x6xf32>
  %c = pcg.batch_matmul %fa, %fb : !pcg.tensor<6x4x5xf32>, !pcg.tensor<6x5x6xf32> -> !pcg.tensor<6x4x6xf32>
  func.return %c : !pcg.tensor<6x4x6xf32>
}

// As exported, the product is reshaped back to 4-D: with FoldReshape nothing
// but the 4-D batch_matmul is left.
// CHECK-LABEL: func.func @unflatten_batch_matmul_4d()
// CHECK-NEXT:    %a = pcg.input key "a" : !pcg.tensor<2x3x4x5xf32>
// CHECK-NEXT:    %b = pcg.input key "b" : !pcg.tensor<2x3x5x6xf32>
// CHECK-NEXT:    %c = pcg.batch_matmul %a, %b : !pcg.tensor<2x3x4x5xf32>, !pcg.tensor<2x3x5x6xf32> -> !pcg.tensor<2x3x4x6xf32>
// CHECK-NEXT:    func.return %c : !pcg.tensor<2x3x4x6xf32>
// CHECK-NEXT:  }
func.func @unflatten_batch_matmul_4d() -> !pcg.tensor<2x3x4x6xf32> {
  %a = pcg.input key "a" : !pcg.tensor<2x3x4x5xf32>
  %b = pcg.input key "b" : !pcg.tensor<2x3x5x6xf32>
  %fa = pcg.reshape %a shape [6, 4, 5] : !pcg.tensor<2x3x4x5xf32> -> !pcg.tensor<6x4x5xf32>
  %fb = pcg.reshape %b shape [6, 5, 6] : !pcg.tensor<2x3x5x6xf32> -> !pcg.tensor<6x5x6xf32>
  %c = pcg.batch_matmul %fa, %fb : !pcg.tensor<6x4x5xf32>, !pcg.tensor<6x5x6xf32> -> !pcg.tensor<6x4x6xf32>
  %d = pcg.reshape %c shape [2, 3, 4, 6] : !pcg.tensor<6x4x6xf32> -> !pcg.tensor<2x3x4x6xf32>
  func.return %d : !pcg.tensor<2x3x4x6xf32>
}

// NOT rewritten: sharded operands (the rewrite only applies to unparallelized
// graphs, where it cannot change which task holds which piece).
// CHECK-LABEL: func.func @sharded_batch_matmul_stays()
// CHECK-NEXT:    %a = pcg.input key "a" : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]>
// CHECK-NEXT:    %b = pcg.input key "b" : !pcg.tensor<2x3x5x6xf32, shard [2, 1, 1, 1]>
// CHECK-NEXT:    %fa = pcg.reshape %a shape [6, 4, 5] : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<6x4x5xf32, shard [2, 1, 1]>
// CHECK-NEXT:    %fb = pcg.reshape %b shape [6, 5, 6] : !pcg.tensor<2x3x5x6xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<6x5x6xf32, shard [2, 1, 1]>
// CHECK-NEXT:    %c = pcg.batch_matmul %fa, %fb : !pcg.tensor<6x4x5xf32, shard [2, 1, 1]>, !pcg.tensor<6x5x6xf32, shard [2, 1, 1]> -> !pcg.tensor<6x4x6xf32, shard [2, 1, 1]>
// CHECK-NEXT:    func.return %c : !pcg.tensor<6x4x6xf32, shard [2, 1, 1]>
// CHECK-NEXT:  }
func.func @sharded_batch_matmul_stays() -> !pcg.tensor<6x4x6xf32, shard [2, 1, 1]> {
  %a = pcg.input key "a" : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]>
  %b = pcg.input key "b" : !pcg.tensor<2x3x5x6xf32, shard [2, 1, 1, 1]>
  %fa = pcg.reshape %a shape [6, 4, 5] : !pcg.tensor<2x3x4x5xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<6x4x5xf32, shard [2, 1, 1]>
  %fb = pcg.reshape %b shape [6, 5, 6] : !pcg.tensor<2x3x5x6xf32, shard [2, 1, 1, 1]> -> !pcg.tensor<6x5x6xf32, shard [2, 1, 1]>
  %c = pcg.batch_matmul %fa, %fb : !pcg.tensor<6x4x5xf32, shard [2, 1, 1]>, !pcg.tensor<6x5x6xf32, shard [2, 1, 1]> -> !pcg.tensor<6x4x6xf32, shard [2, 1, 1]>
  func.return %c : !pcg.tensor<6x4x6xf32, shard [2, 1, 1]>
}

// NOT rewritten: the operands were flattened from different batch dims
// ([2, 3] and [3, 2]), so there is no common 4-D product.
// CHECK-LABEL: func.func @different_batch_dims_stay()
// CHECK-NEXT:    %a = pcg.input key "a" : !pcg.tensor<2x3x4x5xf32>
// CHECK-NEXT:    %b = pcg.input key "b" : !pcg.tensor<3x2x5x6xf32>
// CHECK-NEXT:    %fa = pcg.reshape %a shape [6, 4, 5] : !pcg.tensor<2x3x4x5xf32> -> !pcg.tensor<6x4x5xf32>
// CHECK-NEXT:    %fb = pcg.reshape %b shape [6, 5, 6] : !pcg.tensor<3x2x5x6xf32> -> !pcg.tensor<6x5x6xf32>
// CHECK-NEXT:    %c = pcg.batch_matmul %fa, %fb : !pcg.tensor<6x4x5xf32>, !pcg.tensor<6x5x6xf32> -> !pcg.tensor<6x4x6xf32>
// CHECK-NEXT:    func.return %c : !pcg.tensor<6x4x6xf32>
// CHECK-NEXT:  }
func.func @different_batch_dims_stay() -> !pcg.tensor<6x4x6xf32> {
  %a = pcg.input key "a" : !pcg.tensor<2x3x4x5xf32>
  %b = pcg.input key "b" : !pcg.tensor<3x2x5x6xf32>
  %fa = pcg.reshape %a shape [6, 4, 5] : !pcg.tensor<2x3x4x5xf32> -> !pcg.tensor<6x4x5xf32>
  %fb = pcg.reshape %b shape [6, 5, 6] : !pcg.tensor<3x2x5x6xf32> -> !pcg.tensor<6x5x6xf32>
  %c = pcg.batch_matmul %fa, %fb : !pcg.tensor<6x4x5xf32>, !pcg.tensor<6x5x6xf32> -> !pcg.tensor<6x4x6xf32>
  func.return %c : !pcg.tensor<6x4x6xf32>
}
