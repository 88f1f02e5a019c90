"""Plans at LLM scale (issue 25): the joint search on Llama-2-70B and GPT-3-175B shapes, beside
every baseline it prices.

    python benchmarks/llm_scale.py [--rows llama2-70b@dgx-a100:16,...] [--time-limit 300]
                                   [--work DIR] [--timeout 900]

Each model is imported through `unityc-import` (parameters on meta, `--precision bf16-mixed`)
from a transformers config: Llama-2-70B from `hf:LlamaConfig` (hidden 8192, 80 layers, 64 heads,
8 KV heads, ffn 28672, vocab 32000, seq 4096, batch 1024), GPT-3-175B from `hf:GPT2Config`
(96 layers, hidden 12288, 96 heads, ffn 4 x 12288 as GPT-2 sets it, vocab 50257, seq 2048,
batch 1536; `gpt3-175b-b64` the same at batch 64, Megatron-LM's published 64-GPU run on
`dgx-a100:8`). Each row then
runs the command a user runs, `unityc-opt --unity-search --machine M --optimizer adam
--time-limit T --baselines data-parallel,zero,galvatron,megatron,megatron-lm,gpipe,pipedream
--report r.json`, as its own process: its wall time and CPU time (user + system, its forked
workers included: `os.wait4`) are the search's; the plan's degrees are read from the plan it
wrote, its iteration time, peak memory and MFU (6 x parameters x tokens / (GPUs x peak x
time), `cost.report.Utilization`) and each baseline's from the report. A row is also checked:
the command returned within the time limit + 10 %, the plan fits, and it is at least as fast as
every fitting baseline. On a shared machine CPU seconds are the figure to compare (the wall
time grows with the load, printed beside it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from commands import tool

from unityc.dialects.source import make_context, parse_source
from unityc.graph import Graph, from_module
from unityc.search.levers import describe as lever_text

MODELS = {
    "llama2-70b": (
        "hf:LlamaConfig",
        {"hidden": 8192, "layers": 80, "heads": 64, "kv_heads": 8, "ffn": 28672, "vocab": 32000, "seq": 4096},
        1024,
    ),
    "gpt3-175b": (
        "hf:GPT2Config",
        {"hidden": 12288, "layers": 96, "heads": 96, "vocab": 50257, "seq": 2048},
        1536,
    ),
    "gpt3-175b-b64": (  # Megatron-LM's published 64-GPU benchmark (tensor 8 x pipeline 8): 51.4 % MFU
        "hf:GPT2Config",
        {"hidden": 12288, "layers": 96, "heads": 96, "vocab": 50257, "seq": 2048},
        64,
    ),
}
ROWS = "llama2-70b@dgx-a100:16,llama2-70b@dgx-a100:128,llama2-70b@dgx-a100:512,gpt3-175b@dgx-a100:128"
BASELINES = ("data-parallel", "zero", "galvatron", "megatron", "megatron-lm", "gpipe", "pipedream")
ANCHORS = [
    ("Llama-2-70B pretraining (Touvron et al. 2023)", "1,720,320 A100-80GB GPU-hours, 2 T tokens", "43.5%"),
    ("Megatron-LM (Narayanan et al. 2021)", "1 T parameters on 3,072 A100s, 502 PFLOP/s", "up to 52%"),
]


def run(cmd: list[str], timeout: float) -> tuple[int, float, float, float, str]:
    """(exit status, wall s, CPU s, peak RSS MiB, stderr) of one command, killed past `timeout`."""
    with tempfile.TemporaryFile("w+") as log:
        began = time.perf_counter()
        proc = subprocess.Popen([tool(cmd[0]), *cmd[1:]], stdout=subprocess.DEVNULL, stderr=log, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - began
        timer.cancel()
        log.seek(0)
        return (
            os.waitstatus_to_exitcode(status),
            wall,
            usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024,
            log.read(),
        )


def imported(model: str, work: Path, timeout: float) -> Path:
    """The model's MLIR, imported once into `work`."""
    out = work / f"{model}.mlir"
    if out.exists():
        return out
    name, settings, batch = MODELS[model]
    cmd = ["unityc-import", name, "--config", "paper", *(f"{k}={v}" for k, v in settings.items())]
    cmd += ["--batch", str(batch), "--precision", "bf16-mixed", "-o", str(out)]
    code, wall, cpu, rss, err = run(cmd, timeout)
    if code != 0:
        raise SystemExit(f"import of {model} failed ({code}): {err.strip().splitlines()[-1:]}")
    print(f"imported {model}: {wall:.0f} s wall, {cpu:.0f} s CPU, {rss:.0f} MiB peak", file=sys.stderr)
    return out


def degrees(plan: Graph, devices: int) -> str:
    """data x tensor x pipeline (virtual stages, micro-batches), ZeRO, recomputation, accumulation."""
    weights = [n.types[0] for n in plan.nodes.values() if n.op == "pcg.weight"]
    tensor = max((t.num_pieces // max(t.copy_degree, 1) for t in weights), default=1)
    pipeline = plan.plan.pipeline
    stages = len({n.stage for n in plan.nodes.values()}) if pipeline is not None else 1
    groups = stages // (pipeline.virtual_stages if pipeline is not None else 1)
    data = max(devices // max(tensor * groups, 1), 1)
    text = f"data {data} x tensor {tensor} x pipeline {groups}"
    if pipeline is not None:
        chunks = f", {pipeline.virtual_stages} virtual stages" if pipeline.virtual_stages > 1 else ""
        text += f"{chunks}, {pipeline.schedule}, {pipeline.microbatches} micro-batches"
    levers = lever_text(plan)
    return text + (f"; {levers}" if levers else "")


def row(
    model: str,
    machine: str,
    work: Path,
    limit: float,
    timeout: float,
    describe: Callable[[Graph, int], str] = degrees,
) -> list[list[str]]:
    """The joint plan's row (its degrees as `describe` writes them) and each baseline's."""
    source = imported(model, work, timeout)
    tag = f"{model}-{machine.replace(':', '')}"
    plan_path, report_path = work / f"{tag}.plan.mlir", work / f"{tag}.json"
    cmd = ["unityc-opt", "--unity-search", "--machine", machine, "--optimizer", "adam"]
    cmd += ["--time-limit", f"{limit:g}", "--baselines", ",".join(BASELINES)]
    cmd += ["--report", str(report_path), str(source), "-o", str(plan_path)]
    code, wall, cpu, _, err = run(cmd, timeout)
    if code != 0 or not report_path.exists():
        why = (err.strip().splitlines() or [f"exit {code}"])[-1][:160]
        return [[model, machine, "-", f"failed: {why}", "-", "-", "-", f"{wall:.0f}", f"{cpu:.0f}"]]
    report = json.loads(report_path.read_text())
    plan = from_module(parse_source(make_context(), plan_path.read_text(), str(plan_path)))
    devices = report["devices"]
    p = report["plan"]
    held = wall <= limit * 1.1
    fitting = [b for b in report["baselines"].values() if "iteration_s" in b and b["fits"]]
    best = all(p["iteration_s"] <= b["iteration_s"] * (1 + 1e-9) for b in fitting)
    checks = f"limit {'held' if held else 'OVERRUN'}, {'fits' if p['fits'] else 'DOES NOT FIT'}, "
    checks += "<= every fitting baseline" if best else "SLOWER than a fitting baseline"
    stopped = report["search"]["stopped_early"]
    out = [
        [
            model,
            machine,
            str(devices),
            f"**joint** ({report['source'][:60]}): {describe(plan, devices)}; {checks}"
            + (f"; stopped early ({stopped})" if stopped else ""),
            f"{p['iteration_s']:.2f} s",
            f"{p['peak_memory_bytes'] / 2**30:.1f} GiB",
            f"{100 * p['mfu']:.1f}%",
            f"{wall:.0f}",
            f"{cpu:.0f}",
        ]
    ]
    three_d = [name for name in report["baselines"] if name.startswith("3-d ")]  # the search's own
    for name in (*BASELINES, *three_d):
        b = report["baselines"].get(name)
        if b is None or "iteration_s" not in b:
            note = "not priced" if b is None else b["error"][:120]
            out.append(["", "", "", f"{name}: {note}", "-", "-", "-", "", ""])
            continue
        fits = "" if b["fits"] else " (does not fit)"
        out.append(
            [
                "",
                "",
                "",
                f"{name}: {b['note'][:140]}",
                f"{b['iteration_s']:.2f} s",
                f"{b['peak_memory_bytes'] / 2**30:.1f} GiB{fits}",
                f"{100 * b['mfu']:.1f}%",
                "",
                "",
            ]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=ROWS, help="comma-separated model@machine")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--timeout", type=float, default=1200.0, help="kill a command after this long")
    parser.add_argument("--work", default=None, help="directory for the imported models, plans, reports")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="llm_scale_"))
    work.mkdir(parents=True, exist_ok=True)
    head = ["model", "machine", "GPUs", "plan", "iteration", "peak memory", "MFU", "wall s", "CPU s"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head), flush=True)
    for item in args.rows.split(","):
        model, machine = item.split("@")
        if model not in MODELS:
            raise SystemExit(f"unknown model '{model}' (known: {', '.join(MODELS)})")
        for line in row(model, machine, work, args.time_limit, args.timeout):
            print("| " + " | ".join(line) + " |", flush=True)
    print("\n| anchor | what | MFU |\n|---|---|---|")
    for anchor in ANCHORS:
        print("| " + " | ".join(anchor) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
