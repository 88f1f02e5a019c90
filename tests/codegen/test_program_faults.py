"""Generated programs facing faults and bad input: a stopped rank is named by its peers within
the collective timeout, bad flags are usage errors (no traceback), and a program runs from any
directory (the factory file it rebuilds the reference model from is recorded absolute)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from torchrun import Rank, command, environment, kill_group, rank_logs, wait_for

from unityc.runtime.watch import Heartbeat, collective_failure

PLAN = Path(__file__).parent.parent / "filecheck" / "codegen" / "Inputs" / "tiny_mlp_plan.mlir"
START_S = 600
"""For the program to start and print its first step (about 10 s on a quiet machine)."""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "tiny.py"
    opt = [sys.executable, "-m", "unityc.tools.opt", str(PLAN), "-t", "torch", "-o", str(path)]
    subprocess.run(opt, check=True, timeout=300)
    return path


def workers(agent: int) -> dict[int, int]:
    """rank -> pid of torchrun's workers (the agent's children, by their RANK)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) != agent:
            continue
        for variable in environ:
            if variable.startswith(b"RANK="):
                found[int(variable[5:])] = int(entry)
    return found


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.torchrun
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds torchrun's workers in /proc")
def test_a_stopped_rank_is_named_by_its_peer(program: Path) -> None:
    """SIGSTOP on rank 1 mid-training: rank 0's next collective times out (--timeout 20), it
    watches the heartbeats, names rank 1 and exits 1, well within 120 s of the stop."""
    with tempfile.TemporaryDirectory() as logs:
        args = ["--steps", "1000000", "--timeout", "20"]
        process = subprocess.Popen(
            command(program, 2, args, Path(logs)),
            cwd=program.parent,
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            first_step = lambda: "step 1:" in rank_logs(Path(logs)).get(0, Rank()).stdout  # noqa: E731
            wait_for(lambda: first_step() or process.poll() is not None, START_S)
            assert first_step(), rank_logs(Path(logs))
            ranks = workers(process.pid)
            assert set(ranks) == {0, 1}, ranks
            os.kill(ranks[1], signal.SIGSTOP)
            exited = wait_for(lambda: not running(ranks[0]), 120)
            os.kill(ranks[1], signal.SIGKILL)
            agent, _ = process.communicate(timeout=120)
        finally:
            kill_group(process)
        rank0 = rank_logs(Path(logs))[0]
    assert exited is not None, f"rank 0 still running 120 s after rank 1 stopped:\n{rank0.stderr}"
    assert "rank 0: a collective in step" in rank0.stderr, rank0.stderr
    assert "timed out after 20 s: rank 1 stopped responding" in rank0.stderr, rank0.stderr
    assert "Traceback" not in rank0.stderr, rank0.stderr
    assert "rank      : 0 (local_rank: 0)\n  exitcode  : 1" in agent, agent


def run_alone(program: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(program), *args], capture_output=True, text=True, env=environment(), timeout=300
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--timeout", "0"), "--timeout must be a positive number of seconds, got 0.0"),
        (("--lr", "nan"), "--lr must be a positive number, got nan"),
        (("--tolerance", "-1"), "--tolerance must be a non-negative number, got -1.0"),
        (("--json", "/missing/dir/t.json"), "--json /missing/dir/t.json: no such directory"),
        (("--steps", "0"), "--steps must be at least 1"),
    ],
)
def test_bad_flags_are_usage_errors(program: Path, args: tuple[str, ...], message: str) -> None:
    """Checked before torchrun is even needed: exit 2, the flag named, no traceback."""
    done = run_alone(program, *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_without_torchrun_says_how_to_run(program: Path) -> None:
    done = run_alone(program)
    assert done.returncode == 2
    assert "error: run with torchrun --standalone --nproc_per_node 2" in done.stdout + done.stderr


class Store:
    """A store whose peers' heartbeats are scripted: rank -> successive values of its key."""

    def __init__(self, beats: dict[int, list[str]]):
        self.beats = beats
        self.values: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value.encode()

    def check(self, keys: list[str]) -> bool:
        return all(k in self.values or self._rank(k) in self.beats for k in keys)

    def get(self, key: str) -> bytes:
        script = self.beats.get(self._rank(key))
        if script is None:
            return self.values[key]
        return (script.pop(0) if len(script) > 1 else script[0]).encode()

    @staticmethod
    def _rank(key: str) -> int:
        return int(key.rsplit("/", 1)[1])


TIMED_OUT = RuntimeError(
    "[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 20000ms for recv operation"
)


def diagnose(beats: dict[int, list[str]], error: RuntimeError = TIMED_OUT, world: int = 3) -> str:
    heartbeat = Heartbeat(0, world, 20, interval_s=3600, store=Store(beats))
    heartbeat.where = "step 4: backward"
    return heartbeat.diagnose(error, settle_s=0.01)


def test_a_rank_whose_heartbeat_stands_still_is_named() -> None:
    message = diagnose({1: ["7 step 4: backward", "8 step 4: backward"], 2: ["5 step 3: forward"]})
    assert message == (
        "rank 0: a collective in step 4: backward timed out after 20 s: rank 2 stopped responding (no "
        "heartbeat for 0.01 s: stopped, hung in native code, or gone; rank 2 last seen in step 3: forward)"
    )


def test_a_rank_that_never_started_is_named() -> None:
    message = diagnose({1: ["1 setup", "2 setup"]})
    assert message.endswith(
        "rank 2 stopped responding (no heartbeat for 0.01 s: stopped, hung in native "
        "code, or gone; rank 2 never started)"
    ), message


def test_live_ranks_elsewhere_are_said_to_disagree() -> None:
    message = diagnose(
        {1: ["7 step 5: check", "9 step 5: check"], 2: ["3 step 4: forward", "4 step 4: forward"]}
    )
    assert "every rank is alive (rank 1 in step 5: check; rank 2 in step 4: forward)" in message, message
    assert "hung in Python code or the ranks disagree on which collective comes next" in message


def test_a_lost_peer_is_reported_at_once_in_one_line() -> None:
    error = RuntimeError(
        "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
        "[127.0.0.1]:31637: Connection reset by peer. This is typically caused by a remote worker hanging."
    )
    assert collective_failure(error) == "lost"
    assert diagnose({}, error) == (
        "rank 0: a collective in step 4: backward lost its connection to a peer (a rank died; torchrun "
        "names it): Read error [127.0.0.1]:31637: Connection reset by peer"
    )


def test_other_errors_are_not_collective_failures() -> None:
    assert collective_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert collective_failure(ValueError("Timed out")) is None


def test_ranks_that_all_timed_out_are_said_to_deadlock() -> None:
    """Every rank waiting in a collective of its own (a ZeRO-3 BART's backward did this): each
    marks its last heartbeat, so the diagnosis names a deadlock, not a dead rank."""
    message = diagnose({1: ["9 timed out in step 4: backward"], 2: ["4 timed out in step 4: backward"]})
    assert message == (
        "rank 0: a collective in step 4: backward timed out after 20 s, and so did every other rank's "
        "(rank 1 timed out in step 4: backward; rank 2 timed out in step 4: backward): the ranks wait in "
        "different collectives (a deadlock: they disagree on which collective comes next)"
    ), message


def test_gloo_application_timeout_is_a_timeout() -> None:
    """Gloo's own words for a collective past --timeout (it ended a rank with a raw traceback)."""
    assert collective_failure(RuntimeError("Application timeout caused pair closure")) == "timeout"
