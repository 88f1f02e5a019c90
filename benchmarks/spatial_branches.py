"""Inter-op placement of Inception-v3's branches against data parallelism (issue 29; run on
demand, never in `make test`).

    .venv/bin/python benchmarks/spatial_branches.py                       # summit:8, 64, 8 and 1 image/GPU
    .venv/bin/python benchmarks/spatial_branches.py --per-gpu 1 --machines summit:8

For each machine and images per GPU: the data-parallel plan and the branch plan
(`search/branches.py`: each Inception block's branches data parallel on disjoint device groups),
the iteration, and the busiest device's compute and communication, on the roofline model, SGD.
Data parallelism's compute is balanced over every device; a branch plan cannot lower that, it
can only trade the gradient all-reduce (each group syncs its branch's weights alone) against
moving each block's input into the groups and the branches' outputs to the join.
"""

from __future__ import annotations

import argparse
import resource
import time

from unityc.cost.units import format_bytes, format_time
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine import load_machine
from unityc.search.branches import branch_plan
from unityc.search.plans import PricedPlan, Pricing, data_parallel_plan


def row(machine_name: str, per_gpu: int, name: str, plan: PricedPlan) -> str:
    e = plan.estimate
    busiest = max(e.devices, key=lambda d: d.busy_s)
    return (
        f"| {machine_name} | {per_gpu} | {name} | {format_time(e.iteration_s)} "
        f"| {format_time(busiest.compute_s)} | {format_time(busiest.comm_s)} "
        f"| {format_bytes(e.peak_memory)} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default="summit:8", help="comma-separated")
    parser.add_argument("--per-gpu", type=int, nargs="*", default=[64, 8, 1])
    args = parser.parse_args()
    began = time.monotonic()
    print("| machine | images/GPU | plan | iteration | busiest compute | busiest comm | peak memory |")
    print("|---|---|---|---|---|---|---|")
    for machine_name in args.machines.split(","):
        machine = load_machine(machine_name)
        for per_gpu in args.per_gpu:
            spec = ModelSpec("inception_v3", "paper", batch=per_gpu * machine.num_devices)
            graph = from_module(import_model(spec))
            dp = data_parallel_plan(graph, machine, Pricing())
            print(row(machine_name, per_gpu, "data parallel", dp), flush=True)
            branches = branch_plan(graph, machine, Pricing())
            if branches is not None:
                speedup = dp.estimate.iteration_s / branches.estimate.iteration_s
                name = f"branches ({branches.note}): {speedup:.2f}x over DP"
                print(row(machine_name, per_gpu, name, branches), flush=True)
    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    print(f"\n{time.monotonic() - began:.0f} s wall, {cpu:.0f} s CPU")


if __name__ == "__main__":
    main()
