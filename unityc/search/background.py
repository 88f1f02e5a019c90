"""Work the search can do on a second core: a forked worker that runs a generator of plans and
sends each plan back as it is completed.

The joint search prices whole-graph baselines (data-parallel, Megatron, ...) that do not depend
on the segment search: on a machine with a second core they run beside it, which takes about a
third off the wall time of a small search. Where no fork can be had (not Linux, one usable core,
`UNITYC_SEARCH_WORKERS=1`), or the worker fails in any way, the same generator runs in this
process instead, so the plans (and any error) are exactly what an in-process run gives.

The worker is killed when the caller stops (time limit, Ctrl-C, an error): `close()` always runs.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Generic, TypeVar

T = TypeVar("T")

WORKERS_ENV = "UNITYC_SEARCH_WORKERS"
"""Set to 1 to keep every part of the search in one process."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def can_fork() -> bool:
    if os.environ.get(WORKERS_ENV, "").strip() == "1":
        return False
    if multiprocessing.current_process().daemon:  # e.g. the fuzzer's workers: no children allowed
        return False
    return sys.platform.startswith("linux") and usable_cores() > 1


def _work(conn: Connection, produce: Callable[[], Iterator[T]]) -> None:
    """The worker: each item as it is made, then None; ("failed",) on any error."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # the parent handles Ctrl-C; die quietly
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    try:
        for item in produce():
            conn.send(("item", item))
        conn.send(("done",))
    except BaseException:  # reported to the parent, which redoes the work itself
        with contextlib.suppress(OSError):
            conn.send(("failed",))
    finally:
        conn.close()


class Background(Generic[T]):
    """`produce()`'s items, made in a forked worker where one can be had, else here."""

    def __init__(self, produce: Callable[[], Iterator[T]]):
        self.produce = produce
        self.process: multiprocessing.process.BaseProcess | None = None
        self.conn: Connection | None = None
        if not can_fork():
            return
        try:
            context = multiprocessing.get_context("fork")
            receive, send = context.Pipe(duplex=False)
            self.process = context.Process(target=_work, args=(send, produce), daemon=True)
            self.process.start()
            send.close()
            self.conn = receive
        except Exception:  # no worker to be had: the work is done here instead
            self.process, self.conn = None, None

    def items(self) -> Iterator[T]:
        """Every item, in `produce()`'s order, each as soon as it is had (so a caller stopped
        by a time limit keeps what was completed). If the worker fails or dies, the rest are
        made here: `produce()` runs again and its first items, already given, are skipped
        (so an error is raised here exactly as in-process)."""
        if self.conn is None:
            yield from self.produce()
            return
        given = 0
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                message = ("failed",)
            if message[0] != "item":
                break
            given += 1
            yield message[1]
        self.close()
        if message[0] == "done":
            return
        for i, item in enumerate(self.produce()):
            if i >= given:
                yield item

    def ready(self) -> list[T]:
        """After a stop: the items the worker had already sent that `items` did not give, without
        waiting (the worker is stopped first, so a message it was still writing ends the list)."""
        if self.conn is None:
            return []
        if self.process is not None and self.process.is_alive():
            self.process.kill()
            self.process.join()
        out: list[T] = []
        with contextlib.suppress(Exception):  # a message cut short (by the stop or the kill) ends it
            while self.conn.poll(0):
                message = self.conn.recv()
                if message[0] != "item":
                    break
                out.append(message[1])
        return out

    def close(self) -> None:
        """Stops the worker (if still running) and releases the pipe."""
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join()
            self.process = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
