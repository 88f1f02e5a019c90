"""The fuzzer's long run: mutants of the examples and lit inputs through every pipeline.

    nice -n 10 python benchmarks/fuzz.py [--count 10000] [--seed 0] [--limit 10] [--save DIR]

Each mutant (token deletions, duplications and swaps, numbers set to 0, negatives, huge values,
5000 digits or nan, truncation, unclosed quotes and brackets, non-UTF-8 bytes, deep nesting,
lines dropped, repeated or exchanged, op names and values exchanged) goes through one of
`unityc-opt` (parse+verify, canonicalize, fuse-collectives, estimate, apply-rules, -t torch,
-t dot, data-parallel, --unity-search) or `unityc-run`, in-process with a time limit per input.
Prints every bad outcome (traceback, hang, internal, partial `-o` file) and the outcome table per
pipeline; the bar (issue 14): 0 hangs, 0 tracebacks, >= 99 % of errors located. Exit status 1
if any bad outcome. See `unityc/tools/fuzz.py`.
"""

from __future__ import annotations

import sys
import time

from unityc.tools import fuzz


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not any(a == "--count" or a.startswith("--count=") for a in argv):
        argv = ["--count", "10000", *argv]
    start = time.perf_counter()
    status = fuzz.main(argv)
    print(f"\nwall time: {time.perf_counter() - start:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
