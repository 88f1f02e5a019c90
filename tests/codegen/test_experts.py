"""Expert parallelism in the runtime (`unityc/runtime/experts.py`): a dropless top-k MoE whose
experts are sharded over 2 and 4 gloo ranks (EP 2, EP 4, EP 2 x expert-data 2; balanced and
skewed routing, experts with no rows; fp32 and bf16) equals a dense single-process MoE in the
loss and the gradients of the tokens, the router (through the gates) and every expert weight;
the group layout and the one-rank path in process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unityc.runtime.experts import dispatch, expert_group_ranks, expert_parallel_moe

WORKER = Path(__file__).with_name("experts_worker.py")


@pytest.mark.parametrize(("world", "cases"), [(2, 2), (4, 4)])
def test_expert_parallel_moe_is_exact(world: int, cases: int, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(WORKER), str(world), str(tmp_path)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.endswith(")")]
    assert len(lines) == cases and all(": ok (" in line for line in lines), run.stdout


def test_group_ranks() -> None:
    # tensor innermost, then expert, then expert-data (Megatron-Core's tp-ep-dp for expert layers)
    ep, edp = expert_group_ranks(8, expert=2, tensor=2)
    assert ep == [[0, 2], [1, 3], [4, 6], [5, 7]] and edp == [[0, 4], [1, 5], [2, 6], [3, 7]]
    ep, edp = expert_group_ranks(4, expert=4)
    assert ep == [[0, 1, 2, 3]] and edp == [[0], [1], [2], [3]]
    with pytest.raises(ValueError, match="expert 3 x tensor 1 does not divide 4 ranks"):
        expert_group_ranks(4, expert=3)


def test_one_rank_groups_by_expert_and_combines() -> None:
    x = torch.arange(8.0).view(4, 2)
    ids = torch.tensor([[2, 0], [1, 2], [0, 1], [2, 1]])
    rows, record = dispatch(x, ids, 3)
    assert record.per_expert == (2, 3, 3) and record.send == record.recv == (8,)
    assert rows[:, 0].tolist() == [0.0, 4.0, 2.0, 4.0, 6.0, 0.0, 2.0, 6.0]  # by expert, stable
    scale = [lambda z, s=s: z * s for s in (1.0, 10.0, 100.0)]
    gates = torch.tensor([[0.5, 0.25], [1.0, 2.0], [1.0, 1.0], [0.0, 3.0]])
    got = expert_parallel_moe(x, ids, gates, scale)
    want = torch.stack([x[0] * 50.25, x[1] * 210, x[2] * 11, x[3] * 30])
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((torch.zeros(4, 2), torch.zeros(3, 2, dtype=torch.long), 4), "must be"),
        ((torch.zeros(4, 2), torch.zeros(4, 2), 4), "must be integers"),
        ((torch.zeros(4, 2), torch.full((4, 2), 4), 4), "outside 0 ... 3"),
        ((torch.zeros(4, 2), torch.zeros(4, 2, dtype=torch.long), 0), "do not split"),
    ],
)
def test_bad_arguments_are_named(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dispatch(*args)
