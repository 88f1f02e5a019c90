// RUN: not unityc-opt %s 2>&1 | filecheck %s
// RUN: sed -e 's/"eJ[^"]*"/"not base64!"/' %s | not unityc-opt 2>&1 | filecheck %s --check-prefix=BASE64
// RUN: sed -e 's/tensor<2xf32> :/tensor<100000x100000xf32> :/' %s | not unityc-opt 2>&1 | filecheck %s --check-prefix=HUGE

// A packed literal (`zlib<"..."> : type`) that does not decode to exactly its type's bytes is a
// located error; its element count is checked before anything is decompressed.

%c = pcg.constant value zlib<"eJzLSM3JyQcABiwCFQ=="> : tensor<2xf32> : !pcg.tensor<2xf32>
// CHECK: constant_packed_invalid.mlir:[[# @LINE - 1]]:29: error: packed literal of tensor<2xf32>: the data does not hold exactly 8 bytes
// BASE64: error: packed literal of tensor<2xf32>: not base64 of zlib data
// HUGE: error: a dense literal of 10000000000 elements is too large (at most 67108864)
