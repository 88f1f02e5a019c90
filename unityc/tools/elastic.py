"""The elastic half of `unityc-train`: the plan for the machine that is left, and the worker
that runs it (what torch elastic starts on every rank, attempt after attempt).

torch elastic's agent (one per node, in the `unityc-train` process) restarts its workers when one
of them exits (a worker killed, a peer lost: a collective fails; a rank stopped: a collective
times out past `--timeout`), and re-forms the rendezvous from the nodes that answer: fewer after
a node is gone, more when one comes back (a waiting node makes the agents stop their workers
with SIGTERM, so the step finishes and is saved, `runtime/signals.py`). Each attempt's workers
see the world of that rendezvous (`WORLD_SIZE`) and `worker_main`:

1. describes the machine without the lost devices (`machine_for`: `cpu:4` on 2 ranks is
   `cpu:2`, `dgx-a100:4` on 3 nodes `dgx-a100:3`);
2. takes its plan from the cache `DIR/plans/world-<W>.mlir` or searches one under a short time
   limit (once: the ranks wait on a file lock in DIR, which every node must share, as it shares
   the checkpoints) and generates its program (as `unityc-opt -t torch` does);
3. resumes from the newest complete checkpoint in DIR (`--resume DIR`), which loads into any plan
   and world size (`runtime/checkpoint.py`); the global batch is the graph's, whatever the
   plan; the data function is asked for batches from the checkpoint's step on (`start=`), and
   dropout masks hash the step, so the run stays the same run;
4. rank 0 logs the transition (what was lost, old and new plan, the cost model's estimated
   slowdown, the steps redone, the fault the ranks found: `DIR/elastic/faults.jsonl`) and, at the
   first step on the new plan, the time since the fault was found and since the last step of the
   old plan, in `DIR/elastic/transitions.jsonl` and on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import runpy
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import IntegerAttr, StringAttr
from xdsl.ir import Attribute
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import parse_pipeline
from xdsl.utils.exceptions import ArgSpecParseError

from unityc.codegen import emit_program
from unityc.cost.estimate import estimate_module
from unityc.dialects.container import graph_function
from unityc.dialects.source import make_context, parse_source
from unityc.machine import load_machine
from unityc.runtime import main
from unityc.runtime.watch import FAULTS_FILE
from unityc.tools.opt import check_options
from unityc.tools.search_cli import search_passes

PLANS = "plans"
STATE = "elastic"
"""Under the --save folder: the plan cache, and the run's elastic bookkeeping."""
FAULTS = "faults.jsonl"
"""Under STATE: the faults the ranks found (`runtime/watch.py` `note_fault`), one JSON line each."""

DEFAULT_SEARCH_S = 60.0
"""The time limit of a re-plan's search (short: the job waits for it)."""

SEARCH = "unity-search"
"""`--planner`'s default: each world's plan searched (`--unity-search`)."""


class ElasticError(ValueError):
    """A machine that cannot be re-described, a plan that does not fit, a cache that is broken."""


def machine_for(machine: str, world: int, nproc_per_node: int) -> str:
    """The machine `machine` (a preset naming the whole job) without its lost devices: the one
    with `world` devices, `nproc_per_node` of them per node."""
    base, colon, count = machine.partition(":")
    if not colon or not count.isdigit():
        raise ElasticError(
            f"--machine {machine}: unityc-train re-describes the machine when devices are lost, which "
            "it can for a preset (cpu:P, dgx-a100:N, ...), not for a machine file"
        )
    if base == "cpu":
        return f"cpu:{world}"

    per_node = load_machine(f"{base}:1").num_devices
    if nproc_per_node != per_node or world % per_node:
        raise ElasticError(
            f"--machine {machine}: a {base} node has {per_node} devices; run {per_node} processes per "
            f"node (--nproc-per-node {per_node}), got {nproc_per_node} and a world of {world}"
        )
    return f"{base}:{world // per_node}"


def devices_of(machine: str) -> int:

    return load_machine(machine).num_devices


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Holds the lock of `folder` (an flock on a file in it): one process at a time searches."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class CachedPlan:
    """A plan in the cache: its files and what the cost model says of it."""

    world: int
    plan: Path
    program: Path
    machine: str
    iteration_s: float | None
    summary: str
    origin: str
    """'given' (--plan), 'searched in N s', or 'planned by PASS in N s' (`--planner`)."""

    @staticmethod
    def read(folder: Path, world: int) -> CachedPlan | None:
        record = folder / f"world-{world}.json"
        program = folder / f"world-{world}.py"
        if not (record.is_file() and program.is_file()):
            return None
        data = json.loads(record.read_text())
        return CachedPlan(
            world,
            folder / f"world-{world}.mlir",
            program,
            data["machine"],
            data["iteration_s"],
            data["summary"],
            data["origin"],
        )


def _integer(attr: Attribute) -> int:
    assert isinstance(attr, IntegerAttr), attr
    return attr.value.data


def summarize(module: Any) -> str:
    """A plan in a few words: its machine, how its weights are held (copies, ZeRO), its pipeline
    stages and schedule, and its parallel ops by kind."""

    function = graph_function(module)
    ops = list(function.body.block.ops)
    words: list[str] = []
    copies = {
        int(m[1])
        for op in ops
        if op.name == "pcg.weight"
        for m in [re.search(r"copy (\d+)", str(op.results[0].type))]
        if m
    }
    if copies and max(copies) > 1:
        words.append(f"weights in {max(copies)} copies")
    zero = {_integer(op.attributes["zero"]) for op in ops if "zero" in op.attributes}
    words += [f"ZeRO-{stage}" for stage in sorted(zero)]
    stages = {_integer(op.attributes["stage"]) for op in ops if "stage" in op.attributes}
    if stages:
        schedule = function.attributes.get("unityc.schedule")
        micro = function.attributes.get("unityc.microbatches")
        words.append(
            f"{len(stages)} pipeline stages"
            + (f", {schedule.data}" if isinstance(schedule, StringAttr) else "")
            + (f", {_integer(micro)} micro-batches" if micro is not None else "")
        )
    kinds = Counter(op.name.removeprefix("parallel.") for op in ops if op.name.startswith("parallel."))
    words += [f"{n} {k}" for k, n in sorted(kinds.items())]
    return f"{module.attributes['unityc.machine'].data}: {', '.join(words) or 'one device'}"


def planner_pass(spec: str, machine: str, search_s: float) -> ModulePass:
    """The pass that plans a world on `machine`: `--unity-search` under `search_s` seconds, or
    the baseline `spec` names (`zero{stage=3}`, `megatron{sequence=true}`: a pass of `unityc-opt
    -p`, without `machine`, which is the world's). A ValueError says what is wrong with `spec`."""
    try:
        specs = list(parse_pipeline(spec))
    except ArgSpecParseError as e:
        raise ValueError(f"--planner {spec}: {e}") from None
    if len(specs) != 1:
        raise ValueError(f"--planner {spec}: expected one pass, got {len(specs)}")
    (one,) = specs
    passes = search_passes()
    if one.name not in passes:
        known = ", ".join(sorted(passes))
        raise ValueError(f"--planner {spec}: '{one.name}' is not a planning pass (one of {known})")
    if "machine" in one.normalize_parameter_names().parameters:
        raise ValueError(f"--planner {spec}: the machine is each world's own (give no machine=)")
    cls = passes[one.name]()
    check_options("--planner", cls, one)
    made: Any = cls.from_pass_spec(one)
    if one.name != SEARCH:
        return dataclasses.replace(made, machine=machine)
    limit = made.time_limit if "time_limit" in one.normalize_parameter_names().parameters else search_s
    return dataclasses.replace(made, machine=machine, time_limit=limit, progress=False)


class PlanCache:
    """`DIR/plans`: one plan and program per world size, planned once (under the folder's
    lock; searched, or by the `planner` pass) or given (`--plan`, for the world of its machine)."""

    def __init__(
        self,
        folder: Path,
        model: Path,
        machine: str,
        nproc_per_node: int,
        search_s: float,
        planner: str = SEARCH,
    ):
        self.folder, self.model, self.machine = folder, model, machine
        self.nproc_per_node, self.search_s, self.planner = nproc_per_node, search_s, planner

    def get(self, world: int) -> CachedPlan:
        with locked(self.folder):
            cached = CachedPlan.read(self.folder, world)
            if cached is not None:
                return cached
            return self._search(world)

    def give(self, plan: Path) -> CachedPlan:
        """`plan` (a plan file, `--plan`) as the cache's plan for its machine's world."""

        text = plan.read_text()
        with locked(self.folder):  # another node's launcher took it already: no parse
            for copy in self.folder.glob("world-*.given"):
                cached = CachedPlan.read(self.folder, int(copy.stem.removeprefix("world-")))
                if cached is not None and copy.read_text() == text:
                    return cached
        module = parse_source(make_context(), text, str(plan))
        attribute = module.attributes.get("unityc.machine")
        machine = getattr(attribute, "data", "")
        if not machine:
            raise ElasticError(f"--plan {plan}: the plan does not say which machine it was made for")
        world = devices_of(machine)
        expected = machine_for(self.machine, world, self.nproc_per_node)
        if devices_of(expected) != world:
            raise ElasticError(f"--plan {plan}: made for {machine}, which is not a part of {self.machine}")
        with locked(self.folder):
            cached = self._write(world, module, "given", machine)
            (self.folder / f"world-{world}.given").write_text(text)
            return cached

    def _search(self, world: int) -> CachedPlan:
        from xdsl.context import Context

        machine = machine_for(self.machine, world, self.nproc_per_node)
        module = parse_source(make_context(), self.model.read_text(), str(self.model))
        began = time.monotonic()
        report = self.folder / f"world-{world}.search.txt"
        planner = planner_pass(self.planner, machine, self.search_s)
        with open(report, "w") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            planner.apply(Context(), module)
        how = "searched" if self.planner == SEARCH else f"planned by {self.planner}"
        return self._write(world, module, f"{how} in {time.monotonic() - began:.1f} s", machine)

    def _write(self, world: int, module: Any, origin: str, machine: str) -> CachedPlan:

        plan = self.folder / f"world-{world}.mlir"
        program = self.folder / f"world-{world}.py"
        plan.write_text(str(module))
        program.write_text(emit_program(module, source=str(plan)))
        try:
            iteration_s: float | None = estimate_module(module, load_machine(machine)).iteration_s
        except ValueError:
            iteration_s = None
        record = {
            "machine": machine,
            "iteration_s": iteration_s,
            "summary": summarize(module),
            "origin": origin,
        }
        (self.folder / f"world-{world}.json").write_text(json.dumps(record, indent=2))
        cached = CachedPlan.read(self.folder, world)
        assert cached is not None
        return cached


# --- the run's bookkeeping (rank 0) ----------------------------------------------------------


def _read(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def newest_checkpoint(save: Path) -> tuple[Path, int] | None:
    """The newest complete checkpoint in `save` and its step (None: there is none yet)."""
    steps = [
        (int(m[1]), d)
        for d in (save.iterdir() if save.is_dir() else ())
        if (m := re.fullmatch(r"step-(\d+)", d.name)) and (d / ".metadata").is_file()
    ]
    if not steps:
        return None
    step, path = max(steps)
    return path, step


def _first_fault(path: Path, after: float) -> dict[str, Any] | None:
    """The earliest fault a rank noted in `path` (`runtime/watch.py` `note_fault`) after `after`
    (the last step of the attempt before), or None (a node came back: no fault)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    entries = []
    for line in lines:
        with contextlib.suppress(ValueError):
            entries.append(dict(json.loads(line)))
    later = [e for e in entries if float(e.get("time", 0.0)) >= after]
    return min(later, key=lambda e: float(e["time"])) if later else None


def rate(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1e3:.3g} ms/step"


@dataclass
class Transition:
    """Rank 0's record of one attempt's start: what it replaced, and (at its first step) how
    long the job took to come back."""

    folder: Path
    record: dict[str, Any]
    first_logged: bool = False

    @staticmethod
    def begin(
        folder: Path, cached: CachedPlan, resume: int, nodes: int, batch: int, started: float
    ) -> Transition:
        """`started`: when this attempt's worker started (before its plan lookup or search)."""
        folder.mkdir(parents=True, exist_ok=True)
        before = _read(folder / "attempt.json")
        last = _read(folder / "progress.json")
        record: dict[str, Any] = {
            "started": started,
            "world": cached.world,
            "nodes": nodes,
            "plan": cached.plan.name,
            "machine": cached.machine,
            "summary": cached.summary,
            "origin": cached.origin,
            "iteration_s": cached.iteration_s,
            "resume_step": resume,
            "global_batch": batch,
        }
        if before:
            old, new = before.get("iteration_s"), cached.iteration_s
            last_step = int(last.get("step", resume))
            record.update(
                previous_world=before["world"],
                previous_nodes=before.get("nodes"),
                previous_plan=before["plan"],
                previous_summary=before.get("summary"),
                previous_iteration_s=old,
                estimated_slowdown=(new / old) if old and new else None,
                last_step=last_step,
                last_step_time=last.get("time"),
                steps_redone=max(0, last_step - resume),
            )
            found = _first_fault(folder / FAULTS, after=float(last.get("time", 0.0)))
            if found is not None:
                record.update(fault_found_time=found["time"], fault=found["line"])
        _write_atomic(folder / "attempt.json", record)
        transition = Transition(folder, record)
        print(transition.describe(), flush=True)
        return transition

    def describe(self) -> str:
        r = self.record
        plan = f"{r['plan']} ({r['summary']}; {r['origin']}; estimated {rate(r['iteration_s'])})"
        start = f"resuming at step {r['resume_step']}" if r["resume_step"] else "starting at step 0"
        batch = f"global batch {r['global_batch']} kept"
        if "previous_world" not in r:
            return f"unityc-train: world {r['world']} ({r['nodes']} node(s)), plan {plan}; {start}"
        lost = r["previous_world"] - r["world"]
        change = (
            f"lost {lost} device(s) ({r['previous_nodes']} -> {r['nodes']} node(s))"
            if lost > 0
            else f"gained {-lost} device(s) ({r['previous_nodes']} -> {r['nodes']} node(s))"
            if lost < 0
            else f"restarted on the same {r['world']} devices"
        )
        slowdown = r["estimated_slowdown"]
        slow = "?" if slowdown is None else f"{slowdown:.2f}x (new/old step time)"
        found = r.get("fault_found_time")
        fault = "" if found is None else f"; the fault, found {time.time() - found:.1f} s ago: {r['fault']}"
        return (
            f"unityc-train: world {r['previous_world']} -> {r['world']}: {change}; plan "
            f"{r['previous_plan']} ({r['previous_summary']}; estimated {rate(r['previous_iteration_s'])}) -> "
            f"{plan}; estimated slowdown {slow}; {start} (the last run reached step {r['last_step']}: "
            f"{r['steps_redone']} step(s) redone); {batch}{fault}"
        )

    def after_step(self, step: int) -> None:
        now = time.time()
        _write_atomic(
            self.folder / "progress.json", {"step": step, "time": now, "world": self.record["world"]}
        )
        if self.first_logged:
            return
        self.first_logged = True
        r = self.record
        r["first_step"], r["first_step_time"] = step, now
        since = r.get("last_step_time")
        if since is not None:
            r["recovery_s"] = now - since
            found = r.get("fault_found_time")
            fault = ""
            if found is not None:
                r["fault_to_first_step_s"] = now - found
                fault = f"{now - found:.1f} s after the fault was found ({r['fault']}), "
            print(
                f"unityc-train: first step on {r['plan']} (step {step}) {fault}{now - since:.1f} s after "
                f"the last step on {r['previous_plan']}, {now - r['started']:.1f} s after this attempt "
                "started",
                flush=True,
            )
        with open(self.folder / "transitions.jsonl", "a") as f:
            f.write(json.dumps(r) + "\n")


# --- the worker ------------------------------------------------------------------------------


def worker_arguments(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m unityc.tools.elastic",
        description="One rank of an elastic unityc-train run (torch elastic starts it): the plan for "
        "this attempt's world, searched or cached, resumed from the newest checkpoint.",
    )
    parser.add_argument("model", type=Path)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--save", required=True, type=Path)
    parser.add_argument("--nproc-per-node", type=int, required=True)
    parser.add_argument("--search-time-limit", type=float, default=DEFAULT_SEARCH_S)
    parser.add_argument("--planner", default=SEARCH)
    args, training = parser.parse_known_args(argv)
    return args, [t for t in training if t != "--"]


def steps_of(training: list[str]) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--steps", type=int, default=10)
    return int(parser.parse_known_args(training)[0].steps)


def worker_main(argv: Sequence[str] | None = None) -> int:
    started = time.time()
    args, training = worker_arguments(argv)
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    cache = PlanCache(
        args.save / PLANS,
        args.model,
        args.machine,
        args.nproc_per_node,
        args.search_time_limit,
        args.planner,
    )
    try:
        cached = cache.get(world)
    except (ElasticError, ValueError, OSError) as e:
        print(f"rank {rank}: error: no plan for {world} rank(s): {e}", file=sys.stderr, flush=True)
        return 1
    newest = newest_checkpoint(args.save)
    resume = newest[1] if newest else 0
    if resume >= steps_of(training):
        if rank == 0:
            print(f"unityc-train: {newest[0] if newest else args.save} is the last step: done", flush=True)
        return 0
    program = runpy.run_path(str(cached.program), run_name="unityc_elastic_program")
    plan = program["PLAN"]
    forward = program.get("PROGRAM", program.get("forward"))
    assert forward is not None, f"{cached.program} defines no PROGRAM"
    flags = [*training, "--save", str(args.save)] + (["--resume", str(newest[0])] if newest else [])
    (args.save / STATE).mkdir(parents=True, exist_ok=True)
    os.environ[FAULTS_FILE] = str(args.save / STATE / FAULTS)  # a fault found is timed from there
    transition = (
        Transition.begin(args.save / STATE, cached, resume, nodes, plan.samples, started)
        if rank == 0
        else None
    )

    hook = transition.after_step if transition is not None else None
    return main(plan, forward, flags, build=program.get("build_reference"), on_step=hook)


if __name__ == "__main__":
    sys.exit(worker_main())
