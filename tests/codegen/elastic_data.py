"""The data of `test_elastic.py`: the zoo MLP's batches from numbered samples (batch n holds
samples n*B .. n*B+B-1, each row a function of its sample's number), cut to this rank's pieces,
every piece drawn logged (`log`: one JSON line per rank and batch: the process, world, batch and
sample numbers), so the test sees which samples each step trained on.

Two holds stage the faults at known steps (test-only: a real job is not told when it fails):
`release` makes every rank of a 4-rank attempt wait before batch `kill_at` until the test has
injected its fault and created that file (the workers of a launcher that was killed keep
waiting: their launcher's death ends them); `grow_at` makes a 2-rank attempt wait before that
batch until its rank was sent SIGTERM (a returning node: the agent stops the workers) or 120 s.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

WAIT_S = 120.0


def _terminated() -> bool:
    """Whether the runtime's `Interrupts` noted SIGTERM (it handles the signal)."""
    handler = signal.getsignal(signal.SIGTERM)
    return bool(getattr(getattr(handler, "__self__", None), "signum", 0))


def _hold(batch: int, world: int, launcher: int, release: str, kill_at: int, grow_at: int) -> None:
    began = time.monotonic()
    if release and world == 4 and batch == kill_at:
        marker = Path(release)
        while time.monotonic() - began < WAIT_S:
            if marker.is_file() and os.getppid() == launcher:
                return
            time.sleep(0.05)
    if grow_at and world == 2 and batch == grow_at:
        while time.monotonic() - began < WAIT_S and not _terminated():
            time.sleep(0.05)


def _rows(ids: list[int], key: str, features: int) -> torch.Tensor:
    if key == "labels":
        return torch.tensor([i % 30 for i in ids], dtype=torch.int64)
    salt = 1 if key == "input1" else 2
    return torch.stack(
        [torch.randn(features, generator=torch.Generator().manual_seed(2 * i + salt)) for i in ids]
    )


def batches(
    pieces: Any,
    start: int = 0,
    log: str = "",
    release: str = "",
    kill_at: int = -1,
    grow_at: int = -1,
    features: int = 15,
) -> Iterator[dict[str, torch.Tensor]]:
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    launcher, n = os.getppid(), start
    while True:
        _hold(n, world, launcher, release, kill_at, grow_at)
        out: dict[str, torch.Tensor] = {}
        drawn: list[int] = []
        for key in ("input1", "input2", "labels"):
            where = pieces.slices(key)
            if where is None:
                continue
            size = pieces.shapes[key][0]
            ids = [n * size + r for r in pieces.rows(key)]
            value = _rows(ids, key, features)
            out[key] = value[(slice(None), *where[1:])] if len(where) > 1 else value
            if key == "labels":
                drawn = ids
        if log:
            entry = {"pid": os.getpid(), "rank": rank, "world": world, "batch": n, "samples": drawn}
            entry["round"] = os.environ.get("MASTER_PORT", "")  # the rendezvous round's store
            entry["time"] = time.time()
            with open(log, "a") as f:
                f.write(json.dumps(entry) + "\n")
        yield out
        n += 1
