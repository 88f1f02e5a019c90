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

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects.container import training_function
from unityc.dialects.diagnostics import LocatedError
from unityc.graph import from_module
from unityc.passes.adapter import install_plan, pipeline_options
from unityc.passes.options import PricingOptions
from unityc.search.layers import PipelineError
from unityc.search.pipeline import hetero_gpipe_plan, pipedream_plan


@dataclass(frozen=True)
class _PipelinePass(PricingOptions):
    stages: int = 0

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        training_function(op)  # one graph, its loss a scalar: located errors before any work
        if self.stages < 0:
            raise LocatedError(f"error: -p {self.name}: stages must be >= 0, got {self.stages}")
        options, machine = pipeline_options(self)
        graph = from_module(op)
        try:
            if self.name == "pipedream":
                plan = pipedream_plan(graph, machine, options, self.stages or None)
            else:
                plan = hetero_gpipe_plan(graph, machine, options)
        except PipelineError as e:
            raise LocatedError(f"error: -p {self.name}: {e}") from None
        install_plan(op, f"{self.name} ({plan.note})", self.machine, plan.graph, plan.estimate)


@dataclass(frozen=True)
class PipedreamPass(_PipelinePass):
    """PipeDream's partition DP and the flushed 1F1B schedule (`search.pipeline.pipedream_plan`)."""

    name = "pipedream"


@dataclass(frozen=True)
class HeteroGpipePass(_PipelinePass):
    """The method of papers/002 on a machine of mixed devices (`search.pipeline.hetero_gpipe_plan`)."""

    name = "hetero-gpipe"
