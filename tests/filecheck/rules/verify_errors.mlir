// Bad input: one located line `file:line:col: error: reason`, exit status 1, no traceback,
// and no JSON file.

// RUN: not unityc-rules verify %S/Inputs/verify_syntax_error.rules 2>&1 | filecheck %s --check-prefix=SYNTAX
// SYNTAX-NOT: Traceback
// SYNTAX:     {{^}}{{.*}}verify_syntax_error.rules:3:17: error: 'reduce' is ambiguous: write pcg.reduce or parallel.reduce{{$}}
// SYNTAX-NOT: {{.}}

// RUN: rm -f %t.json
// RUN: sh -c 'unityc-rules verify "$0" --json "$1" > /dev/null 2>&1; echo "exit $?"; test -e "$1" && echo written || echo none' %S/Inputs/verify_syntax_error.rules %t.json | filecheck %s --check-prefix=STATUS
// STATUS:      {{^exit 1$}}
// STATUS-NEXT: {{^none$}}

// RUN: not unityc-rules verify %S/Inputs/does_not_exist.rules 2>&1 | filecheck %s --check-prefix=MISSING
// MISSING-NOT: Traceback
// MISSING:     error: cannot read {{.*}}does_not_exist.rules: No such file or directory

// RUN: not unityc-rules check-axioms %S/Inputs/verify_syntax_error.rules 2>&1 | filecheck %s --check-prefix=SYNTAX
// RUN: not unityc-rules format %S/Inputs/verify_syntax_error.rules 2>&1 | filecheck %s --check-prefix=SYNTAX
