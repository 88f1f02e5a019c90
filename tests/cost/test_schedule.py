"""The iteration simulation: gradient collectives that are not bucketed (ZeRO's) and the updates
follow the backward, as in the generated program, so where a weight appears in the graph does
not change the estimate; the all-reduces of weight copies are bucketed as the program buckets
them and start during the backward."""

from __future__ import annotations

from dataclasses import replace

import pytest

from unityc.cost.communication import collective_floor, collective_time
from unityc.cost.pricing import copy_collectives
from unityc.cost.schedule import Comm, Step, buckets, simulate
from unityc.machine import load_machine
from unityc.machine.spec import Machine
from unityc.runtime.patterns import gradient_buckets

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


def reduced(value: int) -> Step:
    """A weight held in copies on devices 0 and 1: its all-reduce is bucketed."""
    return Step(f"w{value}", (), (value,), grad_reduce=(Comm((0, 1), 2 * MS, 1e6),), update=UPDATE)


def price(devices: tuple[int, ...], nbytes: float) -> float:
    return 2 * MS * nbytes / 1e6  # 2 ms per MB


def test_buckets_start_during_the_backward() -> None:
    """One bucket per weight: w2's gradient is ready at 3 ms (the last layer's backward) and is
    reduced during w1's backward (3-5 ms); w1's bucket follows (5-7 ms); the updates wait for
    both (7-7.2 ms). Without overlap the same all-reduces would end at 8 ms."""
    steps = [X, reduced(1), reduced(2), layer(3, 0, 1), layer(4, 3, 2)]
    grad_buckets = buckets(steps, price, limit=1_000_000)
    assert [b.members for b in grad_buckets] == [(2,), (1,)]  # reverse graph order
    schedule = simulate(steps, {}, 4, grad_buckets)
    assert schedule.backward_s == pytest.approx(4 * MS)
    assert schedule.iteration_s == pytest.approx(7.2 * MS)  # two 0.1 ms updates per device
    assert schedule.buckets == 2
    assert schedule.sync_after_s == pytest.approx(3 * MS)


def test_one_bucket_waits_for_its_last_gradient() -> None:
    """With the default 25 MiB both gradients share one bucket of 2 MB (4 ms), which starts
    when the backward ends."""
    steps = [X, reduced(1), reduced(2), layer(3, 0, 1), layer(4, 3, 2)]
    grad_buckets = buckets(steps, price)
    assert [(b.members, b.comm.nbytes) for b in grad_buckets] == [((2, 1), 2e6)]
    schedule = simulate(steps, {}, 4, grad_buckets)
    assert schedule.iteration_s == pytest.approx(8.2 * MS)


def test_buckets_start_in_their_order() -> None:
    """w2 is read first, so its bucket comes first; w1's gradient is ready first (3 ms) but
    its bucket waits until w2's starts (4 ms), as every rank of the group must issue them in
    the same order."""
    steps = [X, reduced(1), reduced(2), layer(3, 0, 2), layer(4, 3, 1)]
    grad_buckets = buckets(steps, price, limit=1_000_000)
    assert [b.members for b in grad_buckets] == [(2,), (1,)]
    schedule = simulate(steps, {}, 4, grad_buckets)
    assert schedule.iteration_s == pytest.approx(8.2 * MS)


def test_gradient_buckets_cut_by_size_and_dtype() -> None:
    """The cut the runtime and the cost model share: in order, at most `limit` bytes, one dtype
    per bucket, a piece larger than the limit alone."""
    pieces = [(10, "f32"), (10, "f32"), (30, "f32"), (5, "f32"), (5, "f64"), (1, "f64")]
    assert gradient_buckets(pieces, limit=20) == [[0, 1], [2], [3], [4, 5]]
    assert gradient_buckets([], limit=20) == []


def test_buckets_do_not_overlap_compute_on_a_shared_core() -> None:
    """`test_buckets_start_during_the_backward`'s two buckets on devices whose collectives run
    on their compute core (`DeviceKind.comm_shares_core`, cpu:P): the core computes the
    backward (2-4 ms), then reduces w2's bucket (4-6 ms) and w1's (6-8 ms), then the updates
    (8-8.2 ms); on separate streams w2's bucket hides under w1's backward and the same schedule
    ends at 7.2 ms."""
    steps = [X, reduced(1), reduced(2), layer(3, 0, 1), layer(4, 3, 2)]
    grad_buckets = buckets(steps, price, limit=1_000_000)
    assert simulate(steps, {}, 4, grad_buckets).iteration_s == pytest.approx(7.2 * MS)
    shared = simulate(steps, {}, 4, grad_buckets, shared={0, 1})
    assert shared.backward_s == pytest.approx(4 * MS)
    assert shared.iteration_s == pytest.approx(8.2 * MS)
    assert shared.sync_after_s == pytest.approx(4 * MS)
    assert shared.timelines[0].busy_s == pytest.approx(8.2 * MS)  # never two things at once


def test_cpu_collectives_pay_the_handoff_once_each() -> None:
    """On cpu:2 each collective pays the kind's measured `collective_handoff` once, whatever its
    size, and ZeRO's bucket shares add up to one; a kind without the fields (the cpu kind with
    them cleared, every GPU preset) prices as before and overlaps."""
    cpu = load_machine("cpu:2")
    kind = cpu.kinds[0]
    assert kind.comm_shares_core and kind.collective_handoff > 0
    assert cpu.shared_cores == {0, 1}
    plain = Machine(cpu.name, (replace(kind, comm_shares_core=False, collective_handoff=0.0),), cpu.nodes)
    assert plain.shared_cores == frozenset()
    for pattern, nbytes in (("all_reduce", 4), ("all_reduce", 2**20), ("all_gather", 2**22), ("p2p", 64)):
        with_it, without = (collective_time(pattern, nbytes, (0, 1), m) for m in (cpu, plain))
        assert with_it - without == pytest.approx(kind.collective_handoff)
        bytes_part, latency = collective_floor(pattern, nbytes, (0, 1), cpu)
        assert bytes_part + latency <= collective_time(pattern, nbytes, (0, 1), cpu) * (1 + 1e-12)
    assert collective_time("all_reduce", 0, (0, 1), cpu) == 0.0  # nothing moves: no hand-off
    shares = copy_collectives(cpu, "all_gather", {(0, 0, 0): 0, (0, 0, 1): 1}, 2**20, 2**22)
    whole = copy_collectives(cpu, "all_gather", {(0, 0, 0): 0, (0, 0, 1): 1}, 2**22)
    assert 4 * shares[0].seconds == pytest.approx(whole[0].seconds)
    gpus = load_machine("dgx-a100:1")
    assert gpus.shared_cores == frozenset()
    assert all(not k.comm_shares_core and k.collective_handoff == 0 for k in gpus.kinds)
