"""The `gpipe` baseline as a pass (see `search/gpipe.py`):

    unityc-opt model.mlir -p 'gpipe{machine="cpu:4" stages=2 microbatches=4 schedule="1f1b"}' -o plan.mlir

Options: `machine` (preset or spec), `stages` S (default 2), `microbatches` M (default 4),
`schedule` (`gpipe` | `1f1b` | `interleaved-1f1b`, default `gpipe`), `virtual` v (stages per rank
group, interleaved only, default 2), `optimizer`. Replaces the graph with the pipelined plan
(`stage` on every op, the schedule on the graph function, `unityc.machine` recorded) and prints
a one-line estimate to stderr.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class GpipePass(ModulePass):
    name = "gpipe"

    machine: str = "cpu:1"
    stages: int = 2
    microbatches: int = 4
    schedule: str = "gpipe"
    virtual: int = 2
    optimizer: str = "sgd"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from unityc.cost.units import format_bytes, format_time
        from unityc.dialects.container import training_function
        from unityc.dialects.diagnostics import LocatedError
        from unityc.dialects.plan import INTERLEAVED, Pipeline
        from unityc.graph import from_module, to_module
        from unityc.machine import load_machine
        from unityc.passes.unity_search import machine_reference, replace_module
        from unityc.search.gpipe import PipelineError, gpipe_plan

        training_function(op)  # one graph, its loss a scalar: located errors before any work
        try:
            pipeline = Pipeline(
                self.schedule, self.microbatches, self.virtual if self.schedule == INTERLEAVED else 1
            )
        except ValueError as e:
            raise LocatedError(f"error: -p gpipe: {e}") from None
        machine = load_machine(self.machine)
        try:
            plan = gpipe_plan(from_module(op), machine, pipeline, self.stages, self.optimizer)
        except PipelineError as e:
            raise LocatedError(f"error: -p gpipe: {e}") from None
        e = plan.estimate
        sys.stderr.write(
            f"gpipe ({plan.note}) on {self.machine}: iteration time {format_time(e.iteration_s)} "
            f"(estimated without micro-batch overlap), peak memory {format_bytes(e.peak_memory)}"
            f"{'' if e.fits else ' (does not fit)'}\n"
        )
        plan.graph.module_attrs["unityc.machine"] = StringAttr(machine_reference(self.machine))
        replace_module(op, to_module(plan.graph))
