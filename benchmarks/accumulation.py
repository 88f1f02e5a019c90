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

`--ranks 8` instead checks accumulation plans on `cpu:8` under torchrun (8 gloo processes, one
launch of `unityc.runtime.batch`): tiny BERT and MLP configs (the zoo's `small`, batch 16: two
rows per rank, one per micro-batch), data parallel with 2 steps (SGD, Adam) and with ZeRO-1 and
ZeRO-3 with recomputation (Adam), each `--check`ed against single-device PyTorch for 2 steps
(loss, every gradient, updated weights). Eight processes on two cores take minutes of CPU (torch
imported eight times), so this is a benchmark row, not a test (the tests check on 2 ranks,
`tests/codegen/test_torchrun_accumulation.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "codegen"))

from test_torchrun import _sections
from torchrun import torchrun, write_program
from transformer_shapes import MODELS
from xdsl.dialects.builtin import StringAttr

from unityc.cost.units import format_bytes, format_time
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module, to_module
from unityc.machine.presets import preset
from unityc.passes.unity_search import load_rules
from unityc.search.alternatives import accumulation_plan, microbatchable
from unityc.search.baselines import data_parallel, zero
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
    parser.add_argument("--ranks", type=int, default=0, help="check accumulation plans on cpu:RANKS instead")
    args = parser.parse_args()
    if args.ranks:
        check_on_ranks(args.ranks, args.out)
        return
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


RANK_PLANS = [  # (name, model, plan, steps, optimizer)
    ("bert-dp-acc2", "bert", "dp", 2, "sgd"),
    ("bert-dp-acc2-adam", "bert", "dp", 2, "adam"),
    ("bert-zero1-acc2", "bert", "zero1", 2, "adam"),
    ("mlp-zero3-recompute-acc2", "mlp", "zero3-recompute", 2, "adam"),
]


def rank_plan(graph: Graph, machine: str, kind: str, steps: int) -> Graph:
    """The data-parallel (`dp`) or ZeRO (`zero<stage>[-recompute]`) plan on `machine`, with
    `steps` accumulation steps."""
    options = UnityOptions(optimizer="adam")
    if kind == "dp":
        plan = data_parallel(graph, preset(machine), options).graph
    else:
        plan = zero(graph, preset(machine), options, None, int(kind[4]), "recompute" in kind).graph
    plan.module_attrs["unityc.machine"] = StringAttr(machine)
    plan.set_plan(replace(plan.plan, accumulation=steps))
    return plan


def check_on_ranks(ranks: int, out: str) -> None:
    machine = f"cpu:{ranks}"
    models = {
        name: from_module(import_model(ModelSpec(name, "small", batch=2 * ranks))) for name in ("bert", "mlp")
    }
    lines = [
        f"Accumulation plans under torchrun --check on {machine} (gloo, {ranks} processes, one "
        "launch), 2 steps",
        "",
        "| program | plan | accumulation | optimizer | check |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        entries = []
        for name, model, kind, steps, optimizer in RANK_PLANS:
            program = write_program(
                to_module(rank_plan(models[model], machine, kind, steps)), directory, name
            )
            args = ["--check", "--steps", "2", "--optimizer", optimizer]
            entries.append({"name": name, "program": str(program), "args": args})
        manifest = directory / "manifest.json"
        manifest.write_text(json.dumps(entries))
        began = time.perf_counter()
        run = torchrun("unityc.runtime.batch", ranks, str(manifest), cwd=directory)
        took = time.perf_counter() - began
    sections = _sections(run.output)
    failed = 0
    for name, model, kind, steps, optimizer in RANK_PLANS:
        section = sections.get(name, "")
        passed = section.endswith(": exit 0") and "check passed: 2 step(s)" in section
        failed += not passed
        verdict = "passed (loss, every gradient, updated weights)" if passed else "FAILED"
        lines.append(f"| {name} | {model} {kind} | {steps} | {optimizer} | {verdict} |")
        if not passed:
            print(section or run.report(), file=sys.stderr)
    lines += ["", f"torchrun exit {run.returncode}, {took:.0f} s wall"]
    print("\n".join(lines), flush=True)
    if out:
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
