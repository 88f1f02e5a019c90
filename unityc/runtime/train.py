"""The training loop of a generated program: setup, steps, gradient sync, optimizer, timing.

    torchrun --standalone --nproc_per_node 2 train.py [--steps N] [--optimizer NAME] [--check]
        [--data module:function] [--save DIR] [--resume DIR] [--log-every N] [--profile DIR]

NCCL on CUDA when every local rank has a GPU, gloo on CPU otherwise. Every rank loads the
reference model (`sources.load_reference`, the spec and seed the plan records) and keeps its own
pieces of the weights (or reads them from a checkpoint, `checkpoint.py`) and of the batch: the
model's seeded example inputs, the same every step (synthetic data, identical to what the
reference run uses), or this rank's pieces of the batches of `--data` (`data.py`). The optimizer,
clipping and schedule are `optim.py`'s; progress lines and traces `progress.py`'s.

Every collective waits at most `--timeout` seconds (default 600); a rank whose collective times
out names the rank at fault from the heartbeats (`watch.py`) and exits 1, as does a rank whose
peer died. Bad flags are usage errors (exit 2) before torchrun is even needed, unwritable output
paths (`--save`, `--json`, `--profile`) included. Faults:

* an error is reported by the rank it happened on, on stderr as `rank R: error: ...` (an error the
  ranks agree on, by the lowest rank that found it), and in torchrun's error file, so torchrun's
  summary names it; the rank exits 1 at once (no exit barrier a failed peer would never reach);
* ranks started with different arguments stop at once, naming the first difference;
* SIGINT or SIGTERM: the step finishes, the ranks save a checkpoint of it (with `--save`) and exit
  130 or 143 (`signals.py`);
* a worker whose launcher died exits within a second (`watch.watch_launcher`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from unityc.runtime.faults import (
    STOPPING,
    RunError,
    agree_on_arguments,
    fail_collective,
    record_error,
    report,
    start,
)
from unityc.runtime.flags import output_problem, parse_args
from unityc.runtime.module import accumulated_outputs
from unityc.runtime.plan import Plan
from unityc.runtime.signals import Interrupted, Interrupts
from unityc.runtime.sources import Build
from unityc.runtime.trainer import Forward, Trainer

__all__ = [
    "STOPPING",
    "Forward",
    "RunError",
    "Trainer",
    "accumulated_outputs",
    "fail_collective",
    "main",
    "output_problem",
    "parse_args",
    "pick_device",
    "start",
]
"""What other runtime modules and the benchmarks take from here (the loop, its flags and faults
live in `trainer.py`, `flags.py` and `faults.py`)."""


def pick_device() -> tuple[str, torch.device]:
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_world:
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def main(
    plan: Plan,
    forward: Forward,
    argv: Sequence[str] | None = None,
    build: Build | None = None,
    data: Callable[..., Any] | None = None,
    on_step: Callable[[int], None] | None = None,
) -> int:
    """Trains with `plan` (the program's `PLAN` and `forward`; `build` makes its reference
    model); `data` is a data function as `--data` names one (the Python API:
    `rt.main(PLAN, forward, data=my_batches)`); `on_step(k)` is called on every rank after step k
    completed (and was saved, where due): `unityc-train` records its progress with it."""
    args = parse_args(plan, argv)
    args.data_function = data
    if "RANK" not in os.environ:
        print(f"error: run with torchrun --standalone --nproc_per_node {plan.world_size} {sys.argv[0]}")
        return 2
    interrupts = Interrupts()  # from here on SIGINT/SIGTERM stop the run between steps
    backend, device = pick_device()
    heartbeat = start(backend, args.timeout)
    rank = dist.get_rank()
    try:
        agree_on_arguments(list(sys.argv[1:] if argv is None else argv), rank)
        runner = Trainer(plan, forward, args, backend, device, heartbeat, build)
        runner.interrupts = interrupts
        runner.on_step = on_step
        status = runner.run()
    except Interrupted as e:
        if rank == 0:
            print(f"rank {rank}: {e}", file=sys.stderr, flush=True)
        record_error(f"rank {rank}: {e}")  # torchrun's summary: the signal, not "To enable traceback"
        status = e.status
    except STOPPING as e:
        report(rank, e)
        status = 1
    except RuntimeError as e:
        fail_collective(heartbeat, e)
    if status == 0:  # after an error a peer may never reach a barrier: no teardown then
        heartbeat.stop()
        dist.barrier()
        dist.destroy_process_group()
    # Skip interpreter teardown: gloo's threads occasionally abort there ("terminate called
    # without an active exception") after a run that succeeded, turning its status into a crash.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
