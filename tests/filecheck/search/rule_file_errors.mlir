// Hostile rule files get located errors (file:line:col), exit status 1 and no traceback, from
// `unityc-rules` and from the search's --rules; `unityc-rules generate` needs -o (it no longer
// writes into the installed library by default) (issue 14).

// RUN: rm -rf %t && mkdir -p %t
// RUN: python -c "open('%t/deep.rules', 'w').write('rule deep \"d\":\n    ' + 'relu(' * 250 + 'x' + ')' * 250 + ' => x\n')"
// RUN: python -c "open('%t/digits.rules', 'w').write('rule big \"b\":\n    scalar_mul[scale=' + '9' * 5000 + '](x) => x\n')"
// RUN: python -c "open('%t/latin1.rules', 'wb').write(b'rule r \"r\":\n    relu(x) => relu(x) # caf\xe9\n')"

// RUN: not unityc-rules format %t/deep.rules 2>&1 | filecheck %s --check-prefix=DEEP
// DEEP-NOT: Traceback
// DEEP: deep.rules:2:{{[0-9]+}}: error: terms nested too deeply

// RUN: not unityc-rules verify %t/digits.rules 2>&1 | filecheck %s --check-prefix=DIGITS
// DIGITS-NOT: Traceback
// DIGITS: digits.rules:2:22: error: integer too long (5000 digits; at most 18)

// RUN: python -c "open('%t/float.rules', 'w').write('rule big \"b\":\n    scalar_mul[scale=' + '9' * 5000 + '.5](x) => x\n')"
// RUN: not unityc-rules format %t/float.rules 2>&1 | filecheck %s --check-prefix=FLOAT
// FLOAT-NOT: Traceback
// FLOAT: float.rules:2:22: error: number out of range (not a finite float)

// RUN: not unityc-rules format %t/latin1.rules 2>&1 | filecheck %s --check-prefix=LATIN1
// LATIN1-NOT: Traceback
// LATIN1: latin1.rules:2:29: error: not UTF-8 text (byte 0xe9)

// RUN: not unityc-opt %examples/mlp.mlir --unity-search --machine cpu:2 --rules %t/deep.rules -o %t/plan.mlir 2>&1 | filecheck %s --check-prefix=SEARCH
// RUN: not test -e %t/plan.mlir
// SEARCH-NOT: Traceback
// SEARCH: deep.rules:2:{{[0-9]+}}: terms nested too deeply

// RUN: not unityc-rules generate --max-ops 1 2>&1 | filecheck %s --check-prefix=GENERATE
// GENERATE: error: the following arguments are required: -o/--out
