"""Pipelined plans against the other strategies, on the cost model (run on demand, never in `make test`).

    .venv/bin/python benchmarks/pipelines.py                 # all three tables, a few minutes
    .venv/bin/python benchmarks/pipelines.py --tables b --nodes 4,8,16,32 --layers 0

(a) BERT-Large on Summit (Unity OSDI'22 Fig. 15a): the joint search with data + model
    parallelism only (no rule that makes partial sums, no attention-head rule, no pipelines),
    then + reduction parallelism, + attention heads, + pipelines (Unity reports 1.0, 1.2, 1.4x).
    Seeds and whole-graph Megatron plans are off in every row (they use reductions and heads);
    the data-parallel whole-graph plan is the common floor (the search's own plan is shown
    beside it). `--per-gpu` sequences per GPU (Unity's: 4), `--steps 1,2` runs some rows only
    (rows can run in parallel processes).
(b) GPT-2 XL and Llama-3-8B shapes (hidden, heads, FFN, vocabulary, sequence 1024; `--layers`
    of them, 0 = the real depth) on DGX-A100 nodes whose nodes talk over one 100 Gb/s Ethernet
    link each (12.5 GB/s, 10 us) instead of InfiniBand: the joint search (with pipelines)
    against gpipe (even split), pipedream (its partition DP, 1F1B), megatron and data parallel.
    Global batch 2 sequences per GPU.
(c) ResNet-50 (224^2, batch 128) and BERT-Large (batch 16) on 002's machine of 2 x V100 + 2 x M4
    (examples/machines/hetero_v100_m4.toml) and on 4 x V100 on PCIe: gpipe's even split vs
    hetero-gpipe vs the joint search (002 reports +3-4 % over GPipe on equal GPUs, about +7 % on
    mixed devices). hetero-gpipe's plans are priced, not runnable (stages of unequal width; for
    ResNet-50 also batch norm over each micro-batch alone), so the search never returns them.

Imports are cached under `--cache` (default build/bench-cache). Estimated iteration times
(roofline cost model), not measurements.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace

from big_shapes import MODELS as BIG_SHAPES

from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.machine.spec import Link, Machine
from unityc.passes.unity_search import load_rules
from unityc.rewrites.terms import App, subterms
from unityc.search.baselines import data_parallel, megatron
from unityc.search.pipeline import PipelineOptions, even_split_plan, hetero_gpipe_plan, pipedream_plan
from unityc.search.unity import UnityOptions, unity_search

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
HETERO = os.path.join(ROOT, "examples", "machines", "hetero_v100_m4.toml")
EQUAL = os.path.join(ROOT, "examples", "machines", "v100x4_pcie.toml")


def load(spec: ModelSpec, cache: str, tag: str) -> Graph:
    from unityc.dialects.source import make_context, parse_source

    path = os.path.join(cache, f"{tag}.mlir")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        module = import_model(spec)
        with open(path + ".tmp", "w") as f:
            f.write(str(module))
        os.replace(path + ".tmp", path)
    with open(path) as f:
        return from_module(parse_source(make_context(), f.read(), path, 0, True))


def slow_nodes(base: Machine, bandwidth: float = 12.5e9, latency: float = 10e-6) -> Machine:
    """`base` with one 100 Gb/s Ethernet link per node between nodes."""
    nodes = tuple(replace(n, inter_node=Link(bandwidth, latency)) for n in base.nodes)
    return Machine(f"{base.name} (100GbE)", base.kinds, nodes, base.description)


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def timed(build: Callable[[], object]) -> tuple[object | None, str]:
    try:
        return build(), ""
    except ValueError as e:
        return None, str(e).splitlines()[0][:60]


def table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if rows:
        print()
    sys.stdout.flush()


# --- (a) --------------------------------------------------------------------------------------


def _ops(rule) -> set[str]:  # type: ignore[no-untyped-def]
    return {t.op for term in rule.target for t in subterms(term) if isinstance(t, App)}


def ablation(args: argparse.Namespace) -> None:
    rules = load_rules("")
    heads = [r for r in rules if "pcg.attention" in _ops(r) and "parallel.reduce" in _ops(r)]
    reduction = [r for r in rules if "parallel.reduce" in _ops(r) and r not in heads]
    model_only = [r for r in rules if r not in heads and r not in reduction]
    machine = load_machine(f"summit:{args.summit}")
    batch = args.per_gpu * machine.num_devices
    g = load(ModelSpec("bert", "paper", batch=batch), args.cache, f"bert_paper_b{batch}")
    base = UnityOptions(budget=args.budget, seeds=False, whole_graph=False, pipelines=False)
    steps = [
        ("data + model", model_only, base),
        ("+ reduction", model_only + reduction, base),
        ("+ attention heads", rules, base),
        ("+ pipeline", rules, replace(base, pipelines=True)),
    ]
    rows = []
    first = None
    dp = data_parallel(g, machine).estimate.iteration_s
    chosen = [int(k) for k in args.steps.split(",")] if args.steps else range(1, len(steps) + 1)
    for name, subset, options in (steps[k - 1] for k in chosen):
        t = time.monotonic()
        result = unity_search(g, machine, subset, options)
        seconds = min(result.estimate.iteration_s, dp)
        source = result.source if result.estimate.iteration_s <= dp else "data-parallel (floor)"
        first = first or seconds
        rows.append([name, str(len(subset)), ms(result.estimate.iteration_s), ms(seconds),
                     f"{first / seconds:.2f}x", source[:90], f"{time.monotonic() - t:.0f}"])  # fmt: skip
    print(f"(a) BERT-Large, batch {batch}, on {machine.summary()} (Unity Fig. 15a: 1.0 / 1.2 / 1.4x)\n")
    header = ["parallelism", "rules", "search's plan (ms)", "iteration (ms)", "speedup", "plan", "search (s)"]
    table(header, rows)


# --- (b) --------------------------------------------------------------------------------------

LLM = {  # the big-shape benchmark's configs, at sequence 1024
    name: (model, {**settings, "seq": 1024})
    for name, (model, settings, _) in BIG_SHAPES.items()
    if name in ("GPT-2 XL", "Llama-3-8B")
}


def llms(args: argparse.Namespace) -> None:
    rules = load_rules("")
    options = UnityOptions(budget=args.budget, time_limit=args.time_limit or None)
    popts = PipelineOptions()
    print("(b) LLM shapes on DGX-A100 nodes over 100 Gb/s Ethernet; iteration time (ms), estimated\n")
    header = ["model", "GPUs", "batch", "joint search", "gpipe", "pipedream", "megatron", "data parallel",
              "vs best baseline", "joint search's plan", "search (s)"]  # fmt: skip
    table(header, [])  # rows as they are had (a long run keeps what it finished)
    for name, (model, settings) in LLM.items():
        settings = dict(settings)
        if args.layers:
            settings["layers"] = args.layers
        for nodes in [int(n) for n in args.nodes.split(",")]:
            machine = slow_nodes(load_machine(f"dgx-a100:{nodes}"))
            batch = 2 * machine.num_devices
            overrides = tuple((k, str(v)) for k, v in settings.items())
            tag = f"{model[3:]}_" + "_".join(f"{k}{v}" for k, v in settings.items()) + f"_b{batch}"
            g = load(ModelSpec(model, "paper", batch=batch, overrides=overrides), args.cache, tag)
            t = time.monotonic()
            found = unity_search(g, machine, rules, options)
            search_s = time.monotonic() - t
            values = {}
            for label, build in (
                ("gpipe", lambda g=g, m=machine: even_split_plan(g, m, popts)),
                ("pipedream", lambda g=g, m=machine: pipedream_plan(g, m, popts)),
                ("megatron", lambda g=g, m=machine: megatron(g, m)),
                ("data parallel", lambda g=g, m=machine: data_parallel(g, m)),
            ):
                plan, _ = timed(build)
                values[label] = None if plan is None else plan.estimate.iteration_s  # type: ignore[attr-defined]
            best = min((v for v in values.values() if v is not None), default=None)
            row = [
                f"{name} ({settings['layers']} layers)", f"{nodes} x 8", str(batch),
                ms(found.estimate.iteration_s),
                *(ms(v) for v in values.values()),
                f"{best / found.estimate.iteration_s:.2f}x" if best else "-",
                found.source[:70], f"{search_s:.0f}",
            ]  # fmt: skip
            print("| " + " | ".join(row) + " |", flush=True)
    print()


# --- (c) --------------------------------------------------------------------------------------


def hetero(args: argparse.Namespace) -> None:
    rules = load_rules("")
    options = UnityOptions(budget=args.budget)
    popts = PipelineOptions()
    print(
        "(c) papers/002's machine (2 x V100 + 2 x M4) and 4 x V100 on PCIe; iteration time (ms), estimated\n"
    )
    rows = []
    models = [
        ("ResNet-50", ModelSpec("resnet50", "paper", batch=128), "resnet50_paper_b128"),
        ("BERT-Large", ModelSpec("bert", "paper", batch=16), "bert_paper_b16"),
    ]
    for name, spec, tag in models:
        g = load(spec, args.cache, tag)
        for mname, path in (("2 V100 + 2 M4", HETERO), ("4 V100", EQUAL)):
            machine = load_machine(path)
            even, _ = timed(lambda g=g, m=machine: even_split_plan(g, m, popts, stages=4))
            het, _ = timed(lambda g=g, m=machine: hetero_gpipe_plan(g, m, popts))
            t = time.monotonic()
            found = unity_search(g, machine, rules, options)
            e = even.estimate.iteration_s if even else None  # type: ignore[attr-defined]
            h = het.estimate.iteration_s if het else None  # type: ignore[attr-defined]
            j = found.estimate.iteration_s
            rows.append([
                name, mname, ms(e), ms(h), ms(j),
                f"{e / h:.2f}x" if e and h else "-", f"{e / j:.2f}x" if e else "-",
                found.source[:80], f"{time.monotonic() - t:.0f}",
            ])  # fmt: skip
    table(
        ["model", "machine", "gpipe (even)", "hetero-gpipe", "joint search", "hetero-gpipe / gpipe",
         "joint / gpipe", "joint search's plan", "search (s)"],
        rows,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tables", default="abc", help="which tables (a, b, c)")
    parser.add_argument("--summit", type=int, default=4, help="Summit nodes for (a) (default 4)")
    parser.add_argument(
        "--per-gpu", type=int, default=4, help="sequences per GPU in (a) (default 4, as Unity's)"
    )
    parser.add_argument("--nodes", default="4,8", help="DGX-A100 node counts for (b) (default 4,8)")
    parser.add_argument(
        "--layers", type=int, default=4, help="layers of the LLM shapes, 0: real depth (default 4)"
    )
    parser.add_argument(
        "--steps", default="", help="rows of (a) to run, 1-4 (default all; speedups vs the first run)"
    )
    parser.add_argument("--budget", type=int, default=2, help="search budget (default 2)")
    parser.add_argument(
        "--time-limit", type=float, default=0.0, help="seconds per search in (b) (default none)"
    )
    parser.add_argument("--cache", default=os.path.join(ROOT, "build", "bench-cache"))
    args = parser.parse_args(argv)
    if "a" in args.tables:
        ablation(args)
    if "b" in args.tables:
        llms(args)
    if "c" in args.tables:
        hetero(args)


if __name__ == "__main__":
    main()
