"""The real models of issue 26 through the whole chain, as a user runs it (on demand, never in
the test suite):

    .venv/bin/python benchmarks/real_models.py                     # every row of ROWS
    .venv/bin/python benchmarks/real_models.py --only qwen3 phi3   # rows whose name starts so
    .venv/bin/python benchmarks/real_models.py --model hf:OPTConfig --plan 'zero{stage=3}' \\
        --ranks 4 --batch 16                                       # one row of your own

For every row: `unityc-import MODEL --check` (outputs, loss and every gradient against the
module), a plan on cpu:N (`--unity-search --machine cpu:N`, or a unityc-opt pass such as
`megatron`, `zero{stage=3}` or `gpipe{stages=2 microbatches=2 schedule="1f1b"}`, its machine
set to cpu:N), `-t torch`, and `torchrun --nproc_per_node N train.py --check --steps 2` (loss,
outputs, gradients and updated weights against single-device PyTorch). A *wrong* row edits the
generated program (a bias read as 1.01 x itself) and must fail its check. Printed as a Markdown
table: the fused attention ops in the imported graph, the plan (the search's summary and its
estimated iteration time against data parallelism's), the search's wall and CPU seconds, the
plan's parallel ops (and pipeline stages), and each stage's verdict. Wall times are on whatever
machine runs it (the 2-core CI box is shared): CPU seconds are what a quiet machine needs,
roughly.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CODEGEN = ROOT / "tests" / "codegen"
VISION = CODEGEN / "vision_models.py"
"""Plain-torch ConvNeXt, MobileNet-V2 and Conv1d stand-ins (torchvision 0.28, the only build
matching torch 2.13, is CUDA-built: it does not import on this CPU torch)."""
TARGET = f"{CODEGEN / 'target_model.py'}:make"
"""A Hugging Face GPT-2 whose inputs are `(ids, target)`."""
BART = f"{CODEGEN / 'bart_model.py'}:make"
EFFICIENTNET = f"{CODEGEN / 'efficientnet_model.py'}:make"
"""Stock EfficientNet-B0 in plain torch (torchvision's layer for layer)."""
NON_CHAIN = ROOT / "tests" / "search" / "non_chain.py"
"""An `nn.LSTM` language model and a DenseNet-style CNN (graphs that do not cut into a chain)."""
CLASSIFIER_BIAS = (
    "F.linear(reshape_98, classifier_weight, classifier_bias)",
    "F.linear(reshape_98, classifier_weight, classifier_bias * 1.01)",
)
"""EfficientNet-B0's serial program with its classifier bias's gradient 1 % off."""


@dataclass(frozen=True)
class Row:
    name: str
    model: str
    batch: int
    plan: str
    """"search", or a unityc-opt pass (its machine is set to cpu:`ranks`)."""
    ranks: int = 2
    settings: tuple[str, ...] = ()
    wrong: tuple[str, str] | None = None
    """(text, replacement) in the generated program: its --check must fail."""


ROWS = [
    Row("roberta-search", "hf:roberta", 64, "search"),
    Row("roberta-megatron", "hf:roberta", 16, "megatron"),
    Row("phi3-search", "hf:Phi3Config", 64, "search", settings=("pad=0",)),
    Row("phi3-megatron", "hf:Phi3Config", 16, "megatron", settings=("pad=0",)),
    Row("opt-megatron", "hf:OPTConfig", 16, "megatron"),
    Row("gpt-neox-megatron", "hf:GPTNeoXConfig", 16, "megatron"),
    Row("qwen3-search", "hf:Qwen3Config", 64, "search"),
    Row("qwen3-megatron", "hf:Qwen3Config", 16, "megatron"),
    Row("gemma2-megatron", "hf:Gemma2Config", 16, "megatron"),
    Row("t5-search", "hf:T5Config", 64, "search"),
    Row("t5-data", "hf:T5Config", 16, "data-parallel"),
    Row("t5-megatron", "hf:T5Config", 16, "megatron"),
    Row("convnext-search", f"{VISION}:convnext", 32, "search"),
    Row("convnext-data", f"{VISION}:convnext", 8, "data-parallel"),
    Row("mobilenet-search", f"{VISION}:mobilenet", 32, "search"),
    Row("mobilenet-data", f"{VISION}:mobilenet", 8, "data-parallel"),
    Row("conv1d-search", f"{VISION}:conv1d", 64, "search"),
    Row("conv1d-data", f"{VISION}:conv1d", 8, "data-parallel"),
    Row("efficientnet-search", EFFICIENTNET, 4, "search"),
    Row("efficientnet-serial-1", EFFICIENTNET, 4, "data-parallel", ranks=1),
    Row("efficientnet-data-2", EFFICIENTNET, 4, "data-parallel"),
    Row("efficientnet-wrong-1", EFFICIENTNET, 4, "data-parallel", ranks=1, wrong=CLASSIFIER_BIAS),
    Row("target-gpipe-2", TARGET, 4, 'gpipe{stages=2 microbatches=2 schedule="gpipe"}'),
    Row("target-1f1b-2", TARGET, 4, 'gpipe{stages=2 microbatches=2 schedule="1f1b"}'),
    Row("bart-gpipe-2", BART, 8, 'gpipe{stages=2 microbatches=4 schedule="gpipe"}'),
    Row("bart-1f1b-2", BART, 8, 'gpipe{stages=2 microbatches=4 schedule="1f1b"}'),
    Row("bart-zero3-2", BART, 8, "zero{stage=3}"),
    Row("bart-zero3-4", BART, 8, "zero{stage=3}", ranks=4),
    Row("lstm-search", f"{NON_CHAIN}:lstm", 256, "search"),
    Row("lstm-search-2048", f"{NON_CHAIN}:lstm", 2048, "search"),
    Row("densenet-search", f"{NON_CHAIN}:densenet", 256, "search"),
]


def run(args: list[str], timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def with_machine(plan: str, ranks: int) -> str:
    """A unityc-opt pass with its machine set: `zero{stage=3}` -> `zero{machine="cpu:4" stage=3}`."""
    machine = f'machine="cpu:{ranks}"'
    if "{" not in plan:
        return f"{plan}{{{machine}}}"
    return plan.replace("{", f"{{{machine} ", 1).replace(" }", "}")


def search_summary(report_file: Path) -> str:
    """Where the searched plan comes from, the devices it uses, its estimated iteration time and
    the baselines' (the `--report` JSON); the deadline if the search stopped early."""
    if not report_file.exists():
        return "?"
    report = json.loads(report_file.read_text())
    plan = report["plan"]
    text = f"{report['source']}, {plan['devices_used']} device(s), {plan['iteration_s'] * 1e3:.2f} ms"
    others = [
        f"{name} {b['iteration_s'] * 1e3:.2f}"
        for name, b in report.get("baselines", {}).items()
        if b.get("iteration_s") is not None and name in ("data-parallel", "megatron")
    ]
    if others:
        text += f" ({', '.join(others)} ms)"
    stopped = report["search"].get("stopped_early")
    return text + (f"; stopped early: {stopped}" if stopped else "")


def split_heads(model: str, program: str) -> str:
    """How many of the program's attention calls run fewer heads than the imported op has (split
    by heads across ranks), if any attention is imported."""
    heads = [int(h) for h in re.findall(r"= pcg\.attention .* heads (\d+)", model)]
    calls = [int(h) for h in re.findall(r"rt\.kernels\.attention\(.*heads=(\d+)", program)]
    if not heads or len(heads) != len(calls):
        return ""
    return f" ({sum(c < h for c, h in zip(calls, heads, strict=True))} split by heads)"


def one(row: Row, directory: Path) -> dict[str, str]:
    out: dict[str, str] = {"name": row.name, "plan": row.plan, "ranks": str(row.ranks)}
    model_file = directory / f"{row.name}.mlir"
    plan_file = directory / f"{row.name}-plan.mlir"
    program = directory / f"{row.name}.py"
    report = directory / f"{row.name}-report.json"
    batch = ["--batch", str(row.batch)]
    importer = [str(BIN / "unityc-import"), row.model, *row.settings, *batch]
    done = run([*importer, "--check", "-o", str(model_file)])
    out["import"] = "passed" if done.returncode == 0 else f"FAILED: {last_line(done.stderr)}"
    if done.returncode:
        return out
    out["attention"] = str(model_file.read_text().count("pcg.attention"))
    machine = f"cpu:{row.ranks}"
    search = row.plan == "search"
    flags = (
        ["--unity-search", "--machine", machine, "--report", str(report)]
        if search
        else ["-p", with_machine(row.plan, row.ranks)]
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = run([str(BIN / "unityc-opt"), str(model_file), *flags, "-o", str(plan_file)])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    out["search_s"] = f"{time.perf_counter() - start:.1f} / {cpu:.1f}" if search else "-"
    if done.returncode:
        out["plan"] = f"FAILED: {last_line(done.stderr)}"
        return out
    text = plan_file.read_text()
    stages = len(set(re.findall(r"stage = (\d+) : i64", text)))
    out["parallel_ops"] = str(len(re.findall(r"= parallel\.", text)))
    if stages > 1:
        out["parallel_ops"] += f", {stages} stages"
    summary = re.search(r"^\S+ \((.*)\) on cpu:\d+", done.stderr, re.M)
    if search:
        out["plan"] = f"search: {search_summary(report)}"  # (its source: the search, or a baseline)
    else:
        out["plan"] = f"{row.plan}: {summary.group(1)}" if summary else row.plan
    done = run([str(BIN / "unityc-opt"), str(plan_file), "-t", "torch", "-o", str(program)])
    if done.returncode:
        out["torchrun"] = f"codegen FAILED: {last_line(done.stderr)}"
        return out
    out["attention"] += split_heads(model_file.read_text(), program.read_text())
    if row.wrong is not None:
        source = program.read_text()
        if source.count(row.wrong[0]) != 1:
            out["torchrun"] = f"FAILED: the program does not read `{row.wrong[0]}` once"
            return out
        program.write_text(source.replace(*row.wrong))
    steps = "1" if row.wrong else "2"
    done = run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc_per_node",
            str(row.ranks),
            str(program),
            "--check",
            "--steps",
            steps,
            "--timeout",
            "300",
        ]
    )
    output = done.stdout + done.stderr
    passed = re.search(r"check passed: .*", output)
    failed = re.search(r"check failed at .*", output)
    if row.wrong is not None:
        right = done.returncode != 0 and failed
        out["torchrun"] = f"fails as it must: {failed.group(0)[:150]}" if right else "PASSED: it must fail"
    else:
        right = done.returncode == 0 and passed
        out["torchrun"] = passed.group(0) if right else f"FAILED: {last_line(done.stderr)}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="rows whose name starts with one of these")
    parser.add_argument("--model", help="one row of your own: the model to import (with --plan)")
    parser.add_argument("--plan", default="search", help="'search' or a unityc-opt pass (with --model)")
    parser.add_argument("--ranks", type=int, default=2, help="devices of the row's machine (cpu:N) and ranks")
    parser.add_argument("--batch", type=int, default=16, help="the row's batch (with --model)")
    parser.add_argument("--setting", action="append", default=[], help="a model setting such as pad=0")
    args = parser.parse_args()
    if args.model:
        rows = [Row("custom", args.model, args.batch, args.plan, args.ranks, tuple(args.setting))]
    else:
        rows = [r for r in ROWS if not args.only or r.name.startswith(tuple(args.only))]
    header = [
        "row",
        "ranks",
        "import --check",
        "fused attention",
        "plan",
        "search s (wall / CPU)",
        "parallel ops",
        "torchrun --check",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    keys = ("name", "ranks", "import", "attention", "plan", "search_s", "parallel_ops", "torchrun")
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            r = one(row, Path(tmp))
            print("| " + " | ".join(r.get(k, "-") for k in keys) + " |", flush=True)


if __name__ == "__main__":
    main()
