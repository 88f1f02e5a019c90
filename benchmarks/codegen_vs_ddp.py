"""The generated data-parallel program against torch DDP on the same model, side by side.

    python benchmarks/codegen_vs_ddp.py [--model mlp] [--nproc 2] [--steps 10] [--rounds 5]
                                        [--batch 256] [key=value ...]

Builds the data-parallel plan of a zoo model (the batch split over the ranks, every weight in
one copy per rank, gradients all-reduced), emits it with `-t torch`, and runs one torchrun in
which every rank alternates blocks of `--steps` steps of the generated program and of
`DistributedDataParallel` over the same model, batch shard and SGD (`--rounds` times, after
warm-up), so that both see the same machine state; a third block runs the generated program
with `--no-overlap` (gradients all-reduced after the backward instead of bucket by bucket during
it). Prints per-step times (slowest rank) and the ratio; the target is an overhead of at most
5 %. Settings (`key=value`) change the small config of the model; the default is an MLP large
enough for the step to take tens of ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "codegen"))

DEFAULTS = {"mlp": {"in_features": "512", "hidden_dims": "[1024, 1024, 1024, 1024]"}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp", help="zoo model (default mlp)")
    parser.add_argument("--nproc", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--batch", type=int, default=256, help="global batch (default 256)")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block (default 10)")
    parser.add_argument("--rounds", type=int, default=5, help="blocks of each, alternating (default 5)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps of each (default 3)")
    parser.add_argument("--worker", metavar="PROGRAM", help=argparse.SUPPRESS)
    parser.add_argument("settings", nargs="*", metavar="key=value", help="model config settings")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    if args.worker:
        return worker(args)
    from plans import Strategy, plan_module
    from strategies import base_graph, batch_sharded

    from unityc.codegen import emit_program

    settings = dict(DEFAULTS.get(args.model, {}))
    settings.update(item.split("=", 1) for item in args.settings)
    settings["batch"] = str(args.batch)
    print(f"building the data-parallel plan of {args.model} {settings} for cpu:{args.nproc} ...", flush=True)
    module = plan_module(
        base_graph(args.model, **settings),
        Strategy(args.nproc, batch_sharded(args.nproc)),
        f"cpu:{args.nproc}",
    )
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "train_dp.py"
        program.write_text(emit_program(module, source=f"{args.model}-data-{args.nproc}"))
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={args.nproc}",
            __file__,
            "--worker",
            str(program),
            "--steps",
            str(args.steps),
            "--rounds",
            str(args.rounds),
            "--warmup",
            str(args.warmup),
        ]
        done = subprocess.run(
            command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True
        )
    print(done.stdout, end="")
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
    return done.returncode


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("generated_program", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from unityc.runtime.sources import load_reference
    from unityc.runtime.train import Trainer, pick_device
    from unityc.runtime.train import parse_args as program_args

    program = _load(args.worker)
    plan = program.PLAN
    backend, device = pick_device()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    build = program.build_reference
    ours, late = (
        Trainer(plan, program.forward, program_args(plan, flags), backend, device, None, build)
        for flags in (["--lr", "0.001"], ["--lr", "0.001", "--no-overlap"])
    )

    loaded = load_reference(plan.model, build)
    model = DistributedDataParallel(loaded.module.to(device))
    shard = {k: v.chunk(world)[rank].to(device) for k, v in loaded.inputs.items()}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)

    def ddp_step(_: int) -> None:
        loss = model(**shard)[0]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def stepper(trainer: Trainer) -> Any:
        def run(i: int) -> None:
            trainer.step(i)
            for p in trainer.params:
                p.grad = None

        return run

    ours_step, late_step = stepper(ours), stepper(late)

    def block(step: Any, count: int) -> list[float]:
        times = []
        for i in range(count):
            if device.type == "cuda":
                torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            step(i)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        return times

    steps = {"generated": ours_step, "no-overlap": late_step, "ddp": ddp_step}
    for step in steps.values():
        block(step, args.warmup)
    measured: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            measured[name] += block(step, args.steps)
    for name, times in measured.items():
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        measured[name] = slowest.tolist()
    if rank == 0:
        report(plan, world, backend, measured)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def report(plan: Any, world: int, backend: str, measured: dict[str, list[float]]) -> None:
    params = sum(math.prod(layout.shape) for layout in plan.weights.values())
    print(
        f"\n{plan.model.name} ({params / 1e6:.2f} M parameters), global batch {plan.samples}, "
        f"{world} ranks ({backend}), {len(measured['ddp'])} steps each, alternating blocks\n"
    )
    print(f"{'program':<12}{'median ms':>11}{'mean ms':>10}{'min ms':>9}{'samples/s':>11}")
    for name, times in measured.items():
        median = statistics.median(times)
        print(
            f"{name:<12}{median * 1e3:>11.2f}{statistics.fmean(times) * 1e3:>10.2f}"
            f"{min(times) * 1e3:>9.2f}{plan.samples / median:>11.1f}"
        )
    ddp = statistics.median(measured["ddp"])
    ratio = statistics.median(measured["generated"]) / ddp
    verdict = "within" if ratio <= 1.05 else "above"
    print(
        f"\ngenerated / DDP (median step time): {ratio:.3f} ({(ratio - 1) * 100:+.1f} %, "
        f"{verdict} the 5 % target); without overlap: {statistics.median(measured['no-overlap']) / ddp:.3f}"
    )


if __name__ == "__main__":
    sys.exit(main())
