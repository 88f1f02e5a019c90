"""The cost model's predicted iteration times against measured ones, over a set of plans.

    python benchmarks/cost_model_accuracy.py [--steps 8] [--warmup 3] [--cost roofline|profile]
                                             [--profile FILE] [--four] [--only NAME ...] [--fifo]
                                             [--record FILE | --measured FILE]

Every plan (serial, data, tensor/Megatron, reduction and hybrid parallelism of MLP, BERT and
DLRM at sizes where a step takes milliseconds to a second; ZeRO-1/2/3, recomputation, GPipe and
1F1B plans of BERT and the wide MLP; and the plans `--unity-search` finds for cpu:2 at those
sizes) is estimated with `estimate_module`
on its machine (`cpu:P`) and run with `-t torch` under torchrun (gloo); the table lists
predicted and measured ms per iteration, and the summary gives Kendall's tau (do predictions
rank plans as measurements do?) and the median relative error |predicted - measured| /
measured. `--four` adds the 4-process plans: on a 2-core machine they oversubscribe the cores,
which the cpu preset does not model.

`--record FILE` writes what was measured (each plan's median and minimum step, the scheduler, the
load) as JSON; `--measured FILE` prices the plans again against such a file instead of running
them, so a change to the cost model is judged on the same measurements, deterministically
(`cost_model_accuracy_measured_default.json` and `..._fifo.json`: the quiet runs of 2026-11-27
05:28 UTC, default scheduler and SCHED_FIFO).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from unityc.dialects.source import read_module
from unityc.machine import load_machine
from unityc.machine.spec import Machine
from unityc.tools import demo

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "codegen"))

SIZES = {
    "mlp": {"in_features": "256", "hidden_dims": "[512, 512, 512, 512]", "batch": "128"},
    "mlp-wide": {"in_features": "512", "hidden_dims": "[1024, 1024, 1024, 1024]", "batch": "256"},
    "mlp-demo": {**demo.CONFIG, "batch": str(demo.BATCH)},  # `make demo`'s model
    "bert": {
        "hidden": "128",
        "heads": "4",
        "ffn": "512",
        "layers": "2",
        "seq_len": "64",
        "max_positions": "64",
        "vocab_size": "1024",
        "batch": "8",
    },
    "dlrm": {
        "embedding_dim": "64",
        "bottom_mlp": "[13, 512, 64]",
        "top_mlp": "[512, 256, 1]",
        "table_sizes": "[1000, 1000, 1000, 1000]",
        "bag_size": "8",
        "batch": "512",
    },
}

PLANS = [  # (plan, size)
    ("mlp-serial-1", "mlp"),
    ("mlp-data-2", "mlp"),
    ("mlp-tensor-2", "mlp"),
    ("mlp-reduction-2", "mlp"),
    ("mlp-serial-1", "mlp-wide"),
    ("mlp-data-2", "mlp-wide"),
    ("mlp-tensor-2", "mlp-wide"),
    ("bert-serial-1", "bert"),
    ("bert-data-2", "bert"),
    ("bert-megatron-2", "bert"),
    ("dlrm-serial-1", "dlrm"),
    ("dlrm-data-2", "dlrm"),
    ("dlrm-hybrid-2", "dlrm"),
]
# The memory levers and schedules (issue 31): ZeRO-1/2/3 and recomputation (the `zero{stage
# recompute}` baseline) and two-stage pipelines (`gpipe{...}`, 4 micro-batches).
LEVERED = [
    (f"{model}-{kind}-2", size)
    for model, size in (("bert", "bert"), ("mlp", "mlp-wide"))
    for kind in ("zero1", "zero2", "zero3", "recompute", "gpipe", "1f1b")
]
SEARCHED = [("search-2", size) for size in ("mlp", "mlp-wide", "mlp-demo", "bert", "dlrm")]
FOUR = [("mlp-hybrid-4", "mlp"), ("bert-heads-4", "bert"), ("dlrm-hybrid-4", "dlrm")]


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-a: (concordant - discordant pairs) / all pairs."""
    pairs = list(itertools.combinations(range(len(xs)), 2))
    if not pairs:
        return float("nan")
    score = 0
    for i, j in pairs:
        product = (xs[i] - xs[j]) * (ys[i] - ys[j])
        score += (product > 0) - (product < 0)
    return score / len(pairs)


STATS = {"mean": "ms_per_iteration", "median": "median_ms", "min": "min_ms"}


FIFO = ["chrt", "--fifo", "1"]
"""`--fifo`: the program's processes (and their gloo threads) under SCHED_FIFO: each runs until
it blocks, nothing else on the machine preempts it, and a thread woken by a collective gets its
core at once. On the shared 2-core machine this measures the program's own time whatever the
load; against the default scheduler it separates the cost model's error from the OS's
hand-offs (gloo's loop thread busy-polls while a collective is in flight, so on a fully
subscribed machine it takes core time from the compute it overlaps, and a rank woken after a
collective waits for a core). Needs root (or CAP_SYS_NICE); the kernel's RT throttling still
leaves other processes 5 % of each second."""


def measure(program: Path, nproc: int, steps: int, warmup: int, fifo: bool = False) -> dict[str, float]:
    """ms per iteration of the program (slowest rank per step), each of `STATS` over the steps
    after warm-up; under SCHED_FIFO with `fifo` (`FIFO`)."""
    out = program.with_suffix(".json")
    command = [
        *(FIFO if fifo else []),
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(program),
        "--steps",
        str(steps + warmup),
        "--warmup",
        str(warmup),
        "--json",
        str(out),
    ]
    done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{program.name} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    return {name: float(result[key]) for name, key in STATS.items()}


def priced_on(nproc: int, fifo: bool) -> Machine:
    """`cpu:P` as the programs run: the preset models the default scheduler's hand-offs around
    each collective (`DeviceKind.collective_handoff`); under SCHED_FIFO a woken thread gets its
    core at once (`measure_cpu_machine.handoff`: no hand-off), so those runs are priced without
    it. Its threads still share the rank's core (`comm_shares_core`) under either."""
    machine = load_machine(f"cpu:{nproc}")
    if not fifo:
        return machine
    kinds = tuple(dataclasses.replace(k, collective_handoff=0.0) for k in machine.kinds)
    return Machine(machine.name, kinds, machine.nodes, machine.description)


Record = tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str], str], str, float]


def recorded(path: Path) -> Record:
    """A `--record` file: each (plan, size)'s measured `STATS`, the searched plans' MLIR (the
    plan that ran: the search may find another under a changed model), the scheduler, the load
    average."""
    try:
        data = json.loads(path.read_text())
        steps = {
            (p["plan"], p["size"]): {"median": float(p["median_ms"]), "min": float(p["min_ms"])}
            for p in data["plans"]
        }
        texts = {(p["plan"], p["size"]): str(p["mlir"]) for p in data["plans"] if "mlir" in p}
        return steps, texts, str(data["scheduler"]), float(data["load_average"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"error: --measured {path}: not a cost_model_accuracy record ({e})") from None


def record(
    path: Path,
    rows: list[tuple[str, str, float, dict[str, float]]],
    scheduler: str,
    load: float,
    args: argparse.Namespace,
    texts: dict[tuple[str, str], str],
) -> None:
    """Writes a `--measured` file of the plans' measured step times (and the searched plans)."""
    plans = [
        {"plan": n, "size": s, "median_ms": m["median"], "min_ms": m["min"], "predicted_ms": round(p, 3)}
        | ({"mlir": texts[n, s]} if (n, s) in texts else {})
        for n, s, p, m in rows
    ]
    data = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "scheduler": scheduler,
        "load_average": round(load, 2),
        "steps": args.steps,
        "warmup": args.warmup,
        "plans": plans,
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def searched(size: str, nproc: int, tmp: Path):  # type: ignore[no-untyped-def]
    """The plan `unityc-opt --unity-search --machine cpu:P` finds for the model at `size`."""
    from unityc.dialects.source import read_module
    from unityc.frontend import ModelSpec, import_model

    settings = dict(SIZES[size])
    batch = int(settings.pop("batch"))
    spec = ModelSpec(size.split("-")[0], "small", batch=batch, overrides=tuple(settings.items()))
    source, plan = tmp / f"{size}.mlir", tmp / f"{size}-search-{nproc}.mlir"
    source.write_text(str(import_model(spec)))
    command = [sys.executable, "-m", "unityc.tools.opt", str(source), "--unity-search"]
    command += ["--machine", f"cpu:{nproc}", "--baselines", "none", "-o", str(plan)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"search for {size} failed:\n{done.stderr[-2000:]}")
    return read_module(str(plan))


def levered(name: str, size: str):  # type: ignore[no-untyped-def]
    """A `LEVERED` plan: the model at `size` through the `zero` or `gpipe` pass on cpu:P."""
    from unityc.dialects.source import make_context
    from unityc.frontend import ModelSpec, import_model
    from unityc.passes.baselines import ZeroPass
    from unityc.passes.gpipe import GpipePass

    model, kind, nproc = name.rsplit("-", 2)
    settings = dict(SIZES[size])
    batch = int(settings.pop("batch"))
    module = import_model(ModelSpec(model, "small", batch=batch, overrides=tuple(settings.items())))
    machine = f"cpu:{nproc}"
    if kind in ("gpipe", "1f1b"):
        GpipePass(machine=machine, stages=2, microbatches=4, schedule=kind).apply(make_context(), module)
        return module
    stage = 0 if kind == "recompute" else int(kind.removeprefix("zero"))
    ZeroPass(machine=machine, stage=stage, recompute=kind == "recompute").apply(make_context(), module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="timed steps per plan (default 8)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps per plan (default 3)")
    parser.add_argument("--cost", choices=("roofline", "profile"), default="roofline")
    parser.add_argument("--profile", help="profile cache for --cost profile")
    parser.add_argument("--four", action="store_true", help="add the 4-process plans (oversubscribed here)")
    parser.add_argument(
        "--stat",
        choices=tuple(STATS),
        default="median",
        help="measured step time: median (default), mean, or min (least disturbed by other load)",
    )
    parser.add_argument("--only", nargs="*", help="plan names to run (default: all)")
    parser.add_argument(
        "--fifo",
        action="store_true",
        help="run the programs under SCHED_FIFO (chrt; root): their own time, free of other load and "
        "of the default scheduler's hand-offs around collectives",
    )
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--record", type=Path, help="write the measured step times to this JSON file")
    runs.add_argument(
        "--measured",
        type=Path,
        help="price the plans against the step times of a --record file instead of running them",
    )
    args = parser.parse_args()
    if args.measured and args.fifo:
        parser.error("--fifo runs the programs; with --measured the file says how they were run")
    if args.measured and args.stat == "mean":
        parser.error("--measured files hold median and min step times, not the mean")
    known: dict[tuple[str, str], dict[str, float]] = {}
    texts: dict[tuple[str, str], str] = {}
    fifo = args.fifo
    if args.measured:
        known, texts, recorded_scheduler, recorded_load = recorded(args.measured)
        fifo = recorded_scheduler == "SCHED_FIFO"
    if args.fifo and subprocess.run([*FIFO, "true"], capture_output=True).returncode:
        parser.error("--fifo: chrt --fifo failed (needs root or CAP_SYS_NICE)")

    from strategies import build

    from unityc.codegen import emit_program
    from unityc.cost.estimate import estimate_module
    from unityc.cost.profile import ProfileCache

    cache = ProfileCache.load(args.profile) if args.profile else None
    plans = PLANS + LEVERED + SEARCHED + (FOUR if args.four else [])
    if args.only:
        plans = [p for p in plans if p[0] in args.only]
    if args.measured:
        missing = [f"{n} ({s})" for n, s in plans if (n, s) not in known]
        if missing:
            parser.error(f"--measured {args.measured} has no step time for {', '.join(missing)}")
    rows: list[tuple[str, str, float, dict[str, float]]] = []
    load: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, size in tqdm(plans, desc="plans", unit="plan"):
            nproc = int(name.rsplit("-", 1)[1])
            is_search = name.startswith("search-")
            if (name, size) in texts:  # the searched plan that was measured
                (Path(tmp) / "recorded.mlir").write_text(texts[name, size])
                module = read_module(str(Path(tmp) / "recorded.mlir"))
            elif is_search:
                module = searched(size, nproc, Path(tmp))
                texts[name, size] = str(module)
            elif (name, size) in LEVERED:
                module = levered(name, size)
            else:
                module = build(name, **SIZES[size])
            machine = priced_on(nproc, fifo)
            predicted = estimate_module(module, machine, args.cost, "sgd", cache)
            if args.measured:
                rows.append((name, size, predicted.iteration_s * 1e3, known[name, size]))
                continue
            program = Path(tmp) / f"{name}-{size}.py"
            program.write_text(emit_program(module, source=f"{name}.mlir"))
            load.append(os.getloadavg()[0])
            measured = measure(program, nproc, args.steps, args.warmup, args.fifo)
            rows.append((name, size, predicted.iteration_s * 1e3, measured))
    other = "min" if args.stat != "min" else "median"
    print(
        f"\n| plan | size | predicted ms | measured ms ({args.stat}) | pred/meas | measured ms ({other}) "
        f"| pred/meas |\n|---|---|---:|---:|---:|---:|---:|"
    )
    for name, size, predicted_ms, measured_ms in rows:
        print(
            f"| {name} | {size} | {predicted_ms:.2f} | {measured_ms[args.stat]:.2f} | "
            f"{predicted_ms / measured_ms[args.stat]:.2f} | {measured_ms[other]:.2f} | "
            f"{predicted_ms / measured_ms[other]:.2f} |"
        )
    predicted = [r[2] for r in rows]
    mean_load = statistics.fmean(load) if load else 0.0
    scheduler = "SCHED_FIFO" if args.fifo else "default scheduler"
    if args.measured:
        scheduler, mean_load = recorded_scheduler, recorded_load
    if args.record:
        record(args.record, rows, scheduler, mean_load, args, texts)
    print(
        f"\n{len(rows)} plans, cost model '{args.cost}', {scheduler}, "
        f"load average {mean_load:.1f} during the runs"
    )
    for stat in (args.stat, other):
        measured = [r[3][stat] for r in rows]
        errors = [abs(p - m) / m for p, m in zip(predicted, measured, strict=True)]
        print(
            f"{stat} step times: Kendall tau {kendall_tau(predicted, measured):.3f}, "
            f"median relative error {statistics.median(errors) * 100:.1f} %"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
