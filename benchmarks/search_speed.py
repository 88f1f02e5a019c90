"""How long `unityc-opt --unity-search` takes, the whole command, as a user runs it (run on demand,
never in `make test`).

    .venv/bin/python benchmarks/search_speed.py                       # small zoo on cpu:2, cpu:4 + limits
    .venv/bin/python benchmarks/search_speed.py --models mlp bert --machines cpu:2
    .venv/bin/python benchmarks/search_speed.py --no-limits           # skip the time-limit cases

Part 1: every zoo model at its small config (`unityc-import MODEL`), searched on each machine
with default options; the wall time of the command (start-up, parsing, rules, search, report,
writing the plan), the search's own seconds, candidates priced and dropped by their bound, the
plan's estimated iteration time and where it comes from. Target: each at most 5 s on a quiet
machine.

Part 2: `--time-limit 5` where the search alone would take much longer: Inception-v3 at paper
scale on `summit:32`, and a machine of 1,000,000 devices (`dgx-a100:125000`), which is refused
at once. Target: a plan (or a clear refusal) within 5 s + 10 %.

The load average is printed with the table: timings taken while other jobs run are slower (the
CPU seconds of the command, user + system, are what it would take on a quiet machine, roughly).
Imports are cached under `--cache`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

MODELS = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50", "inception_v3"]
MACHINES = "cpu:2,cpu:4"
LIMIT_CASES = [("inception_v3", "paper", "summit:32"), ("inception_v3", "paper", "dgx-a100:125000")]


def tool(name: str) -> str:
    """The venv's console script next to this interpreter (else from PATH)."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else name


def imported(model: str, config: str, cache: str) -> str:
    path = os.path.join(cache, f"{model}_{config}.mlir")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        subprocess.run([tool("unityc-import"), model, "--config", config, "-o", path], check=True)
    return path


def search(path: str, machine: str, extra: list[str]) -> dict[str, Any]:
    """Runs the search command; its wall time, exit status, last error line and report."""
    with tempfile.TemporaryDirectory() as tmp:
        report, plan = os.path.join(tmp, "report.json"), os.path.join(tmp, "plan.mlir")
        command = [tool("unityc-opt"), path, "--unity-search", "--machine", machine]
        command += ["--report", report, "-o", plan, *extra]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.monotonic() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        row: dict[str, Any] = {"wall_s": wall, "cpu_s": cpu, "rc": done.returncode}
        row["plan_written"] = os.path.exists(plan)
        errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        row["error"] = errors[-1] if errors else ("Traceback" if "Traceback" in done.stderr else "")
        if os.path.exists(report):
            with open(report) as f:
                row["report"] = json.load(f)
    return row


def describe(row: dict[str, Any]) -> tuple[str, str, str, str]:
    """(search seconds, priced / dropped, iteration time, source or error) for the table."""
    r = row.get("report")
    if r is None:
        return "-", "-", "-", row["error"] or f"exit {row['rc']}"
    s = r["search"]
    stopped = f"; stopped early ({s['stopped_early']})" if s.get("stopped_early") else ""
    iteration = r["plan"]["iteration_s"]
    priced = f"{s['priced']} / {s['bounded']}"
    return f"{s['seconds']:.2f}", priced, f"{iteration * 1e3:.3f} ms", r["source"] + stopped


def _header(columns: list[str]) -> None:
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    parser.add_argument("--machines", default=MACHINES, help=f"comma-separated (default {MACHINES})")
    parser.add_argument("--no-limits", action="store_true", help="skip the time-limit cases")
    parser.add_argument("--cache", default=os.path.join(os.path.dirname(__file__), ".cache"))
    parser.add_argument("--out", default="", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print()
    _header(
        [
            "model (small)",
            "machine",
            "wall s",
            "CPU s",
            "search s",
            "priced / dropped by bound",
            "iteration",
            "plan",
        ]
    )
    for model in args.models:
        path = imported(model, "small", args.cache)
        for machine in args.machines.split(","):
            row = {"model": model, "config": "small", "machine": machine, **search(path, machine, [])}
            rows.append(row)
            seconds, priced, iteration, source = describe(row)
            times = f"{row['wall_s']:.2f} | {row['cpu_s']:.2f}"
            print(f"| {model} | {machine} | {times} | {seconds} | {priced} | {iteration} | {source} |")
            sys.stdout.flush()
    if not args.no_limits:
        print()
        _header(
            [
                "model",
                "machine",
                "--time-limit",
                "wall s",
                "CPU s",
                "exit",
                "plan written",
                "iteration",
                "plan or error",
            ]
        )
        for model, config, machine in LIMIT_CASES:
            path = imported(model, config, args.cache)
            row = {"model": model, "config": config, "machine": machine, "time_limit": 5.0}
            row |= search(path, machine, ["--time-limit", "5"])
            rows.append(row)
            _, _, iteration, source = describe(row)
            print(
                f"| {model} ({config}) | {machine} | 5 | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | "
                f"{row['rc']} | "
                f"{'yes' if row['plan_written'] else 'no'} | {iteration} | {source} |"
            )
            sys.stdout.flush()
    print()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
