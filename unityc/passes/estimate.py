"""estimate: print the cost model's report for a mapped PCG (time per iteration, memory).

    unityc-opt plan.mlir -p 'estimate{machine="summit:2" cost="roofline" optimizer="adam"}'

Options: `machine` (a preset such as `summit:2`, `dgx-a100:1`, `cpu:2`, or a `.toml` spec),
`cost` (`roofline`, or `profile` with `profile="cache.json"` written by
`python tools/profile_ops.py`), `optimizer` (`sgd` or `adam`), `memory_budget` (GiB per device
in place of the machine's own; the pricing options of `passes/options.py`), `report` (a file to
write the report to instead of stderr). The report goes to stderr, as the search's does, so that stdout
holds the module alone; the module is left unchanged.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from unityc.cost.estimate import estimate_module
from unityc.cost.pipeline import SCHEDULES, chrome_trace
from unityc.cost.pricing import check_views
from unityc.cost.report import Utilization, render
from unityc.cost.staged import estimate_pipelined, is_pipelined
from unityc.dialects.diagnostics import LocatedError
from unityc.graph import from_module
from unityc.passes.adapter import priced
from unityc.passes.options import PricingOptions


@dataclass(frozen=True)
class EstimatePass(PricingOptions):
    name = "estimate"

    report: str = ""
    schedule: str = ""
    """A pipelined plan priced under another schedule (e.g. "2bw"), if given."""
    trace: str = ""
    """A pipelined plan's simulated iteration as a Chrome trace (JSON, for Perfetto), if given."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        o, machine = priced(self)  # options first
        check_views(op, machine)  # then the module against the machine
        if self.schedule or self.trace:
            estimate = self._pipelined(op, machine, o.profile)
        else:
            estimate = estimate_module(op, machine, o.cost, o.optimizer, o.profile)
        text = render(estimate, Utilization.of_graph(from_module(op), machine))
        if self.report:
            with open(self.report, "w") as f:
                f.write(text)
            return
        sys.stderr.write(text)
        sys.stderr.flush()

    def _pipelined(self, op: ModuleOp, machine, cache):  # type: ignore[no-untyped-def]
        """The estimate of a pipelined plan with `schedule` and `trace` (errors for other plans)."""
        import json

        if self.schedule and self.schedule not in SCHEDULES:
            raise LocatedError(
                f"error: -p estimate: schedule: unknown '{self.schedule}' (known: {', '.join(SCHEDULES)})"
            )
        graph = from_module(op)
        if not is_pipelined(graph):
            raise LocatedError(
                "error: -p estimate: schedule and trace are for pipelined plans (unityc.schedule)"
            )
        try:
            estimate = estimate_pipelined(
                graph, machine, self.cost, self.optimizer, cache, self.schedule or None
            )
        except ValueError as e:
            raise LocatedError(f"error: -p estimate: {e}") from None
        if self.trace and estimate.pipeline is not None:
            with open(self.trace, "w") as f:
                json.dump(chrome_trace(estimate.pipeline), f)
        return estimate
