"""Every baseline's data-parallel degree against the batch (issue 25): where the devices do not
divide the batch (at 4,096 GPUs a batch of 1,024 was priced as if replicated: 9,215 s,
337,020 GiB), data parallelism runs the largest degree that does and its row says so; a Megatron
layout, which needs every device, skips a tensor degree whose data degree does not."""

from __future__ import annotations

import pytest
from search_graphs import machine, mlp

from unityc.search.baselines import data_parallel, megatron, zero
from unityc.search.plans import Pricing, data_degree, megatron_plans


def test_degree_divides_the_batch() -> None:
    assert data_degree(mlp(batch=8), 4) == (4, "4-way")
    assert data_degree(mlp(batch=6), 4) == (3, "3-way (the batch of 6 does not split 4 ways; 1 devices idle)")
    wide = "1,024-way (the batch of 1,024 does not split 4,096 ways; 3,072 devices idle)"
    assert data_degree(mlp(batch=1024), 4096) == (1024, wide)


@pytest.mark.parametrize(("batch", "d"), [(2, 2), (6, 3)])
def test_data_parallel_runs_on_the_devices_the_batch_splits_over(batch: int, d: int) -> None:
    m = machine("cpu:4")
    for build in (data_parallel, zero):
        plan = build(mlp(batch=batch), m)
        assert plan.note.startswith(
            f"{d}-way (the batch of {batch} does not split 4 ways; {4 - d} devices idle)"
        )
        inputs = [n.types[0] for n in plan.graph.nodes.values() if n.op == "pcg.input"]
        assert all(t.shard[0] == d for t in inputs)
        assert len(plan.estimate.devices) == d


def test_megatron_skips_data_degrees_the_batch_does_not_split() -> None:
    plans = megatron_plans(mlp(batch=2), machine("cpu:4"), Pricing())
    assert plans
    assert all(
        p.note.startswith("data 2 x tensor 2") or p.note.startswith("data 1 x tensor 4") for p in plans
    )
    assert megatron(mlp(batch=3), machine("cpu:4")).note.startswith("data 1 x tensor 4")
