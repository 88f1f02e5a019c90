"""The iteration simulation: gradient sync and updates follow the backward, as in the generated
program, so where a weight appears in the graph does not change the estimate."""

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
def test_gradient_sync_and_updates_follow_the_backward(steps: list[Step]) -> None:
    """As the runtime does: forward 2 ms, backward 2 ms, then the all-reduces of w2 and w1
    (4-6 and 6-8 ms), each weight's update after its sync (6.0-6.1 and 8.0-8.1 ms)."""
    schedule = simulate(steps, {}, loss=4)
    assert schedule.forward_s == pytest.approx(2 * MS)
    assert schedule.backward_s == pytest.approx(4 * MS)
    assert schedule.iteration_s == pytest.approx(8.1 * MS)
