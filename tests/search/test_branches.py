"""Inter-op placement of Inception's branches (`search/branches.py`, issue 29): the joins found,
and the plan that runs each block's branches side by side on disjoint device groups. On the
tiny Inception-style graph with 64 images on 8 A100s (gradient synchronization, not compute,
dominates) it beats data parallelism on the cost model; the torchrun check of such a plan is in
`tests/codegen/test_torchrun_spatial.py`."""

from __future__ import annotations

from pathlib import Path

from search_graphs import assert_same_outputs

from unityc.cost.pricing import placement
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine.presets import preset
from unityc.search.branches import branch_plan, joins
from unityc.search.plans import Pricing, data_parallel_plan
from unityc.search.strategies import sync_batch_norm

INCEPTION = str(Path(__file__).parent.parent / "codegen" / "inception_tiny.py") + ":make"


def test_each_inception_block_is_a_join_of_four_branches_and_a_u_net_has_none() -> None:
    inception = sync_batch_norm(from_module(import_model(ModelSpec(INCEPTION, "small", 4))))
    found = joins(inception)
    assert sorted(len(b) for b in found.values()) == [4, 4]
    # a branch: its convolutions with their batch norms spelled out; 1 + 2 + 2 + 1 convolutions
    convs = sorted(
        sum(inception.nodes[n].op == "pcg.conv2d" for n in branch) for b in found.values() for branch in b
    )
    assert convs == [1, 1, 1, 1, 2, 2, 2, 2]
    # a U-Net's skip connection is read on the other path too: no branch of its own
    assert joins(sync_batch_norm(from_module(import_model(ModelSpec("unet", "small", 2))))) == {}


def test_branches_side_by_side_beat_data_parallelism_where_synchronization_dominates() -> None:
    graph = from_module(import_model(ModelSpec(INCEPTION, "small", 64)))
    machine = preset("dgx-a100:1")
    plan = branch_plan(graph, machine, Pricing())
    assert plan is not None
    groups = {
        frozenset(placement(node.types[0], node.plan.view, machine).values())
        for node in plan.graph.nodes.values()
        if node.op == "pcg.conv2d"
    }
    # the stem on all 8, each block's branches on 4 disjoint pairs
    assert groups == {frozenset(range(8))} | {frozenset({2 * i, 2 * i + 1}) for i in range(4)}
    assert plan.estimate.iteration_s < data_parallel_plan(graph, machine, Pricing()).estimate.iteration_s
    assert_same_outputs(graph, plan.graph)


def test_no_branch_plan_where_a_branch_cannot_take_its_groups_size() -> None:
    """Inception-v3 small (2 images) on 4 devices: its branches' ops take no 1-device form (they
    stay in copies on all 4), so no branch plan; pinning them from device 3 on made
    `--unity-search --machine cpu:4` fail (device 4 does not exist). On 2 devices there is one."""
    graph = from_module(import_model(ModelSpec("inception_v3", "small")))
    assert branch_plan(graph, preset("cpu:4"), Pricing()) is None
    assert branch_plan(graph, preset("cpu:2"), Pricing()) is not None
