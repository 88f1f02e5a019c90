"""The `gpipe` baseline: GPipe's even split of the graph's sequential layers into pipeline stages.

The graph is cut where one tensor crosses (`split.cut_points`); S - 1 of those cuts are chosen so
that the stages' forward FLOPs are as even as the cuts allow (each at the cut whose running total
is nearest k/S of the whole). The machine's devices form S/v equal rank groups of consecutive
devices (v = virtual stages per group, 1 unless the schedule is interleaved); stage k runs on group
k mod S/v. A group of more than one device runs its stages data parallel (stage replication): the
batch is sharded over the group, weights held in copies, and every stage uses the same layout, so
a tensor crossing a cut goes from rank i of one group to rank i of the next. The loss stays in
partial sums (one per batch shard): the program's pipeline seeds each. Inputs, weights and
constants go to the stage of their first reader (a later reader gets them through the stages
between, like any value).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

from xdsl.dialects.builtin import IntegerAttr, i64

from unityc.cost.compute import Piece, forward_work
from unityc.cost.estimate import Estimate, estimate_graph, node_attrs
from unityc.dialects.pipeline import INTERLEAVED, STAGE, Pipeline
from unityc.graph import Graph
from unityc.graph.simplify import fuse_collectives, simplify
from unityc.machine.spec import Machine
from unityc.search.split import cut_points
from unityc.search.strategies import data_parallel_graph
from unityc.search.unity import strip_views
from unityc.search.views import canonical_view, task_degrees, to_attr


class PipelineError(ValueError):
    """A pipeline the graph or the machine cannot have."""


@dataclass
class PipelinePlan:
    graph: Graph
    estimate: Estimate
    note: str


def _piece(t) -> Piece:
    return Piece(t.piece_shape, str(t.element_type))


def forward_flops(graph: Graph, nid: int) -> float:
    """Forward FLOPs of an op (all its tasks), what the split balances."""
    node = graph.nodes[nid]
    operands = [None if r is None else _piece(graph.type_of(r)) for r in node.operands]
    if node.op.startswith("parallel.") or node.is_source:
        return 0.0
    work = forward_work(node.op, node_attrs(node), operands, [_piece(t) for t in node.types])
    return work.flops * node.types[0].num_pieces


def even_cuts(graph: Graph, stages: int) -> list[int]:
    """The S - 1 cut ops (topological order) that split forward FLOPs most evenly."""
    order = [nid for nid in graph.topological() if not graph.nodes[nid].is_source]
    cuts = cut_points(graph)
    if len(cuts) < stages - 1:
        raise PipelineError(
            f"{stages} stages need {stages - 1} cuts where one tensor crosses, but the graph has "
            f"{len(cuts)}: at most {len(cuts) + 1} stages"
        )
    total = 0.0
    running: dict[int, float] = {}
    for nid in order:
        total += forward_flops(graph, nid) + 1.0  # + 1: ops without FLOPs still count a little
        running[nid] = total
    positions = [running[c] for c in cuts]
    chosen: list[int] = []
    low = 0
    for k in range(1, stages):
        high = len(cuts) - (stages - 1 - k)  # leave a cut for each later stage
        i = bisect_left(positions, k * total / stages, low, high)
        if i > low and (
            i == high or abs(positions[i - 1] - k * total / stages) <= abs(positions[i] - k * total / stages)
        ):
            i -= 1
        i = min(max(i, low), high - 1)
        chosen.append(cuts[i])
        low = i + 1
    return chosen


def assign_stages(graph: Graph, cuts: list[int]) -> dict[int, int]:
    """Each op's stage: the cuts before it in topological order (a cut op ends its stage);
    sources take their first reader's stage."""
    stage: dict[int, int] = {}
    k = 0
    marks = set(cuts)
    for nid in graph.topological():
        if graph.nodes[nid].is_source:
            continue
        stage[nid] = k
        if nid in marks:
            k += 1
    users = graph.users()
    for nid, node in graph.nodes.items():
        if node.is_source:
            stage[nid] = min((stage[u] for u in users[nid] if u in stage), default=0)
    return stage


def gpipe_plan(
    graph: Graph, machine: Machine, pipeline: Pipeline, stages: int, optimizer: str = "sgd"
) -> PipelinePlan:
    """GPipe's plan of `graph` (unparallelized) on `machine` (see the module docstring)."""
    if stages < 1:
        raise PipelineError(f"stages must be at least 1, got {stages}")
    if (problem := pipeline.problem_with(stages)) is not None:
        raise PipelineError(problem)
    groups = pipeline.rank_groups(stages)
    devices = machine.num_devices
    if devices % groups:
        raise PipelineError(
            f"{groups} rank groups do not divide the {devices} devices of the machine into equal groups"
        )
    width = devices // groups
    plan = strip_views(graph)
    if width > 1:
        plan = fuse_collectives(simplify(data_parallel_graph(plan, width)))
    stage = assign_stages(plan, even_cuts(plan, stages))
    for nid, node in list(plan.nodes.items()):
        start = (stage[nid] % groups) * width
        view = to_attr(canonical_view(task_degrees(node.types[0]), start), machine)
        plan.nodes[nid] = node.with_plan(**{STAGE: IntegerAttr(stage[nid], i64)})
        plan.with_view(nid, view)
    plan.function_attrs.update(pipeline.attributes())
    layout = f"{stages} stages x {width}-way data parallel" if width > 1 else f"{stages} stages"
    interleave = f", {pipeline.virtual_stages} per rank group" if pipeline.schedule == INTERLEAVED else ""
    note = f"{layout}{interleave}, {pipeline.schedule}, {pipeline.microbatches} micro-batches"
    return PipelinePlan(plan, estimate_graph(plan, machine, optimizer=optimizer), note)
