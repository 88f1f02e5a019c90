"""An elastic `unityc-train` run on localhost with one fault, checked (`test_elastic.py`,
`benchmarks/elastic.py`): two launchers of 2 processes each (a c10d rendezvous of 1 to 2 nodes)
train the zoo MLP (30x15 first weight, batch 8, Adam, a checkpoint every step) for 20 steps
from a starting plan on 4 ranks; before step 6 (`elastic_data.py` holds every rank there) one of:

* `launcher`: the second launcher gets SIGKILL (its workers end with it): the job goes on on
  2 ranks with a searched plan; with `grow`, the launcher comes back at step 14 and the job
  returns to 4 ranks, with its starting plan, at the step boundary the agent stops it at;
* `worker`: one worker gets SIGKILL: torch elastic restarts every worker, on the same 4 ranks;
* `stop`: one rank gets SIGSTOP: its peers' collectives time out after `--timeout` and name it,
  torch elastic kills it and restarts every worker on the same 4 ranks.

`check` then says what is wrong, if anything: each transition (world, resume step) as expected;
after every transition the losses equal (to the printed 1e-6) those of the new world's program
resumed alone from the same checkpoint to the same step; the samples trained on, step by step,
are batches 1-20 each exactly once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from test_checkpoint_matrix import SPEC, plan
from torchrun import environment, kill_group, torchrun
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects.source import make_context, parse_source
from unityc.frontend import import_model
from unityc.passes.gpipe import GpipePass

STEPS, KILL_AT, GROW_AT, BATCH = 20, 5, 14, 8
LOSS = re.compile(r"^step (\d+): loss ([0-9.]+)", re.MULTILINE)
AGENT_TIME = re.compile(r"^[WEI](\d{4}) (\d\d):(\d\d):(\d\d\.\d+) .*failed \(exitcode", re.MULTILINE)
HERE = Path(__file__).parent
LAST_CALL_S = 25
"""How long the rendezvous waits for the second launcher (it starts once the first one listens)
and, after a node is lost, for a node that will not come."""


@dataclass(frozen=True)
class Scenario:
    plan: str
    """The starting plan on 4 ranks: dp, zero3 or pipelined (2 stages x 2-way data, 1F1B)."""
    fault: str
    """launcher, worker or stop."""
    grow: bool = False
    """(launcher) the launcher comes back at step 14."""
    collective_timeout: float = 20.0
    planner: str = "unity-search"
    """`unityc-train --planner`: how the plan for a smaller (or the grown) world is made."""

    @property
    def name(self) -> str:
        planner = f", --planner {self.planner}" if self.planner != "unity-search" else ""
        return f"{self.plan}, {self.fault}" + (" + grow back" if self.grow else "") + planner

    def expected(self) -> list[tuple[int, int]]:
        if self.fault != "launcher":
            return [(4, 0), (4, KILL_AT)]
        return [(4, 0), (2, KILL_AT), *([(4, GROW_AT)] if self.grow else [])]


@dataclass
class Outcome:
    scenario: Scenario
    statuses: list[int | None]
    text: str
    transitions: list[dict[str, Any]]
    fault_time: float
    detected_time: float | None
    problems: list[str] = field(default_factory=list)

    @property
    def recovery_s(self) -> float | None:
        later = [t for t in self.transitions[1:] if "first_step_time" in t]
        return later[0]["first_step_time"] - self.fault_time if later else None


def starting_plan(kind: str) -> ModuleOp:
    module = import_model(SPEC)
    if kind == "pipelined":
        parsed = parse_source(make_context(), str(module), "mlp.mlir")
        GpipePass(machine="cpu:4", stages=2, microbatches=2, schedule="1f1b").apply(make_context(), parsed)
        return parsed
    return plan(module, 4, {"dp": 0, "zero3": 3}[kind])


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _progress(save: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((save / "elastic" / "progress.json").read_text()))
    except (OSError, ValueError):
        return {}


def _entries(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []


class Run:
    """The launchers of one scenario, their files, and the clock of the whole run."""

    def __init__(self, scenario: Scenario, directory: Path, deadline_s: float):
        self.scenario, self.directory = scenario, directory
        self.until = time.monotonic() + deadline_s
        self.model, self.plan = directory / "mlp.mlir", directory / f"{scenario.plan}-4.mlir"
        self.model.write_text(str(import_model(SPEC)))
        self.plan.write_text(str(starting_plan(scenario.plan)))
        self.save, self.log, self.release = (
            directory / "ck",
            directory / "samples.jsonl",
            directory / "released",
        )
        data = f"log={str(self.log)!r}, release={str(self.release)!r}, kill_at={KILL_AT}"
        data += f", grow_at={GROW_AT - 1 if scenario.grow else -1}"
        self.training = ["--steps", str(STEPS), "--optimizer", "adam", "--log-every", "1"]
        self.training += ["--data", f"{HERE / 'elastic_data.py'}:batches"]
        self.port = free_port()
        self.command = [sys.executable, "-m", "unityc.tools.train", str(self.model), "--machine", "cpu:4"]
        self.command += ["--save", str(self.save), "--plan", str(self.plan), "--nnodes", "1:2"]
        self.command += ["--nproc-per-node", "2", "--rdzv-id", "elastic"]
        self.command += ["--rdzv-last-call", str(LAST_CALL_S), "--planner", scenario.planner]
        self.command += ["--rdzv-endpoint", f"127.0.0.1:{self.port}", "--", *self.training]
        self.command += [
            "--data-args",
            data,
            "--save-every",
            "1",
            "--timeout",
            f"{scenario.collective_timeout:g}",
        ]
        self.env = {**environment(), "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
        self.outputs: list[Path] = []
        self.launchers: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        self.outputs.append(self.directory / f"launcher-{len(self.outputs)}.log")
        with open(self.outputs[-1], "w") as out:
            self.launchers.append(
                subprocess.Popen(
                    self.command,
                    cwd=self.directory,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                )
            )

    def wait_for(self, condition: Any, what: str) -> None:
        while not condition():
            if time.monotonic() > self.until:
                raise TimeoutError(f"timed out waiting for {what}")
            if any(p.poll() not in (None, -signal.SIGKILL) for p in self.launchers):
                raise RuntimeError(f"a launcher ended while waiting for {what}")
            time.sleep(0.1)

    def worker_pid(self, rank: int) -> int:
        """The process of `rank` in the first round (it drew batch 5, the one before the hold)."""
        return next(e["pid"] for e in _entries(self.log) if e["rank"] == rank and e["batch"] == KILL_AT - 1)

    def text(self) -> str:
        return "\n".join(out.read_text(errors="replace") for out in self.outputs)


def run_scenario(scenario: Scenario, directory: Path, deadline_s: float = 600.0) -> Outcome:
    """Runs `scenario` in `directory` (every process killed by the end); the outcome checked."""
    run = Run(scenario, directory, deadline_s)
    fault_time, problems = 0.0, []
    try:
        run.start()  # the first launcher hosts the rendezvous: it must survive
        run.wait_for(lambda: listening(run.port), "the rendezvous")
        run.start()
        run.wait_for(lambda: _progress(run.save).get("step") == KILL_AT, "step 5")
        fault_time = time.time()
        if scenario.fault == "launcher":
            os.kill(run.launchers[1].pid, signal.SIGKILL)
            run.launchers[1].wait(timeout=60)  # gone: its workers see it (their parent changed)
        else:
            os.kill(run.worker_pid(3), signal.SIGKILL if scenario.fault == "worker" else signal.SIGSTOP)
        run.release.write_text("released")
        if scenario.grow:

            def back() -> bool:
                return bool(_progress(run.save).get("world") == 2 and _progress(run.save).get("step", 0) > 6)

            run.wait_for(back, "steps on 2 ranks")
            run.start()
        for i, launcher in enumerate(run.launchers):
            if not (scenario.fault == "launcher" and i == 1):
                launcher.wait(timeout=max(1.0, run.until - time.monotonic()))
    except (TimeoutError, RuntimeError, subprocess.TimeoutExpired) as e:
        problems.append(str(e))
    finally:
        for launcher in run.launchers:
            kill_group(launcher)
    text = run.text()
    record = run.save / "elastic" / "transitions.jsonl"
    transitions = [json.loads(line) for line in record.read_text().splitlines()] if record.is_file() else []
    outcome = Outcome(
        scenario, [p.returncode for p in run.launchers], text, transitions, fault_time, None, problems
    )
    outcome.detected_time = _first_failure(text, fault_time)
    if not problems:
        problems += check(outcome, run)
    return outcome


def _first_failure(text: str, after: float) -> float | None:
    """When an agent first saw a worker fail (its log line's clock time), after `after`."""
    day = time.strftime("%Y-%m-%d", time.localtime(after))
    times = []
    for _, h, m, s in AGENT_TIME.findall(text):
        stamp = time.mktime(time.strptime(f"{day} {h}:{m}:00", "%Y-%m-%d %H:%M:%S")) + float(s)
        if stamp >= after - 1:
            times.append(stamp)
    return min(times) if times else None


def check(outcome: Outcome, run: Run) -> list[str]:
    s, problems = outcome.scenario, []
    wanted = [0] * len(run.launchers)
    if s.fault == "launcher":
        wanted[1] = -signal.SIGKILL
    if outcome.statuses != wanted:
        problems.append(f"launcher statuses {outcome.statuses}, wanted {wanted}")
    seen = [(t["world"], t["resume_step"]) for t in outcome.transitions]
    if seen != s.expected():
        return [*problems, f"transitions (world, resume step) {seen}, wanted {s.expected()}"]
    problems += _losses(outcome, run)
    problems += _samples(outcome, run)
    return problems


def _losses(outcome: Outcome, run: Run) -> list[str]:
    elastic: dict[int, set[float]] = {}
    for step, loss in LOSS.findall(outcome.text):
        elastic.setdefault(int(step), set()).add(float(loss))
    if sorted(elastic) != list(range(1, STEPS + 1)):
        return [f"the run printed the losses of steps {sorted(elastic)}"]
    problems = [f"step {k}: two losses {sorted(v)}" for k, v in elastic.items() if len(v) > 1]
    bounds = [t["resume_step"] for t in outcome.transitions] + [STEPS]
    for t, since, until in zip(outcome.transitions[1:], bounds[1:], bounds[2:], strict=False):
        program = run.save / "plans" / f"world-{t['world']}.py"
        args = [*run.training, "--resume", str(run.save / f"step-{since}"), "--stop-after", str(until)]
        alone = torchrun(program, t["world"], *args, timeout=300, env={"PYTHONPATH": run.env["PYTHONPATH"]})
        if alone.returncode != 0:
            problems.append(alone.report())
            continue
        expected = {int(k): float(v) for k, v in LOSS.findall(alone.output)}
        for step in range(since + 1, until + 1):
            got = min(elastic[step])
            if step not in expected or abs(got - expected[step]) > 1e-6:
                problems.append(f"step {step}: loss {got}, alone on {t['world']} ranks {expected.get(step)}")
    return problems


def _samples(outcome: Outcome, run: Run) -> list[str]:
    """The samples of each step, from the round (torch elastic's rendezvous round: its master
    port) that trained it."""
    rounds: dict[str, list[dict[str, Any]]] = {}
    for e in _entries(run.log):
        rounds.setdefault(e["round"], []).append(e)
    order = list(rounds.values())
    bounds = [t["resume_step"] for t in outcome.transitions] + [STEPS]
    committed: dict[int, set[int]] = {}
    at = 0
    for t, low, high in zip(outcome.transitions, bounds, bounds[1:], strict=False):
        while at < len(order) and not (
            order[at][0]["world"] == t["world"] and min(e["batch"] for e in order[at]) == low
        ):
            at += 1
        if at == len(order):
            return [f"no data drawn for the round of {t['plan']} from step {low}"]
        for e in order[at]:
            if low <= e["batch"] < high:
                committed.setdefault(e["batch"], set()).update(e["samples"])
        at += 1
    trained = [sample for batch in sorted(committed) for sample in sorted(committed[batch])]
    if trained != list(range(STEPS * BATCH)):
        return [f"the samples trained on are not batches 1-{STEPS} once each: {committed}"]
    return []
