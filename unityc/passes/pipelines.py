"""Pipeline baselines as passes, on the cost model the search uses (`search/pipeline.py`):

    unityc-opt model.mlir -p 'pipedream{machine="summit:2"}' -o plan.mlir
    unityc-opt model.mlir -p 'pipedream{machine="cpu:4" stages=2}'
    unityc-opt model.mlir -p 'hetero-gpipe{machine="examples/machines/hetero_v100_m4.toml"}'

`pipedream`: PipeDream's partition DP (stage replication, per-stage device groups, memory), the
1F1B schedule, the micro-batch count whose simulated iteration is fastest; `stages` fixes the
stage count (0: the DP's choice). `hetero-gpipe`: the method of papers/002 (device merging,
layers split by speed, GPipe schedule, micro-batch count by bubble + under-use). Each replaces the
graph with the pipelined plan (`stage` on every op, the schedule on the graph function,
`unityc.machine` recorded) and prints a one-line estimate to stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class _PipelinePass(ModulePass):
    KIND: ClassVar[str] = ""

    machine: str = "cpu:1"
    cost: str = "roofline"
    profile: str = ""
    optimizer: str = "sgd"
    stages: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from unityc.cost.estimate import compute_model
        from unityc.cost.memory import check_optimizer
        from unityc.cost.profile import ProfileCache
        from unityc.cost.units import format_bytes, format_time
        from unityc.dialects.container import training_function
        from unityc.dialects.diagnostics import LocatedError
        from unityc.graph import from_module, to_module
        from unityc.machine import load_machine
        from unityc.passes.unity_search import machine_reference, replace_module
        from unityc.search.layers import PipelineError
        from unityc.search.pipeline import PipelineOptions, hetero_gpipe_plan, pipedream_plan

        training_function(op)  # one graph, its loss a scalar: located errors before any work
        if self.stages < 0:
            raise LocatedError(f"error: -p {self.KIND}: stages must be >= 0, got {self.stages}")
        try:
            check_optimizer(self.optimizer)
            cache = ProfileCache.load(self.profile) if self.profile else None
            compute_model(self.cost, cache)
        except ValueError as e:
            raise LocatedError(f"error: -p {self.KIND}: {e}") from None
        machine = load_machine(self.machine)
        options = PipelineOptions(self.cost, self.optimizer, cache)
        graph = from_module(op)
        try:
            if self.KIND == "pipedream":
                plan = pipedream_plan(graph, machine, options, self.stages or None)
            else:
                plan = hetero_gpipe_plan(graph, machine, options)
        except PipelineError as e:
            raise LocatedError(f"error: -p {self.KIND}: {e}") from None
        e = plan.estimate
        sys.stderr.write(
            f"{self.KIND} ({plan.note}) on {self.machine}: iteration time {format_time(e.iteration_s)}, "
            f"peak memory {format_bytes(e.peak_memory)}{'' if e.fits else ' (does not fit)'}\n"
        )
        plan.graph.module_attrs["unityc.machine"] = StringAttr(machine_reference(self.machine))
        replace_module(op, to_module(plan.graph))


@dataclass(frozen=True)
class PipedreamPass(_PipelinePass):
    name = "pipedream"
    KIND: ClassVar[str] = "pipedream"


@dataclass(frozen=True)
class HeteroGpipePass(_PipelinePass):
    name = "hetero-gpipe"
    KIND: ClassVar[str] = "hetero-gpipe"
