"""How a rank joins the run and how it stops: errors every rank stops on with one message,
reported on stderr and in torchrun's error file, arguments the ranks must agree on, and a
collective that timed out or lost its peer (naming the rank at fault from the heartbeats)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable

import torch.distributed as dist

from unityc.runtime import checkpoint, optim
from unityc.runtime.data import DataError
from unityc.runtime.sources import SourceError
from unityc.runtime.watch import (
    Heartbeat,
    collective_failure,
    launcher_gone,
    note_fault,
    timeout,
    watch_launcher,
)


class RunError(Exception):
    """A problem that stops the run on every rank with one message (`quiet`: another rank
    reports it)."""

    def __init__(self, message: str, quiet: bool = False):
        super().__init__(message)
        self.quiet = quiet


STOPPING = (RunError, SourceError, DataError, optim.OptimizerError, checkpoint.CheckpointError)
"""Errors that stop a run with one message on every rank (no traceback)."""


def report(rank: int, error: Exception) -> None:
    """This rank's error in one line on stderr and in torchrun's error file (its summary then
    names it as the cause, whichever failed rank it picks); an error another rank prints as well
    (`RunError.quiet`) goes to the error file only."""
    line = f"rank {rank}: error: {error}"
    record_error(line)
    if not (isinstance(error, RunError) and error.quiet):
        print(line, file=sys.stderr, flush=True)


SECONDARY_S = 5
"""How much later than now an error caused by another rank's failure is dated in torchrun's
error file: its summary names the failure with the earliest date as the root cause, and dates
are whole seconds (a rank killed by a signal writes no file; torchrun dates it when it notices)."""


def record_error(line: str, later_s: int = 0) -> None:
    """`line` in torchrun's error file for this rank (what `torch.distributed.elastic`'s
    `@record` writes, without the traceback): torchrun's summary shows it as the cause, or as
    one of the other failures when another rank's is dated earlier (`later_s`: an error this
    rank only suffered, such as a peer gone, is dated later so that the peer's is the cause)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    stamp = str(int(time.time()) + later_s)
    record = {"message": line, "extraInfo": {"py_callstack": line, "timestamp": stamp}}
    try:
        with open(path, "w") as f:
            json.dump({"message": record}, f)
    except OSError:
        pass  # torchrun then shows its generic line; the error is on stderr already


def agree_on_arguments(argv: list[str], rank: int) -> None:
    """A collective: RunError on every rank if the ranks were started with different arguments
    (naming the first difference), before any work that would hang on it later."""
    every: list[list[str] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(every, argv)
    first = every[0] or []
    other, theirs = next(((r, a) for r, a in enumerate(every) if a is not None and a != first), (0, first))
    if theirs == first:
        return
    pairs = enumerate(zip(first, theirs, strict=False))
    at = next((i for i, (a, b) in pairs if a != b), min(len(first), len(theirs)))
    mine, its = (" ".join(words[max(0, at - 1) : at + 1]) or "(nothing)" for words in (first, theirs))
    raise RunError(
        f"the ranks were started with different arguments: rank {other} has '{its}' where rank 0 "
        f"has '{mine}' (torchrun passes every rank the same ones)",
        quiet=rank != 0,
    )


def start(backend: str, timeout_s: float) -> Heartbeat:
    """Joins the process group (every collective waits at most `timeout_s`) and starts this
    rank's heartbeat, which ends this rank when its ring neighbour stops beating (`watch.py`)."""
    dist.init_process_group(backend, timeout=timeout(timeout_s))
    rank = dist.get_rank()
    watch_launcher(rank)
    return Heartbeat(rank, dist.get_world_size(), timeout_s, on_silent=lambda line: _end(rank, lambda: line))


def _end(rank: int, cause: Callable[[], str], later_s: int = 0) -> None:
    """Ends this rank (status 1) on a fault it found in a peer: the cause, on stderr, in
    torchrun's error file (dated `later_s` on, see `record_error`) and in the run's fault notes.
    A launcher gone is the cause where it is (and `cause`, which may watch the heartbeats for a
    few seconds, is then not asked)."""
    line = launcher_gone(rank) or f"error: {cause()}"
    print(line, file=sys.stderr, flush=True)
    record_error(line, later_s)
    note_fault(rank, line)
    sys.stdout.flush()
    os._exit(1)


def fail_collective(heartbeat: Heartbeat, error: RuntimeError) -> None:
    """Ends this rank after a collective failed (timed out, or lost its peer), naming the rank
    at fault; other errors propagate. The process group is broken: no barrier, no teardown."""
    kind = collective_failure(error)
    if kind is None:
        raise error
    # A peer that stopped writes nothing: this is the cause to name. A peer that died wrote its
    # own error (or torchrun names its signal): this rank's line is dated after it.
    _end(heartbeat.rank, lambda: heartbeat.diagnose(error), 0 if kind == "timeout" else SECONDARY_S)
