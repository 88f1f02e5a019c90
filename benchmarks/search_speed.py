"""How long `unityc-opt --unity-search` takes, the whole command, as a user runs it (run on demand,
never in `make test`).

    .venv/bin/python benchmarks/search_speed.py                       # small zoo on cpu:2, cpu:4 + limits
    .venv/bin/python benchmarks/search_speed.py --models mlp bert --machines cpu:2
    .venv/bin/python benchmarks/search_speed.py --no-limits           # skip the time-limit cases
    .venv/bin/python benchmarks/search_speed.py --baseline /tmp/main  # before -> after, side by side

Part 1: every zoo model at its small config (`unityc-import MODEL`), searched on each machine
with default options; the wall time of the command (start-up, parsing, rules, search, report,
writing the plan), the search's own seconds, candidates priced and dropped by their bound, the
plan's estimated iteration time and where it comes from. Target: each at most 5 s on a quiet
machine.

Part 2: `--time-limit 5` where the search alone would take much longer: Inception-v3 at paper
scale on `summit:32`, on the largest machine supported (65,536 devices, `dgx-a100:8192`), and on
a machine of 1,000,000 devices (`dgx-a100:125000`), which is refused at once. Target: a plan (or
a clear refusal) within 5 s + 10 %; the peak memory of the command and its worker.

The load average is printed with the table: timings taken while other jobs run are slower (the
CPU seconds of the command and its worker, user + system, are what it would take on a quiet
machine, roughly; the search's worker runs on a second core, so the wall time there is less).
With `--baseline DIR` every case runs first with DIR's unityc (e.g. `git archive` of the commit
before a change, unpacked there), then with this tree's: `before -> after` in each cell.
Imports are cached under `--cache`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

from commands import tool

MODELS = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50", "inception_v3"]
MACHINES = "cpu:2,cpu:4"
LIMIT_CASES = [
    ("inception_v3", "paper", "summit:32"),
    ("inception_v3", "paper", "dgx-a100:8192"),
    ("inception_v3", "paper", "dgx-a100:125000"),
]


def imported(model: str, config: str, cache: str) -> str:
    path = os.path.join(cache, f"{model}_{config}.mlir")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        subprocess.run([tool("unityc-import"), model, "--config", config, "-o", path], check=True)
    return path


def search(path: str, machine: str, extra: list[str], pythonpath: str | None = None) -> dict[str, Any]:
    """Runs the search command (with `pythonpath`: another checkout's unityc, e.g. the code
    before a change); its wall time, CPU seconds and peak memory (its own and its worker's, by
    `os.wait4`), exit status, last error line and report."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as tmp:
        report, plan = os.path.join(tmp, "report.json"), os.path.join(tmp, "plan.mlir")
        command = [tool("unityc-opt"), path, "--unity-search", "--machine", machine]
        command += ["--report", report, "-o", plan, *extra]
        err_path = os.path.join(tmp, "stderr.txt")
        with open(err_path, "w") as err:
            began = time.monotonic()
            child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=env)
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.monotonic() - began
        child.returncode = os.waitstatus_to_exitcode(status)
        with open(err_path) as f:
            stderr = f.read()
        cpu = usage.ru_utime + usage.ru_stime
        row: dict[str, Any] = {"wall_s": wall, "cpu_s": cpu, "rc": child.returncode}
        row["peak_mib"] = usage.ru_maxrss / 1024
        row["plan_written"] = os.path.exists(plan)
        errors = [line for line in stderr.splitlines() if line.startswith("error:")]
        row["error"] = errors[-1] if errors else ("Traceback" if "Traceback" in stderr else "")
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


def _pair(before: dict[str, Any] | None, after: dict[str, Any], fmt: str, key: str) -> str:
    return (fmt.format(before[key]) + " -> " if before is not None else "") + fmt.format(after[key])


def _iteration(row: dict[str, Any]) -> str:
    return describe(row)[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    parser.add_argument("--machines", default=MACHINES, help=f"comma-separated (default {MACHINES})")
    parser.add_argument("--no-limits", action="store_true", help="skip the time-limit cases")
    parser.add_argument("--cache", default=os.path.join(os.path.dirname(__file__), ".cache"))
    parser.add_argument(
        "--baseline",
        default=None,
        help="a checkout of the code before a change (its PYTHONPATH): each case runs with it "
        "first, then with this tree, side by side (before -> after)",
    )
    parser.add_argument("--out", default="", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    print()
    _header(
        [
            "model (small)",
            "machine",
            "CPU s",
            "wall s",
            "search s",
            "priced / dropped by bound",
            "iteration",
            "plan",
        ]
    )
    for model in args.models:
        path = imported(model, "small", args.cache)
        for machine in args.machines.split(","):
            before = None if args.baseline is None else search(path, machine, [], args.baseline)
            row = {"model": model, "config": "small", "machine": machine, **search(path, machine, [])}
            row["before"] = before
            rows.append(row)
            seconds, priced, iteration, source = describe(row)
            if before is not None:
                iteration = f"{_iteration(before)} -> {iteration}"
            cpu, wall = _pair(before, row, "{:.2f}", "cpu_s"), _pair(before, row, "{:.2f}", "wall_s")
            print(f"| {model} | {machine} | {cpu} | {wall} | {seconds} | {priced} | {iteration} | {source} |")
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
                "peak MiB",
                "exit",
                "plan written",
                "iteration",
                "plan or error",
            ]
        )
        for model, config, machine in LIMIT_CASES:
            path = imported(model, config, args.cache)
            limit = ["--time-limit", "5"]
            before = None if args.baseline is None else search(path, machine, limit, args.baseline)
            row = {"model": model, "config": config, "machine": machine, "time_limit": 5.0}
            row |= search(path, machine, limit)
            row["before"] = before
            rows.append(row)
            _, _, iteration, source = describe(row)
            print(
                f"| {model} ({config}) | {machine} | 5 | {_pair(before, row, '{:.2f}', 'wall_s')} | "
                f"{_pair(before, row, '{:.2f}', 'cpu_s')} | {_pair(before, row, '{:.0f}', 'peak_mib')} | "
                f"{row['rc']} | {'yes' if row['plan_written'] else 'no'} | {iteration} | {source} |"
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
