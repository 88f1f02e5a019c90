"""Whole-zoo before/after comparison of two commits (run on demand, never in `make test`).

    .venv/bin/python benchmarks/changes.py d4cdbcd HEAD          # main vs this branch
    .venv/bin/python benchmarks/changes.py d4cdbcd HEAD --models mlp bert --machine cpu:2

Each commit is checked out with `git worktree add --detach` into a temporary directory and run
with PYTHONPATH pointing at it (the shared virtual environment's tools import that tree). For
every zoo model at its small config: `unityc-import`, then `unityc-opt --unity-search` on a small
machine at a small, deterministic budget (no time limit reached; the search's own budget and
alpha stop it) with every baseline in the report (`--baselines`), pipelines on. The fingerprint
of a model is the SHA-256 of the imported module, of the plan the search prints and of its JSON
report (every estimate: the plan's and each baseline's iteration time, peak memory, plan text
hash where the report has one), with the report's wall-clock fields removed. Printed as a
Markdown table: one row per model, `same` where every fingerprint matches, else the fields that
differ and both iteration times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

MODELS = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50", "resnet50", "inception_v3", "unet"]
BASELINES = "data-parallel,megatron,megatron-lm,gpipe,pipedream,zero,galvatron,spatial"
WALL_CLOCK = {"search_s", "elapsed_s", "seconds", "wall_s", "time_s", "search_seconds"}
"""JSON report fields that measure the run, not the plan (dropped before hashing)."""

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(REPO, ".venv", "bin")


def checkout(commit: str, into: str) -> str:
    """`commit` in a detached worktree under `into` (the caller removes it)."""
    path = os.path.join(into, commit.replace("/", "_"))
    subprocess.run(
        ["git", "-C", REPO, "worktree", "add", "--detach", "-f", path, commit],
        check=True,
        capture_output=True,
    )
    return path


def run(tree: str, argv: list[str]) -> tuple[int, str, str, float]:
    """A tool of the shared environment on `tree`'s sources: exit status, stdout, stderr, CPU s
    (user + system, by /usr/bin/time: runs side by side do not count each other's)."""
    env = dict(os.environ, PYTHONPATH=tree)
    with tempfile.NamedTemporaryFile("r", suffix=".time") as times:
        timed = ["/usr/bin/time", "-f", "%U %S", "-o", times.name, *argv]
        done = subprocess.run(timed, env=env, capture_output=True, text=True, cwd=tree)
        fields = times.read().split()
    cpu = float(fields[-2]) + float(fields[-1]) if len(fields) >= 2 else 0.0
    return done.returncode, done.stdout, done.stderr, cpu


def scrub(value: Any) -> Any:
    """The report without its wall-clock fields."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in WALL_CLOCK}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def parts(report: dict[str, Any]) -> dict[str, str]:
    """The report's sections hashed one by one (each baseline on its own): what a difference is in."""
    out = {k: digest(json.dumps(v, sort_keys=True)) for k, v in report.items() if k != "baselines"}
    for name, row in report.get("baselines", {}).items():
        out[f"baseline {name}"] = digest(json.dumps(row, sort_keys=True))
    return out


def fingerprint(tree: str, model: str, args: argparse.Namespace, work: str) -> dict[str, Any]:
    """The model's import, plan and report hashes on `tree`, and its estimate."""
    mlir = os.path.join(work, f"{model}.mlir")
    plan = os.path.join(work, f"{model}_plan.mlir")
    report = os.path.join(work, f"{model}.json")
    rc, _, err, cpu = run(tree, [os.path.join(VENV, "unityc-import"), model, "-o", mlir])
    if rc:
        return {"error": f"import: {err.strip().splitlines()[-1] if err.strip() else rc}", "cpu_s": cpu}
    search = [
        os.path.join(VENV, "unityc-opt"), mlir, "--unity-search", "--machine", args.machine,
        "--budget", str(args.budget), "--split-size", str(args.split_size), "--baselines", BASELINES,
        "--pipelines", "on", "--report", report, "-o", plan,
    ]  # fmt: skip
    rc, _, err, search_cpu = run(tree, search)
    cpu += search_cpu
    if rc:
        return {"error": f"search: {err.strip().splitlines()[-1] if err.strip() else rc}", "cpu_s": cpu}
    with open(mlir) as f:
        imported = f.read()
    with open(plan) as f:
        planned = f.read()
    with open(report) as f:
        data = scrub(json.load(f))
    estimate = next((line.strip() for line in err.splitlines() if line.startswith("plan (")), "")
    return {
        "import": digest(imported),
        "plan": digest(planned),
        "report": digest(json.dumps(data, sort_keys=True)),
        "parts": parts(data),
        "estimate": estimate.split(": ", 1)[-1].split(" (")[0],
        "cpu_s": cpu,
    }


def run_all(tree: str, name: str, args: argparse.Namespace, tmp: str, i: int) -> dict[str, dict[str, Any]]:
    """Every model's fingerprint on one tree, in its own output folder."""
    work = os.path.join(tmp, f"out{i}")
    os.makedirs(work)
    out: dict[str, dict[str, Any]] = {}
    for model in args.models:
        out[model] = fingerprint(tree, model, args, work)
        shown = {k: v for k, v in out[model].items() if k != "parts"}
        print(f"{name} {model}: {shown}", file=sys.stderr, flush=True)
    return out


def table(args: argparse.Namespace, prints: list[dict[str, dict[str, Any]]]) -> list[str]:
    """One row per model: the after commit's hashes, both estimates, and what differs."""
    keys = ("import", "plan", "report", "error")
    rows = [
        f"| model | import | plan | report | estimate {args.before} | estimate {args.after} | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for model in args.models:
        a, b = prints[0][model], prints[1][model]
        differ = [k for k in keys if a.get(k) != b.get(k)]
        if "report" in differ:
            before, after = a.get("parts", {}), b.get("parts", {})
            differ += [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]
        if args.repeat:
            differ += [f"{k} (rerun)" for k in keys if b.get(k) != prints[2][model].get(k)]
        result = "same" if not differ else "differs: " + ", ".join(differ)
        rows.append(
            f"| {model} | {b.get('import', '-')} | {b.get('plan', '-')} | {b.get('report', '-')} | "
            f"{a.get('estimate', a.get('error'))} | {b.get('estimate', b.get('error'))} | {result} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("before", help="base commit (e.g. d4cdbcd)")
    parser.add_argument("after", help="changed commit (e.g. HEAD)")
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--machine", default="cpu:4")
    parser.add_argument("--budget", type=int, default=4, help="expansions per segment search (default 4)")
    parser.add_argument("--split-size", type=int, default=12)
    parser.add_argument("--repeat", action="store_true", help="run `after` twice (is the run deterministic?)")
    args = parser.parse_args()
    runs = [args.before, args.after] + ([args.after] if args.repeat else [])
    with tempfile.TemporaryDirectory(prefix="unityc_changes_") as tmp:
        trees = {name: checkout(name, tmp) for name in dict.fromkeys(runs)}
        try:
            with ThreadPoolExecutor(len(runs)) as pool:  # each run in its own processes, side by side
                prints = list(
                    pool.map(lambda i: run_all(trees[runs[i]], runs[i], args, tmp, i), range(len(runs)))
                )
        finally:
            for path in trees.values():
                subprocess.run(
                    ["git", "-C", REPO, "worktree", "remove", "--force", path], capture_output=True
                )
    cpu = sum(p[m]["cpu_s"] for p in prints for m in p)
    print(
        f"{args.before} vs {args.after}: zoo at small config, {args.machine}, --budget {args.budget}, "
        f"--split-size {args.split_size}, baselines {BASELINES}, pipelines on "
        f"({cpu:.0f} CPU s in the tools, {time.strftime('%Y-%m-%d')})\n"
    )
    print("\n".join(table(args, prints)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
