"""Gradient accumulation as a plan property (issue 25): BERT-Large (`transformer_shapes.py`,
Adam, fp32) at global batch 256 on 8 A100s with 8 GiB each (`dgx-a100:1` with its memory set
to 8 GiB), as Galvatron-BMW's evaluation runs it (plain data parallelism with 8 accumulation
steps). Prints, on the cost model:

1. the data-parallel plan with k = 1, 2, 4, ... accumulation steps: iteration time, peak memory
   per device (activations of one micro-batch), whether it fits;
2. the `data-parallel` accumulation baseline the search compares itself with (the fewest steps
   that fit) and the `zero` baselines (ZeRO-3, recomputed), for reference;
3. the joint search (`unity_search`, `--budget 1`, `--time-limit`), which weighs the
   accumulation plan among its alternatives: its plan must be at least as fast.

    python benchmarks/accumulation.py [--time-limit 300] [--batch 256] [--gib 8] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from transformer_shapes import MODELS

from unityc.cost.units import format_bytes, format_time
from unityc.machine.presets import preset
from unityc.passes.unity_search import load_rules
from unityc.search.alternatives import accumulation_plan, microbatchable
from unityc.search.levers import accumulated, accumulation_steps
from unityc.search.plans import Pricing, data_parallel_plan, zero_version
from unityc.search.unity import UnityOptions, unity_search
from unityc.search.views import strip_views

GIB = 2**30
PRICING = Pricing(optimizer="adam")


def row(name: str, note: str, e, seconds: float | None = None) -> str:  # type: ignore[no-untyped-def]
    fits = "yes" if e.fits else "no"
    took = f" | {seconds:.0f} s" if seconds is not None else " |"
    return (
        f"| {name} | {note} | {format_time(e.iteration_s)} | {format_bytes(e.peak_memory)} | {fits}"
        f" | {len(e.devices)}{took}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--gib", type=float, default=8.0)
    parser.add_argument("--machine", default="dgx-a100:1")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    machine = preset(args.machine).with_memory(args.gib * GIB)
    graph = strip_views(MODELS["BERT-Large"](args.batch))
    lines = [
        f"BERT-Large, batch {args.batch}, Adam fp32, {args.machine} with {args.gib:g} GiB per device "
        "(cost model, roofline)",
        "",
        "| plan | note | iteration | peak memory | fits | devices | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    start = time.perf_counter()
    dp = data_parallel_plan(graph, machine, PRICING)
    lines.append(row("data-parallel", dp.note, dp.estimate, time.perf_counter() - start))
    for k in accumulation_steps(dp.graph):
        start = time.perf_counter()
        e = PRICING.estimate(accumulated(dp.graph, k), machine)
        lines.append(
            row("data-parallel", f"{dp.note}, {k} accumulation steps", e, time.perf_counter() - start)
        )
    print("\n".join(lines), flush=True)
    assert microbatchable(graph), "BERT-Large's graph must run in micro-batches"
    start = time.perf_counter()
    baseline = accumulation_plan(dp, machine, PRICING)
    took = time.perf_counter() - start
    more = ["", "Baselines the search compares itself with:", ""]
    more += [
        "| plan | note | iteration | peak memory | fits | devices | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    if baseline is None:
        more.append("| data-parallel + accumulation | none fits | - | - | no | - | - |")
    else:
        more.append(row("data-parallel + accumulation", baseline.note, baseline.estimate, took))
    for stage, recompute in ((3, False), (3, True)):
        start = time.perf_counter()
        z = zero_version(dp, machine, PRICING, stage, recompute)
        more.append(row("zero", z.note, z.estimate, time.perf_counter() - start))
    print("\n".join(more), flush=True)
    lines += more
    start = time.perf_counter()
    options = UnityOptions(budget=1, optimizer="adam", time_limit=args.time_limit)
    r = unity_search(graph, machine, load_rules(""), options)
    took = time.perf_counter() - start
    stopped = f" [stopped early: {r.report.stopped_early}]" if r.report.stopped_early else ""
    accumulation = r.plan.plan.accumulation
    note = f"from {r.source}{stopped}; accumulation {accumulation}"
    search = ["", "The joint search:", ""]
    search += [
        "| plan | note | iteration | peak memory | fits | devices | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    search.append(row("unity-search", note, r.estimate, took))
    if baseline is not None:
        ratio = baseline.estimate.iteration_s / r.estimate.iteration_s
        search += [
            "",
            f"search / (data-parallel + accumulation) speed: {ratio:.3f}x (>= 1: search as fast or faster)",
        ]
    print("\n".join(search), flush=True)
    lines += search
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
