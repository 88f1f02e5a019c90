"""Runs several generated programs in one torchrun, one after the other in one process group
(the start-up of torchrun, torch and the rendezvous is paid once):

    torchrun --standalone --nproc_per_node 2 -m unityc.runtime.batch manifest.json

The manifest is a JSON list of {"name": ..., "program": "path/to/train.py", "args": [...]}, every
program made for the same number of ranks. Rank 0 prints `=== name` before each program's output
and `=== name: exit N` after it; the batch exits 1 if any program failed (a failed `--check` is
a failure that the other programs survive; a crash ends the batch).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch.distributed as dist

from unityc.runtime.train import STOPPING, RunError, Trainer, fail_collective, parse_args, pick_device, start
from unityc.runtime.watch import DEFAULT_TIMEOUT_S


def load_program(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"unityc_program_{name}", path)
    if spec is None or spec.loader is None:
        raise RunError(f"{path}: cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run several generated programs in one torchrun.")
    parser.add_argument("manifest", help='JSON list of {"name", "program", "args"}')
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="seconds a collective waits for its peers (for every program: they share the process group)",
    )
    options = parser.parse_args(argv)
    with open(options.manifest) as f:
        manifest = json.load(f)
    backend, device = pick_device()
    heartbeat = start(backend, options.timeout)
    rank = dist.get_rank()
    failed = 0
    for entry in manifest:
        name = entry["name"]
        if rank == 0:
            print(f"=== {name}", flush=True)
        program = load_program(entry["program"], name)
        args = parse_args(program.PLAN, [*entry["args"], "--timeout", str(options.timeout)])
        try:
            build = getattr(program, "build_reference", None)
            forward = getattr(program, "PROGRAM", None) or program.forward  # PROGRAM: a pipelined program
            status = Trainer(program.PLAN, forward, args, backend, device, heartbeat, build).run()
        except STOPPING as e:
            if rank == 0:
                print(f"error: {e}", flush=True)
            status = 1
        except RuntimeError as e:
            print(f"=== {name}: rank {rank} failed", flush=True)
            fail_collective(heartbeat, e)
        failed += status != 0
        dist.barrier()
        if rank == 0:
            print(f"=== {name}: exit {status}", flush=True)
    if rank == 0:
        print(f"batch: {len(manifest) - failed} of {len(manifest)} program(s) succeeded", flush=True)
    heartbeat.stop()
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1 if failed else 0)  # as `train.main`: skip gloo's teardown


if __name__ == "__main__":
    sys.exit(main())
