"""The joint search reaches the 3-D plan space itself (issue 25): `megatron_lm.three_d_plans`
prices tensor (with and without sequence parallelism) x pipeline x data factorisations at three
recomputation levels, and the search returns one where it is the fastest that fits, never
slower than the `megatron-lm` baseline's single pick."""

from __future__ import annotations

import sys
from pathlib import Path

from unityc.machine.presets import preset
from unityc.passes.unity_search import load_rules
from unityc.search.baselines import megatron_lm
from unityc.search.megatron_lm import megatron_lm_plan, three_d_plans
from unityc.search.plans import Pricing, data_parallel_plan
from unityc.search.unity import UnityOptions, unity_search

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from transformer_shapes import transformer


def test_three_d_candidates_cover_the_space_and_beat_megatron_lm() -> None:
    graph = transformer(4, 32, 4, 64, 128, 16, 8)
    pricing = Pricing(optimizer="adam")
    machine = preset("cpu:8")
    machine = machine.with_memory(0.5 * data_parallel_plan(graph, machine, pricing).estimate.peak_memory)
    plans = list(three_d_plans(graph, machine, pricing))
    notes = [p.note for p in plans]
    assert all(p.estimate.fits and p.name == "3-d" for p in plans)
    assert any("tensor 4" in n and "sequence parallel" in n for n in notes)
    assert any("tensor 2" in n and "sequence parallel" not in n for n in notes)
    assert any("pipeline 1," not in n for n in notes)  # pipelined where fewer stages do not fit
    assert {r for r in ("full", "selective", "no") if any(f"{r} recomputation" in n for n in notes)} == {
        "full",
        "selective",
        "no",
    }
    hand = megatron_lm_plan(graph, machine, pricing)
    assert min(p.estimate.iteration_s for p in plans) <= hand.estimate.iteration_s * (1 + 1e-9)


def test_joint_search_picks_its_own_three_d_plan() -> None:
    # 1.1 B parameters with Adam on 16 A100s cut to 6 GiB: data parallelism and ZeRO do not
    # win; tensor 4 with sequence parallelism, ZeRO-1 and accumulation does
    graph = transformer(4, 4096, 16, 4 * 4096, 32000, 2048, 32)
    machine = preset("dgx-a100:2").with_memory(6 * 2**30)
    options = UnityOptions(optimizer="adam", budget=1)
    joint = unity_search(graph, machine, load_rules(""), options)
    assert joint.fits and joint.source.startswith("3-d (") and "tensor 4" in joint.source
    assert sum(a.name == "3-d" for a in joint.alternatives) >= 4  # the report's priced factorisations
    hand = megatron_lm(graph, machine, options)
    assert joint.estimate.iteration_s <= hand.estimate.iteration_s * (1 + 1e-9)
    fitting = [a for a in joint.alternatives if a.estimate.fits]
    assert all(joint.estimate.iteration_s <= a.estimate.iteration_s * (1 + 1e-9) for a in fitting)
