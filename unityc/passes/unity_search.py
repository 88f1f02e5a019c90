"""unity-search: find a parallel plan (rewritten graph + a machine view on every op).

    unityc-opt model.mlir --unity-search --machine summit:8 -o plan.mlir --report plan.json
    unityc-opt model.mlir -p 'unity-search{machine="summit:8" budget=32 alpha=1.05}'

The module's graph is replaced by the plan; the module records the machine as
`unityc.machine`. The plan report (estimated iteration time, memory per device, baselines,
roofline bound, mapping summary) goes to stderr, and as JSON to `report` when given. Progress
is shown on stderr while the search runs (`progress=false` hides it).

Options: `machine` (preset or `.toml`), `alpha` (1.05), `budget` (expansions per segment
search; 0: unlimited), `split_size` (ops per segment), `time_limit` (seconds, default 600), `cost`
(`roofline` | `profile` with `profile="cache.json"`), `optimizer` (`sgd` | `adam`),
`memory_check` (never return a plan that does not fit), `rules` (a `.rules` file or directory;
default: the shipped library), `degrees` ("2,4,8"; default: from the machine), `baselines`
("data-parallel,megatron", compared in the report; "none" for none).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr

from unityc.cost.estimate import estimate_graph
from unityc.cost.profile import ProfileCache
from unityc.cost.units import format_bytes
from unityc.dialects.container import training_function
from unityc.dialects.source import output_problem
from unityc.graph import Graph, from_module, to_module
from unityc.machine.spec import Machine
from unityc.passes.adapter import budget_text, machine_reference, priced, replace_module
from unityc.passes.options import DEFAULT_TIME_LIMIT, UnitySearchOptions
from unityc.rewrites.match import compile_rules
from unityc.rewrites.parser import load_library, load_rule_file
from unityc.search.alternatives import better_estimate
from unityc.search.background import Background, can_fork
from unityc.search.baselines import AFTER, TABLE, baseline, run_baseline
from unityc.search.deadline import Stopped, hard_deadline, tail_seconds
from unityc.search.levers import next_lever
from unityc.search.options import UnityResult
from unityc.search.plans import PlanSummary, PricedPlan
from unityc.search.report import BaselineRow, PlanReport, render, to_json
from unityc.search.unity import UnityOptions, unity_search


def load_rules(path: str) -> list[Any]:
    """Compiled rules from a `.rules` file, a directory of them, or the shipped library ("");
    a path holding no rule is an error."""
    from pathlib import Path

    if not path:
        return compile_rules(load_library())
    if os.path.isdir(path):
        if not any(Path(path).glob("*.rules")):
            raise ValueError(f"rules: no .rules file in directory '{path}'")
        rules = load_library(Path(path))
    elif not os.path.exists(path):
        raise ValueError(f"rules: no such file or directory: '{path}'")
    else:
        rules = load_rule_file(path).rules
    if not rules:
        raise ValueError(f"rules: '{path}' holds no rewrite rule")
    return compile_rules(rules)


SEARCHES = tuple(b.name for b in TABLE if b.turn is AFTER)
"""Baselines that are searches of their own: run after the joint search, not beside it."""

BESIDE_ORDER = tuple(b.name for b in sorted(TABLE, key=lambda b: b.turn or 0) if b.turn is not AFTER)
"""The order the baselines are priced in beside the search (`search.baselines.TABLE`'s turns)."""


def _beside_order(name: str) -> int:
    return BESIDE_ORDER.index(name)


Priced = tuple[str, PlanSummary | None, PricedPlan | None, str]
"""A baseline priced: its name, its report row (None where it has no plan), its plan where it
could be returned instead of the search's (it fits, or memory is not checked), why it has none."""


def priced_baselines(
    names: Sequence[str],
    graph: Graph,
    machine: Machine,
    rules: Sequence[Any],
    options: UnityOptions,
    profile: ProfileCache | None,
) -> Iterator[Priced]:
    """Each baseline of `names` as it is priced (`search.baselines.run_baseline`); one that
    cannot be had on this graph and machine (a ValueError: "does not tile", "no partition
    fits") is a row saying why. A plan is megabytes to send back from a worker: only one that
    could be returned comes with its row."""
    for name in names:
        try:
            b = run_baseline(name, graph, machine, rules, options, profile)
        except ValueError as e:
            yield name, None, None, str(e)
            continue
        could = b.estimate.fits or not options.memory_check
        yield name, b.summary(), PricedPlan(b.name, b.graph, b.estimate, None, b.note) if could else None, ""


STARTUP_SECONDS = 60.0
"""A process older than this when the search starts is no one-shot command (a notebook, a test
run calling `main`): its time limit counts from the search's start."""


def process_started() -> float:
    """When this process started, as a `time.monotonic()` value (Linux: from /proc; elsewhere
    now), so that `--time-limit` counts the whole command, not just the search."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22 of stat(5): start time, clock ticks after boot
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return now
    age = uptime - ticks / os.sysconf("SC_CLK_TCK")
    return now - age if 0 <= age < STARTUP_SECONDS else now


def _time_left(deadline: float | None) -> bool:
    return deadline is None or time.monotonic() < deadline


def parse_degrees(text: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        degrees = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise ValueError(f"degrees: expected comma-separated integers, got '{text}'") from None
    if any(d < 2 for d in degrees):
        raise ValueError(f"degrees: every degree must be at least 2, got '{text}'")
    return degrees


class _Bar:
    """A tqdm progress bar on stderr, made on first use."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar: Any = None

    def __call__(self, what: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="unity-search", unit="search", file=sys.stderr, leave=False)
        self.bar.total = total
        self.bar.set_postfix_str(what)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass(frozen=True)
class UnitySearchPass(UnitySearchOptions):
    """The search as a pass: its options are `UnitySearchOptions`'s fields (`passes/options.py`)."""

    name = "unity-search"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        started = process_started()
        if self.report and (problem := output_problem(self.report)):  # before the search, not after
            raise ValueError(f"report {self.report}: {problem}")
        training_function(op)  # one graph, its loss a scalar: located errors before any work
        cost, machine = priced(self)
        profile = cost.profile
        options = self.options()
        names = [] if self.baselines in ("", "none") else [b.strip() for b in self.baselines.split(",")]
        for name in names:
            baseline(name)  # (ValueError naming the known ones)
        rules = load_rules(self.rules)
        graph = from_module(op)
        # what follows the search (baselines it did not price, the next lever of a plan that
        # does not fit) keeps to the same deadline: only the report and the plan's printing after
        deadline = (
            started + self.time_limit - tail_seconds(self.time_limit, graph) if self.time_limit else None
        )
        bar = _Bar(self.progress and sys.stderr.isatty())
        # the baselines that price one plan are priced beside the search from its start (a
        # forked worker, `background.py`), so that a search using its whole time limit does not
        # leave them unpriced (issue 25: zero, gpipe and pipedream at 70B)
        beside = sorted((n for n in names if n not in SEARCHES), key=_beside_order)
        early = (
            Background(lambda: priced_baselines(beside, graph, machine, rules, options, profile))
            if beside and can_fork() and _time_left(deadline)
            else None
        )
        try:
            try:
                result = unity_search(graph, machine, rules, options, profile, bar, started)
            except KeyboardInterrupt:
                raise ValueError("interrupted before any plan was complete; nothing written") from None
            finally:
                bar.close()
            rows, better = self.baseline_rows(
                names, result, early, graph, machine, rules, options, profile, deadline
            )
        finally:
            if early is not None:
                early.close()
        plan, estimate, source = result.plan, result.estimate, result.source
        if better is not None:  # a baseline's plan beats the search's: the search returns it
            plan, estimate, source = better.graph, better.estimate, f"{better.name} baseline ({better.note})"
        # the joint search's own 3-D factorisations, each priced (the report shows why it picked)
        three_d = [p for p in result.alternatives if p.name == "3-d"]
        rows += [BaselineRow(f"3-d {k}", p.note, p.estimate) for k, p in enumerate(three_d, 1)]
        report = PlanReport(self.machine, plan, estimate, result.report, source, rows, self.option_values())
        sys.stderr.write(render(report))
        if self.report:
            with open(self.report, "w") as f:
                json.dump(to_json(report), f, indent=2)
                f.write("\n")
        if self.memory_check and not estimate.fits:
            device = max(estimate.devices, key=lambda d: d.memory.total)
            try:
                with hard_deadline(deadline):
                    lever = next_lever(
                        plan,
                        estimate,
                        lambda g: estimate_graph(g, machine, self.cost, self.optimizer, profile),
                    )
            except Stopped:
                lever = f"the time limit ({self.time_limit:g} s) ran out before the next lever was priced"
            if result.report.stopped_early:
                lever += f"; the search stopped early ({result.report.stopped_early}): more time may find one"
            raise ValueError(
                f"no plan fits the memory of {self.machine}{budget_text(self.memory_budget)}: the smallest "
                f"footprint found needs {format_bytes(device.memory.total)} on device {device.device} "
                f"({format_bytes(device.capacity)} available); {lever}"
            )
        plan.module_attrs["unityc.machine"] = StringAttr(machine_reference(self.machine))
        replace_module(op, to_module(plan))

    def baseline_rows(
        self,
        names: Sequence[str],
        result: UnityResult,
        early: Background[Priced] | None,
        graph: Graph,
        machine: Machine,
        rules: Sequence[Any],
        options: UnityOptions,
        profile: ProfileCache | None,
        deadline: float | None,
    ) -> tuple[list[BaselineRow], PricedPlan | None]:
        """The report's rows of the baselines `names`, and the fastest of their plans priced
        here that beats the search's result (None if none does): a baseline the search priced
        among its own plans is taken from `result`; the others from the worker pricing them
        beside the search (`early`), or priced here where no worker ran (the searches among
        them, `SEARCHES`, always here), each until `deadline`."""
        stopped = result.report.stopped_early
        known = {"data-parallel": [p for p in result.alternatives if p.name == "data-parallel"]}
        for name in ("megatron", "megatron-lm", "galvatron", "gpipe", "pipedream", "hetero-gpipe"):
            known[name] = [p for p in result.alternatives if p.name == name]
        wanted = [n for n in names if not known.get(n)]
        got: dict[str, Priced] = {}
        if early is not None and any(n not in SEARCHES for n in wanted):
            try:
                with hard_deadline(deadline):
                    for item in early.items():
                        got[item[0]] = item
                        if all(n in got for n in wanted if n not in SEARCHES):
                            break
            except Stopped:
                got |= {item[0]: item for item in early.ready()}
        here = [n for n in wanted if n not in got and (early is None or n in SEARCHES)]
        if stopped != "interrupted" and _time_left(deadline):
            try:
                with hard_deadline(deadline):
                    for item in priced_baselines(here, graph, machine, rules, options, profile):
                        got[item[0]] = item
            except Stopped:
                pass
        rows: list[BaselineRow] = []
        better: PricedPlan | None = None
        for name in names:
            if known.get(name):
                b = min(known[name], key=lambda p: p.estimate.iteration_s)
                rows.append(BaselineRow(name, b.note, b.estimate))
                fitting = [p for p in known[name] if p.estimate.fits]
                if fitting and not b.estimate.fits:  # data parallelism made to fit by accumulation
                    b = min(fitting, key=lambda p: p.estimate.iteration_s)
                    rows.append(BaselineRow(name, b.note, b.estimate))
                continue
            if name not in got:
                why = (
                    f"the search stopped early ({stopped})"
                    if stopped == "interrupted"
                    else (f"the time limit ({self.time_limit:g} s) ran out")
                )
                rows.append(BaselineRow(name, "", None, f"not priced: {why}"))
                continue
            _, summary, plan, error = got[name]
            if summary is None:
                rows.append(BaselineRow(name, "", None, error))
                continue
            rows.append(BaselineRow(name, summary.note, summary.estimate))
            rival = better.estimate if better is not None else result.estimate
            if plan is not None and better_estimate(plan.estimate, rival, self.memory_check):
                better = plan
        return rows, better

    def options(self) -> Any:
        """The search's options (the cost options are `CostOptions.parse`'s, checked before)."""
        if self.alpha < 1:
            raise ValueError(f"alpha must be at least 1, got {self.alpha}")
        if self.budget < 0 or self.split_size < 1:
            raise ValueError("budget must be >= 0 and split_size >= 1")
        if self.time_limit is not None and not self.time_limit > 0:
            raise ValueError(
                f"time-limit must be a positive number of seconds, got {self.time_limit:g} (leave it out "
                f"for the default {DEFAULT_TIME_LIMIT:g} s)"
            )
        return UnityOptions(
            alpha=self.alpha,
            budget=self.budget or None,
            split_size=self.split_size,
            time_limit=self.time_limit,
            degrees=parse_degrees(self.degrees),
            cost=self.cost,
            optimizer=self.optimizer,
            memory_check=self.memory_check,
            pipelines=self.pipelines,
        )

    def option_values(self) -> dict[str, Any]:
        names = (
            "machine",
            "alpha",
            "budget",
            "split_size",
            "time_limit",
            "cost",
            "optimizer",
            "memory_check",
            "pipelines",
        )
        return {n: getattr(self, n) for n in names} | {
            "degrees": self.degrees or "auto",
            "rules": self.rules or "library",
        }


def spec(options: Sequence[tuple[str, Any]]) -> str:
    """A `unity-search{...}` pass spec from (name, value) pairs (strings quoted)."""

    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return json.dumps(value)
        if isinstance(value, float):  # pass options take no exponents
            text = f"{value:.15f}".rstrip("0")
            return text + "0" if text.endswith(".") else text
        return str(value)

    return "unity-search{" + " ".join(f"{k}={text(v)}" for k, v in options) + "}"
