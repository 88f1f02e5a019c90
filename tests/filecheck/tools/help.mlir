// Both tools answer --help with their usage, exit 0, and list what they offer.

// RUN: unityc-opt --help | filecheck %s --check-prefix=OPT
// OPT:     usage: unityc-opt
// OPT:     unityc optimizer driver (xDSL opt with the pcg and parallel dialects)
// OPT:     {{^  }}-o OUTPUT_FILE, --output-file OUTPUT_FILE
// OPT:     {{^  }}-p PASSES, --passes PASSES
// OPT:     {{^  }}--verify-diagnostics
// OPT:     {{^  }}--parsing-diagnostics
// OPT:     {{^  }}--split-input-file
// OPT:     {{^  }}--print-op-generic
// The pass list names unityc's own pass next to xDSL's (e.g. canonicalize).
// RUN: unityc-opt --help | tr -d ' \n' | filecheck %s --check-prefix=PASSES
// PASSES: Delimitedlistofpasses.Availablepassesare:{{.*}}canonicalize,{{.*}}fuse-collectives

// RUN: unityc-run --help | filecheck %s --check-prefix=RUNHELP
// RUNHELP:  usage: unityc-run [-h] [--seed SEED] [--float64] file
// RUNHELP:  Run a pcg/parallel graph in the reference interpreter
// RUNHELP:  file{{ +}}an MLIR file holding one func.func graph
// RUNHELP:  --seed SEED{{ +}}seed for inputs and weights (default 0)
// RUNHELP:  --float64{{ +}}compute in float64 instead of the IR's float types
