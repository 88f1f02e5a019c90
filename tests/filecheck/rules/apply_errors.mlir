// Mistakes in apply-rules' input give one line, `error: ...` or a located
// `file:line:col: ...`, exit status 1 and no traceback.

// A syntax error in the rules file points at the rule file's line and column.
// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/bad_syntax.rules"}' 2>&1 | filecheck %s --check-prefix=SYNTAX
// SYNTAX-NOT: Traceback
// SYNTAX:     {{^.*}}bad_syntax.rules:4:20: error: unexpected 'relu'; expected {{.*}}'=>'

// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/missing.rules"}' 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING: error: apply-rules: cannot read rules file '{{.*}}missing.rules': No such file or directory

// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/parallel.rules" names="relu_partition,relu_partitoin"}' 2>&1 | filecheck %s --check-prefix=NAME
// NAME: error: apply-rules: no rule named 'relu_partitoin' in {{.*}}parallel.rules (it has: relu_partition, linear_column, {{.*}})

// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/parallel.rules" names="relu_partition" params="dim=1"}' 2>&1 | filecheck %s --check-prefix=PARAM
// PARAM: error: apply-rules: no selected rule has a parameter 'dim' (their parameters: d, k)

// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/parallel.rules" names="relu_partition" params="d"}' 2>&1 | filecheck %s --check-prefix=PARAMS
// PARAMS: error: apply-rules: params must be NAME=INTEGER separated by commas, got 'd'

// RUN: not unityc-opt %s -p 'apply-rules{file="%S/Inputs/parallel.rules" degrees="2,x"}' 2>&1 | filecheck %s --check-prefix=DEGREES
// DEGREES: error: apply-rules: degrees must be positive integers separated by commas, got '2,x'
func.func @main() -> !pcg.tensor<4xf32> {
  %x = pcg.input key "x" : !pcg.tensor<4xf32>
  %r = pcg.relu %x : !pcg.tensor<4xf32> -> !pcg.tensor<4xf32>
  func.return %r : !pcg.tensor<4xf32>
}
