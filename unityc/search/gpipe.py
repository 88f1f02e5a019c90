"""The `gpipe` pass's plan: GPipe's even split (`pipeline.even_split_plan`) with the pass's
schedule, micro-batch count and stage count.

The graph is cut at its sequential split points (`pipeline.pipeline_cuts`) into S stages of as
even compute as the cuts allow. The machine's devices form S/v equal rank groups of consecutive
devices (v = virtual stages per group, 1 unless the schedule is interleaved); stage k runs on group
k mod S/v. A group of more than one device runs its stages data parallel (stage replication): the
batch is sharded over the group, weights held in copies, and every stage uses the same layout, so
a tensor crossing a cut goes from rank i of one group to rank i of the next. The loss stays in
partial sums (one per batch shard): the program's pipeline seeds each. Inputs, weights and
constants go to the stage of their first reader (a later reader gets them through the stages
between, like any value).
"""

from __future__ import annotations

from dataclasses import replace

from unityc.dialects.plan import INTERLEAVED, Pipeline
from unityc.graph import Graph
from unityc.machine.spec import Machine
from unityc.search.layers import PipelineError
from unityc.search.pipeline import PipelineOptions, PipelinePlan, even_split_plan


def gpipe_plan(
    graph: Graph, machine: Machine, pipeline: Pipeline, stages: int, options: PipelineOptions | None = None
) -> PipelinePlan:
    """GPipe's plan of `graph` (unparallelized) on `machine` (see the module docstring), priced
    with `options` (cost model, optimizer, profile; default the roofline and SGD)."""
    if stages < 1:
        raise PipelineError(f"stages must be at least 1, got {stages}")
    if (problem := pipeline.problem_with(stages)) is not None:
        raise PipelineError(problem)
    plan = even_split_plan(
        graph,
        machine,
        options or PipelineOptions(),
        stages,
        pipeline.microbatches,
        pipeline.schedule,
        pipeline.virtual_stages,
    )
    groups = pipeline.rank_groups(stages)
    width = machine.num_devices // groups
    layout = f"{stages} stages x {width}-way data parallel" if width > 1 else f"{stages} stages"
    interleave = f", {pipeline.virtual_stages} per rank group" if pipeline.schedule == INTERLEAVED else ""
    note = f"{layout}{interleave}, {pipeline.schedule}, {pipeline.microbatches} micro-batches"
    return replace(plan, note=note)


__all__ = ["PipelineError", "gpipe_plan"]
