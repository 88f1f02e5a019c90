"""estimate: print the cost model's report for a mapped PCG (time per iteration, memory).

    unityc-opt plan.mlir -p 'estimate{machine="summit:2" cost="roofline" optimizer="adam"}'

Options: `machine` (a preset such as `summit:2`, `dgx-a100:1`, `cpu:2`, or a `.toml` spec),
`cost` (`roofline`, or `profile` with `profile="cache.json"` written by
`python tools/profile_ops.py`), `optimizer` (`sgd` or `adam`), `report` (a file to write
the report to instead of stderr). The report goes to stderr, as the search's does, so that stdout
holds the module alone; the module is left unchanged.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class EstimatePass(ModulePass):
    name = "estimate"

    machine: str = "cpu:1"
    cost: str = "roofline"
    optimizer: str = "sgd"
    profile: str = ""
    report: str = ""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from unityc.cost.estimate import compute_model, estimate_module
        from unityc.cost.memory import check_optimizer
        from unityc.cost.pricing import check_views
        from unityc.cost.profile import ProfileCache
        from unityc.cost.report import render
        from unityc.machine import load_machine

        machine = load_machine(self.machine)
        cache = ProfileCache.load(self.profile) if self.profile else None
        check_optimizer(self.optimizer)  # options first, then the module against the machine
        compute_model(self.cost, cache)
        check_views(op, machine)
        estimate = estimate_module(op, machine, self.cost, self.optimizer, cache)
        if self.report:
            with open(self.report, "w") as f:
                f.write(render(estimate))
            return
        sys.stderr.write(render(estimate))
        sys.stderr.flush()
