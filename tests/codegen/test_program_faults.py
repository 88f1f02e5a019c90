"""Generated programs facing faults and bad input: a stopped rank is named by its peers within
the collective timeout, bad flags and unwritable outputs are usage errors (no traceback), a
program runs from any directory (the factory file it rebuilds the reference model from is
recorded absolute), SIGINT/SIGTERM save and stop every rank, workers stop with their launcher,
resume checks what the checkpoint recorded, ranks agree on their arguments, and bad batches are
named by the rank that reads them (one `rank R: error:` line on its stderr, and in torchrun's
summary)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from torchrun import (
    FAILURE,
    Rank,
    Run,
    command,
    environment,
    kill_group,
    rank_logs,
    running,
    torchrun,
    wait_for,
    workers,
    write_program,
)
from xdsl.dialects.builtin import StringAttr

from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.machine.presets import preset
from unityc.runtime.watch import Heartbeat, collective_failure
from unityc.search.baselines import data_parallel
from unityc.search.unity import UnityOptions

PLAN = Path(__file__).parent.parent / "filecheck" / "codegen" / "Inputs" / "tiny_mlp_plan.mlir"
START_S = 600
"""For the program to start and print its first step (about 10 s on a quiet machine)."""


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("faults") / "tiny.py"
    opt = [sys.executable, "-m", "unityc.tools.opt", str(PLAN), "-t", "torch", "-o", str(path)]
    subprocess.run(opt, check=True, timeout=300)
    return path


@pytest.mark.torchrun
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds torchrun's workers in /proc")
def test_a_stopped_rank_is_named_by_its_peer(program: Path) -> None:
    """SIGSTOP on rank 1 mid-training: rank 0's heartbeat thread sees rank 1's stand still
    (or, where it waited in a collective already, that collective times out: --timeout 20), names
    rank 1 and exits 1, within 20 s of the stop (120 s allowed: the machine is loaded)."""
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
    assert "rank 0: " in rank0.stderr and "rank 1 stopped responding" in rank0.stderr, rank0.stderr
    assert "(no heartbeat for" in rank0.stderr, rank0.stderr
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
        (("--json", "."), "--json .: is a folder"),
        (("--saved-bytes", "/missing/dir/s.json"), "--saved-bytes /missing/dir/s.json: no such directory"),
        (("--save", "{blocked}/ck"), "--save {blocked}/ck: cannot write there (Not a directory)"),
        (("--profile", "{blocked}"), "--profile {blocked}: cannot write there (File exists)"),
        (("--optimizer", "lbfgs"), "--optimizer lbfgs: its step re-evaluates the model through a closure"),
        (("--reset-optimizer",), "--reset-optimizer goes with --resume"),
    ],
)
def test_bad_flags_are_usage_errors(program: Path, args: tuple[str, ...], message: str) -> None:
    """Checked before torchrun is even needed: exit 2, the flag named, no traceback. Output
    folders a file blocks are found before any training (they were found after it)."""
    blocked = program.parent / "a-file"
    blocked.write_text("not a folder")
    args = tuple(a.format(blocked=blocked) for a in args)
    message = message.format(blocked=blocked)
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


def watcher(beats: dict[int, list[str]], world: int, timeout_s: float, lines: list[str]) -> Heartbeat:
    """Rank 0's heartbeat (1 s period) with its thread stopped: the test calls `watch` itself."""
    heartbeat = Heartbeat(0, world, timeout_s, interval_s=1, store=Store(beats), on_silent=lines.append)
    heartbeat.stop()
    heartbeat.where = "step 6: data"
    return heartbeat


def test_a_silent_neighbour_is_named_within_the_timeout() -> None:
    """The heartbeat thread's watch of its ring neighbour (rank 0 watches rank 1), at scripted
    times: named once its counter stood still for --timeout less 3 periods (17 s of 20), not
    while it moves, nor once it finished or waits in a timed-out collective itself."""
    lines: list[str] = []
    beats = {1: ["4 step 5: forward"] * 2 + ["5 step 5: forward"] + ["5 step 5: forward"] * 3}
    heartbeat = watcher(beats, 2, 20, lines)
    assert heartbeat.silent_s == 17
    assert [heartbeat.watch(t) for t in (0.0, 10.0, 11.0, 27.0)] == [None, None, None, None]
    assert heartbeat.watch(28.5) == (
        "rank 0: rank 1 stopped responding while this rank was in step 6: data (no heartbeat for 18 s, "
        "--timeout 20: stopped, hung in native code, or gone; last seen in step 5: forward)"
    )
    for last in ("done", "timed out in step 5: forward"):
        quiet = watcher({1: [f"4 {last}"]}, 2, 20, lines)
        assert [quiet.watch(t) for t in (0.0, 30.0, 60.0)] == [None, None, None]
    assert watcher({1: ["4 x"]}, 2, 4, lines).silent_s == 5  # a short --timeout: the collectives'
    alone = watcher({}, 1, 20, lines)
    assert alone.watch(0.0) is None and alone.watch(100.0) is None and not lines


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


def start(program: Path, args: list[str], logs: Path) -> subprocess.Popen[str]:
    """torchrun of `program` on 2 ranks in a session of its own (each rank's output in `logs`)."""
    return subprocess.Popen(
        command(program, 2, args, logs),
        cwd=program.parent,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def first_step(process: subprocess.Popen[str], logs: Path) -> dict[int, int]:
    """Waits for rank 0's first progress line; returns rank -> worker pid."""
    started = lambda: "step 1:" in rank_logs(logs).get(0, Rank()).stdout  # noqa: E731
    wait_for(lambda: started() or process.poll() is not None, START_S)
    assert started(), rank_logs(logs)
    ranks = workers(process.pid)
    assert set(ranks) == {0, 1}, ranks
    return ranks


def no_traceback(logs: Path) -> None:
    for rank, log in rank_logs(logs).items():
        assert "Traceback" not in log.stderr + log.stdout, f"rank {rank}:\n{log.stderr}"


@pytest.mark.torchrun
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds torchrun's workers in /proc")
@pytest.mark.parametrize(("signum", "group"), [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_a_signal_finishes_the_step_saves_and_stops_every_rank(
    program: Path, tmp_path: Path, signum: int, group: bool
) -> None:
    """SIGTERM to rank 1 alone (a scheduler's preemption notice), or SIGINT to torchrun and
    every worker at once (a Ctrl-C in the terminal: torchrun forwards it as well): every rank
    stops after the same step, a checkpoint of it is saved and named `latest`, and every rank
    exits 128 + the signal, one line, no traceback (was: KeyboardInterrupt and gloo tracebacks
    on every rank, nothing saved). torchrun's summary names the signal as the cause (was: "To
    enable traceback see ..."); after a Ctrl-C torchrun prints its own SignalException instead."""
    logs, ck = tmp_path / "logs", tmp_path / "ck"
    process = start(program, ["--steps", "1000000", "--log-every", "1000", "--save", str(ck)], logs)
    try:
        ranks = first_step(process, logs)
        if group:
            os.killpg(process.pid, signum)
        else:
            os.kill(ranks[1], signum)
        agent, _ = process.communicate(timeout=300)
    finally:
        kill_group(process)
    name = signal.Signals(signum).name
    if not group:
        codes = dict(FAILURE.findall(agent))
        assert codes == {"0": str(128 + signum), "1": str(128 + signum)}, agent
        assert f": stopped by {name} after step " in agent.split("Root Cause")[1], agent
    stderr = rank_logs(logs)[0].stderr
    assert f"rank 0: stopped by {name} after step " in stderr, stderr
    latest = (ck / "latest").read_text().strip()
    assert f"; saved {ck / latest}" in stderr, stderr
    assert (ck / latest / ".metadata").is_file()
    no_traceback(logs)


@pytest.mark.torchrun
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds torchrun's workers in /proc")
def test_workers_stop_when_torchrun_is_killed(program: Path, tmp_path: Path) -> None:
    """kill -9 of torchrun: both workers exit within seconds, saying why (they went on training
    and writing checkpoints)."""
    logs = tmp_path / "logs"
    process = start(program, ["--steps", "1000000", "--log-every", "1000"], logs)
    try:
        ranks = first_step(process, logs)
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=60)
        gone = wait_for(lambda: not any(running(pid) for pid in ranks.values()), 60)
    finally:
        kill_group(process)
    assert gone is not None, "workers still running 60 s after torchrun was killed"
    for rank, log in rank_logs(logs).items():
        assert f"rank {rank}: error: the launcher (pid {process.pid}) is gone" in log.stderr, log.stderr


def failed(run: Run, *lines: str) -> None:
    """The run failed with `lines` on the stderr of the ranks that found it (one line each, no
    traceback), and torchrun's summary shows the first line as the cause and no failure without
    its error file ("To enable traceback see ...")."""
    assert run.returncode not in (0, None), run.report()
    for line in lines:
        rank = int(line.split(":", 1)[0].removeprefix("rank "))
        assert line in run.ranks[rank].stderr, run.report()
    assert f"traceback : {lines[0]}" in run.agent, run.agent
    assert "To enable traceback" not in run.agent, run.agent  # every failed rank wrote its error file
    for rank, log in run.ranks.items():
        assert "Traceback" not in log.stderr, f"rank {rank}:\n{log.stderr}"


@pytest.mark.torchrun
def test_resume_checks_what_the_checkpoint_recorded(program: Path, tmp_path: Path) -> None:
    """A checkpoint saved with Adam: resuming with SGD is refused naming the difference, unless
    --reset-optimizer; `--resume` takes the --save folder (its newest complete step, not a
    half-written one); a truncated data file is named (was: CheckpointException traceback).
    (`--init` with another optimizer: test_checkpoint_matrix.)"""
    ck = tmp_path / "ck"
    saved = torchrun(program, 2, "--steps", "2", "--optimizer", "adam", "--save", str(ck))
    assert saved.returncode == 0, saved.report()
    (ck / ".step-9.partial").mkdir()  # a save killed before its rename
    (ck / ".step-9.partial" / "__0_0.distcp").write_text("half")
    other = torchrun(program, 2, "--steps", "3", "--optimizer", "sgd", "--resume", str(ck))
    differs = (
        f"--resume {ck}: {ck / 'step-2'} was saved with other optimizer settings (name 'Adam' there, "
        "'SGD' here); pass the same ones, or --reset-optimizer to start a fresh optimizer on purpose"
    )
    failed(other, f"rank 0: error: {differs}", f"rank 1: error: {differs}")
    reset = torchrun(
        program,
        2,
        "--steps",
        "3",
        "--optimizer",
        "sgd",
        "--resume",
        str(ck),
        "--reset-optimizer",
        "--log-every",
        "1",
    )
    assert reset.returncode == 0 and "resumed at step 2" in reset.output, reset.report()
    data = sorted((ck / "step-2").glob("*.distcp"))[-1]
    data.write_bytes(data.read_bytes()[:100])
    cut = torchrun(program, 2, "--steps", "3", "--optimizer", "adam", "--resume", str(ck))
    failed(cut, f"rank 0: error: {data}: truncated (100 bytes, the checkpoint's .metadata needs")


@pytest.mark.torchrun
def test_ranks_started_with_different_arguments_stop_at_once(program: Path, tmp_path: Path) -> None:
    """Two ranks started by hand (as two launchers would) with different --steps: found before
    any step, naming the difference (was: a collective timeout naming the wrong cause)."""
    env = {**environment(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(program), "--steps", steps, "--timeout", "120"],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r, steps in ((0, "3"), (1, "5"))
    ]
    outputs = [p.communicate(timeout=300) for p in ranks]
    assert [p.returncode for p in ranks] == [1, 1], outputs
    assert outputs[0][1].strip() == (
        "rank 0: error: the ranks were started with different arguments: rank 1 has '--steps 5' where "
        "rank 0 has '--steps 3' (torchrun passes every rank the same ones)"
    ), outputs
    assert outputs[1][1].strip() == "", outputs  # rank 0 speaks for both


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BAD_DATA = """
import torch


def batch(step, dtype=torch.int64):
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(step))
    return {"input_ids": ids.to(dtype), "labels": ids}


def out_of_vocabulary():
    for step in range(1, 1000):
        b = batch(step)
        if step == 2:
            b["input_ids"][3, 5] = 500  # row 3: rank 1's half of the batch
        yield b


def float_ids():
    while True:
        yield batch(1, torch.float32)


def raises():
    yield batch(1)
    raise OSError("the shard file went away")
"""


@pytest.fixture(scope="module")
def bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data-parallel program of the zoo BERT on 2 ranks (an embedding of 128 rows), beside
    data functions that go wrong."""
    directory = tmp_path_factory.mktemp("bert")
    module = import_model(ModelSpec("bert", "small", batch=4))
    planned = data_parallel(from_module(module), preset("cpu:2"), UnityOptions(), None)
    planned.graph.module_attrs["unityc.machine"] = StringAttr("cpu:2")
    (directory / "bad_data.py").write_text(BAD_DATA)
    return write_program(to_module(planned.graph), directory, "bert-dp")


@pytest.mark.torchrun
@pytest.mark.parametrize(
    ("function", "lines"),
    [
        (
            "out_of_vocabulary",
            ["rank 1: error: batch 2: input 'input_ids' holds the index 500, outside [0, 128) (the "
             "embedding it indexes has 128 rows)"],
        ),
        (
            "float_ids",
            [f"rank {r}: error: batch 1: input 'input_ids' holds float32 values, the plan takes int64 "
             "(convert them in the data function)" for r in (0, 1)],
        ),
        (
            "raises",
            [f"rank {r}: error: the data function failed at batch 2: OSError: the shard file went away"
             for r in (0, 1)],
        ),
    ],
)  # fmt: skip
def test_bad_batches_are_named_by_the_rank_that_reads_them(
    bert: Path, function: str, lines: list[str]
) -> None:
    """Out-of-vocabulary ids (in rank 1's rows only: rank 1 names the input, batch and value,
    rank 0 does not wait for it), float ids (were truncated silently), a data function that
    raises after its first batch (was a traceback)."""
    run = torchrun(bert, 2, "--steps", "3", "--data", f"bad_data.py:{function}", "--timeout", "120")
    failed(run, *lines)


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
