"""Does the search split a 1-D signal network along its length where that pays? (issue 29: the
1-D forms; run on demand, never in `make test`).

    .venv/bin/python benchmarks/spatial_1d.py                        # dgx-a100:1, batch 2, 2^16 samples
    .venv/bin/python benchmarks/spatial_1d.py --batch 8 --length 4096

The model (`tests/codegen/vision_models.py:signal1d`, also the search test's) is a Conv1d
front-end of the kind speech and sensor models put before their encoder: `depth` stages of two
"same" 3-tap convolutions (BatchNorm, ReLU) and a 2x max pool, channels doubling, then the mean
over time and a linear classifier. The importer lowers a 1-D op to a 2-D one over a height of 1,
so the width forms (`spatial.rules`, the whole-graph spatial plans) split its length with a
halo. With fewer signals than devices, data parallelism leaves devices idle; the table says
what the search returns, how its convolutions are split, and the data-parallel and `spatial`
baselines, on the roofline model.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections import Counter
from pathlib import Path

from unityc.cost.units import format_time
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine import load_machine
from unityc.passes.unity_search import load_rules
from unityc.search.baselines import data_parallel, spatial
from unityc.search.unity import UnityOptions, unity_search

MODEL = Path(__file__).resolve().parent.parent / "tests" / "codegen" / "vision_models.py"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machine", default="dgx-a100:1")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=65536)
    parser.add_argument("--time-limit", type=float, default=0.0)
    args = parser.parse_args()
    model = f"{MODEL}:signal1d"
    spec = ModelSpec(model, "small", args.batch, (("length", str(args.length)),))
    graph = from_module(import_model(spec))
    machine = load_machine(args.machine)
    options = UnityOptions(time_limit=args.time_limit or None)
    began = time.monotonic()
    result = unity_search(graph, machine, load_rules(""), options)
    seconds = time.monotonic() - began
    forms = Counter(
        str(list(result.plan.type_of(node.operands[0]).shard))
        for node in result.plan.nodes.values()
        if node.op == "pcg.conv2d"
    )
    rows = [
        ("search", result.estimate.iteration_s, f"{result.source}; convolutions' input shards {dict(forms)}")
    ]
    for name, build in (("data parallel", data_parallel), ("spatial", spatial)):
        try:
            plan = build(graph, machine, options)
            rows.append((name, plan.estimate.iteration_s, plan.note))
        except ValueError as e:
            rows.append((name, float("nan"), str(e)))
    print(f"{args.machine}, {args.batch} signals of {args.length} samples, search {seconds:.0f} s\n")
    print("| plan | iteration | vs search | how |")
    print("|---|---|---|---|")
    for name, s, how in rows:
        print(f"| {name} | {format_time(s)} | {s / result.estimate.iteration_s:.2f}x | {how} |")
    print(f"\n{resource.getrusage(resource.RUSAGE_SELF).ru_utime:.0f} s CPU")


if __name__ == "__main__":
    main()
