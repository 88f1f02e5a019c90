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
import queue
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any, Generic, TypeVar

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
    """`produce()`'s items, made in a forked worker where one can be had, else here.

    A thread of this process reads the worker's items from the pipe as they come (a pipe holds
    64 KiB: a worker writing a bigger item while this process is busy elsewhere would wait, and
    a caller stopped by a time limit would lose it)."""

    def __init__(self, produce: Callable[[], Iterator[T]]):
        self.produce = produce
        self.process: multiprocessing.process.BaseProcess | None = None
        self.conn: Connection | None = None
        self.inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self.reader: threading.Thread | None = None
        self.here: Iterator[T] | None = None
        """Where no worker runs: `produce()` as far as `prefetch` ran it."""
        self.fetched: list[T] = []
        """Items `prefetch` made here, not given yet."""
        if not can_fork():
            return
        try:
            context = multiprocessing.get_context("fork")
            receive, send = context.Pipe(duplex=False)
            self.process = context.Process(target=_work, args=(send, produce), daemon=True)
            self.process.start()
            send.close()
            self.conn = receive
            self.reader = threading.Thread(target=self._read, args=(receive,), daemon=True)
            self.reader.start()
        except Exception:  # no worker to be had: the work is done here instead
            self.close()

    def _read(self, conn: Connection) -> None:
        """The reader thread: each message into the inbox, up to the last one."""
        while True:
            try:
                message = conn.recv()
            except Exception:  # the worker died (a message cut short) or sent what cannot be read
                message = ("failed",)
            self.inbox.put(message)
            if message[0] != "item":
                return

    def prefetch(self, count: int) -> None:
        """Where no worker runs, makes the first `count` items here now (so that a caller
        stopped later keeps them: `ready`); nothing where a worker makes them."""
        if self.conn is not None:
            return
        if self.here is None:
            self.here = self.produce()
        while len(self.fetched) < count:
            item = next(self.here, _END)
            if item is _END:
                return
            self.fetched.append(item)  # type: ignore[arg-type]

    def items(self) -> Iterator[T]:
        """Every item, in `produce()`'s order, each as soon as it is had (so a caller stopped
        by a time limit keeps what was completed). If the worker fails or dies, the rest are
        made here: `produce()` runs again and its first items, already given, are skipped
        (so an error is raised here exactly as in-process)."""
        if self.conn is None:
            while self.fetched:
                yield self.fetched.pop(0)
            yield from self.here if self.here is not None else self.produce()
            return
        given = 0
        while True:
            message = self.inbox.get()
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
        """After a stop: the items already had that `items` did not give, without waiting (the
        worker is stopped first, so a message it was still writing ends the list)."""
        out: list[T] = []
        if self.conn is None:
            out, self.fetched = self.fetched, out
            return out
        self._stop()
        while not self.inbox.empty():
            message = self.inbox.get()
            if message[0] != "item":
                break
            out.append(message[1])
        return out

    def _stop(self) -> None:
        """Ends the worker (if still running) and then the reader thread (the pipe's end)."""
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join()
            self.process = None
        if self.reader is not None:
            self.reader.join()
            self.reader = None

    def close(self) -> None:
        """Stops the worker (if still running) and releases the pipe."""
        self._stop()
        if self.conn is not None:
            self.conn.close()
            self.conn = None


_END = object()
