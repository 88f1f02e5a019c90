"""Memory levers in the search: a plan that does not fit gets ZeRO stages and recomputation
until it does (`search/levers.py`), `--memory-budget` overrides the device memory, and when
nothing fits the error names what the plan already has and the next lever."""

from __future__ import annotations

import os
import subprocess
import sys

from unityc.cost.estimate import estimate_graph
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine.presets import preset
from unityc.search.levers import with_memory_levers
from unityc.search.plans import Pricing, data_parallel_plan
from unityc.search.unity import strip_views

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def test_levers_make_a_data_parallel_plan_fit() -> None:
    graph = strip_views(from_module(import_model(ModelSpec("mlp", "small", batch=64))))
    roomy = preset("cpu:4")
    pricing = Pricing(optimizer="adam")
    plan = data_parallel_plan(graph, roomy, pricing)
    need = plan.estimate.peak_memory
    tight = roomy.with_memory(need * 0.7)
    e = estimate_graph(plan.graph, tight, optimizer="adam")
    assert not e.fits
    levered = with_memory_levers(plan.graph, e, tight, lambda g: estimate_graph(g, tight, optimizer="adam"))
    assert levered.estimate.fits, levered.note
    assert levered.estimate.peak_memory < need
    assert "ZeRO" in levered.note
    assert any(n.zero for n in levered.graph.nodes.values())
    # a plan that fits is left alone
    assert with_memory_levers(plan.graph, plan.estimate, roomy, lambda g: plan.estimate).note == ""


def test_memory_budget_error_names_the_next_lever(tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        [sys.executable, "-m", "unityc.tools.opt", os.path.join(EXAMPLES, "mlp.mlir"), "--unity-search",
         "--machine", "cpu:2", "--optimizer", "adam", "--memory-budget", "0.00001", "--budget", "2",
         "-o", str(tmp_path / "plan.mlir")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "with a memory budget of 1e-05 GiB per device" in last
    assert "the next lever would be a smaller batch, more devices, pipeline parallelism" in last
    assert not (tmp_path / "plan.mlir").exists()


def test_levers_make_a_pipelined_plan_fit() -> None:
    """Inside a pipeline's stages too (-t torch runs ZeRO and recomputation there): the hybrid
    2 stages x 2-way data parallel plan of the MLP, with Adam, on devices with 70 % of its peak."""
    from xdsl.dialects.builtin import StringAttr

    from unityc.codegen import emit_program
    from unityc.graph import to_module
    from unityc.search.pipeline import LayerCosts, Stage, materialize

    graph = strip_views(from_module(import_model(ModelSpec("mlp", "small", batch=64))))
    roomy = preset("cpu:4")
    L = LayerCosts(graph, roomy).count
    plan = materialize(graph, roomy, [Stage(0, L // 2, 0, 2), Stage(L // 2, L, 2, 2)], "1f1b", 2)
    need = estimate_graph(plan, roomy, optimizer="adam").peak_memory
    tight = roomy.with_memory(need * 0.7)
    e = estimate_graph(plan, tight, optimizer="adam")
    assert e.pipeline is not None and not e.fits
    levered = with_memory_levers(plan, e, tight, lambda g: estimate_graph(g, tight, optimizer="adam"))
    assert levered.estimate.fits and levered.estimate.pipeline is not None, levered.note
    assert any(n.zero or n.recompute for n in levered.graph.nodes.values())
    module = to_module(levered.graph)
    module.attributes["unityc.machine"] = StringAttr("cpu:4")
    assert "PIPELINE = rt.Pipeline(" in emit_program(module)
