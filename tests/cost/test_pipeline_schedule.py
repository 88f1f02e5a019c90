"""Pipeline schedules on small cases computed by hand (unityc/cost/pipeline.py)."""

from __future__ import annotations

import json

import pytest

from unityc.cost.pipeline import StageCost, chrome_trace, group_order, simulate_pipeline


def uniform(stages: int, f: float = 1.0, b: float = 2.0, **kw: float) -> list[StageCost]:
    return [StageCost(f, b, **kw) for _ in range(stages)]


def test_gpipe_two_stages_by_hand() -> None:
    # stage 0: F0 [0,1] F1 [1,2]; stage 1: F0 [1,2] F1 [2,3] B0 [3,5] B1 [5,7]; stage 0: B0 [5,7] B1 [7,9]
    run = simulate_pipeline(uniform(2), "gpipe", 2)
    assert run.iteration_s == pytest.approx(9.0)
    assert run.forward_s == pytest.approx(3.0)
    spans = {(e.what, e.stage, e.microbatch): (e.start, e.end) for e in run.events}
    assert spans[("B", 0, 1)] == (7.0, 9.0)
    assert spans[("B", 1, 0)] == (3.0, 5.0)
    assert [g.inflight for g in run.groups] == [2, 2]
    # bubble: each group computes 6 of 9 s
    assert run.bubble == pytest.approx(1 - 12 / 18)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("stages", "micro"), [(2, 3), (4, 4), (4, 8), (3, 1)])
def test_flush_schedules_take_m_plus_s_minus_1_slots(schedule: str, stages: int, micro: int) -> None:
    """Equal stages and no transfers: (M + S - 1) x (f + b) for both flush schedules."""
    run = simulate_pipeline(uniform(stages), schedule, micro)
    assert run.iteration_s == pytest.approx((micro + stages - 1) * 3.0)


def test_1f1b_order_and_inflight() -> None:
    assert [(t.kind, t.microbatch) for t in group_order("1f1b", 2, 3, 1, 0)] == [
        ("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)
    ]  # fmt: skip
    run = simulate_pipeline(uniform(4, activation_bytes=10.0), "1f1b", 8)
    # 1F1B holds min(S - k, M) micro-batches on stage k; GPipe all M
    assert [g.inflight for g in run.groups] == [4, 3, 2, 1]
    assert [g.inflight_bytes for g in run.groups] == [40.0, 30.0, 20.0, 10.0]
    gpipe = simulate_pipeline(uniform(4, activation_bytes=10.0), "gpipe", 8)
    assert [g.inflight for g in gpipe.groups] == [8] * 4
    assert simulate_pipeline(uniform(4), "1f1b", 2).groups[0].inflight == 2


def test_transfers_and_sync_by_hand() -> None:
    # S=2, M=1, f=1, b=1, send 0.5 each way, stage 0 syncs 2 s and updates 1 s
    costs = [StageCost(1, 1, send_s=0.5, sync_s=2.0, update_s=1.0), StageCost(1, 1, send_back_s=0.5)]
    run = simulate_pipeline(costs, "1f1b", 1)
    # F0 [0,1], send [1,1.5],
    # F1 [1.5,2.5], B1 [2.5,3.5], send back [3.5,4], B0 [4,5], sync [5,7], update [7,8]
    assert run.iteration_s == pytest.approx(8.0)
    assert run.backward_s == pytest.approx(5.0)


def test_link_is_one_transfer_at_a_time() -> None:
    # sends of 2 s after forwards of 1 s: the link, not the stage, paces the pipeline
    costs = [StageCost(1, 1, send_s=2.0), StageCost(1, 1)]
    run = simulate_pipeline(costs, "gpipe", 3)
    sends = sorted((e.start, e.end) for e in run.events if e.what == "send")
    assert sends == [(1.0, 3.0), (3.0, 5.0), (5.0, 7.0)]


def test_interleaved_beats_1f1b_bubble() -> None:
    """Interleaving v chunks per group shrinks the bubble by about v (Megatron-LM §2.2)."""
    M, G, v = 8, 4, 2
    one = simulate_pipeline(uniform(G, 2.0, 4.0), "1f1b", M)
    inter = simulate_pipeline(uniform(G * v, 1.0, 2.0), "interleaved-1f1b", M, v)
    assert one.iteration_s == pytest.approx((M + G - 1) * 6.0)
    # ideal: M*(f+b) + (G-1)*(f+b)/v
    assert inter.iteration_s == pytest.approx(M * 6.0 + (G - 1) * 3.0)
    assert inter.bubble < one.bubble
    assert {t.stage for t in group_order("interleaved-1f1b", 8, 8, 2, 1)} == {1, 5}


def test_two_buffered_has_no_flush() -> None:
    costs = uniform(4, 1.0, 2.0, sync_s=1.0)
    run = simulate_pipeline(costs, "2bw", 8)
    assert run.iteration_s == pytest.approx(8 * 3.0)  # the steady-state period: no fill, no drain
    flush = simulate_pipeline(costs, "1f1b", 8)
    assert flush.iteration_s == pytest.approx(11 * 3.0 + 1.0)


def test_bad_schedules_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown schedule"):
        simulate_pipeline(uniform(2), "zigzag", 2)
    with pytest.raises(ValueError, match="multiple"):
        simulate_pipeline(uniform(4), "interleaved-1f1b", 3, 2)
    with pytest.raises(ValueError, match=">= 0"):
        StageCost(-1.0, 1.0)


def test_chrome_trace_is_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    run = simulate_pipeline(uniform(2, send_s=0.1), "1f1b", 2)
    trace = chrome_trace(run)
    text = json.dumps(trace)
    events = [e for e in json.loads(text)["traceEvents"] if e["ph"] == "X"]
    assert len([e for e in events if e["cat"] in ("F", "B")]) == 2 * 2 * 2
    assert all(e["dur"] >= 0 for e in events)
