"""Step time through the Python API (`unityc.distribute`) against the generated program's own
loop (`runtime.trainer.Trainer.step`), the same plan, weights and batch, alternating in one torchrun.

    python benchmarks/api_step_time.py [--strategy data-parallel|megatron|zero] [--blocks 8] [--steps 5]

Each rank builds them from one plan: the `Trainer` a generated program runs (its `step`:
`DistributedModel.train_step`, forward and backward with the gradient sync, then SGD), a
`DistributedModel` driven as a user's loop drives it (`loss = model(**batch)[0];
loss.backward(); optimizer.step(); optimizer.zero_grad()`), and the same driven through its
`step(**batch)` (the program's step function, plus the cut of the whole batch). Blocks of
`--steps` steps alternate (API, step(), program, API, ...) after a warm-up block each; every step
is timed from a barrier to the slowest rank's end. Prints the median and mean ms per step of
each and the ratios to the program. The model is `make demo`'s wide MLP (batch 256) on cpu:2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(strategy: str, blocks: int, steps: int) -> None:
    import torch
    import torch.distributed as dist

    import unityc
    from unityc.models.spec import ModelSpec, load_model
    from unityc.runtime.flags import parse_args
    from unityc.runtime.trainer import Trainer
    from unityc.tools.api import program_of
    from unityc.tools.demo import BATCH, CONFIG

    dist.init_process_group("gloo")
    spec = ModelSpec("mlp", batch=BATCH, overrides=tuple(CONFIG.items()))
    loaded = load_model(spec)
    options = {"stage": 3} if strategy == "zero" else {}
    plan = unityc.plan(loaded.module, loaded.inputs, machine="cpu:2", strategy=strategy, **options)
    program = program_of(plan)
    args = parse_args(program.PLAN, ["--steps", str(10**6), "--optimizer", "sgd", "--lr", "0.01"])
    args.data_function = None
    trainer = Trainer(program.PLAN, program.forward, args, "gloo", torch.device("cpu"), None,
                      lambda _: (load_model(spec).module, loaded.inputs))  # fmt: skip
    model = unityc.distribute(loaded.module, plan)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = loaded.inputs
    counter = [0]

    def api_step() -> None:
        loss = model(**batch)
        (loss[0] if isinstance(loss, tuple) else loss).backward()
        optimizer.step()
        optimizer.zero_grad()

    def api_step_call() -> None:  # the API's step(): the program's own step function
        model.step(**batch)
        optimizer.step()
        optimizer.zero_grad()

    def program_step() -> None:
        trainer.step(counter[0])
        trainer.zero.zero_grad()
        counter[0] += 1

    def timed(step: object) -> float:
        dist.barrier()
        start = time.perf_counter()
        step()  # type: ignore[operator]
        slowest = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return float(slowest.item())

    modes = {"api": api_step, "step": api_step_call, "program": program_step}
    times: dict[str, list[float]] = {k: [] for k in modes}
    for step in modes.values():  # warm-up
        for _ in range(steps):
            timed(step)
    for block in range(len(modes) * blocks):
        name = list(modes)[block % len(modes)]
        times[name] += [timed(modes[name]) for _ in range(steps)]
    if dist.get_rank() == 0:
        api, call, prog = (statistics.median(times[k]) * 1e3 for k in modes)
        means = " / ".join(f"{statistics.fmean(times[k]) * 1e3:.2f}" for k in modes)
        row = f"| {strategy} | {len(times['api'])} | {api:.2f} | {call:.2f} | {prog:.2f} | "
        print(f"{row}{api / prog:.3f} | {call / prog:.3f} | {means} |", flush=True)
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--strategy", action="append", help="data-parallel (default), megatron, zero")
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.blocks, args.steps)
        return 0
    print("| plan | steps each | API median ms | API step() median ms | program median ms | API / program "
          "| step() / program | means (ms) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for strategy in args.strategy or ["data-parallel"]:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            __file__,
        ]
        command += ["--worker", strategy, "--blocks", str(args.blocks), "--steps", str(args.steps)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
        print(
            rows[0]
            if rows and done.returncode == 0
            else f"{strategy}: failed\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
