"""How planning scales with the device count (issue 39's Done-when rows), as the user runs it.

    python benchmarks/scale_planning.py [--rows bert,gpt3] [--time-limit 300] [--work DIR]

* **bert**: BERT-Large (`unityc-import bert --config paper`) planned by the Megatron baseline,
  `unityc-opt -p 'megatron{machine="M"}'`, at batch 32 on `dgx-a100:1` and at batch 8192 on
  `dgx-a100:256` (2,048 GPUs) and `dgx-a100:8192` (65,536 GPUs): the whole process's CPU
  seconds (import of the MLIR, verification, pricing, printing) and the ratio to the first row
  (targets: <= 2x at 256 nodes, <= 3x at 8,192).
* **gpt3**: GPT-3-175B (`hf:GPT2Config --config paper`, 96 layers, hidden 12288, 96 heads,
  vocab 50257, seq 2048, bf16-mixed) at global batch 6144 on `dgx-a100:1536` (12,288 GPUs,
  MegaScale's scale): `unityc-opt --unity-search --optimizer adam --time-limit T --baselines
  megatron-lm --report r.json`; wall, CPU (its forked workers included: `os.wait4`), peak RSS,
  exit status, whether a plan was written, its iteration time, whether it fits, and its MFU
  beside MegaScale's 55.2 % (Jiang et al. 2024) and the megatron-lm row of its report.

CPU seconds are the figure to compare on a shared machine (the wall time grows with the load,
which is printed before and after).
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
from pathlib import Path

BIN = Path(sys.executable).parent
BERT_ROWS = ((32, "dgx-a100:1"), (8192, "dgx-a100:256"), (8192, "dgx-a100:8192"))
GPT3 = ["hidden=12288", "layers=96", "heads=96", "vocab=50257", "seq=2048"]
MEGASCALE_MFU = 0.552


def run(cmd: list[str], timeout: float) -> tuple[int, float, float, float, str]:
    """(exit status, wall s, CPU s of it and its children, peak RSS MiB, stderr) of one command."""
    with tempfile.TemporaryFile("w+") as log:
        began = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        wall = time.perf_counter() - began
        log.seek(0)
        code = os.waitstatus_to_exitcode(status)
        return code, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, log.read()


def imported(name: str, args: list[str], out: Path, timeout: float) -> Path:
    if not out.exists():
        code, _, cpu, _, err = run(
            [str(BIN / "unityc-import"), name, "--config", "paper", *args, "-o", str(out)], timeout
        )
        if code:
            raise SystemExit(f"import {name} failed: {err.strip().splitlines()[-1:]}")
        print(f"imported {out.name}: {cpu:.1f} CPU s", file=sys.stderr)
    return out


def bert(work: Path, timeout: float) -> None:
    print("| BERT-Large, batch | machine | GPUs | CPU s (whole process) | vs first row | wall s | plan |")
    print("|---|---|---|---|---|---|---|")
    first = None
    for batch, machine in BERT_ROWS:
        source = imported("bert", ["--batch", str(batch)], work / f"bert{batch}.mlir", timeout)
        cmd = [
            str(BIN / "unityc-opt"),
            str(source),
            "-p",
            f'megatron{{machine="{machine}"}}',
            "-o",
            os.devnull,
        ]
        code, wall, cpu, _, err = run(cmd, timeout)
        first = cpu if first is None else first
        gpus = 8 * int(machine.split(":")[1])
        said = (err.strip().splitlines() or [f"exit {code}"])[-1][:110]
        print(
            f"| {batch} | {machine} | {gpus:,} | {cpu:.2f} | {cpu / first:.2f}x | {wall:.1f} | {said} |",
            flush=True,
        )


def gpt3(work: Path, limit: float, timeout: float) -> None:
    source = imported(
        "hf:GPT2Config", [*GPT3, "--batch", "6144", "--precision", "bf16-mixed"], work / "gpt3.mlir", timeout
    )
    report, plan = work / "gpt3.json", work / "gpt3.plan.mlir"
    for path in (report, plan):
        path.unlink(missing_ok=True)
    cmd = [str(BIN / "unityc-opt"), str(source), "--unity-search", "--machine", "dgx-a100:1536"]
    cmd += ["--optimizer", "adam", "--time-limit", f"{limit:g}", "--baselines", "megatron-lm"]
    cmd += ["--report", str(report), "-o", str(plan)]
    code, wall, cpu, rss, err = run(cmd, timeout)
    head = ["GPT-3-175B, batch 6144, dgx-a100:1536", "wall s", "CPU s", "peak MiB", "exit", "plan written"]
    head += ["iteration", "fits", f"MFU (MegaScale {100 * MEGASCALE_MFU:.1f} %)", "megatron-lm row"]
    print("\n| " + " | ".join(head) + " |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    cells = ["-", "-", "-", "-"]
    if report.exists():
        data = json.loads(report.read_text())
        p = data["plan"]
        row = data.get("baselines", {}).get("megatron-lm", {})
        lm = (
            f"{row['iteration_s']:.2f} s, fits {row['fits']}"
            if "iteration_s" in row
            else row.get("error", "-")[:80]
        )
        cells = [f"{p['iteration_s']:.2f} s", str(p["fits"]), f"{100 * p['mfu']:.1f} %", lm]
    said = (err.strip().splitlines() or [""])[-1][:100]
    what = json.loads(report.read_text())["source"][:60] if report.exists() else said
    written = "yes" if plan.exists() else "no"
    line = [what, f"{wall:.0f}", f"{cpu:.0f}", f"{rss:.0f}", str(code), written, *cells]
    print("| " + " | ".join(line) + " |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="bert,gpt3")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="scale_planning_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)\n")
    rows = args.rows.split(",")
    if "bert" in rows:
        bert(work, args.timeout)
    if "gpt3" in rows:
        gpt3(work, args.time_limit, args.timeout)
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
