"""Memory levers against the baselines, in the shape of Galvatron-BMW's evaluation: BERT-Large,
a T5-3B-shaped encoder-decoder and Llama-3-8B (`transformer_shapes.py`, Adam, fp32) on 8 and 16
A100s (`dgx-a100:1`, `dgx-a100:2`) with 8, 12 and 16 GiB per device: throughput in samples/s on
the cost model (the same for every method) of the joint search against the baselines. Then the
Llama-3-8B headline: global batch 32 on dgx-a100:1 (80 GB), the joint search against the best
plan without the levers.

    python benchmarks/memory_levers.py [--models BERT-Large,T5-3B] [--machines dgx-a100:1]
        [--budgets 8,12] [--time-limit 240] [--no-headline]

Global batch: BERT-Large and T5-3B, each method at the batch (of `BATCHES`, doubling) that gives
it the most throughput among those that fit, its largest fitting batch in practice; Llama-3-8B,
a common global batch of 32 in every cell. The joint search runs at the batch where the fastest
baseline of its row and `galvatron` had their best (it weighs their plans, so it is never slower
there) and at the next larger batch of the list (smaller batches, largest first, if none fits).

Methods: `unity-search` (the joint search, `--budget 1`, bounded by `--time-limit`; it
compares its own plan with the data-parallel, Megatron, zero, galvatron and pipelined plans, with
ZeRO stages and recomputation on every plan that does not fit), `DP` (data parallel), `ZeRO-3`
(the `zero` baseline, FSDP: stage 3, recomputing every op where only that fits), `TP` (Megatron's
layout at the node's tensor degree, 8), `DP+TP` (the fastest Megatron layout with a tensor degree
between 1 and 8), `megatron` (the fastest Megatron layout), `galvatron` (Galvatron-BMW's
per-layer DP over layers x memory). The fixed layouts (DP, ZeRO-3, TP, DP+TP, megatron) are
mapped once on the full 80 GB machine and checked against each budget; `galvatron` and the search
run on the machine with the budget. A cell is "-" where no batch fits (named below the table);
a search cell slower than `galvatron`'s is marked `!`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(__file__))

from transformer_shapes import MODELS

from unityc.graph import Graph
from unityc.machine.presets import preset
from unityc.machine.spec import Machine
from unityc.passes.unity_search import load_rules
from unityc.search.galvatron import galvatron_plan
from unityc.search.plans import PricedPlan, Pricing, data_parallel_plan, megatron_plans, zero_version
from unityc.search.unity import UnityOptions, unity_search
from unityc.search.views import strip_views

GIB = 2**30
BUDGETS = (8, 12, 16)
MACHINES = ("dgx-a100:1", "dgx-a100:2")
TABLE_MODELS = ("BERT-Large", "T5-3B", "Llama-3-8B")
BATCHES = {"BERT-Large": (16, 32, 64, 128, 256), "T5-3B": (16, 32, 64), "GPT-2 XL": (16, 32, 64)}
COMMON_BATCH = {"Llama-3-8B": 32}
BASELINES = ("DP", "ZeRO-3", "TP", "DP+TP", "megatron", "galvatron")
METHODS = ("unity-search", *BASELINES)
PRICING = Pricing(optimizer="adam")
RULES = load_rules("")


def tensor_degree(plan: PricedPlan) -> int:
    text = plan.note.split("tensor ", 1)
    return int(text[1].split(";")[0]) if len(text) > 1 else 1


def batches(model: str) -> tuple[int, ...]:
    return (COMMON_BATCH[model],) if model in COMMON_BATCH else BATCHES[model]


class Fixed:
    """The plans that do not depend on the budget, per (model, machine, batch), built once."""

    def __init__(self) -> None:
        self.graphs: dict[tuple[str, int], Graph] = {}
        self.plans: dict[tuple[str, str, int], dict[str, list[PricedPlan]]] = {}

    def graph(self, model: str, batch: int) -> Graph:
        if (model, batch) not in self.graphs:
            self.graphs[(model, batch)] = strip_views(MODELS[model](batch))
        return self.graphs[(model, batch)]

    def get(self, model: str, machine: str, batch: int) -> dict[str, list[PricedPlan]]:
        key = (model, machine, batch)
        if key in self.plans:
            return self.plans[key]
        m = preset(machine)
        node = m.nodes[0].num_devices
        graph = self.graph(model, batch)
        dp = data_parallel_plan(graph, m, PRICING)
        megatron = megatron_plans(graph, m, PRICING)
        self.plans[key] = {
            "DP": [dp],
            "ZeRO-3": [zero_version(dp, m, PRICING, 3), zero_version(dp, m, PRICING, 3, recompute=True)],
            "TP": [p for p in megatron if tensor_degree(p) == node],
            "DP+TP": [p for p in megatron if 1 < tensor_degree(p) < node],
            "megatron": megatron,
            "bases": [dp, *megatron],
        }
        return self.plans[key]


def fastest_fitting(plans: list[PricedPlan], budget: float) -> PricedPlan | None:
    fitting = [p for p in plans if p.estimate.peak_memory <= budget]
    return min(fitting, key=lambda p: p.estimate.iteration_s, default=None)


Cell = tuple[float, int, str] | None
"""(samples/s, global batch, what the plan is), None where no batch fits."""


def best_over(
    batch_list: tuple[int, ...], plan_at: Callable[[int], PricedPlan | None], budget: float
) -> Cell:
    """The best throughput over the batches, ascending, stopping at the first that does not fit
    (a larger batch needs more memory)."""
    best: Cell = None
    for batch in batch_list:
        plan = plan_at(batch)
        if plan is None or plan.estimate.peak_memory > budget:
            break
        throughput = batch / plan.estimate.iteration_s
        if best is None or throughput > best[0]:
            best = (throughput, batch, f"{plan.name} ({plan.note})")
    return best


def search(graph: Graph, machine: Machine, time_limit: float) -> PricedPlan:
    options = UnityOptions(budget=1, optimizer="adam", time_limit=time_limit)
    r = unity_search(graph, machine, RULES, options)
    stopped = f" [stopped early: {r.report.stopped_early}]" if r.report.stopped_early else ""
    return PricedPlan("unity-search", r.plan, r.estimate, r.mapped, r.source + stopped)


def row(model: str, machine: str, gib: int, fixed: Fixed, time_limit: float) -> dict[str, Cell]:
    budget = gib * GIB
    m = preset(machine).with_memory(budget)
    listed = batches(model)
    cells: dict[str, Cell] = {}
    for method in ("DP", "ZeRO-3", "TP", "DP+TP", "megatron"):

        def fixed_at(b: int, method: str = method) -> PricedPlan | None:
            return fastest_fitting(fixed.get(model, machine, b)[method], budget)

        cells[method] = best_over(listed, fixed_at, budget)

    def galvatron_at(b: int) -> PricedPlan | None:
        try:
            return galvatron_plan(fixed.graph(model, b), m, PRICING, fixed.get(model, machine, b)["bases"])
        except ValueError:  # no layer strategy fits at any tensor degree
            return None

    cells["galvatron"] = best_over(listed, galvatron_at, budget)
    # the search at the batch of the row's best baseline and of galvatron (it weighs their plans:
    # never slower there) and at the next larger batch of the list; smaller ones if none fits
    ahead = max((c for c in cells.values() if c is not None), default=None)
    start = listed[0] if ahead is None else ahead[1]
    tried = {b for b in listed if b >= start}
    tried = set(sorted(tried)[:2]) | ({cells["galvatron"][1]} if cells["galvatron"] else set())
    best: Cell = None
    for b in [*sorted(tried), *sorted((b for b in listed if b < min(tried)), reverse=True)]:
        if best is not None and b < min(tried):
            break
        plan = search(fixed.graph(model, b), m, time_limit)
        if plan.estimate.peak_memory > budget:
            continue
        throughput = b / plan.estimate.iteration_s
        if best is None or throughput > best[0]:
            best = (throughput, b, plan.note)
    cells["unity-search"] = best
    return cells


def text(cell: Cell) -> str:
    return "-" if cell is None else f"{cell[0]:.2f} (b{cell[1]})"


def table(models: list[str], machines: list[str], budgets: list[int], time_limit: float) -> None:
    fixed = Fixed()
    print(f"| model | machine | GiB | {' | '.join(METHODS)} |", flush=True)
    print("|" + "---|" * (3 + len(METHODS)), flush=True)
    missing: list[str] = []
    sources: list[str] = []
    for model in models:
        for machine in machines:
            for gib in budgets:
                started = time.monotonic()
                cells = row(model, machine, gib, fixed, time_limit)
                shown = [text(cells[m]) for m in METHODS]
                ours, theirs = cells["unity-search"], cells["galvatron"]
                if theirs is not None and (ours is None or ours[0] < theirs[0] * (1 - 1e-9)):
                    shown[0] += " !"
                missing += [f"{model} / {machine} / {gib} GiB: {m}" for m in METHODS if cells[m] is None]
                if ours is not None:
                    sources.append(f"{model} / {machine} / {gib} GiB (b{ours[1]}): {ours[2]}")
                took = time.monotonic() - started
                print(
                    f"| {model} | {machine} | {gib} | {' | '.join(shown)} |  <!-- {took:.0f} s -->",
                    flush=True,
                )
    print("\nNo batch fits:")
    for line in missing:
        print(f"  {line}")
    print("\nWhere the joint search's plan comes from:")
    for line in sources:
        print(f"  {line}")


def headline(time_limit: float) -> None:
    """Llama-3-8B, global batch 32, seq 2048, Adam, on dgx-a100:1 (80 GB per device)."""
    m = preset("dgx-a100:1")
    graph = strip_views(MODELS["Llama-3-8B"](32))
    plain = [data_parallel_plan(graph, m, PRICING), *megatron_plans(graph, m, PRICING)]
    fitting = [p for p in plain if p.estimate.fits]
    print("\nLlama-3-8B, global batch 32, seq 2048, Adam (fp32), dgx-a100:1:")
    for p in plain:
        e = p.estimate
        verdict = "" if e.fits else " (does not fit)"
        peak = f"peak {e.peak_memory / GIB:.1f} GiB{verdict}"
        print(f"  without levers: {p.name} ({p.note[:40]}): {e.iteration_s:.2f} s, {peak}")
    r = search(graph, m, time_limit)
    e = r.estimate
    verdict = "" if e.fits else " (does not fit)"
    print(f"  unity-search: {r.note}: {e.iteration_s:.2f} s/iteration = {32 / e.iteration_s:.2f} samples/s")
    print(f"    peak {e.peak_memory / GIB:.1f} GiB{verdict}")
    if fitting:
        best = min(fitting, key=lambda p: p.estimate.iteration_s)
        print(f"  best without levers: {best.name}: {32 / best.estimate.iteration_s:.2f} samples/s")
    else:
        print("  best without levers: none fits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(TABLE_MODELS))
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--time-limit", type=float, default=240.0, help="seconds per joint search")
    parser.add_argument("--no-table", action="store_true")
    parser.add_argument("--no-headline", action="store_true")
    args = parser.parse_args()
    if not args.no_table:
        budgets = [int(b) for b in args.budgets.split(",")]
        table(args.models.split(","), args.machines.split(","), budgets, args.time_limit)
    if not args.no_headline:
        headline(args.time_limit)


if __name__ == "__main__":
    main()
