"""fp32 against bf16-mixed on the cost model: the same model and machine, the baselines (and
with --search the joint search) priced in both precisions. bf16 shrinks compute (tensor-core
rates) and activation traffic, while the gradient reductions of the fp32 master weights stay
as they are, so plans that move fewer gradient bytes gain: the best plan can change.

    python benchmarks/precision.py [--model bert] [--per-gpu 4] [--machines dgx-a100:4,summit:2]
                                   [--search SECONDS]

Prints, per machine and precision, each plan's iteration time, its gradient sync + update part,
and the fastest plan. V100s (summit) have no bf16 tensor cores: bf16 runs at the fp32 rate
there, and only traffic and memory shrink.
"""

from __future__ import annotations

import argparse
import sys

from unityc.cost.estimate import Estimate
from unityc.dialects.precision import BF16_MIXED, FP32, precision_attrs
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.passes.unity_search import load_rules
from unityc.search.baselines import data_parallel, megatron
from unityc.search.unity import UnityOptions, unity_search


def graph_of(model: str, batch: int, precision: str) -> Graph:
    graph = from_module(import_model(ModelSpec(model, "paper", batch=batch)))
    graph.function_attrs.update(precision_attrs(precision))
    return graph


def row(name: str, e: Estimate) -> tuple[str, float, float, float]:
    return name, e.iteration_s * 1e3, e.update_s * 1e3, e.peak_memory / 2**30


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert")
    parser.add_argument(
        "--per-gpu", type=int, default=4, help="samples per device (global batch = this x devices)"
    )
    parser.add_argument("--machines", default="dgx-a100:1,dgx-a100:4,dgx-h100:4,summit:2")
    parser.add_argument(
        "--search", type=float, default=0.0, help="also run unity-search with this time limit (s)"
    )
    args = parser.parse_args(argv)
    rules = load_rules("") if args.search else None
    print(f"{args.model} (paper config), {args.per_gpu} samples per device, SGD\n")
    print("| machine | precision | plan | iteration (ms) | grad sync + update (ms) | peak memory (GiB) |")
    print("|---|---|---|---:|---:|---:|")
    for name in args.machines.split(","):
        machine = load_machine(name)
        base = graph_of(args.model, args.per_gpu * machine.num_devices, FP32)
        for precision in (FP32, BF16_MIXED):
            graph = base.copy()
            graph.function_attrs.update(precision_attrs(precision))
            rows = [row("data-parallel", data_parallel(graph, machine).estimate)]
            best = megatron(graph, machine)
            rows.append(row(f"megatron ({best.note.split(';')[0]})", best.estimate))
            if rules is not None:
                found = unity_search(graph, machine, rules, UnityOptions(time_limit=args.search))
                rows.append(row("unity-search", found.estimate))
            fastest = min(rows, key=lambda r: r[1])[0]
            for plan, ms, sync, peak in rows:
                mark = " **best**" if plan == fastest else ""
                print(
                    f"| {name} | {precision} | {plan}{mark} | {ms:.2f} | {sync:.2f} | {peak:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
