"""The real models of issue 26 through the whole chain, as a user runs it (on demand, never in
the test suite):

    .venv/bin/python benchmarks/real_models.py                     # every row of ROWS
    .venv/bin/python benchmarks/real_models.py --only qwen3 phi3   # rows whose name starts so

For every row: `unityc-import MODEL --check` (outputs, loss and every gradient against the
module), a plan on cpu:2 (`--unity-search`, or a baseline pass such as Megatron), `-t torch`,
and `torchrun --nproc_per_node 2 train.py --check --steps 2` (loss, outputs, gradients and
updated weights against single-device PyTorch). Printed as a Markdown table: the fused
attention ops in the imported graph, the plan's parallel ops, the search's wall time, and each
stage's verdict. Wall times are on whatever machine runs it (the 2-core CI box is shared).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
VISION = ROOT / "tests" / "codegen" / "vision_models.py"

# (name, model, batch, settings, plan: "search" or a unityc-opt pass)
ROWS = [
    ("roberta-search", "hf:roberta", 64, (), "search"),
    ("roberta-megatron", "hf:roberta", 16, (), "megatron"),
    ("phi3-search", "hf:Phi3Config", 64, ("pad=0",), "search"),
    ("phi3-megatron", "hf:Phi3Config", 16, ("pad=0",), "megatron"),
    ("opt-megatron", "hf:OPTConfig", 16, (), "megatron"),
    ("qwen3-search", "hf:Qwen3Config", 64, (), "search"),
    ("qwen3-megatron", "hf:Qwen3Config", 16, (), "megatron"),
    ("gemma2-megatron", "hf:Gemma2Config", 16, (), "megatron"),
    ("t5-search", "hf:T5Config", 64, (), "search"),
    ("t5-data", "hf:T5Config", 16, (), "data-parallel"),
    ("t5-megatron", "hf:T5Config", 16, (), "megatron"),
    ("convnext-search", f"{VISION}:convnext", 32, (), "search"),
    ("convnext-data", f"{VISION}:convnext", 8, (), "data-parallel"),
    ("mobilenet-search", f"{VISION}:mobilenet", 32, (), "search"),
    ("mobilenet-data", f"{VISION}:mobilenet", 8, (), "data-parallel"),
    ("conv1d-search", f"{VISION}:conv1d", 64, (), "search"),
    ("conv1d-data", f"{VISION}:conv1d", 8, (), "data-parallel"),
]


def run(args: list[str], timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:120] if lines else ""


def one(row: tuple, directory: Path) -> dict[str, str]:
    name, model, batch, settings, how = row
    out: dict[str, str] = {"name": name, "plan": how}
    model_file, plan, program = (
        directory / f"{name}.mlir",
        directory / f"{name}-plan.mlir",
        directory / f"{name}.py",
    )
    done = run(
        [
            str(BIN / "unityc-import"),
            model,
            *settings,
            "--batch",
            str(batch),
            "--check",
            "-o",
            str(model_file),
        ]
    )
    out["import"] = "passed" if done.returncode == 0 else f"FAILED: {last_line(done.stderr)}"
    if done.returncode:
        return out
    out["attention"] = str(model_file.read_text().count("pcg.attention"))
    flags = (
        ["--unity-search", "--machine", "cpu:2"] if how == "search" else ["-p", f'{how}{{machine="cpu:2"}}']
    )
    start = time.perf_counter()
    done = run([str(BIN / "unityc-opt"), str(model_file), *flags, "-o", str(plan)])
    out["search_s"] = f"{time.perf_counter() - start:.1f}" if how == "search" else "-"
    if done.returncode:
        out["plan"] = f"FAILED: {last_line(done.stderr)}"
        return out
    text = plan.read_text()
    out["parallel_ops"] = str(len(re.findall(r"= parallel\.", text)))
    summary = re.search(r"^plan \((.*)\): iteration", done.stderr, re.M) or re.search(
        r"^\S+ \((.*)\) on cpu:2", done.stderr, re.M
    )
    out["plan"] = f"{how}: {summary.group(1)}" if summary else how
    done = run([str(BIN / "unityc-opt"), str(plan), "-t", "torch", "-o", str(program)])
    if done.returncode:
        out["torchrun"] = f"codegen FAILED: {last_line(done.stderr)}"
        return out
    done = run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc_per_node",
            "2",
            str(program),
            "--check",
            "--steps",
            "2",
        ]
    )
    passed = re.search(r"check passed: .*", done.stdout + done.stderr)
    out["torchrun"] = (
        passed.group(0) if done.returncode == 0 and passed else f"FAILED: {last_line(done.stderr)}"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="rows whose name starts with one of these")
    args = parser.parse_args()
    rows = [r for r in ROWS if not args.only or r[0].startswith(tuple(args.only))]
    header = [
        "row",
        "import --check",
        "fused attention",
        "plan (cpu:2)",
        "search s",
        "parallel ops",
        "torchrun --check",
    ]
    print("| " + " | ".join(header) + " |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            r = one(row, Path(tmp))
            cells = [
                r.get(k, "-")
                for k in ("name", "import", "attention", "plan", "search_s", "parallel_ops", "torchrun")
            ]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
