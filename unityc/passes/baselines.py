"""Baseline plans as passes, on the cost model the search uses (see `search/baselines.py`).

    unityc-opt model.mlir -p 'data-parallel{machine="summit:2"}' -o dp.mlir
    unityc-opt model.mlir -p 'megatron{machine="summit:2"}'
    unityc-opt model.mlir -p 'sequential{machine="cpu:4" budget=16}'
    unityc-opt small.mlir -p 'exhaustive{machine="cpu:2"}'

Each replaces the module's graph with the baseline's mapped plan (every op with a machine
view, `unityc.machine` recorded) and prints a one-line estimate to stderr. `sequential` and
`exhaustive` apply rewrite rules (`rules`: a file or directory; default the shipped library).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class _BaselinePass(ModulePass):
    BASELINE: ClassVar[str] = ""

    machine: str = "cpu:1"
    cost: str = "roofline"
    profile: str = ""
    optimizer: str = "sgd"
    rules: str = ""
    budget: int = 12
    alpha: float = 1.05

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from unityc.cost.options import CostOptions
        from unityc.cost.units import format_bytes, format_time
        from unityc.dialects.container import training_function
        from unityc.graph import from_module, to_module
        from unityc.passes.unity_search import UnitySearchPass, load_rules, machine_reference, replace_module
        from unityc.search.baselines import run_baseline

        training_function(op)  # one graph, its loss a scalar: located errors before any work
        priced = CostOptions.parse(self.machine, self.cost, self.optimizer, self.profile)
        machine, profile = priced.machine, priced.profile
        options = UnitySearchPass(
            machine=self.machine,
            cost=self.cost,
            optimizer=self.optimizer,
            budget=self.budget,
            alpha=self.alpha,
        ).options()
        rules = load_rules(self.rules) if self.BASELINE in ("sequential", "exhaustive") else []
        plan = run_baseline(self.BASELINE, from_module(op), machine, rules, options, profile)
        e = plan.estimate
        sys.stderr.write(
            f"{self.BASELINE} ({plan.note}) on {self.machine}: iteration time {format_time(e.iteration_s)}, "
            f"peak memory {format_bytes(e.peak_memory)}{'' if e.fits else ' (does not fit)'}\n"
        )
        plan.graph.module_attrs["unityc.machine"] = StringAttr(machine_reference(self.machine))
        replace_module(op, to_module(plan.graph))


@dataclass(frozen=True)
class DataParallelPass(_BaselinePass):
    name = "data-parallel"
    BASELINE: ClassVar[str] = "data-parallel"


@dataclass(frozen=True)
class MegatronPass(_BaselinePass):
    name = "megatron"
    BASELINE: ClassVar[str] = "megatron"


@dataclass(frozen=True)
class SequentialPass(_BaselinePass):
    name = "sequential"
    BASELINE: ClassVar[str] = "sequential"


@dataclass(frozen=True)
class ExhaustivePass(_BaselinePass):
    name = "exhaustive"
    BASELINE: ClassVar[str] = "exhaustive"


BASELINE_PASSES: tuple[type[ModulePass], ...] = (
    DataParallelPass,
    MegatronPass,
    SequentialPass,
    ExhaustivePass,
)
