// Bad input: unityc-opt and unityc-run report `file:line:col: error: reason`
// on stderr, followed by the source line and a marker under the culprit, exit
// with status 1, and print no traceback.

// RUN: not unityc-opt %S/Inputs/malformed.mlir 2>&1 | filecheck %s --check-prefix=MALFORMED
// RUN: not unityc-run %S/Inputs/malformed.mlir 2>&1 | filecheck %s --check-prefix=MALFORMED
// MALFORMED-NOT: Traceback
// MALFORMED:      {{^}}{{.*}}Inputs{{/|\\}}malformed.mlir:4:20: error: Expected ':'
// MALFORMED-NEXT: {{^}}  %r = pcg.relu %x !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// MALFORMED-NEXT: {{^                   \^+$}}
// MALFORMED-NOT: Traceback

// RUN: not unityc-opt %S/Inputs/unknown_op.mlir 2>&1 | filecheck %s --check-prefix=UNKNOWN
// UNKNOWN-NOT: Traceback
// UNKNOWN:      unknown_op.mlir:4:23: error: Operation pcg.frobnicate is not registered
// UNKNOWN-NEXT: %r = pcg.frobnicate %x : !pcg.tensor<8x16xf32> -> !pcg.tensor<8x16xf32>
// UNKNOWN-NOT: Traceback

// RUN: not unityc-opt %S/Inputs/wrong_type.mlir 2>&1 | filecheck %s --check-prefix=WRONG-TYPE
// RUN: not unityc-run %S/Inputs/wrong_type.mlir 2>&1 | filecheck %s --check-prefix=WRONG-TYPE
// WRONG-TYPE-NOT: Traceback
// WRONG-TYPE:      wrong_type.mlir:4:3: error: pcg.relu: result 0 has type !pcg.tensor<8x16xf32>, but its operands give !pcg.tensor<8x16xf32, shard [2, 1]>
// WRONG-TYPE-NEXT: %r = pcg.relu %x : !pcg.tensor<8x16xf32, shard [2, 1]> -> !pcg.tensor<8x16xf32>
// WRONG-TYPE-NEXT: {{^  \^\^$}}
// WRONG-TYPE-NOT: Traceback

// RUN: not unityc-opt %S/Inputs/impossible_degrees.mlir 2>&1 | filecheck %s --check-prefix=DEGREES
// DEGREES-NOT: Traceback
// DEGREES:      impossible_degrees.mlir:2:33: error: invalid !pcg.tensor: shard degree 3 does not divide dimension 0 of size 16
// DEGREES-NEXT: func.func @main() -> !pcg.tensor<16x32xf32, shard [3, 1]> {
// DEGREES-NOT: Traceback

// RUN: not unityc-opt %S/Inputs/wrong_return.mlir 2>&1 | filecheck %s --check-prefix=RETURN
// RETURN-NOT: Traceback
// RETURN: wrong_return.mlir:4:3: error: func.return: Expected arguments to have the same types as the function output types: expected [!pcg.tensor<8x16xf32>], got [!pcg.tensor<8x16xf32, copy 2>]
// RETURN-NOT: Traceback

// RUN: not unityc-opt %S/Inputs/undefined_value.mlir 2>&1 | filecheck %s --check-prefix=UNDEFINED
// UNDEFINED-NOT: Traceback
// UNDEFINED: undefined_value.mlir:{{[0-9]+}}:{{[0-9]+}}: error: values used but not defined: [%nope]
// UNDEFINED-NOT: Traceback

// The failure is exit status 1 (not a crash), and nothing goes to stdout.
// RUN: sh -c 'unityc-opt "$0" > "$1" 2>/dev/null; echo "exit $?"; wc -c < "$1"' %S/Inputs/wrong_type.mlir %t.stdout | filecheck %s --check-prefix=STATUS
// RUN: sh -c 'unityc-opt "$0" > "$1" 2>/dev/null; echo "exit $?"; wc -c < "$1"' %S/Inputs/malformed.mlir %t.stdout | filecheck %s --check-prefix=STATUS
// RUN: sh -c 'unityc-run "$0" > "$1" 2>/dev/null; echo "exit $?"; wc -c < "$1"' %S/Inputs/impossible_degrees.mlir %t.stdout | filecheck %s --check-prefix=STATUS
// STATUS:      {{^exit 1$}}
// STATUS-NEXT: {{^ *0$}}

// A missing file is an error too.
// RUN: not unityc-opt %S/Inputs/does_not_exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not unityc-run %S/Inputs/does_not_exist.mlir 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING-NOT: Traceback
// MISSING: error: {{.*}}does_not_exist.mlir
// MISSING-NOT: Traceback
