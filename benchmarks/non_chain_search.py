"""Searches on graphs that do not cut into a chain of segments (issue 26), the whole
`unityc-opt --unity-search` command as a user runs it (run on demand, never in `make test`):

    .venv/bin/python benchmarks/non_chain_search.py                          # this tree
    .venv/bin/python benchmarks/non_chain_search.py --baseline /tmp/old      # before -> after

The models are `tests/search/non_chain.py`'s: an `nn.LSTM` language model (1 layer x 6 steps,
and 2 layers x 10 steps: ~300 ops, the issue's kind) and DenseNet-style blocks (4 and 12
layers, each reading every earlier output), imported once (cached under `--cache`). Each search
runs with `--time-limit 100000` (in effect no limit: does it finish?) under a wall-clock cap (`--cap`, default
300 s), then with the default limit. Columns: wall and CPU seconds of the command (CPU seconds are
what a quiet machine needs, roughly), its peak memory, candidates priced, where the plan comes
from, its estimated iteration time, and data parallelism's. With `--baseline DIR` each case runs
first with DIR's unityc (e.g. `git archive` of the commit before the change, unpacked there).
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

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "tests", "search", "non_chain.py")
CASES = [
    ("lstm", ("batch=256",)),
    ("lstm", ("batch=256", "seq=10", "layers=2")),
    ("densenet", ("batch=256",)),
    ("densenet", ("batch=256", "layers=12")),
]


def imported(factory: str, settings: tuple[str, ...], cache: str) -> str:
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, f"{factory}-{'-'.join(s.replace('=', '') for s in settings)}.mlir")
    if not os.path.exists(path):
        tool = os.path.join(os.path.dirname(sys.executable), "unityc-import")
        subprocess.run([tool, f"{MODELS}:{factory}", *settings, "-o", path], check=True, capture_output=True)
    return path


def search(tree: str, model: str, machine: str, limit: list[str], cap: float) -> dict:
    """One search with `tree`'s unityc: wall and CPU seconds, peak memory, and the report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        peak = os.path.join(tmp, "peak")
        command = ["/usr/bin/time", "-f", "%M", "-o", peak]  # the command's own peak memory (KiB)
        command += [sys.executable, "-m", "unityc.tools.opt", model, "--unity-search", "--machine", machine]
        command += [*limit, "--report", report, "-o", os.path.join(tmp, "plan.mlir")]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        env = {**os.environ, "PYTHONPATH": tree}
        try:
            subprocess.run(command, env=env, capture_output=True, timeout=cap, check=False)
        except subprocess.TimeoutExpired:
            return {"wall": time.monotonic() - start, "timeout": True}
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        row = {
            "wall": time.monotonic() - start,
            "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
        }
        with open(peak) as f:
            row["rss_mib"] = int(f.read().split()[-1]) / 1024
        if os.path.exists(report):
            with open(report) as f:
                row["report"] = json.load(f)
        return row


def cell(row: dict) -> str:
    if row.get("timeout"):
        return f"no plan after {row['wall']:.0f} s (killed)"
    r = row.get("report")
    if r is None:
        return f"failed after {row['wall']:.0f} s"
    data = r["baselines"].get("data-parallel", {}).get("iteration_s", float("nan"))
    stopped = " (time limit)" if r["search"]["stopped_early"] else ""
    return (
        f"{row['wall']:.0f} s wall, {row['cpu']:.0f} s CPU, {row['rss_mib']:.0f} MiB; "
        f"{r['search']['priced']} priced; {r['source']} {r['plan']['iteration_s'] * 1e3:.2f} ms "
        f"(DP {data * 1e3:.2f} ms){stopped}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machine", default="cpu:2")
    parser.add_argument("--baseline", default="", help="a tree whose unityc runs first (before -> after)")
    parser.add_argument("--cap", type=float, default=300.0, help="seconds before a search is killed")
    parser.add_argument("--cache", default=os.path.join(HERE, ".cache"))
    args = parser.parse_args()
    trees = ([args.baseline] if args.baseline else []) + [os.path.join(HERE, "..")]
    print(f"load average {os.getloadavg()[0]:.1f}; machine {args.machine}")
    print(
        "| model | ops | limit | "
        + " | ".join("before" if t == args.baseline else "after" for t in trees)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(trees))
    for factory, settings in CASES:
        model = imported(factory, settings, args.cache)
        with open(model) as f:
            ops = f.read().count(" = pcg.")
        for limit in (["--time-limit", "100000"], []):
            cells = [cell(search(t, model, args.machine, limit, args.cap)) for t in trees]
            name = f"{factory} {' '.join(settings)}"
            print(
                f"| {name} | {ops} | {'none' if limit else 'default'} | " + " | ".join(cells) + " |",
                flush=True,
            )


if __name__ == "__main__":
    main()
