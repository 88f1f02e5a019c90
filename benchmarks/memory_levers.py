"""Memory levers against the baselines, in the shape of Galvatron-BMW's evaluation: BERT-Large,
GPT-2 XL and Llama-3-8B shapes (`transformer_shapes.py`, Adam, fp32) on 8 and 16 A100s with 8,
12 and 16 GiB per device, each method at the global batch (of those that fit) that gives it
the most throughput, in samples/s on the cost model (the same for every method). Then the
Llama-3-8B headline: global batch 32 on dgx-a100:1 (80 GB), the joint search against the best
plan without the levers.

    python benchmarks/memory_levers.py [--models BERT-Large,GPT-2 XL] [--machines dgx-a100:1]

Methods: `unity-search` (the joint search, `budget` 1, with ZeRO stages and recomputation
chosen per weight and per op), `DP` (data parallel), `ZeRO-3` (the `zero` baseline, FSDP),
`TP` (Megatron's layout at the node's tensor degree), `DP+TP` (the fastest Megatron layout with
a smaller tensor degree), `megatron` (the fastest Megatron layout), `galvatron` (Galvatron-BMW's
per-layer DP). A cell is "-" where no batch fits (named below the table).
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
from unityc.search.plans import Plan, Pricing, data_parallel_plan, megatron_plans, zero_plan
from unityc.search.unity import UnityOptions, strip_views, unity_search

GIB = 2**30
BUDGETS = (8, 12, 16)
MACHINES = ("dgx-a100:1", "dgx-a100:2")
BATCHES = {"BERT-Large": (16, 32, 64, 128, 256), "GPT-2 XL": (16, 32, 64), "Llama-3-8B": (16, 32)}
METHODS = ("unity-search", "DP", "ZeRO-3", "TP", "DP+TP", "megatron", "galvatron")
PRICING = Pricing(optimizer="adam")


def tensor_degree(plan: Plan) -> int:
    text = plan.note.split("tensor ", 1)
    return int(text[1].split(";")[0]) if len(text) > 1 else 1


class Fixed:
    """Plans that do not depend on the budget, per (model, machine, batch), built once."""

    def __init__(self) -> None:
        self.cache: dict[tuple[str, str, int], dict[str, Plan | None]] = {}
        self.megatron: dict[tuple[str, str, int], list[Plan]] = {}

    def plans(self, model: str, machine: str, batch: int, graph: Graph) -> dict[str, Plan | None]:
        key = (model, machine, batch)
        if key in self.cache:
            return self.cache[key]
        m = preset(machine)
        node = m.nodes[0].num_devices
        megatron = megatron_plans(graph, m, PRICING)
        fastest = lambda ps: min(ps, key=lambda p: p.estimate.iteration_s, default=None)  # noqa: E731
        self.cache[key] = {
            "DP": data_parallel_plan(graph, m, PRICING),
            "ZeRO-3": zero_plan(graph, m, PRICING, 3),
            "TP": fastest([p for p in megatron if tensor_degree(p) == node]),
            "DP+TP": fastest([p for p in megatron if 1 < tensor_degree(p) < node]),
        }
        self.megatron[key] = megatron
        return self.cache[key]


def budget_plan(
    method: str, graph: Graph, machine: Machine, fixed: dict[str, Plan | None], megatron: list[Plan]
) -> Plan | None:
    if method == "galvatron":
        try:
            return galvatron_plan(graph, machine, PRICING)
        except ValueError:  # no layer strategy fits
            return None
    if method == "unity-search":
        options = UnityOptions(budget=1, optimizer="adam", time_limit=120)
        r = unity_search(graph, machine, RULES, options)
        return Plan(r.source, r.plan, r.estimate, r.mapped, r.source)
    if method == "megatron":
        fits = [p for p in megatron if p.estimate.peak_memory <= machine.kinds[0].memory]
        return min(fits, key=lambda p: p.estimate.iteration_s, default=None)
    return fixed[method]


def fits(plan: Plan | None, budget: float) -> bool:
    return plan is not None and plan.estimate.peak_memory <= budget


def cell(
    model: str, machine: str, budget: int, method: str, build: Callable[[int], Graph], fixed: Fixed
) -> str:
    """The best throughput over the batches that fit, as text ("-" if none fits)."""
    m = preset(machine).with_memory(budget * GIB)
    best: tuple[float, int] | None = None
    for batch in BATCHES[model]:
        graph = strip_views(build(batch))
        plans = fixed.plans(model, machine, batch, graph)
        plan = budget_plan(method, graph, m, plans, fixed.megatron[(model, machine, batch)])
        if not fits(plan, budget * GIB):
            break  # a larger batch needs more memory
        assert plan is not None
        throughput = batch / plan.estimate.iteration_s
        if best is None or throughput > best[0]:
            best = (throughput, batch)
    return "-" if best is None else f"{best[0]:.1f} (b{best[1]})"


RULES = load_rules("")


def table(models: list[str], machines: list[str]) -> None:
    fixed = Fixed()
    print(f"| model | machine | GiB | {' | '.join(METHODS)} |")
    print("|" + "---|" * (3 + len(METHODS)))
    missing: list[str] = []
    for model in models:
        for machine in machines:
            for budget in BUDGETS:
                started = time.monotonic()
                row = [cell(model, machine, budget, method, MODELS[model], fixed) for method in METHODS]
                missing += [
                    f"{model} / {machine} / {budget} GiB: {m}"
                    for m, c in zip(METHODS, row, strict=True)
                    if c == "-"
                ]
                took = time.monotonic() - started
                print(
                    f"| {model} | {machine} | {budget} | {' | '.join(row)} |  <!-- {took:.0f} s -->",
                    flush=True,
                )
    print("\nsamples/s on the cost model (best global batch that fits in parentheses); no batch tried fits:")
    for line in missing:
        print(f"  {line}")


def headline() -> None:
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
    r = unity_search(graph, m, RULES, UnityOptions(budget=1, optimizer="adam", time_limit=300))
    e = r.estimate
    verdict = "" if e.fits else " (does not fit)"
    print(f"  unity-search: {r.source}: {e.iteration_s:.2f} s/iteration = {32 / e.iteration_s:.2f} samples/s")
    print(f"    peak {e.peak_memory / GIB:.1f} GiB{verdict}")
    if fitting:
        best = min(fitting, key=lambda p: p.estimate.iteration_s)
        print(f"  best without levers: {best.name}: {32 / best.estimate.iteration_s:.2f} samples/s")
    else:
        print("  best without levers: none fits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--no-table", action="store_true")
    parser.add_argument("--no-headline", action="store_true")
    args = parser.parse_args()
    if not args.no_table:
        table(args.models.split(","), args.machines.split(","))
    if not args.no_headline:
        headline()


if __name__ == "__main__":
    main()
