"""SIGINT and SIGTERM during training: the current step finishes, every rank stops after it.

A scheduler sends SIGTERM before it preempts a job, a user's Ctrl-C sends SIGINT to every process
of the terminal's group (torchrun then forwards it and kills the workers 30 s later). Either way
the signal is only noted (`Interrupts`); between steps the ranks agree on it (one all-reduce of
the signal number, so a signal that reached one rank stops them all at the same step), save a
checkpoint of the last completed step when `--save` was given, and exit with 128 + the signal's
number (130 for SIGINT, 143 for SIGTERM) and one line, no traceback.
"""

from __future__ import annotations

import signal
from types import FrameType

import torch
import torch.distributed as dist

CAUGHT = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The ranks agreed to stop on a signal (after a completed step)."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum

    @property
    def status(self) -> int:
        return 128 + self.signum


class Interrupts:
    """Notes SIGINT and SIGTERM (the first one) instead of raising KeyboardInterrupt."""

    def __init__(self) -> None:
        self.signum = 0
        for signum in CAUGHT:
            signal.signal(signum, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.signum = self.signum or signum

    def agreed(self, device: torch.device) -> int:
        """A collective: the signal any rank received (the highest number), or 0."""
        flag = torch.tensor([self.signum], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return int(flag.item())


def name(signum: int) -> str:
    return signal.Signals(signum).name
