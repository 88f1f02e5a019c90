"""A baseline pass's work (`passes.baselines`): its plan built by the search's baseline table
and installed in the module. Apart from the pass classes so that registering them on
`unityc-opt`'s start imports no search, cost model or rewrite library."""

from __future__ import annotations

from typing import Any

from xdsl.dialects.builtin import ModuleOp

from unityc.dialects.container import training_function
from unityc.graph import from_module
from unityc.passes.adapter import install_plan, priced
from unityc.passes.options import SearchOptions
from unityc.passes.unity_search import UnitySearchPass, load_rules
from unityc.search.baselines import baseline, run_baseline


def run_baseline_pass(search: SearchOptions, name: str, op: ModuleOp, own: dict[str, Any]) -> None:
    """Plan `op` by the baseline `name` with the `search` options and its `own` options."""
    training_function(op)  # one graph, its loss a scalar: located errors before any work
    cost, machine = priced(search)
    options = UnitySearchPass(
        machine=search.machine,
        cost=search.cost,
        optimizer=search.optimizer,
        budget=search.budget,
        alpha=search.alpha,
    ).options()
    rules = load_rules(search.rules) if baseline(name).rules else []
    plan = run_baseline(name, from_module(op), machine, rules, options, cost.profile, **own)
    install_plan(op, f"{name} ({plan.note})", search.machine, plan.graph, plan.estimate)
