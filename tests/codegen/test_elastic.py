"""`unityc-train` losing a node and getting it back (issue 44), on localhost (`elastic_run.py`):
two launchers of 2 processes each train the zoo MLP for 20 steps from a data-parallel plan on 4
ranks, saving every step (Adam: optimizer state must carry over). Before step 6 the second
launcher is killed (SIGKILL; its workers end with it): torch elastic restarts the survivors on the
one node left, which plan for 2 ranks (searched: the cache has no such plan) and resume from
step 5. At step 14 the launcher comes back: the agent stops the workers with SIGTERM, they save
step 14 and the job resumes on 4 ranks with the data-parallel plan again, to step 20.

The losses of steps 6-14 equal those of the 2-rank program resumed from step 5 on its own, and
those of steps 15-20 those of the 4-rank program resumed from step 14 (to the printed 1e-6); the
samples trained on, step by step (the data function's log), are batches 1-20 each exactly once.
Each transition is in `DIR/elastic/transitions.jsonl` with its plans, estimated slowdown, steps
redone, the fault the ranks found and the time from it to the first step on the new plan. The
larger matrix (ZeRO-3 and pipelined starting plans, each also growing back, SIGKILL of a worker,
SIGSTOP of a rank) is `benchmarks/elastic.py`, benchmark-only (the suite's budget).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from elastic_run import GROW_AT, KILL_AT, Scenario, run_scenario

pytestmark = pytest.mark.torchrun


def test_losing_and_regaining_a_node_keeps_the_run(tmp_path: Path) -> None:
    outcome = run_scenario(Scenario("dp", "launcher", grow=True), tmp_path, deadline_s=600)
    assert not outcome.problems, "\n".join([*outcome.problems, outcome.text[-6000:]])
    start, lost, grown = outcome.transitions
    assert lost["previous_world"] == 4 and lost["origin"].startswith("searched"), lost
    assert lost["plan"] == "world-2.mlir" and lost["estimated_slowdown"] is not None, lost
    assert lost["steps_redone"] == 0 and lost["first_step"] == KILL_AT + 1, lost
    assert grown["plan"] == "world-4.mlir" and grown["origin"] == "given", grown
    assert grown["first_step"] == GROW_AT + 1 and grown["global_batch"] == start["global_batch"], grown
    assert outcome.recovery_s is not None and outcome.recovery_s > 0
    # the fault as the first rank to find it noted it (a launcher gone, a peer lost), and the time
    # from there to the first step on the new plan
    assert "launcher" in lost["fault"] or "lost its connection" in lost["fault"], lost
    assert 0 < lost["fault_to_first_step_s"] <= outcome.recovery_s, lost
    text = outcome.text
    assert (
        "lost 2 device(s)" in text and "estimated slowdown" in text and "first step on world-2.mlir" in text
    )
    assert "s after the fault was found (rank " in text


def test_the_machine_left_is_described_and_bad_input_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No torchrun: `machine_for` re-describes presets (and refuses what it cannot), the
    launcher's usage errors exit 2 before any work."""
    from unityc.tools.elastic import ElasticError, machine_for
    from unityc.tools.train import parse_args

    assert machine_for("cpu:4", 2, 2) == "cpu:2"
    assert machine_for("dgx-a100:4", 24, 8) == "dgx-a100:3"
    with pytest.raises(ElasticError, match="a dgx-a100 node has 8 devices"):
        machine_for("dgx-a100:4", 12, 4)
    with pytest.raises(ElasticError, match="not for a machine file"):
        machine_for("examples/machines/mixed.toml", 2, 1)
    model = tmp_path / "m.mlir"
    model.write_text("")
    for argv, message in (
        ([str(tmp_path / "none.mlir")], "no such file"),
        ([str(model), "--nnodes", "2:1"], "MIN:MAX"),
        ([str(model), "--", "--resume", "x"], "passes it to the program itself"),
        ([str(model), "--planner", "bogus"], "'bogus' is not a planning pass"),
        ([str(model), "--planner", 'zero{machine="cpu:2"}'], "give no machine="),
        ([str(model), "--planner", "zero{stages=3}"], "unknown option 'stages'"),
        ([str(model), "--planner", "zero,megatron"], "expected one pass, got 2"),
    ):
        with pytest.raises(SystemExit) as exit_:
            parse_args(["--machine", "cpu:2", "--save", str(tmp_path / "ck"), *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err, message


def test_a_planner_pass_plans_the_smaller_world(tmp_path: Path) -> None:
    """`--planner 'zero{stage=3}'`: the plan for 2 of cpu:4's ranks is ZeRO-3 over both (the
    search would put the tiny MLP on one device), and the cache says how it was made."""
    from elastic_run import SPEC

    from unityc.frontend import import_model
    from unityc.tools.elastic import PlanCache

    model = tmp_path / "mlp.mlir"
    model.write_text(str(import_model(SPEC)))
    cache = PlanCache(tmp_path / "plans", model, "cpu:4", 2, 60.0, "zero{stage=3}")
    cached = cache.get(2)
    assert cached.machine == "cpu:2" and cached.origin.startswith("planned by zero{stage=3} in"), cached
    assert "2 copies" in cached.summary and "ZeRO-3" in cached.summary, cached.summary
    assert cache.get(2) == cached  # once: the second world-2 lookup reads the cache
