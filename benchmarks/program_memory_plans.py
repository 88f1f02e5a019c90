"""What the generated program keeps for backward, per plan kind, against the estimate (issue 38
item 5): every kind of `tests/codegen/test_saved_bytes.py` (`KINDS`) on Hugging Face Llama, GPT-2
and BERT (tiny configs, batch 4, 2 gloo ranks), fp32 and bf16-mixed, in one torchrun. Prints a
markdown table: per case and rank, the bytes `--saved-bytes` counted (the most held at once; by
dtype) and the estimate's activations of that device.

    python benchmarks/program_memory_plans.py [--models llama,gpt2,bert] [--precisions fp32,bf16-mixed]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "codegen"))

from test_saved_bytes import KINDS, case_name, measure  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama,gpt2,bert")
    parser.add_argument("--precisions", default="fp32,bf16-mixed")
    parser.add_argument("--kinds", default=",".join(KINDS))
    options = parser.parse_args()
    cases = [
        (m, p, k)
        for m in options.models.split(",")
        for p in options.precisions.split(",")
        for k in options.kinds.split(",")
    ]
    with tempfile.TemporaryDirectory() as directory:
        runs = measure(Path(directory), cases)
    print("| case | rank | program saves | by dtype | estimate | estimate / program |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for case in cases:
        name = case_name(*case)
        records = runs.measured.get(name)
        if records is None:
            print(f"| {name} | - | failed | | | |")
            continue
        for rank, record in enumerate(records):
            measured, estimated = record["peak_bytes"], runs.estimated[name].get(rank, 0.0)
            ratio = estimated / measured if measured else float("nan")
            worst = max(worst, abs(ratio - 1))
            dtypes = ", ".join(f"{k} {v}" for k, v in record["forward_by_dtype"].items())
            print(f"| {name} | {rank} | {measured} B | {dtypes} | {estimated:.0f} B | {ratio:.3f} |")
    print(f"\nworst difference: {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
