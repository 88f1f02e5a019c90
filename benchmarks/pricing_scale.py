"""What pricing one plan costs as the machine grows: BERT-Large (24 layers, hidden 1024, seq 512;
`transformer_shapes.bert_large`), weak scaling at 4 sequences per GPU, on `dgx-a100:N/8` for
N = 8, 128, 2,048 and 65,536 GPUs, all measured in one run (run on demand, never in tests).

    .venv/bin/python benchmarks/pricing_scale.py                    # the table
    .venv/bin/python benchmarks/pricing_scale.py --devices 8,128 --check
    PYTHONPATH=/path/to/older/tree .venv/bin/python benchmarks/pricing_scale.py --skip-over 60

Three plans per size: data parallelism over every GPU (`data-parallel`), Megatron's layout
(`megatron`: tensor 8 within a node x data across nodes) and a pipelined 3-D plan as the
`megatron-lm` baseline builds it (`megatron-lm`: tensor 4 x pipeline 2 x data N/8, 1F1B over 32
micro-batches of one sequence per replica, ZeRO-1, the attention core recomputed). Per plan and
size, CPU seconds (`time.process_time`, this process alone) of:

* **price**: `estimate_graph` of the mapped plan, what a plan costs to price (the search prices
  every plan it compares this way): with roles (`cost/roles.py`), one device per role; the
  median of `--repeat` (3) pricings, what lived before frozen out of garbage collection;
* **map**: building the plan as its baseline does (`plans.finish`: simplify, the machine-mapping
  DP choosing views, then the estimate), for reference: above 64 devices the DP prices each op's
  candidate views on one device per role of its own pieces (`roles.placement_reps`);

and the estimate's iteration time, peak memory and number of roles. `--check` also prices the
plan per device (`roles=False`, the slow path) and prints the largest relative difference of
iteration time and peak memory. `--skip-over S`: sizes after one whose price took more than S
seconds are skipped (an older tree's per-device pricing grows with the devices).

`--search` adds a second table (`--search-only`: only it): a whole joint search
(`unity_search`, `budget=2`, `pipelines=False`, Adam) of the zoo BERT (`small`, 80 ops) with one
sample per GPU on `dgx-a100:N/8` (8 GPUs: `dgx-a100:1`) for N in `--search-devices` (8, 128,
2,048, 8,192), all in this process (`UNITYC_SEARCH_WORKERS=1`): its CPU seconds, the plan and its
iteration time (issue 25: "the search at any device count spends its time on candidates, not on
counting devices").
"""

from __future__ import annotations

import argparse
import gc
import inspect
import os
import sys
import time
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from transformer_shapes import bert_large

from unityc.cost.estimate import Estimate, estimate_graph
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine.presets import preset
from unityc.machine.spec import Machine
from unityc.rewrites.match import compile_rules
from unityc.rewrites.parser import load_library
from unityc.search.background import WORKERS_ENV
from unityc.search.layout import Layout
from unityc.search.megatron_lm import SELECTIVE, Config, build
from unityc.search.plans import PricedPlan, Pricing, data_parallel_plan, finish
from unityc.search.strategies import megatron_layouts
from unityc.search.unity import UnityOptions, unity_search

GIB = 2**30
SIZES = (8, 128, 2048, 65536)
PER_GPU = 4
PLANS = ("data-parallel", "megatron", "megatron-lm")


def plan(name: str, machine: Machine, pricing: Pricing) -> tuple[PricedPlan, float]:
    """The mapped plan and the CPU seconds its baseline took to build it."""
    devices = machine.num_devices
    graph = bert_large(PER_GPU * devices)
    began = time.process_time()
    if name == "data-parallel":
        built = data_parallel_plan(graph, machine, pricing)
    elif name == "megatron":
        built = finish(
            "megatron",
            megatron_layouts(graph, Layout(data=devices // 8, tensor=8))[0].graph,
            machine,
            pricing,
        )
    else:
        data = devices // 8
        built = build(graph, machine, Config(4, 2, data, 1, PER_GPU * devices // data, SELECTIVE), pricing)
    return built, time.process_time() - began


def price(
    built: PricedPlan, machine: Machine, optimizer: str, repeat: int = 1, **kwargs: object
) -> tuple[Estimate, float]:
    """The estimate and the median CPU seconds of `repeat` pricings (a single one varies by
    +-50 % on a loaded machine). The objects alive before are frozen out of garbage collection
    (`gc.freeze`): its full collections otherwise walk every object of the process, the
    machines and plans of earlier rows included, and charge that to whatever runs then."""
    took = []
    gc.collect()
    gc.freeze()  # what lives already (machines of 65,536 devices met before) is not scanned again
    try:
        for _ in range(repeat):
            began = time.process_time()
            e = estimate_graph(built.graph, machine, optimizer=optimizer, **kwargs)  # type: ignore[arg-type]
            took.append(time.process_time() - began)
    finally:
        gc.unfreeze()
    return e, sorted(took)[len(took) // 2]


SEARCH_SIZES = (8, 128, 2048, 8192)


def search_table(sizes: Sequence[int]) -> None:
    """The zoo BERT's joint search at each size (see the module docstring)."""
    os.environ[WORKERS_ENV] = "1"  # the search and the plans beside it in this process: its CPU s
    rules = compile_rules(load_library())
    print("\nzoo BERT (small), one sample per GPU, unity_search(budget=2, pipelines=False), adam")
    print("| GPUs | machine | search (CPU s) | plan | iteration |")
    print("|---|---|---|---|---|")
    for n in sizes:
        graph = from_module(import_model(ModelSpec("bert", "small", batch=n)))
        name = f"dgx-a100:{max(n // 8, 1)}"
        options = UnityOptions(budget=2, pipelines=False, optimizer="adam")
        gc.collect()
        began = time.process_time()
        result = unity_search(graph, preset(name), rules, options)
        took = time.process_time() - began
        print(
            f"| {n:,} | {name} | {took:.2f} | {result.source} | {result.estimate.iteration_s * 1e3:.4f} ms |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default=",".join(map(str, SIZES)), help="GPU counts (multiples of 8)")
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--check", action="store_true", help="also price per device and compare")
    parser.add_argument("--skip-over", type=float, default=0.0, help="skip larger sizes past this price")
    parser.add_argument("--plans", default=",".join(PLANS), help="which plans")
    parser.add_argument("--repeat", type=int, default=3, help="price each plan this many times (median)")
    parser.add_argument("--search", action="store_true", help="also time whole searches (zoo BERT)")
    parser.add_argument("--search-only", action="store_true", help="only the search table")
    parser.add_argument("--search-devices", default=",".join(map(str, SEARCH_SIZES)), help="GPU counts")
    args = parser.parse_args()
    if args.search_only:
        search_table([int(s) for s in args.search_devices.split(",")])
        return
    sizes = [int(s) for s in args.devices.split(",")]
    has_roles = "roles" in inspect.signature(estimate_graph).parameters
    pricing = Pricing(optimizer=args.optimizer)
    header = ["plan", "GPUs", "price (CPU s)", "map (CPU s)", "roles", "iteration", "peak memory"]
    if args.check:
        header += ["per device (CPU s)", "max rel. diff"]
    print(f"BERT-Large, {PER_GPU} sequences per GPU, {args.optimizer}; unityc from {_tree()}")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in args.plans.split(","):
        skipping = False
        for n in sizes:
            if skipping:
                print(f"| {name} | {n:,} | skipped (> {args.skip_over:g} s before) | | | | |")
                continue
            machine = preset(f"dgx-a100:{n // 8}")  # (building a machine of 65,536 devices takes ~1 s)
            built, mapped_s = plan(name, machine, pricing)
            e, priced_s = price(built, machine, args.optimizer, args.repeat)
            roles = getattr(e, "roles", None)
            row = [name, f"{n:,}", f"{priced_s:.2f}", f"{mapped_s:.2f}",
                   str(len(roles.reps)) if roles is not None else "-",
                   f"{e.iteration_s * 1e3:.2f} ms", f"{e.peak_memory / GIB:.2f} GiB"]  # fmt: skip
            if args.check and has_roles:
                every, every_s = price(built, machine, args.optimizer, roles=False)
                diff = max(
                    abs(e.iteration_s - every.iteration_s) / every.iteration_s,
                    abs(e.peak_memory - every.peak_memory) / every.peak_memory,
                )
                row += [f"{every_s:.2f}", f"{diff:.1e}"]
            print("| " + " | ".join(row) + " |", flush=True)
            skipping = args.skip_over > 0 and priced_s > args.skip_over
    if args.search:
        search_table([int(s) for s in args.search_devices.split(",")])


def _tree() -> str:
    import unityc

    return os.path.dirname(os.path.dirname(os.path.abspath(unityc.__file__)))


if __name__ == "__main__":
    main()
