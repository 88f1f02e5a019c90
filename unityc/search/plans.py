"""Finished plans: a graph mapped by the DP (a view on every node) and priced by `estimate`.

`finish` turns any parallel graph into one (simplify, reduce the loss's partial sums, fuse
collectives, map, estimate); `whole_graph_plans` builds the data-parallel and Megatron plans of a
whole graph (`strategies.py`): the baselines, and plans the search's result is compared with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from unityc.cost.estimate import Estimate, compute_model, estimate_graph
from unityc.cost.profile import ProfileCache
from unityc.graph import Graph
from unityc.graph.simplify import fuse_collectives, reduce_loss, simplify
from unityc.machine.spec import Machine
from unityc.search.experts import with_experts
from unityc.search.layout import tilings
from unityc.search.mapping import Mapped, Mapper, MappingOptions
from unityc.search.opcost import SYNC_WEIGHT
from unityc.search.padding import image_input, pad_images, padded_layout
from unityc.search.spatial_layout import spatial_graph, spatial_layouts
from unityc.search.strategies import (
    data_parallel_graph,
    megatron_layouts,
    tensor_degrees,
    with_levers,
)
from unityc.search.views import Block, big_degrees, canonical_view, task_degrees, to_attr, views_in


@dataclass
class PricedPlan:
    name: str
    graph: Graph
    """Mapped: every node carries a view."""
    estimate: Estimate
    mapped: Mapped | None
    """The DP's mapping (None for a pipelined plan)."""
    note: str = ""

    def summary(self) -> PlanSummary:
        return PlanSummary(self.name, self.note, replace(self.estimate, rows=()))


@dataclass(frozen=True)
class PlanSummary:
    """What the report shows of a plan compared with the search's (a baseline row): its name,
    note and estimate without the per-op rows (a few bytes to send from the search's worker,
    where the plan is megabytes)."""

    name: str
    note: str
    estimate: Estimate


@dataclass(frozen=True)
class Pricing:
    """How plans are priced: the cost model and the DP's weighting."""

    cost: str = "roofline"
    optimizer: str = "sgd"
    sync_weight: float = SYNC_WEIGHT
    side_by_side: bool = True
    profile: ProfileCache | None = None

    def mapper(self, machine: Machine, memory_weight: float = 0.0) -> Mapper:
        options = MappingOptions(self.sync_weight, memory_weight, side_by_side=self.side_by_side)
        return Mapper(machine, compute_model(self.cost, self.profile), self.optimizer, options)

    def estimate(self, graph: Graph, machine: Machine) -> Estimate:
        return estimate_graph(graph, machine, self.cost, self.optimizer, self.profile)


def finish(name: str, graph: Graph, machine: Machine, pricing: Pricing, note: str = "") -> PricedPlan:
    """Simplify, reduce the loss, fuse collectives, map with the DP, estimate."""
    plan = fuse_collectives(reduce_loss(simplify(graph)))
    mapped = pricing.mapper(machine).map(plan)
    if not mapped.feasible:
        raise ValueError(f"{name}: the plan has no feasible machine mapping{_unplaceable(plan, machine)}")
    for nid, view in mapped.views.items():
        plan.with_view(nid, to_attr(view, machine))
    return PricedPlan(name, plan, pricing.estimate(plan, machine), mapped, note)


def _unplaceable(plan: Graph, machine: Machine) -> str:
    """Why no mapping exists when an op's tasks cannot be laid out on the machine at all (such as
    two rules nested on one op: a 2-way width split of a 2-way channel split is 4 tasks), else ''."""
    whole = Block(0, machine.num_devices)
    for nid, node in plan.nodes.items():
        if not node.types or views_in(task_degrees(node.types[0]), whole):
            continue
        tasks, devices = math.prod(task_degrees(node.types[0])), machine.num_devices
        return f": op %{nid} ({node.op}) runs as {tasks} tasks, more than {devices} devices can hold"
    return ""


def one_device_plan(graph: Graph, machine: Machine, pricing: Pricing) -> PricedPlan:
    """The graph as it is, every op on device 0: no DP to run, so it is had at once (what a
    search stopped early falls back on). The graph must be unparallelized (one task per op)."""
    plan = graph.copy()
    if any(big_degrees(task_degrees(node.types[0])) for node in plan.nodes.values()):
        raise ValueError("one device: the graph is already parallel")
    views = {nid: canonical_view(task_degrees(node.types[0]), 0) for nid, node in plan.nodes.items()}
    cost = pricing.mapper(machine).cost_of(plan, views)
    for nid, view in views.items():
        plan.with_view(nid, to_attr(view, machine))
    mapped = Mapped(cost, cost.objective(0.0), views)
    return PricedPlan("one device", plan, pricing.estimate(plan, machine), mapped, "device 0")


def input_batch(graph: Graph) -> int | None:
    """The batch of `graph`: the greatest common divisor of its batched inputs' first dims
    (None: it has none)."""
    sizes = {n.types[0].shape[0] for n in graph.nodes.values() if n.op == "pcg.input" and n.types[0].rank}
    return math.gcd(*sizes) if sizes else None


def data_degree(graph: Graph, n: int) -> tuple[int, str]:
    """The data-parallel degree a plan over `n` devices runs and what its report row says of it:
    n where the batch splits n ways (or the graph has no batch), else the largest degree
    dividing the batch, the other devices idle (as practitioners run a batch smaller than the
    machine, or one it does not divide: each replica needs whole samples of its own). Every
    baseline's data-parallel degree passes here (`megatron_plans` skips a tensor degree whose
    data degree this reduces)."""
    batch = input_batch(graph)
    if batch is None or batch % n == 0:
        return n, f"{n}-way"
    d = max(k for k in range(1, min(n, batch) + 1) if batch % k == 0)
    return d, f"{d:,}-way (the batch of {batch:,} does not split {n:,} ways; {n - d:,} devices idle)"


def data_parallel_plan(graph: Graph, machine: Machine, pricing: Pricing) -> PricedPlan:
    """Data parallelism over every device, or over the most whose number divides the batch
    (`data_degree`)."""
    d, note = data_degree(graph, machine.num_devices)
    return finish("data-parallel", data_parallel_graph(graph, d), machine, pricing, note)


def spatial_plans(graph: Graph, machine: Machine, pricing: Pricing, hybrid: bool = True) -> list[PricedPlan]:
    """Spatial plans (`spatial_layout.spatial_graph`) of a graph with convolutions, fastest first:
    images over height x width alone, then (`hybrid`) with each data-parallel degree dividing
    the batch, each on the most devices its images split over (`spatial_layout.spatial_layouts`).
    Where that leaves devices idle (48 devices, 8 images of 1024 rows: 6 pieces per image, and
    no dim divides by 3), the same on every device with the image padded to rows that do divide
    (`padding.padded_layout`, `padding.pad_images`: 1056 rows), an algebraic alternative whose
    extra rows and masks are priced like any op. [] for a graph without a convolution or on
    one device."""
    n = machine.num_devices
    plans: list[PricedPlan] = []
    for m, batch in spatial_layouts(graph, n)[: None if hybrid else 1]:
        note = f"{m // batch}-way over height x width" + (f" x {batch}-way data" if batch > 1 else "")
        layouts = [(graph, m, note + (f" ({m} of {n} devices)" if m < n else ""))]
        rows = padded_layout(graph, n, batch) if m < n else None
        if rows is not None:
            real = graph.nodes[image_input(graph)].types[0].shape[2]
            note = f"{n // batch}-way over height x width" + (f" x {batch}-way data" if batch > 1 else "")
            layouts.append((pad_images(graph, rows), n, f"{note}, images padded from {real} to {rows} rows"))
        for source, devices, text in layouts:
            try:
                plans.append(finish("spatial", spatial_graph(source, devices, batch), machine, pricing, text))
            except ValueError:  # no feasible mapping
                continue
    return sorted(plans, key=lambda p: p.estimate.iteration_s)


def fastest_kind_plan(graph: Graph, machine: Machine, pricing: Pricing) -> PricedPlan | None:
    """On a machine of several device kinds, data parallelism over the devices of the fastest
    kind alone (its f32 peak times efficiency), the others idle: speed-aware placement, as a
    data-parallel step waits for its slowest device (2 x V100 + 2 x M4: the V100 pair beats
    all four). None on one kind, or where that kind has one device or the batch does not split."""
    speed = {d.kind.name: d.kind.speed() for d in machine.devices}
    if len(speed) < 2:
        return None
    fastest = max(speed, key=lambda k: speed[k])
    n = sum(1 for d in machine.devices if d.kind.name == fastest)
    if n < 2:
        return None
    try:
        plan = data_parallel_graph(graph, n)
        return finish("data-parallel", plan, machine, pricing, f"{n}-way on the {fastest}s")
    except ValueError:
        return None


def zero_plan(
    graph: Graph, machine: Machine, pricing: Pricing, stage: int, recompute: bool = False
) -> PricedPlan:
    """Data parallelism over every device with the weights' copies sharded ZeRO-`stage` (FSDP
    for stage 3), and optionally every op recomputed in backward (`strategies.with_levers`)."""
    return zero_version(data_parallel_plan(graph, machine, pricing), machine, pricing, stage, recompute)


def zero_version(
    plan: PricedPlan, machine: Machine, pricing: Pricing, stage: int, recompute: bool = False
) -> PricedPlan:
    """A data-parallel `plan` with its weights' copies sharded ZeRO-`stage` and optionally every
    op recomputed: the `zero` baseline (the mapping stays: the levers change no view)."""
    levered = with_levers(plan.graph, stage, recompute)
    note = f"{plan.note}, ZeRO-{stage}" + (", recomputed" if recompute else "")
    return PricedPlan("zero", levered, pricing.estimate(levered, machine), plan.mapped, note)


def megatron_plans(
    graph: Graph, machine: Machine, pricing: Pricing, sequence: Sequence[bool] = (False,)
) -> list[PricedPlan]:
    """The Megatron plans (`megatron_layouts`) of each tensor-parallel degree dividing a node,
    without and/or with Megatron's sequence parallelism (`sequence`: the variants to build;
    at tensor degree 1 there is nothing to shard, so one plan), of the tensor degrees whose data
    degree divides the batch (`data_degree`; Megatron-LM's own rule). A layout with more
    replicas than samples has nothing to split the batch by: it splits what it can (the
    sequence) and replicates the rest, a plan far slower than the others whose devices can each
    fall into a role of their own, so pricing it costs what pricing per device does
    (`cost/roles.py`; Llama-2-70B at 4,096 GPUs, tensor 2 x data 2,048 over 1,024 sequences:
    4,096 roles, about 90 CPU s a plan)."""
    plans = []
    refused: list[str] = []
    tiled = tilings(machine.num_devices, {"tensor": tensor_degrees(machine) or [1]})
    for tiling in with_experts(tiled, graph, machine):
        d, why = data_degree(graph, tiling.data)
        if d != tiling.data:  # the layout needs every device: another tensor degree may fit the batch
            refused.append(f"tensor {tiling.tensor}: data {why}")
            continue
        variants = dict.fromkeys(sequence) if tiling.tensor > 1 else [False]  # (nothing to shard at 1)
        for layout in (replace(tiling, sequence=s) for s in variants):
            for laid in megatron_layouts(graph, layout):
                kept = ", ".join(f"{op} x{k}" for op, k in sorted(laid.stops.items()))
                note = (
                    f"data {layout.data} x tensor {layout.tensor}"
                    + (f", expert {layout.expert}" if layout.expert > 1 else "")
                    + (", sequence parallel" if layout.sequence else "")
                    + (f"; replicated where a column split met {kept}" if kept else "")
                )
                if laid.gathered:
                    note += f"; {laid.gathered} gathered for the loss instead"
                plans.append(finish("megatron", laid.graph, machine, pricing, note))
    if not plans and refused:
        raise ValueError(f"no tensor degree leaves a data degree dividing the batch ({'; '.join(refused)})")
    return plans
