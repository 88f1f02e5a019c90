"""Machine views checked in constant time (`dialects/view.py`): the arithmetic check agrees with
placing every task on every small view, a view the compiler writes for 65,536 tasks is checked
without placing them, and the largest offsets are the farthest task's."""

from __future__ import annotations

import itertools
import random

from unityc.dialects.view import MachineViewAttr


def _placed(view: MachineViewAttr, dims: list[int]) -> str | None:
    """The check by enumeration (what `problem_for` did for every view)."""
    seen: set[tuple[int, int]] = set()
    for coord in itertools.product(*(range(d) for d in dims)):
        where = view.placement(coord)
        if where in seen:
            return f"machine view places two tasks on one device (task {list(coord)})"
        seen.add(where)
    return None


def test_agrees_with_enumeration() -> None:
    rng = random.Random(39)
    for _ in range(3000):
        dims = [rng.choice((2, 3, 4)) for _ in range(rng.randint(1, 3))]
        strides = [rng.randint(1, 12) for _ in dims]
        inter = [rng.random() < 0.4 for _ in dims]
        view = MachineViewAttr(rng.randint(0, 3), strides, inter)
        assert view.problem_for([1, *dims]) == _placed(view, dims), (dims, strides, inter)
        node = max(view.placement(c)[0] for c in itertools.product(*(range(d) for d in dims)))
        local = max(view.placement(c)[1] for c in itertools.product(*(range(d) for d in dims)))
        assert view.largest([1, *dims]) == (node, local)


def test_large_view_is_not_enumerated(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    clash = MachineViewAttr(0, [1, 1], [False, False])
    assert clash.problem_for([2, 2]) == "machine view places two tasks on one device (task [1, 0])"
    # 8,192 nodes x 8 devices: data 8,192 across the nodes, tensor 8 within each
    view = MachineViewAttr(0, [1, 1], [False, True])
    monkeypatch.setattr(MachineViewAttr, "placement", lambda *a: (_ for _ in ()).throw(AssertionError))
    assert view.problem_for([8, 8192]) is None
    assert view.largest([8, 8192]) == (8191, 7)
