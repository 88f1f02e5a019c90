"""The search's background worker (search/background.py): the same items, in the same order, as
in-process, whether the worker runs, fails or is not allowed; a stopped caller leaves no worker."""

from __future__ import annotations

import multiprocessing
import multiprocessing.queues
import os
from collections.abc import Iterator

import pytest

from unityc.search import background
from unityc.search.background import Background


def squares() -> Iterator[tuple[int, int]]:
    for i in range(5):
        yield i, os.getpid()


def test_items_come_from_a_worker_in_order() -> None:
    if not background.can_fork():
        pytest.skip("no second core or no fork here")
    work = Background(squares)
    items = list(work.items())
    assert [i for i, _ in items] == list(range(5))
    assert {pid for _, pid in items} != {os.getpid()}  # made in another process
    assert work.process is None and work.conn is None  # closed once done


def test_one_process_when_workers_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(background.WORKERS_ENV, "1")
    work = Background(squares)
    assert work.process is None
    assert {pid for _, pid in work.items()} == {os.getpid()}


def test_a_failing_worker_is_redone_here_and_raises_here() -> None:
    parent = os.getpid()

    def fails_in_a_worker() -> Iterator[int]:
        yield 0
        yield 1
        if os.getpid() != parent:
            raise RuntimeError("worker only")
        yield 2

    assert list(Background(fails_in_a_worker).items()) == [0, 1, 2]

    def fails_everywhere() -> Iterator[int]:
        yield 0
        raise ValueError("bad plan")

    with pytest.raises(ValueError, match="bad plan"):
        list(Background(fails_everywhere).items())


def test_close_stops_a_running_worker() -> None:
    if not background.can_fork():
        pytest.skip("no second core or no fork here")

    def forever() -> Iterator[int]:
        while True:
            yield 1

    work = Background(forever)
    process = work.process
    assert process is not None
    first = next(iter(work.items()))
    assert first == 1
    work.close()
    assert not process.is_alive()


def _inside_a_daemon(out: multiprocessing.queues.Queue[list[int]]) -> None:
    out.put([pid for _, pid in Background(squares).items()])


def test_a_daemon_process_does_the_work_itself() -> None:
    """A daemonic process (the fuzzer's workers) may not fork children: no worker, no error."""
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    child = context.Process(target=_inside_a_daemon, args=(out,), daemon=True)
    child.start()
    pids = out.get(timeout=120)
    child.join()
    assert isinstance(pids, list), pids
    assert len(set(pids)) == 1 and pids[0] == child.pid


def test_ready_gives_what_the_worker_sent_without_waiting(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A caller stopped by a time limit keeps the items the worker has already sent (`ready`),
    and does not wait for the rest (were it to wait, it would get the third item too)."""
    if not background.can_fork():
        pytest.skip("no second core or no fork here")
    import time

    marker = tmp_path / "sent"

    def two_then_slow() -> Iterator[int]:
        yield 0
        yield 1
        marker.touch()  # after both were sent: a send returns once the pipe holds the item
        time.sleep(120)
        yield 2

    work = Background(two_then_slow)
    for _ in range(600):
        if marker.exists():
            break
        time.sleep(0.1)
    assert list(work.ready()) == [0, 1]
    work.close()
    assert work.process is None


def test_an_item_bigger_than_the_pipe_is_kept_at_a_stop(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A pipe holds 64 KiB: the worker's items are read as they come (a thread), so a caller
    busy elsewhere until its time limit still gets a big item (a plan of a big graph), which a
    worker blocked on a full pipe would have lost when stopped."""
    if not background.can_fork():
        pytest.skip("no second core or no fork here")
    import time

    marker = tmp_path / "sent"
    big = bytes(1 << 20)

    def big_then_slow() -> Iterator[bytes]:
        yield big
        marker.touch()  # the send returned: the item left the worker
        time.sleep(120)
        yield b""

    work = Background(big_then_slow)
    for _ in range(600):
        if marker.exists():
            break
        time.sleep(0.1)
    assert work.ready() == [big]
    work.close()


def test_prefetched_items_are_kept_at_a_stop_without_a_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a worker, `prefetch` makes the first items here (data parallelism before the
    segment search): a stop keeps them, and `items` goes on from there in order."""
    monkeypatch.setenv(background.WORKERS_ENV, "1")
    made: list[int] = []

    def counted() -> Iterator[int]:
        for i in range(4):
            made.append(i)
            yield i

    work = Background(counted)
    work.prefetch(2)
    assert made == [0, 1]
    assert work.ready() == [0, 1]
    work = Background(counted)
    made.clear()
    work.prefetch(2)
    assert list(work.items()) == [0, 1, 2, 3]
    assert made == [0, 1, 2, 3]  # made once each
