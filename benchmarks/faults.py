"""Fault injection against generated training programs and the commands (issue 27): hostile
cases a new user would try, each run for real, and a table of what came out.

    .venv/bin/python benchmarks/faults.py [--only SUBSTRING] [--start K] [--stop L] [--json rows.json]

Programs: the hand-written tiny plan (tests/filecheck/codegen/Inputs/tiny_mlp_plan.mlir, two
Megatron/data-parallel towers, 2 ranks), the zoo BERT data parallel on 2 ranks (an embedding of
128 rows), and the zoo MLP (30x15 first weight) as ZeRO-3 and data parallel on 2 and 4 ranks.
Per case: the exit status (torchrun's), whether the outcome is the one wanted (a refusal with
one located line, or an accept that does what was asked), whether any process of unityc or the
generated program printed a Python traceback (torchrun's own launcher traceback after a failed
worker is counted apart: it is torchrun's, printed whatever the workers do), whether torchrun's
summary names the cause (no failure in it reads "To enable traceback": every failed rank wrote
its error file; a miss makes the case not as wanted), whether it ran past the collective
`--timeout` (a hang), and the line the user reads. Runs on CPU with gloo;
torchrun cases take 10-40 s each on a loaded 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "codegen"))

from torchrun import (  # noqa: E402
    command,
    environment,
    kill_group,
    rank_logs,
    wait_for,
    workers,
    write_program,
)

TINY_PLAN = ROOT / "tests" / "filecheck" / "codegen" / "Inputs" / "tiny_mlp_plan.mlir"
PY = sys.executable
LIMIT_S = 600
"""Past this a case counts as a hang (every collective waits at most --timeout, 20 s here)."""

BAD_DATA = """
import torch


def batch(step, dtype=torch.int64):
    ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(step))
    return {"input_ids": ids.to(dtype), "labels": ids}


def good(start=0):
    step = start
    while True:
        step += 1
        yield batch(step)


def out_of_vocabulary():
    for step in range(1, 1000):
        b = batch(step)
        if step == 2:
            b["input_ids"][3, 5] = 500
        yield b


def negative_ids():
    b = batch(1)
    b["input_ids"][0, 0] = -1
    yield b


def float_ids():
    while True:
        yield batch(1, torch.float32)


def raises():
    yield batch(1)
    raise OSError("the shard file went away")


def raises_at_once():
    raise KeyError("no such split")


def wrong_shape():
    while True:
        short = torch.zeros(4, 8, dtype=torch.int64)
        yield {"input_ids": short, "labels": short}


def not_a_batch():
    while True:
        yield 42


def missing_input():
    while True:
        yield {"input_ids": torch.zeros(4, 16, dtype=torch.int64)}


def empty():
    return []
"""


@dataclass
class Outcome:
    status: int | None
    text: str
    """What the user reads: the command's output, the ranks' logs."""
    program_traceback: bool
    launcher_traceback: bool
    seconds: float
    extra_ok: bool = True
    cause_named: bool = True
    """torchrun's summary (if it printed one) names the worker's error, not "To enable traceback"."""


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[Path], Outcome]
    wanted: str
    """'refused' (exit != 0 with `line`), or 'accepted' (exit 0 with `line`)."""
    line: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain(*argv: str, cwd: Path | None = None) -> Callable[[Path], Outcome]:
    def run(work: Path) -> Outcome:
        start = time.monotonic()
        args = [a.replace("{work}", str(work)) for a in argv]
        try:
            done = subprocess.run(
                args, capture_output=True, text=True, cwd=cwd or work, env=environment(), timeout=LIMIT_S
            )
        except subprocess.TimeoutExpired:
            return Outcome(None, "", False, False, time.monotonic() - start)
        text = done.stdout + done.stderr
        return Outcome(done.returncode, text, "Traceback" in text, False, time.monotonic() - start)

    return run


def launched(
    program: str, nproc: int, *argv: str, action: Callable[[subprocess.Popen[str], Path], None] | None = None
) -> Callable[[Path], Outcome]:
    """torchrun of a program in `work` (`action`: what to do to it once step 1 is printed)."""

    def run(work: Path) -> Outcome:
        start = time.monotonic()
        logs = Path(tempfile.mkdtemp(dir=work))
        args = [a.replace("{work}", str(work)) for a in argv]
        process = subprocess.Popen(
            command(work / program, nproc, args, logs),
            cwd=work,
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            if action is not None:
                wait_for(lambda: started(logs) or process.poll() is not None, LIMIT_S)
                action(process, logs)
            agent, _ = process.communicate(timeout=LIMIT_S)
            status: int | None = process.returncode
        except subprocess.TimeoutExpired:
            kill_group(process)
            agent, _ = process.communicate()
            status = None
        finally:
            kill_group(process)
        ranks = rank_logs(logs)
        text = "\n".join(f"[rank {r}] {log.stdout}{log.stderr}" for r, log in sorted(ranks.items()))
        program_tb = any("Traceback" in log.stdout + log.stderr for log in ranks.values())
        outcome = Outcome(
            status, text + "\n" + agent, program_tb, "Traceback" in agent, time.monotonic() - start
        )
        outcome.cause_named = "To enable traceback" not in agent
        return outcome

    return run


def started(logs: Path) -> bool:
    """Whether rank 0 printed its first step."""
    rank0 = rank_logs(logs).get(0)
    return rank0 is not None and "step 1:" in rank0.stdout


def signal_ranks(signum: int, ranks: tuple[int, ...]) -> Callable[[subprocess.Popen[str], Path], None]:
    def act(process: subprocess.Popen[str], logs: Path) -> None:
        pids = workers(process.pid)
        for rank in ranks:
            os.kill(pids[rank], signum)
        if signum == signal.SIGSTOP:
            time.sleep(60)  # the peer's collective times out (--timeout 20) and it reports
            with contextlib.suppress(ProcessLookupError):  # torchrun may have ended it already
                os.kill(pids[ranks[0]], signal.SIGKILL)

    return act


def signal_launcher(signum: int) -> Callable[[subprocess.Popen[str], Path], None]:
    """`signum` to torchrun alone (a scheduler's SIGTERM, or kill -INT of its pid): it forwards it."""

    def act(process: subprocess.Popen[str], logs: Path) -> None:
        os.kill(process.pid, signum)

    return act


def saved(folder: str, then_: Callable[[Path], Outcome]) -> Callable[[Path], Outcome]:
    """`then_`, which must also leave a complete checkpoint named by `folder`/latest."""

    def run(work: Path) -> Outcome:
        outcome = then_(work)
        latest = work / folder / "latest"
        complete = latest.is_file() and (work / folder / latest.read_text().strip() / ".metadata").is_file()
        outcome.extra_ok = outcome.extra_ok and complete
        outcome.text += f"\n{folder}/latest: " + (latest.read_text().strip() if complete else "MISSING")
        return outcome

    return run


LOSS = re.compile(r"^step (\d+): loss ([0-9.]+)", re.MULTILINE)
KILL_STEPS = 30


def losses(outcome: Outcome) -> dict[int, str]:
    return {int(step): loss for step, loss in LOSS.findall(outcome.text)}


def kill_mid_save(folder: Path, seen: list[str]) -> Callable[[subprocess.Popen[str], Path], None]:
    """SIGKILL of torchrun and every worker at once while a save of step >= 3 is half-written
    (its `.step-<k>.partial` folder exists)."""

    def act(process: subprocess.Popen[str], logs: Path) -> None:
        pids = [process.pid, *workers(process.pid).values()]  # torchrun's workers: sessions of their own
        deadline = time.monotonic() + LIMIT_S
        while time.monotonic() < deadline and process.poll() is None:
            with contextlib.suppress(OSError):
                partial = [e.name for e in os.scandir(folder) if e.name.endswith(".partial")]
                if partial and int(partial[0].split("-")[1].split(".")[0]) >= 3:
                    for pid in pids:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                    seen.append(partial[0])
                    return
            time.sleep(0.0005)

    return act


def killed_during_save(work: Path) -> Outcome:
    """An uninterrupted run, a run saving every step SIGKILLed (launcher and workers) during a
    save, then `--resume ck` (the --save folder): it must resume from the newest complete step
    and print the uninterrupted run's losses from there on."""
    train = ("--steps", str(KILL_STEPS), "--optimizer", "adam", "--log-every", "1", *TO)
    folder = work / "ck-kill"
    shutil.rmtree(folder, ignore_errors=True)
    uninterrupted = launched(T, 2, *train)(work)
    seen: list[str] = []
    killed = launched(
        T, 2, *train, "--save", str(folder), "--save-every", "1", action=kill_mid_save(folder, seen)
    )(work)
    complete = sorted(int(p.name[5:]) for p in folder.glob("step-*") if (p / ".metadata").is_file())
    resumed = launched(T, 2, *train, "--resume", str(folder))(work)
    want, got = losses(uninterrupted), losses(resumed)
    at = re.search(r"resumed at step (\d+)", resumed.text)
    start = int(at[1]) if at else 0
    newest = bool(complete) and start == complete[-1]
    same = bool(got) and sorted(got) == list(range(start + 1, KILL_STEPS + 1))
    same = same and all(got[k] == want.get(k) for k in got)
    differ = next((k for k in sorted(got) if got[k] != want.get(k)), None)
    resumed.text += (
        f"\nkilled during the save of {seen[0] if seen else 'NOTHING (no save caught)'}; complete steps "
        f"{complete}; resumed at step {start}; steps {start + 1}-{KILL_STEPS} "
        + ("repeat the uninterrupted losses" if same else f"DIFFER (first at step {differ})")
    )
    resumed.extra_ok = bool(seen) and killed.status not in (0, None) and start >= 2 and newest and same
    resumed.program_traceback = any(o.program_traceback for o in (uninterrupted, killed, resumed))
    resumed.seconds += uninterrupted.seconds + killed.seconds
    return resumed


def init_other_optimizer(work: Path) -> Outcome:
    """`--init` of an Adam checkpoint (step 2) into an SGD run: the weights only, so it is
    accepted, and its step 1 loss is the Adam run's step 3 loss (the same weights)."""
    adam = launched(
        T, 2, "--steps", "3", "--optimizer", "adam", "--log-every", "1", "--resume", "{work}/ck-adam", *TO
    )
    first = adam(work)
    sgd = launched(T, 2, "--steps", "1", "--optimizer", "sgd", "--lr", "0.5", "--init", "{work}/ck-adam", *TO)
    outcome = sgd(work)
    want, got = losses(first).get(3), losses(outcome).get(1)
    outcome.extra_ok = first.status == 0 and want is not None and got == want
    outcome.text += f"\nstep 1 loss {got} after --init; the Adam run's step 3 loss {want}"
    outcome.program_traceback = outcome.program_traceback or first.program_traceback
    outcome.seconds += first.seconds
    return outcome


def kill_launcher(process: subprocess.Popen[str], logs: Path) -> None:
    pids = workers(process.pid)
    os.kill(process.pid, signal.SIGKILL)
    gone = wait_for(lambda: not any(Path(f"/proc/{p}").exists() and _alive(p) for p in pids.values()), 60)
    with open(logs / "watch.txt", "w") as f:
        f.write("workers gone" if gone is not None else "WORKERS STILL RUNNING")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def different_arguments(work: Path) -> Outcome:
    start = time.monotonic()
    env = {**environment(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    ranks = [
        subprocess.Popen(
            [PY, str(work / "tiny.py"), "--steps", steps, "--timeout", "20"],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r, steps in ((0, "3"), (1, "5"))
    ]
    texts = [p.communicate(timeout=LIMIT_S)[0] for p in ranks]
    status = max(p.returncode for p in ranks)
    return Outcome(
        status, "\n".join(texts), any("Traceback" in t for t in texts), False, time.monotonic() - start
    )


def then(*steps: Callable[[Path], Outcome]) -> Callable[[Path], Outcome]:
    """Runs `steps` in order; the outcome is the last one's (the earlier ones must succeed)."""

    def run(work: Path) -> Outcome:
        outcomes = [step(work) for step in steps]
        last = outcomes[-1]
        last.extra_ok = all(o.status == 0 for o in outcomes[:-1])
        last.seconds = sum(o.seconds for o in outcomes)
        last.program_traceback = any(o.program_traceback for o in outcomes)
        return last

    return run


def prepare(setup: Callable[[Path], None], step: Callable[[Path], Outcome]) -> Callable[[Path], Outcome]:
    def run(work: Path) -> Outcome:
        setup(work)
        return step(work)

    return run


def copy_ck(name: str, damage: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(work: Path) -> None:
        target = work / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(work / "ck-adam" / "step-2", target)
        damage(target)

    return setup


def truncate(file: str, size: int) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        path = sorted(folder.glob(file))[-1]
        path.write_bytes(path.read_bytes()[:size])

    return damage


def scramble(folder: Path) -> None:
    path = sorted(folder.glob("*.distcp"))[0]
    data = bytearray(path.read_bytes())
    data[:512] = os.urandom(512)
    path.write_bytes(bytes(data))


def half_written(work: Path) -> None:
    folder = work / "ck-half"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(work / "ck-adam", folder)
    (folder / "latest").unlink()
    partial = folder / ".step-9.partial"
    partial.mkdir()
    (partial / "__0_0.distcp").write_text("killed mid-save")


T = "tiny.py"
B = "bert.py"
TO = ("--timeout", "20")
OPT = (PY, "-m", "unityc.tools.opt")


def cases() -> list[Case]:
    usage = [
        ("--steps 0", ("--steps", "0"), "--steps must be at least 1"),
        ("--steps -1", ("--steps", "-1"), "--steps must be at least 1"),
        ("--warmup -1", ("--warmup", "-1"), "--warmup must not be negative"),
        ("--lr 0", ("--lr", "0"), "--lr must be a positive number"),
        ("--lr nan", ("--lr", "nan"), "--lr must be a positive number"),
        ("--lr inf", ("--lr", "inf"), "--lr must be a positive number"),
        ("--tolerance -1", ("--tolerance", "-1"), "--tolerance must be a non-negative number"),
        ("--timeout 0", ("--timeout", "0"), "--timeout must be a positive number of seconds"),
        ("--timeout inf", ("--timeout", "inf"), "--timeout must be a positive number of seconds"),
        ("--json in a missing folder", ("--json", "/missing/t.json"), "no such directory"),
        ("--json a folder", ("--json", "."), "--json .: is a folder"),
        ("--save under a file", ("--save", "{work}/a-file/ck"), "cannot write there (Not a directory)"),
        ("--save is a file", ("--save", "{work}/a-file"), "cannot write there"),
        ("--profile under a file", ("--profile", "{work}/a-file/p"), "cannot write there"),
        ("--optimizer lbfgs", ("--optimizer", "lbfgs"), "re-evaluates the model through a closure"),
        ("--optimizer nosuch", ("--optimizer", "nosuch"), "not a torch.optim optimizer"),
        ("--optimizer-args x", ("--optimizer-args", "x"), "every argument needs a name"),
        ("--optimizer-args syntax", ("--optimizer-args", "a=("), "is not a list of name=value"),
        ("--lr-min-ratio 2", ("--lr-min-ratio", "2"), "--lr-min-ratio must lie in [0, 1]"),
        ("--clip-grad-norm 0", ("--clip-grad-norm", "0"), "--clip-grad-norm must be positive"),
        ("--lr-schedule bogus", ("--lr-schedule", "bogus"), "invalid choice"),
        ("--resume and --init", ("--resume", "a", "--init", "b"), "--resume and --init both give"),
        ("--reset-optimizer alone", ("--reset-optimizer",), "--reset-optimizer goes with --resume"),
        ("--stop-after 0", ("--stop-after", "0"), "--stop-after must be at least 1"),
        ("--bucket-mb 0", ("--bucket-mb", "0"), "--bucket-mb must be a positive number"),
        ("--save-every -1", ("--save-every", "-1"), "must not be negative"),
        ("--data-args x", ("--data-args", "x"), "--data-args: "),
        ("--steps abc", ("--steps", "abc"), "invalid int value"),
    ]
    out = [Case(f"usage: {name}", plain(PY, T, *args), "refused", line) for name, args, line in usage]
    out.append(Case("usage: no torchrun", plain(PY, T), "refused", "error: run with torchrun"))
    data = [
        (
            "--data out of vocabulary (rank 1's rows)",
            "out_of_vocabulary",
            "rank 1: error: batch 2: input 'input_ids' holds the index 500",
        ),
        ("--data negative id", "negative_ids", "holds the index -1, outside [0, 128)"),
        ("--data float token ids", "float_ids", "holds float32 values, the plan takes int64"),
        ("--data raises after a batch", "raises", "the data function failed at batch 2: OSError"),
        ("--data raises at its call", "raises_at_once", "the data function failed: KeyError"),
        ("--data wrong shape", "wrong_shape", "has shape [4, 8], the plan was made for [4, 16]"),
        ("--data not a batch", "not_a_batch", "a batch must be a dict by argument name or a tuple"),
        ("--data missing input", "missing_input", "has no input 'labels'"),
        ("--data no batches", "empty", "the data function returned no batches"),
        ("--data no such module", None, "cannot import nosuchmodule"),
        ("--data no such function", "nothing", "has no function 'nothing'"),
    ]
    for name, function, line in data:
        spec = "nosuchmodule:f" if function is None else f"bad_data.py:{function}"
        out.append(Case(name, launched(B, 2, "--steps", "3", "--data", spec, *TO), "refused", line))
    out.append(
        Case(
            "--data good batches",
            launched(B, 2, "--steps", "3", "--data", "bad_data.py:good", *TO),
            "accepted",
            "step 3: loss",
        )
    )
    save = launched(T, 2, "--steps", "2", "--optimizer", "adam", "--save", "{work}/ck-adam", *TO)
    resume = lambda *a: launched(T, 2, "--steps", "4", *a, *TO)  # noqa: E731
    adam = ("--optimizer", "adam")
    ck = [
        (
            "save then --resume DIR (the --save folder)",
            then(save, resume(*adam, "--resume", "{work}/ck-adam")),
            "accepted",
            "resumed at step 2",
        ),
        (
            "--resume with another optimizer",
            resume("--optimizer", "sgd", "--resume", "{work}/ck-adam"),
            "refused",
            "name 'Adam' there, 'SGD' here",
        ),
        (
            "--resume with another lr",
            resume(*adam, "--lr", "0.1", "--resume", "{work}/ck-adam"),
            "refused",
            "lr 0.01 there, 0.1 here",
        ),
        (
            "--resume with another schedule",
            resume(*adam, "--lr-schedule", "cosine", "--resume", "{work}/ck-adam"),
            "refused",
            "schedule 'constant' there, 'cosine' here",
        ),
        (
            "--resume with other optimizer args",
            resume(*adam, "--optimizer-args", "eps=1e-6", "--resume", "{work}/ck-adam"),
            "refused",
            "arguments '{}' there",
        ),
        (
            "--resume --reset-optimizer with SGD",
            resume("--reset-optimizer", "--resume", "{work}/ck-adam"),
            "accepted",
            "resumed at step 2",
        ),
        (
            "--resume at --steps",
            launched(T, 2, "--steps", "2", *adam, "--resume", "{work}/ck-adam", *TO),
            "refused",
            "the checkpoint is at step 2, --steps 2 asks for no more",
        ),
        (
            "--resume missing folder",
            resume(*adam, "--resume", "{work}/nowhere"),
            "refused",
            "no such checkpoint folder",
        ),
        (
            "--resume empty folder",
            resume(*adam, "--resume", "{work}/empty"),
            "refused",
            "holds no complete step-<k>",
        ),
        (
            "--resume a file",
            resume(*adam, "--resume", "{work}/a-file"),
            "refused",
            "a file, not a checkpoint folder",
        ),
        (
            "--resume truncated data file",
            prepare(copy_ck("ck-cut", truncate("*.distcp", 100)), resume(*adam, "--resume", "{work}/ck-cut")),
            "refused",
            "truncated (100 bytes",
        ),
        (
            "--resume missing data file",
            prepare(
                copy_ck("ck-gone", lambda f: sorted(f.glob("*.distcp"))[0].unlink()),
                resume(*adam, "--resume", "{work}/ck-gone"),
            ),
            "refused",
            "missing (the checkpoint's .metadata lists it)",
        ),
        (
            "--resume scrambled data file",
            prepare(copy_ck("ck-scrambled", scramble), resume(*adam, "--resume", "{work}/ck-scrambled")),
            "refused",
            "corrupt or truncated checkpoint",
        ),
        (
            "--resume truncated .metadata",
            prepare(
                copy_ck("ck-meta", truncate(".metadata", 50)), resume(*adam, "--resume", "{work}/ck-meta")
            ),
            "refused",
            ".metadata: not a readable checkpoint",
        ),
        (
            "--init truncated .metadata",
            prepare(
                copy_ck("ck-meta2", truncate(".metadata", 50)),
                launched(T, 2, "--steps", "2", "--init", "{work}/ck-meta2", *TO),
            ),
            "refused",
            "not a readable checkpoint",
        ),
        (
            "--resume another model's checkpoint",
            then(
                launched(B, 2, "--steps", "1", "--save", "{work}/ck-bert", *TO),
                resume("--resume", "{work}/ck-bert"),
            ),
            "refused",
            "a checkpoint of another model?",
        ),
        (
            "--init an Adam checkpoint into an SGD run",
            init_other_optimizer,
            "accepted",
            "--init: a fresh optimizer",
        ),
        (
            "SIGKILL of everything during a save, then --resume DIR",
            killed_during_save,
            "accepted",
            "repeat the uninterrupted losses",
        ),
        (
            "--resume DIR past a killed save",
            prepare(half_written, resume(*adam, "--resume", "{work}/ck-half")),
            "accepted",
            "resumed at step 2",
        ),
    ]
    out += [Case(n, r, w, line) for n, r, w, line in ck]
    zero = [
        (
            "ZeRO-3 save (2 ranks)",
            launched(
                "zero3-2.py", 2, "--steps", "4", *adam, "--stop-after", "2", "--save", "{work}/ck-z3", *TO
            ),
            "accepted",
            "saved",
        ),
        (
            "ZeRO-3 checkpoint into data parallel (4 ranks)",
            launched("dp-4.py", 4, "--steps", "4", *adam, "--resume", "{work}/ck-z3", "--check", *TO),
            "accepted",
            "check passed: 2 step(s)",
        ),
        (
            "data-parallel checkpoint into ZeRO-3 (4 ranks)",
            then(
                launched(
                    "dp-2.py", 2, "--steps", "4", *adam, "--stop-after", "2", "--save", "{work}/ck-dp", *TO
                ),
                launched("zero3-4.py", 4, "--steps", "4", *adam, "--resume", "{work}/ck-dp", "--check", *TO),
            ),
            "accepted",
            "check passed: 2 step(s)",
        ),
    ]
    out += [Case(n, r, w, line) for n, r, w, line in zero]
    long = ("--steps", "1000000", "--log-every", "100000", *TO)
    faults = [
        (
            "SIGTERM to rank 1 with --save",
            launched(T, 2, *long, "--save", "{work}/ck-term", action=signal_ranks(signal.SIGTERM, (1,))),
            "refused",
            "rank 0: stopped by SIGTERM after step",
        ),
        (
            "SIGINT to every worker with --save",
            launched(T, 2, *long, "--save", "{work}/ck-int", action=signal_ranks(signal.SIGINT, (0, 1))),
            "refused",
            "rank 0: stopped by SIGINT after step",
        ),
        (
            "SIGINT without --save",
            launched(T, 2, *long, action=signal_ranks(signal.SIGINT, (0, 1))),
            "refused",
            "rank 0: stopped by SIGINT after step",
        ),
        (
            "SIGTERM to torchrun with --save",
            saved(
                "ck-tterm",
                launched(T, 2, *long, "--save", "{work}/ck-tterm", action=signal_launcher(signal.SIGTERM)),
            ),
            "refused",
            "stopped by SIGTERM after step",
        ),
        (
            "SIGINT to torchrun with --save",
            saved(
                "ck-tint",
                launched(T, 2, *long, "--save", "{work}/ck-tint", action=signal_launcher(signal.SIGINT)),
            ),
            "refused",
            "stopped by SIGINT after step",
        ),
        ("kill -9 of torchrun", launched(T, 2, *long, action=kill_launcher), "refused", "the launcher (pid"),
        (
            "kill -9 of rank 1",
            launched(T, 2, *long, action=signal_ranks(signal.SIGKILL, (1,))),
            "refused",
            "lost its connection to a peer",
        ),
        (
            "SIGSTOP of rank 1",
            launched(T, 2, *long, action=signal_ranks(signal.SIGSTOP, (1,))),
            "refused",
            "rank 1 stopped responding",
        ),
        (
            "3 ranks for a 2-rank plan",
            launched(T, 3, "--steps", "2", *TO),
            "refused",
            "the plan needs 2 processes, torchrun started 3",
        ),
        (
            "ranks with different --steps",
            different_arguments,
            "refused",
            "rank 1 has '--steps 5' where rank 0 has '--steps 3'",
        ),
        (
            "--optimizer adam betas=2",
            launched(T, 2, "--optimizer", "adam", "--optimizer-args", "betas=2", *TO),
            "refused",
            "--optimizer adam",
        ),
    ]
    out += [Case(n, r, w, line) for n, r, w, line in faults]
    mlp = str(ROOT / "examples" / "mlp.mlir")
    search = (*OPT, mlp, "--unity-search", "--machine", "cpu:2")
    compiler = [
        (
            "--memory-budget 0",
            (*search, "--memory-budget", "0"),
            "memory-budget must be a positive number of GiB, got 0",
        ),
        ("--memory-budget -1", (*search, "--memory-budget", "-1"), "memory-budget must be a positive number"),
        (
            "--time-limit 0",
            (*search, "--time-limit", "0"),
            "time-limit must be a positive number of seconds, got 0",
        ),
        ("--time-limit -1", (*search, "--time-limit", "-1"), "time-limit must be a positive number"),
        (
            "galvatron memory_budget=0.0",
            (*OPT, mlp, "-p", 'galvatron{machine="cpu:2" memory_budget=0.0}'),
            "memory-budget must be a positive number",
        ),
        (
            "galvatron memory_budget=0",
            (*OPT, mlp, "-p", 'galvatron{machine="cpu:2" memory_budget=0}'),
            "memory-budget",
        ),
        (
            "--report under a file",
            (*search, "--report", "{work}/a-file/r.json", "-o", "{work}/plan.mlir"),
            "--report",
        ),
        ("-o under a file", (*search, "-o", "{work}/a-file/plan.mlir"), "-o "),
        (
            "-t torch -o under a file",
            (*OPT, str(TINY_PLAN), "-t", "torch", "-o", "{work}/a-file/t.py"),
            "-o ",
        ),
        ("--budget -1", (*search, "--budget", "-1"), "budget must be >= 0"),
    ]
    out += [Case(f"unityc-opt {n}", plain(*a), "refused", line) for n, a, line in compiler]
    return out


def build(work: Path) -> None:
    from xdsl.dialects.builtin import StringAttr

    from unityc.frontend import ModelSpec, import_model
    from unityc.graph import from_module, to_module
    from unityc.machine.presets import preset
    from unityc.search.baselines import data_parallel, zero
    from unityc.search.unity import UnityOptions

    subprocess.run([*OPT, str(TINY_PLAN), "-t", "torch", "-o", str(work / "tiny.py")], check=True)
    (work / "a-file").write_text("not a folder")
    (work / "empty").mkdir(exist_ok=True)
    (work / "bad_data.py").write_text(BAD_DATA)
    bert = import_model(ModelSpec("bert", "small", batch=4))
    planned = data_parallel(from_module(bert), preset("cpu:2"), UnityOptions(), None)
    planned.graph.module_attrs["unityc.machine"] = StringAttr("cpu:2")
    write_program(to_module(planned.graph), work, "bert")
    mlp = import_model(
        ModelSpec("mlp", "small", batch=8, overrides=(("in_features", "15"), ("hidden_dims", "[30,30]")))
    )
    for name, ranks, stage in (("zero3-2", 2, 3), ("dp-2", 2, 0), ("dp-4", 4, 0), ("zero3-4", 4, 3)):
        planned = zero(from_module(mlp), preset(f"cpu:{ranks}"), UnityOptions(optimizer="adam"), None, stage)
        planned.graph.module_attrs["unityc.machine"] = StringAttr(f"cpu:{ranks}")
        write_program(to_module(planned.graph), work, name)


def judge(case: Case, outcome: Outcome) -> tuple[bool, str]:
    """(as wanted, the line the user reads)."""
    lines = [line for line in outcome.text.splitlines() if case.line in line]
    shown = (
        lines[0]
        if lines
        else next(
            (line for line in outcome.text.splitlines() if "error" in line.lower()),
            outcome.text.strip()[-160:],
        )
    )
    if case.wanted == "accepted":
        ok = outcome.status == 0 and bool(lines)
    else:
        ok = outcome.status not in (0, None) and bool(lines)
    return ok and outcome.extra_ok and outcome.cause_named and not outcome.program_traceback, shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    parser.add_argument("--start", type=int, default=1, help="the first case to run (1-based)")
    parser.add_argument("--stop", type=int, default=0, help="the last case to run (0: the last one)")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="unityc-faults-"))
    build(work)
    rows = []
    columns = "# | case | wanted | exit | as wanted | program traceback | torchrun's traceback | cause named"
    columns += " | hang | s"
    print(f"| {columns} | what the user reads |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    last = args.stop or len(cases())
    chosen = [(i, c) for i, c in enumerate(cases()) if args.only in c.name and args.start <= i + 1 <= last]
    for i, case in chosen:
        outcome = case.run(work)
        ok, shown = judge(case, outcome)
        shown = re.sub(r"\s+", " ", shown).replace("|", "\\|")[:220].replace(str(work), "W")
        row = {
            "case": case.name,
            "wanted": case.wanted,
            "exit": outcome.status,
            "ok": ok,
            "program_traceback": outcome.program_traceback,
            "launcher_traceback": outcome.launcher_traceback,
            "cause_named": outcome.cause_named,
            "hang": outcome.status is None,
            "seconds": round(outcome.seconds, 1),
            "line": shown,
        }
        rows.append(row)
        flags = [
            "yes" if ok else "NO",
            "YES" if outcome.program_traceback else "no",
            "yes" if outcome.launcher_traceback else "no",
            "yes" if outcome.cause_named else "NO",
            "YES" if outcome.status is None else "no",
        ]
        cells = [
            str(i + 1),
            case.name,
            case.wanted,
            str(outcome.status),
            *flags,
            f"{outcome.seconds:.0f}",
            shown,
        ]
        print("| " + " | ".join(cells) + " |", flush=True)
    bad = [r for r in rows if not r["ok"]]
    print(
        f"\n{len(rows)} cases: {len(rows) - len(bad)} as wanted, {sum(r['program_traceback'] for r in rows)} "
        f"with a traceback from unityc or the program, {sum(r['hang'] for r in rows)} hangs, "
        f"{sum(r['launcher_traceback'] for r in rows)} with torchrun's own launcher traceback "
        f"({sum(not r['cause_named'] for r in rows)} of them not naming the worker's error)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
