"""The `gpipe` baseline as a pass (see `search/gpipe.py`):

    unityc-opt model.mlir -p 'gpipe{machine="cpu:4" stages=2 microbatches=4 schedule="1f1b"}' -o plan.mlir

Options: `machine` (preset or spec), `stages` S (default 2), `microbatches` M (default 4),
`schedule` (`gpipe` | `1f1b` | `interleaved-1f1b`, default `gpipe`), `virtual` v (stages per rank
group, interleaved only, default 2), `optimizer`. Replaces the graph with the pipelined plan
(`stage` on every op, the schedule on the graph function, `unityc.machine` recorded) and prints
a one-line estimate to stderr.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects.container import training_function
from unityc.dialects.diagnostics import LocatedError
from unityc.dialects.plan import INTERLEAVED, Pipeline
from unityc.graph import from_module
from unityc.passes.adapter import install_plan, pipeline_options
from unityc.passes.options import PricingOptions
from unityc.search.gpipe import PipelineError, gpipe_plan


@dataclass(frozen=True)
class GpipePass(PricingOptions):
    name = "gpipe"

    stages: int = 2
    microbatches: int = 4
    schedule: str = "gpipe"
    virtual: int = 2

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        training_function(op)  # one graph, its loss a scalar: located errors before any work
        try:
            pipeline = Pipeline(
                self.schedule, self.microbatches, self.virtual if self.schedule == INTERLEAVED else 1
            )
        except ValueError as e:
            raise LocatedError(f"error: -p gpipe: {e}") from None
        options, machine = pipeline_options(self)
        try:
            plan = gpipe_plan(from_module(op), machine, pipeline, self.stages, options)
        except PipelineError as e:
            raise LocatedError(f"error: -p gpipe: {e}") from None
        how = " (estimated without micro-batch overlap)"
        install_plan(op, f"gpipe ({plan.note})", self.machine, plan.graph, plan.estimate, how)
