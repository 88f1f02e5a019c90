"""Benchmark the Unity search on the zoo at paper scale (run on demand, never in `make test`).

    .venv/bin/python benchmarks/search_zoo.py                        # every model, summit 6..192 GPUs
    .venv/bin/python benchmarks/search_zoo.py --models bert resnext50 --machines summit:8
    .venv/bin/python benchmarks/search_zoo.py --machines dgx-a100:1,dgx-a100:4 --sequential

For every model and machine: the model is imported at its paper config with the global batch
= per-GPU batch x devices (weak scaling, as in Unity §6), searched (`unity_search`, default
options unless given), and compared with the data-parallel and Megatron baselines (and, with
`--sequential`, Unity's sequential ablation) and the `megatron-lm` baseline on the same cost
model; the last column says whether the plan is at least as fast as every baseline that fits.
Printed as a Markdown table; `--out` also writes the rows as JSON. Imports are cached under
`--cache`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from tqdm import tqdm

from unityc.cost.units import format_bytes, format_time
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.models import zoo
from unityc.passes.unity_search import load_rules
from unityc.search.baselines import data_parallel, megatron, megatron_lm, sequential
from unityc.search.unity import UnityOptions, unity_search

MODELS = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50", "inception_v3"]
MACHINES = "summit:1,summit:2,summit:4,summit:8,summit:32"


def load_graph(model: str, batch: int, cache: str) -> Graph:
    """The model's graph at paper config and this batch (imported once, then read back)."""
    from xdsl.context import Context
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    from unityc.dialects.parallel import PARALLEL
    from unityc.dialects.pcg import PCG
    from unityc.dialects.source import parse_source

    path = os.path.join(cache, f"{model}_paper_b{batch}.mlir")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        module = import_model(ModelSpec(model, "paper", batch=batch))
        with open(path + ".tmp", "w") as f:
            f.write(str(module))
        os.replace(path + ".tmp", path)
    ctx = Context()
    for dialect in (Builtin, Func, PCG, PARALLEL):
        ctx.load_dialect(dialect)
    with open(path) as f:
        return from_module(parse_source(ctx, f.read(), path, 0, True))


def run(model: str, machine_name: str, args: argparse.Namespace, rules: list[Any]) -> dict[str, Any]:
    machine = load_machine(machine_name)
    n = machine.num_devices
    batch = zoo()[model].batch["paper"] * n
    graph = load_graph(model, batch, args.cache)
    options = UnityOptions(
        alpha=args.alpha,
        budget=args.budget or None,
        split_size=args.split_size,
        time_limit=args.time_limit or None,
        optimizer="adam" if model == "bert" else "sgd",  # as in Unity's evaluation
    )
    began = time.monotonic()
    result = unity_search(graph, machine, rules, options)
    seconds = time.monotonic() - began
    row: dict[str, Any] = {
        "model": model,
        "machine": machine_name,
        "devices": n,
        "batch": batch,
        "ops": sum(1 for node in graph.nodes.values() if not node.is_source),
        "search_s": seconds,
        "segments": result.report.segments,
        "searched": result.report.searches,
        "priced": result.report.priced,
        "plan_s": result.estimate.iteration_s,
        "roofline_s": result.estimate.roofline_s,
        "peak_bytes": result.estimate.peak_memory,
        "fits": result.fits,
        "memory_rounds": len(result.report.rounds),
    }
    baselines = [("dp", data_parallel), ("megatron", megatron), ("megatron_lm", megatron_lm)]
    for name, build in baselines:
        try:
            plan = build(graph, machine, options)
            row[f"{name}_s"] = plan.estimate.iteration_s
            row[f"{name}_fits"] = plan.estimate.fits
            row[f"{name}_note"] = plan.note
        except ValueError as e:  # PipelineError among them: no micro-batches, no split
            row[f"{name}_s"] = None
            row[f"{name}_error"] = str(e)
    if args.sequential:
        plan = sequential(graph, machine, rules, options)
        row["sequential_s"] = plan.estimate.iteration_s
        row["sequential_fits"] = plan.estimate.fits
    return row


def joint_at_least_as_fast(r: dict[str, Any]) -> str:
    """Whether the plan is at least as fast as every baseline that fits (`yes`), else which not."""
    slower = [
        name
        for name in ("dp", "megatron", "megatron_lm", "sequential")
        if r.get(f"{name}_s") and r.get(f"{name}_fits", True) and r[f"{name}_s"] < r["plan_s"] * (1 - 1e-9)
    ]
    return "yes" if not slower else "no: " + ", ".join(slower)


def _ratio(r: dict[str, Any], key: str) -> str:
    v = r.get(key)
    return f"{v / r['plan_s']:.2f}x" if v else "-"


def _baseline(r: dict[str, Any], name: str) -> str:
    if not r.get(f"{name}_s"):
        return "-"
    return format_time(r[f"{name}_s"]) + ("" if r.get(f"{name}_fits", True) else " (OOM)")


def markdown(rows: list[dict[str, Any]]) -> str:
    head = (
        "| model | machine | GPUs | ops | search | plan | DP | Megatron | megatron-lm | sequential | vs DP "
        "| vs Megatron | / roofline | peak memory | fits | plan <= every baseline |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        fits = "yes" if r["fits"] else "no"
        lines.append(
            f"| {r['model']} | {r['machine']} | {r['devices']} | {r['ops']} | {r['search_s']:.1f} s "
            f"| {format_time(r['plan_s'])} | {_baseline(r, 'dp')} | {_baseline(r, 'megatron')} "
            f"| {_baseline(r, 'megatron_lm')} | {_baseline(r, 'sequential')} "
            f"| {_ratio(r, 'dp_s')} | {_ratio(r, 'megatron_s')} "
            f"| {r['plan_s'] / r['roofline_s']:.2f} | {format_bytes(r['peak_bytes'])} | {fits} "
            f"| {joint_at_least_as_fast(r)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=MODELS, choices=MODELS)
    parser.add_argument("--machines", default=MACHINES, help=f"comma-separated (default {MACHINES})")
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--budget", type=int, default=UnityOptions().budget or 0)
    parser.add_argument("--split-size", type=int, default=UnityOptions().split_size)
    parser.add_argument("--time-limit", type=float, default=0.0)
    parser.add_argument("--rules", default="", help="a .rules file or directory (default: the library)")
    parser.add_argument("--sequential", action="store_true", help="also run Unity's sequential ablation")
    parser.add_argument("--cache", default=os.path.join(os.path.dirname(__file__), ".cache"))
    parser.add_argument("--out", default="", help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rules = load_rules(args.rules)
    rows = []
    jobs = [(m, machine) for m in args.models for machine in args.machines.split(",")]
    for model, machine in tqdm(jobs, desc="search_zoo", file=sys.stderr):
        rows.append(run(model, machine, args, rules))
        if args.out:
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=2)
    sys.stdout.write(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
