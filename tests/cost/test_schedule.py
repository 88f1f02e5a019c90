"""The iteration simulation: where a weight appears in the graph does not change the estimate."""

from __future__ import annotations

import pytest

from unityc.cost.schedule import Comm, Step, simulate

MS = 1e-3
SYNC = (Comm((0, 1), 2 * MS, 1e6),)  # all-reduce of a weight's gradient across its copies
UPDATE = ((0, 0.1 * MS), (1, 0.1 * MS))


def weight(value: int) -> Step:
    return Step(f"w{value}", (), (value,), grad_sync=SYNC, update=UPDATE)


def layer(value: int, x: int, w: int) -> Step:
    work = ((0, 1 * MS), (1, 1 * MS))
    return Step(f"op{value}", (x, w), (value,), fwd_compute=work, bwd_compute=work, has_backward=True,
                grad_operands=(True, True))  # fmt: skip


X = Step("x", (), (0,))


@pytest.mark.parametrize(
    "steps",
    [
        [X, weight(1), weight(2), layer(3, 0, 1), layer(4, 3, 2)],  # weights declared first
        [X, weight(1), layer(3, 0, 1), weight(2), layer(4, 3, 2)],  # each before its use
    ],
    ids=["weights-first", "weights-inline"],
)
def test_updates_run_after_the_backward_and_syncs_overlap_it(steps: list[Step]) -> None:
    """Forward 2 ms, backward 2 ms; w2's gradient (ready at 3 ms) syncs during op3's backward
    (3-5 ms), w1's (ready at 4 ms) after it (5-7 ms); each update follows its sync (5.0-5.1 and
    7.0-7.1 ms). Had w2's update run mid-backward, op3's backward would wait for it (8.2 ms)."""
    schedule = simulate(steps, {}, loss=4)
    assert schedule.forward_s == pytest.approx(2 * MS)
    assert schedule.backward_s == pytest.approx(4 * MS)
    assert schedule.iteration_s == pytest.approx(7.1 * MS)
