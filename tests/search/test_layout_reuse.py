"""Pricing the 3-D plans reuses the repeated work (issue 25 item 1): `megatron_lm`'s scan over
stage counts, chunks, recomputation levels and micro-batch sizes lays the graph out once per
(data degree, tensor degree, sequence parallelism) (`pipeline.Layouts`), not once per plan, and
every plan is priced exactly as when each is laid out afresh. Counts calls, no wall clock."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from unityc.machine.presets import preset
from unityc.search import pipeline
from unityc.search.megatron_lm import megatron_lm_plan, three_d_plans
from unityc.search.plans import Pricing, data_parallel_plan

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from transformer_shapes import transformer


def _priced(graph, machine, pricing):  # type: ignore[no-untyped-def]
    hand = megatron_lm_plan(graph, machine, pricing)
    plans = [hand, *three_d_plans(graph, machine, pricing, priced=(hand,))]
    return [(p.note, p.estimate.iteration_s, p.estimate.peak_memory, p.estimate.devices) for p in plans]


def test_three_d_scan_lays_out_each_shape_once_with_the_same_estimates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = transformer(4, 32, 4, 64, 128, 16, 8)
    pricing = Pricing(optimizer="adam")
    machine = preset("cpu:8")
    machine = machine.with_memory(0.5 * data_parallel_plan(graph, machine, pricing).estimate.peak_memory)
    built = []
    materialize = pipeline.materialize

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(args[2])
        return materialize(*args, **kwargs)

    monkeypatch.setattr("unityc.search.megatron_lm.materialize", counted)
    monkeypatch.setattr(pipeline, "LAYOUTS", pipeline.Layouts())
    reused = _priced(graph, machine, pricing)
    laid_out = pipeline.LAYOUTS.laid_out
    monkeypatch.setattr(pipeline, "LAYOUTS", pipeline.Layouts(size=0))  # every plan laid out afresh
    fresh = _priced(graph, machine, pricing)
    assert reused == fresh
    plans = len(built) // 2
    assert pipeline.LAYOUTS.laid_out == plans  # without reuse: one layout per plan
    assert laid_out < plans / 2, (laid_out, plans)  # with: most plans share one
