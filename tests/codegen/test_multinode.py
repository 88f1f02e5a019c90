"""Multi-node launch: a generated program under two torchrun launchers (`--nnodes 2
--nproc-per-node 2`, a c10d rendezvous on localhost, as two hosts would run it), with --check,
for a ZeRO-3 plan (saving a checkpoint from both "nodes") and a pipelined plan (2 stages x 2-way
data parallel), each on 4 ranks.

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT \\
        --rdzv-id JOB train.py --check        # the same command on both hosts
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_checkpoint_matrix import SPEC, plan
from torchrun import TIMEOUT_S, environment, kill_group, write_program

from unityc.dialects.source import make_context, parse_source
from unityc.frontend import ModelSpec, import_model
from unityc.passes.gpipe import GpipePass

pytestmark = pytest.mark.torchrun


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_launchers(program: Path, *args: str) -> tuple[list[int | None], str]:
    """Runs `program` under two torchrun launchers of 2 processes each; returns their exit
    statuses (None: killed at the time limit) and every rank's output."""
    endpoint = f"localhost:{free_port()}"
    with tempfile.TemporaryDirectory() as logs:
        launchers = []
        for node in range(2):
            launch = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2"]
            launch += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "unityc-test"]
            launch += [f"--log-dir={logs}/{node}", "--redirects=3", str(program), *args]
            launchers.append(
                subprocess.Popen(
                    launch,
                    cwd=program.parent,
                    env=environment(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )
        statuses: list[int | None] = []
        agents = []
        for launcher in launchers:
            try:
                agents.append(launcher.communicate(timeout=TIMEOUT_S)[0])
                statuses.append(launcher.returncode)
            except subprocess.TimeoutExpired:
                kill_group(launcher)
                agents.append(launcher.communicate()[0])
                statuses.append(None)
        ranks = [f.read_text(errors="replace") for f in sorted(Path(logs).glob("*/*/attempt_*/*/std*.log"))]
    return statuses, "\n".join([*agents, *ranks])


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("multinode")


def test_a_zero3_plan_runs_and_saves_under_two_launchers(directory: Path) -> None:
    program = write_program(plan(import_model(SPEC), 4, 3), directory, "zero3-4")
    ck = directory / "ck"
    statuses, output = two_launchers(
        program, "--check", "--steps", "2", "--optimizer", "adam", "--save", str(ck)
    )
    assert statuses == [0, 0], output
    assert "check passed: 2 step(s)" in output, output
    assert (ck / "step-2" / ".metadata").is_file()


def test_a_pipelined_plan_runs_under_two_launchers(directory: Path) -> None:
    module = parse_source(make_context(), str(import_model(ModelSpec("mlp", "small", 16))), "mlp.mlir")
    GpipePass(machine="cpu:4", stages=2, microbatches=4, schedule="1f1b").apply(make_context(), module)
    program = write_program(module, directory, "mlp-1f1b-4")
    statuses, output = two_launchers(program, "--check", "--steps", "2")
    assert statuses == [0, 0], output
    assert "check passed: 2 step(s)" in output, output
