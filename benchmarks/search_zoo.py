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

from unityc.cost.pricing import placement
from unityc.cost.units import format_bytes, format_time
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.models import zoo
from unityc.passes.unity_search import load_rules
from unityc.search.baselines import data_parallel, megatron, megatron_lm, sequential, spatial
from unityc.search.plans import Pricing, finish
from unityc.search.strategies import data_parallel_graph
from unityc.search.unity import UnityOptions, unity_search

MODELS = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50", "inception_v3", "unet"]
FIXED_BATCH = {"unet"}
"""Models searched at their paper batch on every machine (strong scaling: the high-resolution
U-Net has 8 images, fewer than the devices), not per-GPU batch x devices."""
UNITY_FIG14 = {"dlrm": 3.6, "xdl": 1.9, "mlp": 2.0, "candle_uno": 1.6, "resnext50": 1.0, "inception_v3": 1.3}
"""Unity's speedups over data parallelism (OSDI'22, Fig. 14, 48 V100s)."""
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
    batch = zoo()[model].batch["paper"] * (1 if model in FIXED_BATCH else n)
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
        "source": result.source,
        "devices_used": len({d for node in result.plan.nodes.values() for d in _devices(node, machine)}),
    }
    baselines = [
        ("dp", data_parallel),
        ("megatron", megatron),
        ("megatron_lm", megatron_lm),
        ("spatial", spatial),
    ]
    if batch < n:  # data parallelism over as many devices as images (the rest idle)
        row["dp_images_s"] = finish(
            "data-parallel", data_parallel_graph(graph, batch), machine, Pricing(optimizer=options.optimizer)
        ).estimate.iteration_s
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


def _devices(node: Any, machine: Any) -> set[int]:
    """The devices a mapped node's tasks run on (empty for a node without a view)."""
    if node.plan.view is None or not node.types:
        return set()
    return set(placement(node.types[0], node.plan.view, machine).values())


def joint_at_least_as_fast(r: dict[str, Any]) -> str:
    """Whether the plan is at least as fast as every baseline that fits (`yes`), else which not."""
    slower = [
        name
        for name in ("dp", "megatron", "megatron_lm", "sequential", "spatial", "dp_images")
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
        "| model | machine | GPUs | ops | search | plan | GPUs used | DP | DP on the images' GPUs | Megatron "
        "| megatron-lm | sequential | spatial | vs DP | Unity vs DP (Fig. 14) | vs Megatron | / roofline "
        "| peak memory | fits | plan <= every baseline |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        fits = "yes" if r["fits"] else "no"
        lines.append(
            f"| {r['model']} | {r['machine']} | {r['devices']} | {r['ops']} | {r['search_s']:.1f} s "
            f"| {format_time(r['plan_s'])} | {r.get('devices_used', '-')} | {_baseline(r, 'dp')} "
            f"| {_baseline(r, 'dp_images')} "
            f"| {_baseline(r, 'megatron')} | {_baseline(r, 'megatron_lm')} | {_baseline(r, 'sequential')} "
            f"| {_baseline(r, 'spatial')} | {_ratio(r, 'dp_s')} | {UNITY_FIG14.get(r['model'], '-')} "
            f"| {_ratio(r, 'megatron_s')} "
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
