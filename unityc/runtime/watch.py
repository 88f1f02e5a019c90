"""Collective timeouts that name the rank at fault.

Every process group of a program is made with a timeout (`--timeout`, default 600 s), so a
collective whose peer never comes (a rank stopped with SIGSTOP, hung, or on a host that is gone)
fails instead of waiting forever. The failure itself only says that a receive timed out; to name
the rank at fault, every rank runs a `Heartbeat`: a thread that writes, once a second, a counter
and where the rank is ("step 3: backward") to the rendezvous store. A rank whose collective failed
reads every heartbeat twice, a few seconds apart:

* a rank whose counter did not move is not running: stopped, hung in native code, or gone;
* a rank whose counter moved is alive, and the message says where it is (ranks that disagree
  on which collective comes next, or a rank spinning in Python code).

A stopped rank is also found without waiting for a collective to time out: each rank's heartbeat
thread watches its ring neighbour's (rank r watches r+1: one more read a second per rank), and a
neighbour whose counter has not moved for `--timeout` less three heartbeat periods (one for a
beat to be seen, one to check it, one for torchrun's agent to see this rank exit) is named and
this rank exits 1 (`on_silent`), so the run ends within `--timeout` of the stop. The thread runs
whatever the main thread does (a collective waiting releases the GIL, as do torch's kernels), so
a live rank, however loaded, beats; a neighbour that finished (`stop`) or waits in a collective
that timed out says so in its last beat and is not named.

A lost connection (a killed peer) is reported at once, without the wait: torchrun names the
rank that died. The store is the default process group's (torchrun's agent serves it), so
reading it does not depend on any worker being alive.

Workers outlive a launcher killed with SIGKILL (it cannot stop them): they would go on training
and writing checkpoints. `watch_launcher` ends a worker within a second of its parent's death
(a thread that sees the process re-parented).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

DEFAULT_TIMEOUT_S = 600.0
"""How long a collective may wait for its peers (as NCCL's default): long enough for rank 0's
--check work and a slow first step at scale, short enough that a stopped rank is noticed."""

INTERVAL_S = 1.0
"""Heartbeat period."""

SETTLE_S = 5.0
"""How long a rank whose collective failed watches the heartbeats (several periods, so a live
but busy rank under load still shows progress)."""

TIMED_OUT = ("Timed out", "timed out", "Application timeout")
"""Gloo says "Application timeout caused pair closure" when a collective waited past its timeout."""
LOST = ("Connection closed", "Connection reset", "Broken pipe")

KEY = "unityc/heartbeat/{rank}"

WAITING = "timed out in "
"""How a rank whose collective timed out marks its last heartbeat: a peer that reads it knows the
rank is not gone but waiting in a collective too (a deadlock, not a dead rank)."""


DONE = "done"
"""The last heartbeat of a rank that finished (`Heartbeat.stop`): its peers stop watching it."""

MARGIN_BEATS = 3
"""Heartbeat periods a silent neighbour is named before `--timeout`: its last beat is seen up to
one period late, checked up to one period late, and torchrun's agent sees this rank's exit."""


LAUNCHER: list[int] = []
"""The launcher's pid, once `watch_launcher` started watching it."""


def launcher_gone(rank: int) -> str | None:
    """The line a worker whose launcher died ends with (None while it lives): a peer that saw it
    first may have ended already, so a lost connection is reported with this cause."""
    if not LAUNCHER or os.getppid() == LAUNCHER[0]:
        return None
    return f"rank {rank}: error: the launcher (pid {LAUNCHER[0]}) is gone; this worker stops"


FAULTS_FILE = "UNITYC_FAULTS_FILE"
"""The environment variable naming a file where a rank that found a fault (a peer stopped or
lost, its launcher gone) appends one JSON line, `{"time", "rank", "line"}`: `unityc-train` reads
it to time its recovery from the fault's detection."""


def note_fault(rank: int, line: str) -> None:
    """Appends the fault this rank found to the FAULTS_FILE (where one is named)."""
    path = os.environ.get(FAULTS_FILE)
    if not path:
        return
    entry = json.dumps({"time": time.time(), "rank": rank, "line": line})
    with contextlib.suppress(OSError), open(path, "a") as f:
        f.write(entry + "\n")


def watch_launcher(rank: int, interval_s: float = INTERVAL_S) -> threading.Thread:
    """Ends this process (status 1, one line on stderr) when its parent, the launcher, is gone."""
    LAUNCHER[:] = [os.getppid()]

    def watch() -> None:
        while (line := launcher_gone(rank)) is None:
            time.sleep(interval_s)
        print(line, file=sys.stderr, flush=True)
        note_fault(rank, line)
        os._exit(1)

    thread = threading.Thread(target=watch, name="unityc-launcher-watch", daemon=True)
    thread.start()
    return thread


def timeout(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def collective_failure(error: BaseException) -> str | None:
    """'timeout' or 'lost' if `error` is a collective that timed out or lost its peer, else None."""
    if not isinstance(error, RuntimeError):
        return None
    text = str(error)
    if any(word in text for word in TIMED_OUT):
        return "timeout"
    if isinstance(error, dist.DistError) or any(word in text for word in LOST):
        return "lost"
    return None


def reason(error: BaseException) -> str:
    """The backend's message without its source location and advice: `[.../pair.cc:537] Read
    error [127.0.0.1]:31637: Connection reset by peer. This is typically ...` -> `Read error
    [127.0.0.1]:31637: Connection reset by peer`."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\] ", "", text)
    return text.split(". ", 1)[0].rstrip(".")


class Heartbeat:
    """This rank's heartbeat in the store, and the diagnosis of a failed collective."""

    def __init__(
        self,
        rank: int,
        world: int,
        timeout_s: float,
        interval_s: float = INTERVAL_S,
        store: Any = None,
        on_silent: Callable[[str], None] | None = None,
    ):
        self.rank, self.world, self.timeout_s, self.interval_s = rank, world, timeout_s, interval_s
        self.on_silent = on_silent
        """Told the line naming a silent neighbour (and expected to end the process); None: no
        neighbour is watched."""
        self._seen: tuple[int, float] | None = None
        """The neighbour's last counter and when this rank first saw it (monotonic)."""
        self.where = "setup"
        """What this rank is doing (set by the trainer; read by the heartbeat thread)."""
        self.store: Any = store if store is not None else c10d._get_default_store()
        """A torch.distributed Store (set, get, check): the default process group's."""
        self.count = 0
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._run, name="unityc-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        self.count += 1
        self.store.set(KEY.format(rank=self.rank), f"{self.count} {self.where}")

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._beat()
                line = self.watch(time.monotonic())
            except Exception:  # the store is gone (the run is ending): nothing left to report to
                return
            if line is not None and self.on_silent is not None and not self._stop.is_set():
                self.on_silent(line)
                return

    @property
    def silent_s(self) -> float:
        """How long a neighbour's heartbeat may stand still before it is named: `--timeout` less
        MARGIN_BEATS periods, but never under SETTLE_S (what the diagnosis after a timeout
        watches: a short --timeout is left to the collectives)."""
        return max(self.timeout_s - MARGIN_BEATS * self.interval_s, SETTLE_S)

    def watch(self, now: float) -> str | None:
        """The line naming the ring neighbour if its counter has stood still for `silent_s`
        (None: it moves, finished, waits in a timed-out collective itself, or never beat)."""
        if self.on_silent is None or self.world < 2:
            return None
        neighbour = (self.rank + 1) % self.world
        beat = self.read([neighbour]).get(neighbour)
        if beat is None or beat[1] == DONE or beat[1].startswith(WAITING):
            self._seen = None
            return None
        if self._seen is None or self._seen[0] != beat[0]:
            self._seen = (beat[0], now)
            return None
        silent = now - self._seen[1]
        if silent < self.silent_s:
            return None
        return (
            f"rank {self.rank}: rank {neighbour} stopped responding while this rank was in {self.where} "
            f"(no heartbeat for {silent:.0f} s, --timeout {self.timeout_s:g}: stopped, hung in native "
            f"code, or gone; last seen in {beat[1]})"
        )

    def stop(self) -> None:
        """Stops the heartbeat; its last beat says this rank is done (its watcher stops)."""
        self._stop.set()
        self._thread.join(timeout=2 * self.interval_s)
        self.where = DONE
        with contextlib.suppress(Exception):  # the store may be gone already
            self._beat()

    def read(self, ranks: list[int] | None = None) -> dict[int, tuple[int, str]]:
        """The last heartbeat (counter, where) of `ranks` (default every rank) that the store holds."""
        beats: dict[int, tuple[int, str]] = {}
        for rank in range(self.world) if ranks is None else ranks:
            key = KEY.format(rank=rank)
            try:
                if not self.store.check([key]):
                    continue
                count, _, where = self.store.get(key).decode().partition(" ")
            except Exception:
                continue
            beats[rank] = (int(count), where)
        return beats

    def diagnose(self, error: BaseException, settle_s: float = SETTLE_S) -> str:
        """One line: what failed where, and which rank is at fault (as far as can be seen)."""
        kind = collective_failure(error)
        where = self.where
        if kind != "timeout":
            return (
                f"rank {self.rank}: a collective in {where} lost its connection to a peer (a rank "
                f"died; torchrun names it): {reason(error)}"
            )
        self._stop.set()  # our own counter stops: it is not evidence about the others
        self._thread.join(timeout=2 * self.interval_s)
        self.where = WAITING + where
        self._beat()  # the last heartbeat says this rank waits in a collective that timed out
        before = self.read()
        time.sleep(settle_s)
        after = self.read()
        others = [r for r in range(self.world) if r != self.rank]
        waiting = [r for r in others if r in after and after[r][1].startswith(WAITING)]
        still = [r for r in others if r not in after or before.get(r, (None,))[0] == after[r][0]]
        silent = [r for r in still if r not in waiting]
        waited = f"rank {self.rank}: a collective in {where} timed out after {self.timeout_s:g} s"
        if waiting and len(waiting) == len(others):
            places = "; ".join(f"rank {r} {after[r][1]}" for r in waiting)
            return (
                f"{waited}, and so did every other rank's ({places}): the ranks wait in different "
                "collectives (a deadlock: they disagree on which collective comes next)"
            )
        if silent:
            seen = "; ".join(
                f"rank {r} last seen in {after[r][1]}" if r in after else f"rank {r} never started"
                for r in silent
            )
            ranks = ", ".join(map(str, silent))
            return (
                f"{waited}: rank{'s' if len(silent) > 1 else ''} {ranks} stopped responding (no "
                f"heartbeat for {settle_s:g} s: stopped, hung in native code, or gone; {seen})"
            )
        places = "; ".join(f"rank {r} in {after[r][1]}" for r in others)
        return (
            f"{waited} although every rank is alive ({places}): a rank is hung in Python code or "
            "the ranks disagree on which collective comes next"
        )
