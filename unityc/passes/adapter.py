"""What every plan-making pass does around its one call into the library: read its pricing
options into a machine and a cost model, and put the plan in place of the module's graph with a
one-line estimate on stderr."""

from __future__ import annotations

import os
import sys

from xdsl.dialects.builtin import ModuleOp, StringAttr

from unityc.cost.estimate import Estimate
from unityc.cost.options import CostOptions
from unityc.cost.units import format_bytes, format_time
from unityc.dialects.diagnostics import LocatedError
from unityc.graph import Graph, to_module
from unityc.machine import Machine
from unityc.machine.presets import PRESETS
from unityc.passes.options import PricingOptions
from unityc.search.pipeline import PipelineOptions


def machine_reference(name: str) -> str:
    """What a plan records as its machine: a preset as given, a spec file as an absolute path
    (the plan may be read from another directory)."""
    if name.split(":", 1)[0] in PRESETS and not os.path.exists(name):
        return name
    return os.path.abspath(name)


def replace_module(op: ModuleOp, new: ModuleOp) -> None:
    """Moves the body and attributes of `new` into `op` (a pass must rewrite its module in place)."""
    block = op.body.block
    for old in list(block.ops):
        old.detach()
        old.erase()
    for moved in list(new.body.block.ops):
        moved.detach()
        block.add_op(moved)
    op.attributes.update(new.attributes)


def budgeted(machine: Machine, budget_gib: float | None) -> Machine:
    """`machine` with `budget_gib` GiB per device (`--memory-budget`; None keeps its own)."""
    if budget_gib is None:
        return machine
    if not 0 < budget_gib < float("inf"):
        raise ValueError(
            f"memory-budget must be a positive number of GiB, got {budget_gib:g} (leave it out "
            "for the machine's own device memory)"
        )
    return machine.with_memory(budget_gib * 2**30)


def budget_text(budget_gib: float | None) -> str:
    return f" with a memory budget of {budget_gib:g} GiB per device" if budget_gib else ""


def priced(options: PricingOptions) -> tuple[CostOptions, Machine]:
    """The pass's pricing options parsed and checked (ValueError naming the one at fault, the
    machine first), and the machine under the memory budget."""
    cost = CostOptions.parse(options.machine, options.cost, options.optimizer, options.profile)
    return cost, budgeted(cost.machine, options.memory_budget)


def install_plan(
    op: ModuleOp, what: str, machine_name: str, graph: Graph, estimate: Estimate, how: str = ""
) -> None:
    """Replaces the module's graph with the mapped plan `graph` (recording the machine) and says
    `what` it is and its estimate (`how` it was estimated, if not plainly) on stderr."""
    sys.stderr.write(
        f"{what} on {machine_name}: iteration time {format_time(estimate.iteration_s)}{how}, "
        f"peak memory {format_bytes(estimate.peak_memory)}{'' if estimate.fits else ' (does not fit)'}\n"
    )
    graph.module_attrs["unityc.machine"] = StringAttr(machine_reference(machine_name))
    replace_module(op, to_module(graph))


def pipeline_options(p: PricingOptions) -> tuple[PipelineOptions, Machine]:
    """The pass's pricing options as the pipeline search's, and the machine (errors located at
    the pass)."""
    try:
        cost, machine = priced(p)
    except ValueError as e:
        raise LocatedError(f"error: -p {p.name}: {e}") from None
    return PipelineOptions(cost.cost, cost.optimizer, cost.profile), machine
