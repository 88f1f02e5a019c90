"""Running generated programs under torchrun (gloo, CPU) from the tests and benchmarks.

Each rank's output goes to its own log (`--redirects 3`), so a failed run reports which rank
failed, its exit status and the tail of its stderr (`Run.report`), rather than an interleaving.
Time limits are generous (several times the quiet-machine time): they only stop a hang.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from unityc.codegen import emit_program

TIMEOUT_S = 1200
"""For one torchrun of one program (a few to 60 s on a quiet machine)."""

TAIL = 25

FAILURE = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")


@dataclass
class Rank:
    stdout: str = ""
    stderr: str = ""


@dataclass
class Run:
    name: str
    returncode: int | None
    """None: killed after its time limit."""
    agent: str
    """torchrun's own output: on failure, a summary naming each failed rank and its exit code."""
    ranks: dict[int, Rank] = field(default_factory=dict)

    @property
    def output(self) -> str:
        """What rank 0 printed (the program's report), stdout then stderr."""
        rank0 = self.ranks.get(0, Rank())
        return rank0.stdout + rank0.stderr

    def exit_codes(self) -> dict[int, int]:
        """The exit status of every rank that failed (from torchrun's summary)."""
        return {int(rank): int(code) for rank, code in FAILURE.findall(self.agent)}

    def report(self) -> str:
        """Which program failed and why: torchrun's status, each failed rank's exit status and
        the tail of its stderr (every rank's, when torchrun names none)."""
        status = "killed after its time limit" if self.returncode is None else f"exit {self.returncode}"
        failed = self.exit_codes()
        lines = [f"{self.name}: torchrun {status}"]
        lines += [f"rank {rank}: exit {code}" for rank, code in sorted(failed.items())]
        for rank in sorted(failed or self.ranks):
            log = self.ranks.get(rank, Rank())
            lines.append(f"--- rank {rank} stderr, last {TAIL} lines:")
            lines += log.stderr.splitlines()[-TAIL:] or ["(empty)"]
            lines.append(f"--- rank {rank} stdout, last {TAIL} lines:")
            lines += log.stdout.splitlines()[-TAIL:] or ["(empty)"]
        if not self.ranks:
            lines += ["--- torchrun:", *self.agent.splitlines()[-TAIL:]]
        return "\n".join(lines)


def write_program(module: ModuleOp, directory: Path, name: str) -> Path:
    (directory / f"{name}.mlir").write_text(str(module))
    path = directory / f"{name}.py"
    path.write_text(emit_program(module, source=f"{name}.mlir"))
    return path


def command(program: Path | str, nproc: int, args: Sequence[str], logs: Path) -> list[str]:
    """torchrun of `program` (a file, or a module name) on `nproc` processes, each rank's
    output in `logs`."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    torchrun += [f"--log-dir={logs}", "--redirects=3"]
    if isinstance(program, str):
        torchrun.append("-m")
    return [*torchrun, str(program), *args]


def environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def rank_logs(logs: Path) -> dict[int, Rank]:
    """Each rank's output (the last attempt's: torchrun does not restart here)."""
    ranks: dict[int, Rank] = {}
    for stdout in sorted(logs.glob("*/attempt_*/*/stdout.log")):
        stderr = stdout.with_name("stderr.log")
        ranks[int(stdout.parent.name)] = Rank(
            stdout.read_text(errors="replace"), stderr.read_text(errors="replace") if stderr.exists() else ""
        )
    return ranks


def kill_group(process: subprocess.Popen[str]) -> None:
    """Ends torchrun and its workers (started in a session of their own)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def torchrun(
    program: Path | str,
    nproc: int,
    *args: str,
    timeout: float = TIMEOUT_S,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Run:
    """Runs `program` (a file, or a module name) on `nproc` gloo processes (`env` added to the
    environment); returns its exit status and every rank's output. A run past `timeout` is
    killed, workers included."""
    name = program.name if isinstance(program, Path) else program
    with tempfile.TemporaryDirectory() as logs:
        process = subprocess.Popen(
            command(program, nproc, args, Path(logs)),
            cwd=cwd or (program.parent if isinstance(program, Path) else None),
            env={**environment(), **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            agent, _ = process.communicate(timeout=timeout)
            returncode: int | None = process.returncode
        except subprocess.TimeoutExpired:
            kill_group(process)
            agent, _ = process.communicate()
            returncode = None
        return Run(name, returncode, agent, rank_logs(Path(logs)))


def sections(output: str) -> dict[str, str]:
    """The output of each program of a batch (`unityc.runtime.batch`) by name, from its
    `=== name` line to its `=== name: exit N` line (a program the batch never finished: absent)."""
    found: dict[str, str] = {}
    name = None
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith("=== ") and name is None:
            name, lines = line[4:], []
        elif name is not None and line.startswith(f"=== {name}: exit "):
            found[name] = "\n".join([*lines, line])
            name = None
        elif name is not None:
            lines.append(line)
    return found


def wait_for(predicate: Callable[[], bool], limit_s: float, poll_s: float = 0.2) -> float | None:
    """Seconds until `predicate()` held (None: not within `limit_s`)."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(poll_s)
    return None


COMPILER = ("xdsl", "z3", "lark")
"""What a generated program must not import: the compiler's own dependencies."""


def without_compiler(directory: Path) -> dict[str, str]:
    """An environment (for `torchrun(env=...)`) in which importing xdsl, z3 or lark fails, as on
    a cluster node with torch alone: packages of those names that refuse to import, first on
    PYTHONPATH. A program that touches the compiler then fails."""
    shadow = directory / "no-compiler"
    for name in COMPILER:
        (shadow / name).mkdir(parents=True, exist_ok=True)
        (shadow / name / "__init__.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(shadow), environment().get("PYTHONPATH")) if p)}


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
