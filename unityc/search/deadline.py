"""Time limits: what is kept back for the work after a search, and a hard deadline raised
into it (`Stopped`)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from unityc.graph import Graph


def tail_seconds(limit: float, graph: Graph) -> float:
    """Time kept back from a time limit for what follows the search: the report, the plan's
    conversion to IR and printing (about a millisecond per op), and a tenth for slack."""
    return 0.1 * limit + 1e-3 * len(graph.nodes)


class Stopped(BaseException):
    """Raised into a search when its time is up: a BaseException, like KeyboardInterrupt, so
    that no `except Exception` on the way swallows it."""


@contextmanager
def hard_deadline(at: float | None) -> Iterator[None]:
    """Raises `Stopped` in the block at `time.monotonic()` value `at` (SIGALRM; nothing where no
    timer signal can be had: another thread than the main one, or no `setitimer`)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if at is None or not usable:
        yield
        return
    armed = [True]

    def ring(signum: int, frame: Any) -> None:
        if armed[0]:
            raise Stopped()

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, max(at - time.monotonic(), 1e-3))
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
