"""The search's background worker (search/background.py): the same items, in the same order, as
in-process, whether the worker runs, fails or is not allowed; a stopped caller leaves no worker."""

from __future__ import annotations

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
