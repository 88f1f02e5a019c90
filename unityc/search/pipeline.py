"""Pipelined plans: a partition (`partition.py`) made a plan, and the plans of `pipedream`,
`hetero-gpipe`, `gpipe` and the joint search's pipeline candidates.

*Plans.* `materialize` turns a partition into a pipelined plan: every op data parallel over its
stage's group (`rebuild` with the stage's width, so a tensor crossing to a stage of another width
is re-partitioned there), `stage` on every op, views on the group's devices, the schedule and
micro-batch count on the graph function; `estimate` then prices it by simulating the schedule.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from unityc.cost.estimate import (
    Estimate,
    estimate_graph,
)
from unityc.cost.pipeline import simulate_pipeline
from unityc.cost.profile import ProfileCache
from unityc.dialects.plan import GraphPlan, Pipeline
from unityc.graph import Graph, Ref
from unityc.graph.simplify import fuse_collectives, simplify
from unityc.machine.spec import Machine
from unityc.search.layers import (
    LayerCosts,
    Partition,
    PipelineError,
    Stage,
    block_views,
    carry_stages,
    layer_of,
    matched_ops,
)
from unityc.search.layout import Layout
from unityc.search.partition import (
    StageModel,
    ladder_partitions,
    partition,
    partition_value,
    stage_costs,
    why_nothing_fits,
)
from unityc.search.rebuild import rebuild
from unityc.search.strategies import batch_forms, megatron_layouts, sync_batch_norm, tensor_degrees
from unityc.search.tokens import unflatten_tokens
from unityc.search.views import View, canonical_view, strip_views, task_degrees, to_attr
from unityc.search.vocabulary import pad_vocabulary

# --- plans ------------------------------------------------------------------------------------


def materialize(
    graph: Graph,
    machine: Machine,
    stages: Sequence[Stage],
    schedule: str,
    layout: Layout | int,
    max_layers: int | None = None,
    untied: bool = True,
) -> Graph:
    """The pipelined plan of a partition (see the module docstring); `graph` unparallelized.
    `layout`: its stage groups (`pipeline`, S / `virtual` for S `stages`), micro-batches and
    what lays out each group (`Layout.within_stage`); each stage's width is the stage's own (a
    data-parallel pipeline's may differ); an int M is the micro-batches of a data-parallel
    pipeline, one chunk per stage (`Layout(pipeline=len(stages), microbatches=M)`). With
    `virtual` > 1, stage k runs on the group of stage k mod (S / virtual); `max_layers` as the
    partition's `LayerCosts` had it (its layers are those of `layer_of`). With `tensor` > 1
    every stage runs the Megatron layout (`strategies.megatron_layouts`, tensor parallel x data
    parallel width / tensor, sequence parallel where `layout.sequence`) on its group, views
    chosen by the mapping DP on the first group and shifted to each stage's. A weight read on
    several stages is held by each (`untie`), or with `untied` false by its first reader's stage
    only, the later readers receiving it down the pipeline each micro-batch (and sending its
    gradient back)."""
    if isinstance(layout, int):
        layout = Layout(pipeline=len(stages), microbatches=layout)
    virtual, tensor = layout.virtual, layout.tensor * layout.context  # (both laid out by Megatron's)
    graph = pad_vocabulary(graph, layout.tensor)  # (as `megatron_layouts` pads it: the stages carry over)
    if layout.splits_tokens:  # (as `megatron_layouts` lays it out, so that the stages carry over)
        graph = unflatten_tokens(graph)
    if layout.pipeline * virtual != len(stages):
        raise PipelineError(
            f"{len(stages)} stages are not {layout.pipeline} stage groups x {virtual} chunks ({layout!r})"
        )
    pipeline = Pipeline(schedule, layout.microbatches, virtual)
    if (problem := pipeline.problem_with(len(stages))) is not None:  # (the loader would refuse it)
        raise PipelineError(problem)
    _, layer = layer_of(graph, max_layers)
    stage_of_layer = {}
    for k, st in enumerate(stages):
        for i in range(st.first, st.last):
            stage_of_layer[i] = k
    groups = len(stages) // virtual
    width = [stages[k % groups].width for k in range(len(stages))]
    start = [stages[k % groups].start for k in range(len(stages))]
    users = graph.users()

    def stage_of(nid: int) -> int:
        if nid in layer:
            return stage_of_layer[layer[nid]]
        return min((stage_of_layer[layer[u]] for u in users[nid] if u in layer), default=0)

    original_stage = {nid: stage_of(nid) for nid in graph.nodes}
    source = graph
    if untied:
        graph = untie(graph, original_stage, groups)
    base = sync_batch_norm(graph)
    order = [
        nid
        for nid in base.topological()
        if not base.nodes[nid].is_source and not base.nodes[nid].op.startswith("parallel.")
    ]
    # sync_batch_norm may add ops; they take the stage of the op before them in order
    stage_seq: list[int] = []
    k = 0
    for nid in order:
        k = original_stage.get(nid, k)
        stage_seq.append(k)

    by_node = dict(zip(order, stage_seq, strict=True))

    def propose(nid, node, operands):  # type: ignore[no-untyped-def]
        k = by_node.get(nid, 0)
        return batch_forms(operands, width[k]) if width[k] > 1 else []

    if tensor > 1 and (len(set(width)) != 1 or width[0] % tensor):
        raise PipelineError(f"tensor-parallel stages need one width, a multiple of {tensor}: got {width}")

    def lay_out() -> tuple[Graph, dict[int, View] | None]:
        if tensor > 1 or layout.expert > 1:  # (expert parallelism: `strategies._Megatron._experts`)
            group = replace(layout.within_stage, data=width[0] // tensor)  # (tensor x context)
            laid = fuse_collectives(simplify(megatron_layouts(graph, group)[0].graph))
            return laid, block_views(laid, machine, width[0])
        return fuse_collectives(simplify(rebuild(base, propose))), None

    if len(set(width)) == 1:  # the layout does not depend on the stages: laid out once
        plan, views = LAYOUTS.get(source, _ties(source, graph), machine, width[0], layout, lay_out)
    else:
        plan, views = lay_out()
    # the loss stays in partial sums, one per pipeline (copies over a tensor-parallel group): each
    # pipeline's last stage seeds its own, no collective
    stage = carry_stages(plan, base, order, stage_seq)
    _carry_names(plan, base, order)
    for nid, node in list(plan.nodes.items()):
        k = stage[nid]
        if views is not None:
            view = to_attr(views[nid]._replace(start=views[nid].start + start[k]), machine)
        else:
            view = to_attr(canonical_view(task_degrees(node.types[0]), start[k]), machine)
        plan.nodes[nid] = node.with_plan(stage=k, view=view)
    plan.function_attrs = plan.kept_function_attrs()
    plan.set_plan(GraphPlan(pipeline))
    return plan


class Layouts:
    """The stage layouts `materialize` made last (a few), so that the plans of one graph at
    one stage width that differ only in their stages (stage counts and chunks of the same data
    degree, recomputation levels, micro-batch sizes: what `megatron_lm`'s 3-D scan tries) lay
    the graph out once: the Megatron layout or data-parallel rebuild, simplified, collectives
    fused, and its views on the first group by the mapping DP (a third of pricing a 70B plan).
    Keyed by the graph (before `untie`) and machine objects themselves (held, so that their ids
    stay theirs), what `untie` changed in the graph (`_ties`), the stage width and what lays out
    a stage group (`Layout.within_stage`: tensor degree, sequence parallelism, any later axis);
    each use gets its own copy."""

    def __init__(self, size: int = 6):
        self.size = size
        self.made: dict[tuple[Any, ...], tuple[Graph, Machine, Graph, dict[int, View] | None]] = {}
        self.laid_out = 0
        """Layouts made (not reused): what tests count."""

    def get(
        self,
        graph: Graph,
        ties: tuple[tuple[int, tuple[Ref | None, ...]], ...],
        machine: Machine,
        width: int,
        layout: Layout,
        lay_out: Callable[[], tuple[Graph, dict[int, View] | None]],
    ) -> tuple[Graph, dict[int, View] | None]:
        # (the width says the data degree; the expert degree, carved out of it, stays in the key)
        key = (id(graph), ties, id(machine), width, replace(layout.within_stage, data=layout.expert))
        hit = self.made.pop(key, None)
        if hit is None or hit[0] is not graph or hit[1] is not machine:
            self.laid_out += 1
            plan, views = lay_out()
            hit = (graph, machine, plan, views)
        self.made[key] = hit  # the most recent last
        while len(self.made) > self.size:
            del self.made[next(iter(self.made))]
        plan = hit[2]
        return Graph(dict(plan.nodes), plan.outputs, dict(plan.module_attrs), plan.next_id,
                     dict(plan.function_attrs)), hit[3]  # fmt: skip


LAYOUTS = Layouts()


def _ties(graph: Graph, untied: Graph) -> tuple[tuple[int, tuple[Ref | None, ...]], ...]:
    """What `untie` changed in `graph`: the nodes it added (copies of weights or constants, each
    read in place of the one at the same operand of its readers) and the readers it rewired, with
    their operands; () where it changed nothing. With `graph`, this determines `untied`."""
    if untied is graph:
        return ()
    old = graph.nodes
    return tuple(
        (nid, node.operands)
        for nid, node in untied.nodes.items()
        if nid not in old or old[nid].operands != node.operands
    )


def untie(graph: Graph, stage: Mapping[int, int], groups: int) -> Graph:
    """`graph` (unparallelized) where a weight read on several stages (`stage`: each compute
    op's) is held by each of them, as Megatron-LM holds a tied embedding: one `pcg.weight` of the
    same key per rank group reading it (stage k runs on group k mod `groups`; the first reader's
    keeps the node), so no group reads another's weight; the program loads every copy from the
    one weight and sums their gradients over the ranks holding them (a copy group) before the
    optimizer step, so they stay equal. A constant read on several stages (BART's position ids,
    read by the encoder and the decoder) is copied likewise: each group holds it, none sends it."""
    users = graph.users()
    out: Graph | None = None
    for nid, node in list(graph.nodes.items()):
        if node.op not in ("pcg.weight", "pcg.constant"):
            continue
        readers: dict[int, list[int]] = {}
        for u in sorted(users[nid], key=lambda u: stage[u]):
            readers.setdefault(stage[u] % groups, []).append(u)
        for g in list(readers)[1:]:
            out = out or graph.copy()
            (copy,) = out.add_node(replace(node, hint=None))
            for u in readers[g]:
                reader = out.nodes[u]
                operands = tuple(copy if r is not None and r[0] == nid else r for r in reader.operands)
                out.nodes[u] = replace(reader, operands=operands)
    return graph if out is None else out


def _carry_names(plan: Graph, base: Graph, order: Sequence[int]) -> None:
    """The SSA names of `base`'s compute ops (in `order`) on the same ops of `plan`, a rebuild of
    it that `carry_stages` checked keeps them in order (the program's variables keep them too)."""
    for nid, old in matched_ops(plan, base, order):
        if plan.nodes[nid].hint is None:
            plan.nodes[nid] = replace(plan.nodes[nid], hint=base.nodes[old].hint)


@dataclass
class PipelinePlan:
    name: str
    graph: Graph
    estimate: Estimate
    note: str
    partition: Partition | None = None


def price_plan(name: str, graph: Graph, machine: Machine, note: str, cost: str, optimizer: str,
               profile: ProfileCache | None, part: Partition | None = None) -> PipelinePlan:  # fmt: skip
    return PipelinePlan(name, graph, estimate_graph(graph, machine, cost, optimizer, profile), note, part)


# --- baselines and the search's pipeline candidates ---------------------------------------------

MAX_LAYERS = 24
"""Layers the partition DP works on for big graphs (split points merged evenly beyond that)."""


def allowed_widths(machine: Machine) -> list[int]:
    """Stage replications worth trying: every width on up to 8 devices; beyond, the divisors of
    a node and multiples of a node dividing the machine (groups that tile it)."""
    D = machine.num_devices
    if D <= 8:
        return list(range(1, D + 1))
    node = machine.nodes[0].num_devices
    return sorted(
        {w for w in range(1, node + 1) if node % w == 0} | {w for w in range(node, D + 1, node) if D % w == 0}
    )


def microbatch_counts(batch: int, limit: int = 32) -> list[int]:
    """Powers of two dividing the batch, up to `limit`."""
    return [m for m in (2**k for k in range(batch.bit_length())) if m <= limit and batch % m == 0]


@dataclass(frozen=True)
class PipelineOptions:
    cost: str = "roofline"
    optimizer: str = "sgd"
    profile: ProfileCache | None = None
    max_layers: int = MAX_LAYERS

    def layer_costs(self, graph: Graph, machine: Machine) -> LayerCosts:
        return LayerCosts(graph, machine, self.cost, self.optimizer, self.profile, self.max_layers)


def _finish(name: str, graph: Graph, machine: Machine, part: Partition, schedule: str, M: int,
            options: PipelineOptions, note: str, virtual: int = 1) -> PipelinePlan:  # fmt: skip
    layout = Layout(tensor=part.tensor, pipeline=len(part.stages) // virtual, virtual=virtual, microbatches=M)
    plan = materialize(graph, machine, part.stages, schedule, layout, options.max_layers)
    e = estimate_graph(plan, machine, options.cost, options.optimizer, options.profile)
    return PipelinePlan(name, plan, e, note, part)


def describe(part: Partition, schedule: str, M: int) -> str:
    groups = "; ".join(
        f"layers {st.first}-{st.last - 1} on {st.start}"
        + (f"-{st.start + st.width - 1}" if st.width > 1 else "")
        for st in part.stages
    )
    tensor = f", tensor parallel {part.tensor} in each stage" if part.tensor > 1 else ""
    return f"{len(part.stages)} stages ({groups}){tensor}, {schedule}, {M} micro-batches"


def best_partition(
    graph: Graph,
    machine: Machine,
    options: PipelineOptions,
    schedule: str = "1f1b",
    stages: int | None = None,
    costs: LayerCosts | None = None,
    tensor: bool = False,
) -> tuple[Partition, int] | None:
    """PipeDream's DP for each micro-batch count; the partition whose simulated schedule is
    fastest, with its micro-batch count (None if none fits). With `tensor`, instead partitions
    whose stages each run the Megatron layout on a group of t devices, for every
    tensor-parallel degree t dividing a node (the joint search's per-stage parallelism)."""
    costs = costs or options.layer_costs(graph, machine)
    memo = (schedule, stages, tensor)
    if memo in costs._partitions:
        return costs._partitions[memo]
    layouts: list[tuple[int, list[int]]] = [(t, [t]) for t in tensor_degrees(machine)] if tensor else []
    if not tensor:
        layouts = [(1, allowed_widths(machine))]
    found: tuple[float, Partition, int] | None = None
    for t, widths in layouts:
        for M in microbatch_counts(costs.batch):
            model = StageModel(costs, M, schedule, t)
            part = partition(model, stages=stages, widths=widths)
            if part is None:
                continue
            run = simulate_pipeline(stage_costs(model, part.stages), schedule, M)
            if found is None or run.iteration_s < found[0]:
                found = (run.iteration_s, replace(part, tensor=t), M)
    costs._partitions[memo] = None if found is None else (found[1], found[2])
    return costs._partitions[memo]


def ranked_partitions(
    graph: Graph, machine: Machine, options: PipelineOptions, stages: int | None = None,
    costs: LayerCosts | None = None,
) -> list[tuple[float, Partition, int]]:  # fmt: skip
    """PipeDream's 1F1B partitions for each micro-batch count (`microbatch_counts` up to the
    batch) under each memory cap of `partition.ladder_partitions`, with their micro-batch count,
    fastest simulated schedule first."""
    costs = costs or options.layer_costs(graph, machine)
    ranked: list[tuple[float, Partition, int]] = []
    seen: set[tuple[tuple[Stage, ...], int]] = set()
    for M in microbatch_counts(costs.batch, costs.batch):
        model = StageModel(costs, M, "1f1b")
        for part in ladder_partitions(model, stages, allowed_widths(machine)):
            if (part.stages, M) in seen:
                continue
            seen.add((part.stages, M))
            run = simulate_pipeline(stage_costs(model, part.stages), "1f1b", M)
            ranked.append((run.iteration_s, part, M))
    return sorted(ranked, key=lambda r: (r[0], len(r[1].stages)))


def pipedream_plan(
    graph: Graph,
    machine: Machine,
    options: PipelineOptions | None = None,
    stages: int | None = None,
    costs: LayerCosts | None = None,
) -> PipelinePlan:
    """PipeDream: its partition DP (stage replication, per-stage device groups), the 1F1B
    schedule (flushed, as the IR's plans are; `estimate{schedule="2bw"}` prices 2BW): of the
    partitions of every micro-batch count and memory cap (`ranked_partitions`), the fastest by
    the simulated schedule whose plan fits by `estimate` (the DP's per-stage memory is close to
    the estimate's, not equal: activation gradients, buffers and reserved bytes it does not
    see). More device memory never gives a slower partition by the DP's simulation (the caps
    do not depend on it). `costs`: the graph's layer costs, if already had (shared with other
    plans of the same graph and machine)."""
    options = options or PipelineOptions()
    graph = plain_graph(graph)
    costs = costs or options.layer_costs(graph, machine)
    ranked = ranked_partitions(graph, machine, options, stages, costs)
    if not ranked:
        raise PipelineError(f"pipedream: no partition fits the machine's memory: {why_nothing_fits(costs)}")
    smallest: PipelinePlan | None = None
    for _, part, M in ranked:
        # With fewer micro-batches than stages, 1F1B's warm-up is every forward: GPipe's schedule,
        # which torch runs for any count (its 1F1B refuses M < stages, and so does the verifier).
        schedule = "1f1b" if len(part.stages) <= M else "gpipe"
        plan = _finish("pipedream", graph, machine, part, schedule, M, options, describe(part, schedule, M))
        if plan.estimate.fits:
            return plan
        if smallest is None or plan.estimate.peak_memory < smallest.estimate.peak_memory:
            smallest = plan
    assert smallest is not None
    return smallest


# --- the 002 method ---------------------------------------------------------------------------


def merge_devices(speeds: Sequence[float]) -> list[list[int]]:
    """002's Algorithm 1: merge the two slowest (merged) devices while that makes the speeds
    more even (smaller mean absolute deviation) and the merged device is no faster than the
    fastest; returns groups of device indices, in device order."""
    groups = [[i] for i in range(len(speeds))]

    def speed(g: list[int]) -> float:
        return sum(speeds[i] for i in g)

    def spread(gs: list[list[int]]) -> float:
        values = [speed(g) for g in gs]
        mean = sum(values) / len(values)
        return sum(abs(v - mean) for v in values) / len(values)

    while len(groups) > 1:
        ranked = sorted(groups, key=speed)
        a, b = ranked[0], ranked[1]
        merged = sorted(a + b)
        candidate = [g for g in groups if g is not a and g is not b] + [merged]
        if speed(merged) > max(speed(g) for g in groups) or spread(candidate) >= spread(groups):
            break
        groups = sorted(candidate, key=min)
    return groups


def proportional_split(work: Sequence[float], shares: Sequence[float]) -> list[int]:
    """Layer boundaries giving stage k about share k of the work (each stage one layer at least)."""
    total = sum(work)
    prefix = list(itertools.accumulate(work, initial=0.0))
    bounds = [0]
    target = 0.0
    S = len(shares)
    for k, share in enumerate(shares[:-1]):
        target += share / sum(shares) * total
        lo, hi = bounds[-1] + 1, len(work) - (S - 1 - k)
        best = min(range(lo, hi + 1), key=lambda j: abs(prefix[j] - target))
        bounds.append(best)
    return [*bounds, len(work)]


def bubble_and_underuse(costs: LayerCosts, stages: int, width: int, counts: Sequence[int]) -> int:
    """002's micro-batch criterion: the count n minimizing bubble (S - 1)/(n + S - 1) plus the
    under-use of a device at B/n rows (1 - its throughput there / at the whole batch), over the
    counts that split the batch (a scan of the same objective the paper bisects)."""
    B = costs.batch

    def per_row(rows: int) -> float:
        p = costs.of(0, rows)
        return (p["sum_fwd"][-1] + p["sum_bwd"][-1]) / rows

    full = per_row(B // width)
    best = min(
        [n for n in counts if costs.feasible(0, B // (n * width))],
        key=lambda n: (stages - 1) / (n + stages - 1) + max(0.0, 1.0 - full / per_row(B // (n * width))),
    )
    return best


def hetero_gpipe_plan(
    graph: Graph, machine: Machine, options: PipelineOptions | None = None, costs: LayerCosts | None = None
) -> PipelinePlan:
    """002's method: merge the slowest devices until speeds are even, one stage per (merged)
    device with layers split in proportion to its speed, the batch split inside a merged device
    (its devices are equal in 002; the paper splits channels, which costs the same compute here
    and an all-gather more), GPipe's schedule with the micro-batch count of its criterion."""
    options = options or PipelineOptions()
    graph = plain_graph(graph)
    costs = costs or options.layer_costs(graph, machine)
    groups = merge_devices([machine.kind_of(d).speed() for d in range(machine.num_devices)])
    for g in groups:
        if g != list(range(g[0], g[0] + len(g))):
            raise PipelineError(f"hetero-gpipe: merged devices {g} are not adjacent in the machine")
    S = min(len(groups), costs.count)
    groups = groups[:S]
    width = max(len(g) for g in groups)
    counts = [
        n
        for n in microbatch_counts(costs.batch)
        if costs.batch % (n * width) == 0 and costs.feasible(0, costs.batch // (n * width))
    ]
    if not counts:
        raise PipelineError(f"hetero-gpipe: the batch of {costs.batch} does not split over {width} devices")
    p = costs.of(0, costs.batch // counts[0] // width)
    work = [f + b for f, b in zip(p["fwd"], p["bwd"], strict=True)]
    shares = [sum(machine.kind_of(d).speed() for d in g) for g in groups]
    bounds = proportional_split(work, shares)
    stages = tuple(Stage(bounds[k], bounds[k + 1], g[0], len(g)) for k, g in enumerate(groups))
    M = bubble_and_underuse(costs, S, width, counts)
    model = StageModel(costs, M, "gpipe")
    part = Partition(stages, partition_value(model, stages) or math.inf)
    merged = [g for g in groups if len(g) > 1]
    note = describe(part, "gpipe", M) + (f"; merged devices {merged}" if merged else "")
    return _finish("hetero-gpipe", graph, machine, part, "gpipe", M, options, note)


def even_split_plan(
    graph: Graph, machine: Machine, options: PipelineOptions | None = None, stages: int | None = None,
    microbatches: int | None = None, schedule: str = "gpipe", virtual: int = 1,
) -> PipelinePlan:  # fmt: skip
    """GPipe's even split (the `gpipe` baseline and pass): S stages (default: as many as devices
    and layers allow) on S / `virtual` equal groups of consecutive devices (stage k on group k mod
    S / v; v > 1 only for interleaved 1F1B), data parallel inside a group; the layers
    (`pipeline_cuts`, so models with an attention mask split too) cut so that each stage gets an
    equal share of the compute (forward + backward, priced per layer); M micro-batches (default
    4 S where the batch allows: GPipe's advice M >= 4 S)."""
    options = options or PipelineOptions()
    graph = plain_graph(graph)
    costs = options.layer_costs(graph, machine)
    D = machine.num_devices
    S = stages or max(s for s in range(1, min(D, costs.count) + 1) if D % s == 0)
    if S < 1 or virtual < 1 or S % virtual:
        raise PipelineError(f"{S} stages do not split into rank groups of {virtual} stages each")
    if costs.count < S:
        raise PipelineError(
            f"{S} stages need {S - 1} cuts where one activation crosses, but the graph has "
            f"{costs.count - 1}: at most {costs.count} stages"
        )
    groups = S // virtual
    if D % groups:
        raise PipelineError(
            f"{groups} rank groups do not divide the {D} devices of the machine into equal groups"
        )
    width = D // groups

    def problem(m: int) -> str | None:
        """Why the batch has no `m` micro-batches on `width` devices per stage (None: it has)."""
        if costs.batch % (m * width):
            rows = costs.batch
            return f"{m} micro-batches on {width} device(s) per stage do not split the batch of {rows} rows"
        try:
            costs.of(0, costs.batch // (m * width))
        except PipelineError as e:  # the graph has no such micro-batch: the op that refuses it
            return f"{m} micro-batches on {width} device(s) per stage: {e}"
        return None

    if microbatches is None:
        counts = [m for m in microbatch_counts(costs.batch, 64) if problem(m) is None]
        if not counts:
            first = problem(1)
            raise PipelineError(first or f"the batch of {costs.batch} does not split over {width} devices")
        M = max([m for m in counts if m <= 4 * S] or counts[:1])
    elif (why := problem(M := microbatches)) is not None:
        raise PipelineError(why)
    p = costs.of(0, costs.batch // (M * width))
    work = [f + b for f, b in zip(p["fwd"], p["bwd"], strict=True)]
    bounds = proportional_split(work, [1.0] * S)
    chosen = tuple(Stage(bounds[k], bounds[k + 1], (k % groups) * width, width) for k in range(S))
    part = Partition(chosen, math.inf)
    note = describe(part, schedule, M) + (f", {virtual} stages per rank group" if virtual > 1 else "")
    return _finish("gpipe", graph, machine, part, schedule, M, options, note, virtual)


def interleaved_plan(
    graph: Graph, machine: Machine, part: Partition, M: int, costs: LayerCosts, options: PipelineOptions,
    virtual: int = 2,
) -> PipelinePlan:  # fmt: skip
    """The interleaved 1F1B version of a partition whose stages have one width: its groups each
    hold `virtual` model chunks (the layers cut into `virtual` x S blocks of equal compute, block
    j on group j mod S), with the smallest multiple of S micro-batches at least M."""
    G = len(part.stages)
    widths = {st.width for st in part.stages}
    if len(widths) != 1 or costs.count < virtual * G:
        raise PipelineError("interleaving needs stages of one width and enough layers")
    width = widths.pop()
    counts = [m for m in microbatch_counts(costs.batch, 64) if m % G == 0 and m >= M]
    if not counts:
        raise PipelineError(f"no micro-batch count that is a multiple of {G} divides the batch")
    micro = counts[0]
    p = (
        costs.of(0, costs.batch // (micro * width))
        if part.tensor == 1
        else costs.of_tensor(width, part.tensor, costs.batch // micro)
    )
    work = [f + b for f, b in zip(p["fwd"], p["bwd"], strict=True)]
    bounds = proportional_split(work, [1.0] * (virtual * G))
    stages = tuple(
        Stage(bounds[j], bounds[j + 1], part.stages[j % G].start, width) for j in range(virtual * G)
    )
    chunks = Partition(stages, math.inf, part.tensor)
    layout = Layout(tensor=part.tensor, pipeline=G, virtual=virtual, microbatches=micro)
    plan = materialize(graph, machine, stages, "interleaved-1f1b", layout, options.max_layers)
    e = estimate_graph(plan, machine, options.cost, options.optimizer, options.profile)
    note = describe(chunks, "interleaved-1f1b", micro) + f", {virtual} chunks per group"
    return PipelinePlan("pipeline", plan, e, note, chunks)


def pipeline_candidates(
    graph: Graph, machine: Machine, options: PipelineOptions | None = None, tensor: bool = True
) -> list[PipelinePlan]:
    """The joint search's pipeline plans: the partition DP with each flush schedule's simulation
    choosing the micro-batch count (and the 1F1B partition interleaved), plus the baselines
    (`pipedream`, `hetero-gpipe`, `gpipe`) so that the search never returns a plan slower than
    they are. Plans the machine or graph
    cannot have are left out. `tensor`: also partitions with tensor-parallel stages. The layer
    costs are computed once for all of them."""
    options = options or PipelineOptions()
    graph = plain_graph(graph)
    if machine.num_devices < 2:
        return []
    plans: list[PipelinePlan] = []
    costs = options.layer_costs(graph, machine)
    for schedule, staged in itertools.product(("1f1b", "gpipe"), (False, True) if tensor else (False,)):
        try:
            found = best_partition(graph, machine, options, schedule, costs=costs, tensor=staged)
        except (PipelineError, ValueError):
            continue
        if found is None or len(found[0].stages) < 2:
            continue
        part, M = found
        with contextlib.suppress(PipelineError):  # (1F1B refuses fewer micro-batches than stages)
            plans.append(
                _finish("pipeline", graph, machine, part, schedule, M, options, describe(part, schedule, M))
            )
        if schedule == "1f1b":
            with contextlib.suppress(PipelineError, ValueError):
                plans.append(interleaved_plan(graph, machine, part, M, costs, options))
    for build in (
        lambda: pipedream_plan(graph, machine, options, costs=costs),
        lambda: hetero_gpipe_plan(graph, machine, options, costs),
        lambda: even_split_plan(graph, machine, options),
    ):
        try:
            plans.append(build())
        except (PipelineError, ValueError):
            continue
    # a one-stage "pipeline" is the graph on one group: no pipeline (the search has those plans)
    return [p for p in plans if p.partition is None or len(p.partition.stages) > 1]


def plain_graph(graph: Graph) -> Graph:
    out = strip_views(graph)
    out.function_attrs = graph.kept_function_attrs()
    return out
