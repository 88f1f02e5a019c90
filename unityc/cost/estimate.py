"""The cost model's adapter: a mapped PCG (a `Graph`, or an xDSL module) -> an `Estimate`.

It walks the graph once in topological order, turns every node into a `schedule.Step` using the
per-node pricing of `pricing.py` (shared with the search's machine-mapping DP), simulates the
iteration and sums the parts. `estimate_module` converts the module with `graph.from_module`
and estimates that graph. Conventions:

* **Placement**: a task runs on the device its op's machine view gives its result coordinate
  (`#pcg.view`; global device = the device `node offset` nodes and `device offset` devices
  from the view's start, see `Machine.global_device`). An op with no view runs all its tasks on
  device 0, one after the other.
* **Data movement**: a parallel op moves pieces from its producer's devices to its own
  (`communication.parallel_groups`); a pcg op whose operand piece lives on another device than
  the task reading it gets a point-to-point transfer (reported in the notes: a plan should make
  such moves explicit).
* **Gradients**: weights want gradients, inputs and constants do not; an op has a backward if
  one of its results carries the loss's gradient (the loss is the graph's first output) and one
  of its operands wants one. A weight held with copy degree > 1 and used directly gets its
  gradient all-reduced across its copies, in the program's buckets during the backward
  (`schedule.buckets`); a weight replicated by `parallel.replicate` gets the replicate's backward
  (a reduce) instead.
* **Roofline bound**: the model's training FLOPs (every pcg op on logical shapes, forward and
  backward, plus the optimizer) over the machine's total peak FLOP/s for each op's dtype.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, bf16

from unityc.cost.communication import PARALLEL_PATTERN, Coord, collective_time
from unityc.cost.compute import (
    MATMUL_LIKE,
    SOURCES,
    OpCost,
    backward_work,
    compute_dtype,
    forward_work,
    op_cost,
)
from unityc.cost.memory import DeviceMemory, attention_saved_bytes, check_optimizer, saves
from unityc.cost.pipeline import PipelineRun
from unityc.cost.pricing import (
    ComputeModel,
    Placed,
    WeightParts,
    compute_parts,
    node_form,
    parallel_parts,
    phase,
    piece,
    placement,
    sum_concat_parts,
    type_info,
    weight_parts,
)
from unityc.cost.profile import ProfileCache, op_key, profiled_cost
from unityc.cost.roles import ROLE_THRESHOLD, Roles, device_arrays, find_roles
from unityc.cost.schedule import Comm, Schedule, Step, Timeline, buckets, simulate
from unityc.cost.units import format_bytes
from unityc.dialects.container import graph_function
from unityc.dialects.forms import Form
from unityc.dialects.pcg_types import PcgOp, TensorType, own_form
from unityc.graph import Graph, Node, Ref, from_module, full_attrs, op_class
from unityc.graph.microbatch import microbatch_graph
from unityc.graph.precision import priced_graph
from unityc.machine.spec import Machine

COST_MODES = ("roofline", "profile")
WEIGHT_PATTERN = {
    0: "all_reduce",
    1: "all_reduce+all_gather",
    2: "reduce_scatter+all_gather",
    3: "reduce_scatter",
}
"""A weight's gradient sync by ZeRO stage (ZeRO-3 also all-gathers it before each use)."""

__all__ = [
    "COST_MODES",
    "ComputeModel",
    "DeviceRow",
    "Estimate",
    "OpRow",
    "build_steps",
    "compute_model",
    "estimate_graph",
    "estimate_module",
    "gradient_flags",
    "graph_function",
    "node_attrs",
    "node_form_of",
    "piece",
    "placement",
    "profile_model",
    "roofline_model",
]


@dataclass(frozen=True)
class OpRow:
    """One op of the report; times are per iteration on the op's busiest device."""

    name: str
    kind: str
    label: str
    devices: tuple[int, ...]
    fwd_compute_s: float = 0
    bwd_compute_s: float = 0
    fwd_comm_s: float = 0
    bwd_comm_s: float = 0
    pattern: str = ""
    """Its communication pattern (gradient all-reduce for a weight), if any."""
    collectives: int = 0
    comm_bytes: float = 0
    """Bytes of one of its collectives."""
    flops: float = 0
    memory: float = 0
    """Bytes it holds, over all devices: weight + gradient + optimizer state, or saved activations."""
    num_devices: int = 0
    """Devices it runs on where `devices` lists only the representatives of their roles (priced
    by roles, `cost/roles.py`); 0: as many as `devices`."""

    @property
    def device_count(self) -> int:
        return self.num_devices or len(self.devices)


@dataclass(frozen=True)
class DeviceRow:
    device: int
    kind: str
    compute_s: float
    comm_s: float
    busy_s: float
    memory: DeviceMemory
    capacity: float
    count: int = 1
    """The devices this row stands for: priced by roles, every device of `device`'s role."""


@dataclass(frozen=True)
class Estimate:
    machine: Machine
    cost: str
    optimizer: str
    rows: tuple[OpRow, ...]
    devices: tuple[DeviceRow, ...]
    iteration_s: float
    """When the last thing of the iteration ends (forward, backward, gradient sync, update)."""
    forward_s: float
    """When the last forward step ends."""
    backward_s: float
    """When the last backward step ends (the updates may run on after it)."""
    plan_flops: float
    """FLOPs the plan's tasks perform, forward and backward."""
    model_flops: float
    """The model's training FLOPs on logical shapes (forward, backward, optimizer)."""
    roofline_s: float
    """model_flops at the peak FLOP/s of every device of the machine: a lower bound."""
    notes: tuple[str, ...]
    pipeline: PipelineRun | None = None
    """A pipelined plan's simulated schedule (`cost/pipeline.py`), else None."""
    buckets: int = 0
    """Gradient buckets of weights held in copies, all-reduced during the backward."""
    sync_after_s: float = 0.0
    """How long their communication runs on after the backward ends (what of it counts)."""
    roles: Roles | None = None
    """Priced by roles (`cost/roles.py`): `devices` has one row per role, its representative."""

    @property
    def devices_used(self) -> int:
        """Devices that run or hold anything (each row counts the devices of its role)."""
        return sum(d.count for d in self.devices)

    @property
    def busiest(self) -> DeviceRow:
        return max(self.devices, key=lambda d: (d.busy_s, -d.device))

    @property
    def update_s(self) -> float:
        return self.iteration_s - self.backward_s

    @property
    def roofline_ratio(self) -> float:
        return self.iteration_s / self.roofline_s if self.roofline_s > 0 else float("inf")

    @property
    def peak_memory(self) -> float:
        """The largest per-device memory of the plan."""
        return max((d.memory.total for d in self.devices), default=0.0)

    @property
    def fits(self) -> bool:
        """Whether every device holds what the plan puts on it."""
        return all(d.memory.total <= d.capacity for d in self.devices)

    def device(self, index: int) -> DeviceRow:
        """The row of device `index` (of its role's representative, priced by roles)."""
        rep = self.roles.rep_of(index) if self.roles is not None else index
        return next(d for d in self.devices if d.device == rep)


def roofline_model() -> ComputeModel:
    return op_cost


def profile_model(cache: ProfileCache) -> ComputeModel:
    """Measured times where the cache has them, the roofline elsewhere (counted in the cache)."""

    def model(kind, attrs, operands, results, device, needs_grad) -> OpCost:  # type: ignore[no-untyped-def]
        if kind in SOURCES:  # nothing to measure
            return op_cost(kind, attrs, operands, results, device, needs_grad)
        measured = cache.lookup(device.name, op_key(kind, attrs, operands, results))
        if measured is None:
            return op_cost(kind, attrs, operands, results, device, needs_grad)
        return profiled_cost(measured, kind, attrs, operands, results, needs_grad)

    return model


def compute_model(cost: str, profile: ProfileCache | None) -> ComputeModel:
    """The compute model a cost mode names (checks the mode and that a profile is given)."""
    if cost not in COST_MODES:
        raise ValueError(f"unknown cost model '{cost}' (known: {', '.join(COST_MODES)})")
    if cost == "profile" and profile is None:
        raise ValueError('cost="profile" needs a profile cache file (profile="cache.json")')
    return profile_model(profile) if cost == "profile" and profile is not None else roofline_model()


def node_attrs(node: Node) -> dict[str, Any]:
    """The properties a cost formula reads (none for sources)."""
    return {} if node.op in SOURCES else full_attrs(node.op, node.attrs)


def node_form_of(node: Node, operand_types: tuple[TensorType | None, ...]) -> Form:
    if node.is_source:
        return own_form(node.types[0])
    return node_form(node.op, node.attrs, operand_types)


def gradient_flags(
    graph: Graph, order: Sequence[int], requires: Iterable[Ref] = (), roots: Iterable[Ref] | None = None
) -> tuple[set[Ref], set[Ref]]:
    """(tensors that depend on a weight, tensors that receive a gradient). Gradients flow back
    from `roots` (default: the loss, the first output); `requires` adds tensors that want a
    gradient without being weights (a subgraph's inputs, in the search)."""
    requires_grad: set[Ref] = set(requires)
    for nid in order:
        node = graph.nodes[nid]
        floats = [(nid, i) for i, t in enumerate(node.types) if type_info(t).is_float]
        if node.op == "pcg.weight" or (
            not node.is_source and any(r in requires_grad for r in node.operand_refs())
        ):
            requires_grad.update(floats)
    gets_grad = {r for r in (graph.outputs[:1] if roots is None else roots) if r in requires_grad}
    for nid in reversed(order):
        node = graph.nodes[nid]
        if any((nid, i) in gets_grad for i in range(len(node.types))):
            gets_grad.update(r for r in node.operand_refs() if r in requires_grad)
    return requires_grad, gets_grad


class _Builder:
    def __init__(
        self, graph: Graph, machine: Machine, compute: ComputeModel, optimizer: str, roles: bool = False
    ):
        self.graph = graph
        self.machine = machine
        self.compute = compute
        self.optimizer = optimizer
        self.ids: dict[Ref, int] = {}
        self.where: dict[Ref, dict[Coord, int]] = {}
        self.mult: dict[int, int] = {}
        self.gets_grad: set[Ref] = set()
        self.memory: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.internal: dict[int, dict[int, float]] = {}
        """Attention's internal saved tensors per device, by node id."""
        self.weights: dict[int, WeightParts] = {}
        """The parts of each weight (ZeRO gathers, gradients per device), by node id."""
        self.transfers = 0
        self.unplaced = 0
        self.model_flops = 0.0
        self.roofline_s = 0.0
        self.update_flops = 0.0
        """Of `model_flops`, the optimizer's (once per iteration, whatever the micro-batches)."""
        self.update_roofline_s = 0.0
        self.arrays: dict[int, Any] = {}
        self.roles: Roles | None = None
        if roles:
            self.arrays = device_arrays(graph, machine)
            self.roles = find_roles(graph, machine, self.arrays)
            self.rep_mask = self.roles.rep_mask
        self.placed: dict[int, Placed] = {}
        """Priced by roles: the placement of each array (by its id; nodes placed alike share)."""

    def placed_at(self, nid: int) -> Placed:
        array = self.arrays[nid]
        if id(array) not in self.placed:
            self.placed[id(array)] = Placed(array, self.rep_mask)
        return self.placed[id(array)]

    def count(self, device: int) -> int:
        """The devices `device` stands for (priced by roles: its role's)."""
        return 1 if self.roles is None else self.roles.count_of(device)

    def total(self, per_device: Mapping[int, float]) -> float:
        """A per-device quantity summed over every device (each representative for its role)."""
        if self.roles is None:
            return float(sum(per_device.values()))
        return float(sum(self.roles.count_of(d) * v for d, v in per_device.items()))

    def comms(self, comms: Sequence[Comm]) -> tuple[tuple[Comm, ...], int]:
        """Collectives as the simulation runs them (priced by roles, on the representatives),
        and how many the plan runs."""
        return (tuple(comms), len(comms)) if self.roles is None else self.roles.collapse_comms(comms)

    def vid(self, r: Ref) -> int:
        return self.ids.setdefault(r, len(self.ids))

    def results(self, nid: int) -> list[Ref]:
        return [(nid, i) for i in range(len(self.graph.nodes[nid].types))]

    # --- steps -------------------------------------------------------------------------------

    def step(self, index: int, nid: int) -> tuple[Step, OpRow]:
        node = self.graph.nodes[nid]
        t0 = node.types[0]
        if node.view is None:
            self.unplaced += 1
        where = placement(t0, node.view, self.machine) if self.roles is None else self.placed_at(nid)
        for r in self.results(nid):
            self.where[r] = where
        operand_mult = max((self.mult[self.vid(o)] for o in node.operand_refs()), default=1)
        result_mult = operand_mult
        if node.op == "parallel.pipeline":
            result_mult = operand_mult * node.attr("degree")
        elif node.op == "parallel.batch":
            result_mult = max(operand_mult // node.attr("degree"), 1)
        for r in self.results(nid):
            self.mult[self.vid(r)] = result_mult
        name = node.hint or f"{index}"
        if node.op == "pcg.weight":
            return self.weight_step(nid, node, t0, where, name)
        if node.op == "parallel.sum_concat":
            return self.sum_concat_step(nid, node, t0, where, name, operand_mult)
        if node.op.startswith("parallel."):
            return self.parallel_step(nid, node, t0, where, name, max(operand_mult, result_mult))
        return self.compute_step(nid, node, where, name, operand_mult)

    def _base(self, nid: int, node: Node, m: int) -> dict[str, Any]:
        results = self.results(nid)
        return {
            "operands": tuple(self.vid(o) for o in node.operand_refs()),
            "results": tuple(self.vid(r) for r in results),
            "multiplicity": m,
            "has_backward": any(r in self.gets_grad for r in results) and node.op not in SOURCES,
            "grad_operands": tuple(o in self.gets_grad for o in node.operand_refs()),
        }

    def compute_step(
        self, nid: int, node: Node, where: dict[Coord, int], name: str, m: int
    ) -> tuple[Step, OpRow]:
        base = self._base(nid, node, m)
        types = tuple(None if r is None else self.graph.type_of(r) for r in node.operands)
        grads = [r is not None and r in self.gets_grad for r in node.operands]
        backward = base["has_backward"]
        attrs = node_attrs(node)
        parts = compute_parts(
            self.machine,
            self.compute,
            node.op,
            attrs,
            node_form_of(node, types),
            where,
            types,
            node.operands,
            [None if r is None else self.where[r] for r in node.operands],
            node.types,
            grads,
            backward,
        )
        (fwd_comm, collectives), (bwd_comm, _) = self.comms(parts.fwd_comm), self.comms(parts.bwd_comm)
        parts = replace(parts, fwd_comm=fwd_comm, bwd_comm=bwd_comm)
        self.transfers += collectives
        cost = parts.cost
        flops = self.total(parts.tasks) * m * (cost.fwd.flops + (cost.bwd.flops if backward else 0))
        self.add_model_flops(node, attrs, types, grads if backward else [False] * len(grads), m)
        extra = 0.0
        if backward and node.op == "pcg.attention":
            extra = self.attention_memory(nid, attrs, types, node.types[0], parts.tasks, m)
        if backward:
            extra += self.autocast_copies(nid, node, types, parts.tasks)
        bwd = parts.bwd
        if backward and node.recompute:  # its forward runs again in backward
            bwd = merge_work(parts.fwd, parts.bwd)
        step = Step(
            name=name,
            fwd_comm=parts.fwd_comm,
            fwd_compute=parts.fwd,
            bwd_compute=bwd,
            bwd_gather=self.regathers(node) if backward else (),
            bwd_comm=parts.bwd_comm,
            **base,
        )
        row = OpRow(
            name=name,
            kind=node.op,
            label=self.label(node),
            devices=tuple(sorted(parts.tasks)),
            fwd_compute_s=m * max(s for _, s in parts.fwd),
            bwd_compute_s=m * max(s for _, s in bwd),
            fwd_comm_s=m * phase(parts.fwd_comm),
            bwd_comm_s=m * phase(parts.bwd_comm),
            pattern="p2p" if parts.fwd_comm else "",
            collectives=collectives,
            comm_bytes=max((c.nbytes for c in parts.fwd_comm), default=0),
            flops=flops,
            memory=extra,
            num_devices=self.device_total(parts.tasks),
        )
        return step, row

    def device_total(self, devices: Iterable[int]) -> int:
        """How many devices these representatives stand for (0 when not priced by roles)."""
        return 0 if self.roles is None else sum(self.roles.count_of(d) for d in devices)

    def regathers(self, node: Node) -> tuple[Comm, ...]:
        """The all-gathers of the ZeRO-3 weights `node` reads again in backward: those it saves
        (the program frees them after forward and gathers them when its backward unpacks them),
        or all it reads if it is recomputed."""
        if saves(node.op) != "operands" and not node.recompute:
            return ()
        return tuple(
            c for r in node.operand_refs() if r[0] in self.weights for c in self.weights[r[0]].gather
        )

    def attention_memory(
        self, nid: int, attrs: Mapping[str, Any], types: Sequence[TensorType | None], result: TensorType,
        tasks: Mapping[int, int], m: int,
    ) -> float:  # fmt: skip
        """Attention's internal saved tensors, added to its devices (to its backward's transient
        bytes if it is recomputed); returns the total kept from forward."""
        per_task = attention_task_bytes(attrs, types, result)
        self.internal[nid] = {device: float(per_task * count * m) for device, count in tasks.items()}
        if self.graph.nodes[nid].recompute:
            return 0.0
        for device, count in tasks.items():
            self.memory[device]["activations"] += per_task * count * m
        return self.total(tasks) * per_task * m

    def autocast_copies(
        self, nid: int, node: Node, types: Sequence[TensorType | None], tasks: Mapping[int, int]
    ) -> float:
        """bf16-mixed: autocast casts each fp32 weight a bf16 op reads to a bf16 copy that the op
        saves for its backward; held like attention's internal tensors (from forward to the op's
        backward, only then if it is recomputed). Returns the bytes kept from forward."""
        if node.types[0].element_type != bf16 or op_class(node.op).AUTOCAST != "bf16":
            return 0.0
        per_task = sum(
            2 * type_info(t).piece.numel
            for r, t in zip(node.operands, types, strict=True)
            if r is not None and t is not None and self.graph.nodes[r[0]].op == "pcg.weight"
            and t.element_type != bf16
        )  # fmt: skip
        if not per_task:
            return 0.0
        held = self.internal.setdefault(nid, {})
        for device, count in tasks.items():
            held[device] = held.get(device, 0.0) + per_task * count
            if not node.recompute:
                self.memory[device]["activations"] += per_task * count
        return 0.0 if node.recompute else self.total(tasks) * per_task

    def add_model_flops(
        self,
        node: Node,
        attrs: Mapping[str, Any],
        types: Sequence[TensorType | None],
        grads: Sequence[bool],
        m: int,
    ) -> None:
        logical = [piece(t, logical=True) for t in types]
        results = [piece(t, logical=True) for t in node.types]
        flops = forward_work(node.op, attrs, logical, results).flops  # type: ignore[arg-type]
        flops += backward_work(node.op, attrs, logical, results, grads).flops  # type: ignore[arg-type]
        flops *= m
        dtype = compute_dtype(logical, results)  # type: ignore[arg-type]
        self.model_flops += flops
        self.roofline_s += flops / self.machine.total_peak_flops(dtype, node.op in MATMUL_LIKE)

    def parallel_step(
        self, nid: int, node: Node, t: TensorType, where: dict[Coord, int], name: str, m: int
    ) -> tuple[Step, OpRow]:
        base = self._base(nid, node, m)
        (source,) = node.operand_refs()
        fwd, bwd = parallel_parts(
            self.machine,
            node.op,
            full_attrs(node.op, node.attrs),
            self.graph.type_of(source),
            self.where[source],
            t,
            where,
            base["grad_operands"][0],
        )
        (fwd, collectives), (bwd, _) = self.comms(fwd), self.comms(bwd)
        step = Step(name=name, fwd_comm=fwd, bwd_comm=bwd, **base)
        row = OpRow(
            name=name,
            kind=node.op,
            label=self.label(node),
            devices=tuple(sorted({d for c in fwd for d in c.devices} or set(where.values()))),
            num_devices=self.device_total({d for c in fwd for d in c.devices} or set(where.values())),
            fwd_comm_s=m * phase(fwd),
            bwd_comm_s=m * phase(bwd),
            pattern=PARALLEL_PATTERN[node.op] if fwd else "",
            collectives=collectives,
            comm_bytes=max((c.nbytes for c in fwd), default=0),
        )
        return step, row

    def sum_concat_step(
        self, nid: int, node: Node, t: TensorType, where: dict[Coord, int], name: str, m: int
    ) -> tuple[Step, OpRow]:
        base = self._base(nid, node, m)
        refs = list(node.operand_refs())
        fwd, bwd = sum_concat_parts(
            self.machine,
            [self.graph.type_of(r) for r in refs],
            [self.where[r] for r in refs],
            t,
            where,
            base["grad_operands"],
        )
        (fwd, collectives), (bwd, _) = self.comms(fwd), self.comms(bwd)
        step = Step(name=name, fwd_comm=fwd, bwd_comm=bwd, **base)
        row = OpRow(
            name=name,
            kind=node.op,
            label=self.label(node),
            devices=tuple(sorted({d for c in fwd for d in c.devices} or set(where.values()))),
            num_devices=self.device_total({d for c in fwd for d in c.devices} or set(where.values())),
            fwd_comm_s=m * phase(fwd),
            bwd_comm_s=m * phase(bwd),
            pattern="p2p" if fwd else "",
            collectives=collectives,
            comm_bytes=max((c.nbytes for c in fwd), default=0),
        )
        return step, row

    def weight_step(
        self, nid: int, node: Node, t: TensorType, where: dict[Coord, int], name: str
    ) -> tuple[Step, OpRow]:
        wants = (nid, 0) in self.gets_grad
        parts = weight_parts(self.machine, self.optimizer, t, where, wants, node.zero)
        (sync, synced), (gather, _), (reduce, reduced) = (
            self.comms(parts.sync), self.comms(parts.gather), self.comms(parts.reduce)
        )  # fmt: skip
        parts = replace(parts, sync=sync, gather=gather, reduce=reduce)
        self.weights[nid] = parts
        held = 0.0
        for device, parts_held in parts.held.items():
            for what, nbytes in parts_held.items():
                self.memory[device][what] += nbytes
            held += self.count(device) * sum(parts_held.values())
        if wants:
            p = piece(t)
            assert p is not None
            self.model_flops += parts.update_flops
            self.roofline_s += parts.update_flops / self.machine.total_peak_flops(p.dtype)
            self.update_flops += parts.update_flops
            self.update_roofline_s += parts.update_flops / self.machine.total_peak_flops(p.dtype)
        base = {**self._base(nid, node, 1), "has_backward": False}
        step = Step(
            name=name,
            fwd_comm=parts.gather,
            grad_reduce=parts.reduce,
            grad_dtype=piece(t).dtype,  # type: ignore[union-attr]
            grad_sync=parts.sync,
            update=parts.update,
            **base,
        )
        sync = parts.after_backward
        row = OpRow(
            name=name,
            kind=node.op,
            label=self.label(node),
            devices=tuple(sorted(parts.held)),
            fwd_comm_s=phase(parts.gather),
            bwd_comm_s=phase(sync),
            pattern=WEIGHT_PATTERN[node.zero] if sync else "",
            collectives=synced + reduced,
            comm_bytes=piece(t).nbytes if sync else 0,  # type: ignore[union-attr]
            memory=held,
            num_devices=self.device_total(parts.held),
        )
        return step, row

    def label(self, node: Node) -> str:
        key = node.attr("key") if node.op in ("pcg.input", "pcg.weight") else None
        return f"{node.op} {key}" if key else node.op

    # --- memory ------------------------------------------------------------------------------

    def saved_activations(self, order: Sequence[int]) -> dict[Ref, float]:
        """Adds what backward keeps to the devices holding it; returns bytes per value."""
        saved = saved_values(self.graph, order, self.gets_grad)
        per_value: dict[Ref, float] = {}
        for v in saved:
            on = self.bytes_on(v)
            for device, nbytes in on.items():
                self.memory[device]["activations"] += nbytes
            per_value[v] = self.total(on)
        return per_value

    def bytes_on(self, v: Ref, micro_batches: bool = True) -> dict[int, float]:
        """Bytes of tensor `v` per device holding pieces of it (all its micro-batches, or one)."""
        nbytes = piece(self.graph.type_of(v)).nbytes  # type: ignore[union-attr]
        if micro_batches:
            nbytes *= self.mult[self.vid(v)]
        out: dict[int, float] = defaultdict(float)
        for device in self.where[v].values():
            out[device] += nbytes
        return out

    def peaks(self, order: Sequence[int]) -> dict[int, tuple[float, float]]:
        """Per device, (the peak over the iteration of what is not persistent: live saved
        activations + gradients made so far + transient bytes; the transient bytes then). Forward
        ends with every saved activation live, plus at most one op's gathered ZeRO-3 weights;
        backward then runs in reverse, each op holding its results' and operands' gradients,
        its gathered weights and unreduced ZeRO-2/3 gradients and, if recomputed, what it
        would have kept, then freeing the activations no earlier op needs, while the weights'
        gradients appear; the end holds every gradient."""
        graph = self.graph
        saved = saved_by(graph, order, self.gets_grad)
        live: dict[int, float] = defaultdict(float)
        last: dict[Ref, int] = {}  # a saved value is freed after the backward of its first saver
        for nid in order:
            for v in saved.get(nid, ()):
                last.setdefault(v, nid)
        for v in last:
            for device, nbytes in self.bytes_on(v).items():
                live[device] += nbytes
        for nid, per_device in self.internal.items():
            if not graph.nodes[nid].recompute:
                for device, nbytes in per_device.items():
                    live[device] += nbytes
        best: dict[int, tuple[float, float]] = {d: (nbytes, 0.0) for d, nbytes in live.items()}

        def consider(moment: Mapping[int, float], transient: Mapping[int, float]) -> None:
            for device in set(moment) | set(transient):
                total = moment.get(device, 0.0) + transient.get(device, 0.0)
                if total > best.get(device, (0.0, 0.0))[0]:
                    best[device] = (total, transient.get(device, 0.0))

        for nid in order:  # forward: gathered ZeRO-3 weights while their reader runs
            consider(live, self.gathered(nid, gradient=False))
        grads: dict[int, float] = defaultdict(float)
        seen: set[int] = set()
        for nid in reversed(order):
            node = graph.nodes[nid]
            if not _has_backward(graph, nid, self.gets_grad):
                continue
            transient = self.gathered(nid, gradient=True)
            for r in (*((nid, i) for i in range(len(node.types))), *node.operand_refs()):
                if r in self.gets_grad and graph.nodes[r[0]].op != "pcg.weight":
                    for device, nbytes in self.bytes_on(r, micro_batches=False).items():
                        transient[device] += nbytes
            if node.recompute:
                for v in would_save(graph, nid, self.gets_grad):
                    for device, nbytes in self.bytes_on(v, micro_batches=False).items():
                        transient[device] += nbytes
                for device, nbytes in self.internal.get(nid, {}).items():
                    transient[device] += nbytes / max(self.mult[self.vid((nid, 0))], 1)
            consider({d: live.get(d, 0.0) + grads.get(d, 0.0) for d in set(live) | set(grads)}, transient)
            for r in node.operand_refs():
                if r[0] in self.weights and r[0] not in seen:
                    seen.add(r[0])
                    for device, held in self.weights[r[0]].held.items():
                        grads[device] += held.get("gradients", 0.0)
            for v in saved.get(nid, ()):
                if last.get(v) == nid:
                    for device, nbytes in self.bytes_on(v).items():
                        live[device] -= nbytes
            if not node.recompute:
                for device, nbytes in self.internal.get(nid, {}).items():
                    live[device] -= nbytes
        consider(grads, {})
        return best

    def gathered(self, nid: int, gradient: bool) -> dict[int, float]:
        """Bytes op `nid` holds for a moment beyond the shards of the ZeRO weights it reads: the
        gathered ZeRO-3 weights, and in backward the unreduced ZeRO-2/3 gradients."""
        out: dict[int, float] = defaultdict(float)
        for r in self.graph.nodes[nid].operand_refs():
            parts = self.weights.get(r[0])
            if parts is None or parts.full is None:
                continue
            for device, full in parts.full.items():
                held = parts.held[device]
                if self.graph.nodes[r[0]].zero == 3:
                    out[device] += full - held["weights"]
                if gradient and "gradients" in held:
                    out[device] += full - held["gradients"]
        return out


def device_memory(parts: Mapping[str, float], peak: tuple[float, float], reserved: float) -> DeviceMemory:
    """A device's memory: its persistent parts, and its peak (`_Builder.peaks`: what is not
    persistent at the worst moment, with the transient bytes then)."""
    memory = DeviceMemory(**parts, reserved=reserved, transient=peak[1])
    persistent = memory.weights + memory.optimizer + memory.buffers + reserved
    return replace(memory, peak=persistent + peak[0])


def merge_work(*parts: Sequence[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """(device, seconds) lists added up per device, in first-seen order."""
    total: dict[int, float] = {}
    for part in parts:
        for device, seconds in part:
            total[device] = total.get(device, 0.0) + seconds
    return tuple(total.items())


def attention_task_bytes(
    attrs: Mapping[str, Any], types: Sequence[TensorType | None], result: TensorType
) -> int:
    """What one attention task keeps besides its operands (see `memory.attention_saved_bytes`)."""
    operands = [piece(t) for t in types]
    out = piece(result)
    assert out is not None and operands[0] is not None and operands[1] is not None and operands[3] is not None
    batch, sq, _ = operands[0].shape
    e = operands[0].shape[2]
    eh = operands[3].shape[0]
    return attention_saved_bytes(
        batch, sq, operands[1].shape[1], eh, attrs["heads"] * eh // e, out.nbytes // max(out.numel, 1)
    )


def saved_by(graph: Graph, order: Sequence[int], gets_grad: set[Ref]) -> dict[int, tuple[Ref, ...]]:
    """Per op with a backward, the tensors it keeps from forward for it (weights excluded). A
    `recompute` op keeps only its operands made outside recomputation (its region's inputs,
    which `torch.utils.checkpoint` keeps); the rest it makes again in backward."""
    out: dict[int, tuple[Ref, ...]] = {}
    for nid in order:
        node = graph.nodes[nid]
        if not node.recompute:
            out[nid] = would_save(graph, nid, gets_grad)
        elif _has_backward(graph, nid, gets_grad):
            out[nid] = tuple(
                o
                for o in node.operand_refs()
                if graph.nodes[o[0]].op != "pcg.weight" and not graph.nodes[o[0]].recompute
            )
    return out


def _has_backward(graph: Graph, nid: int, gets_grad: set[Ref]) -> bool:
    node = graph.nodes[nid]
    return node.op not in SOURCES and any((nid, i) in gets_grad for i in range(len(node.types)))


def would_save(graph: Graph, nid: int, gets_grad: set[Ref]) -> tuple[Ref, ...]:
    """What op `nid`'s backward keeps from forward without recomputation (weights excluded)."""
    if not _has_backward(graph, nid, gets_grad):
        return ()
    node = graph.nodes[nid]
    rule = saves(node.op)
    if rule == "operands":
        return tuple(o for o in node.operand_refs() if graph.nodes[o[0]].op != "pcg.weight")
    if rule == "result":
        return tuple((nid, i) for i in range(len(node.types)))
    return ()


def saved_values(graph: Graph, order: Sequence[int], gets_grad: set[Ref]) -> dict[Ref, None]:
    """The tensors some backward keeps from forward (in a stable order)."""
    saved: dict[Ref, None] = {}
    for refs in saved_by(graph, order, gets_grad).values():
        saved.update((r, None) for r in refs)
    return saved


def estimate_module(
    module: ModuleOp,
    machine: Machine,
    cost: str = "roofline",
    optimizer: str = "sgd",
    profile: ProfileCache | None = None,
) -> Estimate:
    """Estimate one training iteration of the graph in `module` on `machine`."""
    check_optimizer(optimizer)
    compute_model(cost, profile)
    for op in graph_function(module).body.block.ops:
        if not isinstance(op, func.ReturnOp | PcgOp):
            raise ValueError(f"estimate cannot price '{op.name}': only pcg and parallel ops are known")
    return estimate_graph(from_module(module), machine, cost, optimizer, profile)


def build_steps(
    graph: Graph, machine: Machine, compute: ComputeModel, optimizer: str, roles: bool = False
) -> tuple[_Builder, list[int], list[Step], list[OpRow]]:
    """Every node as a schedule step and a report row, saved activations added to memory; each
    value in the element type the program runs it in (`graph.precision.priced_graph`). With
    `roles`, the steps run on one representative device per role (`cost/roles.py`)."""
    graph = priced_graph(graph)
    order = graph.topological()
    b = _Builder(graph, machine, compute, optimizer, roles)
    _, b.gets_grad = gradient_flags(graph, order)
    steps: list[Step] = []
    rows: list[OpRow] = []
    for i, nid in enumerate(order):
        step, row = b.step(i, nid)
        steps.append(step)
        rows.append(row)
    saved = b.saved_activations(order)
    rows = [
        replace(row, memory=row.memory + sum(saved.get(r, 0.0) for r in b.results(nid)))
        for row, nid in zip(rows, order, strict=True)
    ]
    return b, order, steps, rows


def estimate_graph(
    graph: Graph,
    machine: Machine,
    cost: str = "roofline",
    optimizer: str = "sgd",
    profile: ProfileCache | None = None,
    roles: bool | None = None,
) -> Estimate:
    """Estimate one training iteration of `graph` (its nodes' views place it) on `machine`; a
    pipelined plan (`stage` on its ops) by its schedule (`cost/staged.py`). `roles`: price one
    device per role (`cost/roles.py`; the same estimate, at a cost that does not grow with the
    devices), or every device; None: by roles on machines of more than `ROLE_THRESHOLD`."""
    from unityc.cost.staged import estimate_pipelined, is_pipelined

    if is_pipelined(graph):
        return estimate_pipelined(graph, machine, cost, optimizer, profile)
    check_optimizer(optimizer)
    k = graph.plan.accumulation
    priced = microbatch_graph(graph, k) if k > 1 else graph  # one micro-batch: its activations
    by_roles = machine.num_devices > ROLE_THRESHOLD if roles is None else roles
    b, order, steps, rows = build_steps(priced, machine, compute_model(cost, profile), optimizer, by_roles)
    loss = priced.outputs[0] if priced.outputs else None
    loss_id = b.vid(loss) if loss is not None and loss in b.ids else None
    grad_buckets = buckets(
        steps, lambda devices, nbytes: collective_time("all_reduce", nbytes, devices, machine)
    )
    schedule = simulate(steps, b.mult, loss_id, grad_buckets)
    if k > 1:
        schedule = _accumulated(schedule, priced, order, steps, b.mult, loss_id, k)
    for c in (
        *(c for s in steps for c in (*s.fwd_comm, *s.bwd_comm, *s.grad_sync)),
        *(g.comm for g in grad_buckets),
    ):
        for d in c.devices:
            b.memory[d]["buffers"] = max(b.memory[d]["buffers"], c.nbytes)
    peaks = b.peaks(order)
    used = sorted(set(schedule.timelines) | set(b.memory))
    devices = tuple(
        DeviceRow(
            device=d,
            kind=machine.kind_of(d).name,
            compute_s=schedule.timelines[d].compute_s if d in schedule.timelines else 0.0,
            comm_s=schedule.timelines[d].comm_s if d in schedule.timelines else 0.0,
            busy_s=schedule.timelines[d].busy_s if d in schedule.timelines else 0.0,
            memory=device_memory(b.memory[d], peaks.get(d, (0.0, 0.0)), machine.kind_of(d).reserved),
            capacity=machine.kind_of(d).memory,
            count=b.count(d),
        )
        for d in used
    ) or (DeviceRow(0, machine.kind_of(0).name, 0.0, 0.0, 0.0, DeviceMemory(), machine.kind_of(0).memory),)
    notes: list[str] = []
    if b.unplaced:
        notes.append(f"{b.unplaced} op(s) without a machine view run on device 0")
    if b.transfers:
        notes.append(
            f"{b.transfers} operand piece(s) read from another device without a parallel op (priced as p2p)"
        )
    if profile is not None and cost == "profile":
        notes.append(
            f"profile: {profile.hits} op(s) priced from the profile, "
            f"{profile.misses} fell back to the roofline"
        )
    for dev in devices:
        if dev.memory.total > dev.capacity:
            like = f" (and {dev.count - 1} more of its role)" if dev.count > 1 else ""
            notes.append(
                f"device {dev.device}{like} needs {format_bytes(dev.memory.total)}, "
                f"more than its {format_bytes(dev.capacity)}"
            )
    if k > 1:
        notes.insert(0, accumulation_note(graph, k, k))
    return Estimate(
        machine=machine,
        cost=cost,
        optimizer=optimizer,
        rows=tuple(rows),
        devices=devices,
        iteration_s=schedule.iteration_s,
        forward_s=schedule.forward_s,
        backward_s=schedule.backward_s,
        plan_flops=k * sum(r.flops for r in rows),
        model_flops=k * (b.model_flops - b.update_flops) + b.update_flops,
        roofline_s=k * (b.roofline_s - b.update_roofline_s) + b.update_roofline_s,
        notes=tuple(notes),
        buckets=schedule.buckets
        if b.roles is None
        else b.roles.count_collectives(g.comm for g in grad_buckets),
        sync_after_s=schedule.sync_after_s,
        roles=b.roles,
    )


def accumulation_note(graph: Graph, k: int, parts: int) -> str:
    """What an estimate of a plan with gradient accumulation says about it."""
    inputs = [n.types[0] for n in graph.nodes.values() if n.op == "pcg.input" and n.types[0].rank]
    rows = inputs[0].shape[0] // inputs[0].shard[0] // parts if inputs else 0
    return (
        f"gradient accumulation: {k} steps of {rows} row(s) per piece, gradients summed, "
        "one gradient sync and update"
    )


def _accumulated(
    last: Schedule,
    graph: Graph,
    order: list[int],
    steps: list[Step],
    mult: Mapping[int, int],
    loss: int | None,
    k: int,
) -> Schedule:
    """The schedule of k accumulation steps, `last` the final one's (forward, backward, gradient
    sync, update): the k - 1 before it run forward and backward only, their gradients summed in
    place, as the program runs them (`no_sync`); a ZeRO-2/3 weight's gradient is reduce-scattered
    after each backward all the same (the program's hook does, so its shard is all it keeps), the
    all-gather of its updated shards and the update once."""
    deferred = [
        replace(step, grad_reduce=(), update=(), grad_sync=_per_backward(step, graph.nodes[nid].zero))
        for nid, step in zip(order, steps, strict=True)
    ]
    before = simulate(deferred, mult, loss)
    period = before.iteration_s
    extra = (k - 1) * period
    timelines = {}
    for d in set(before.timelines) | set(last.timelines):
        runs = [(j * period, before.timelines.get(d)) for j in range(k - 1)]
        runs.append((extra, last.timelines.get(d)))
        timelines[d] = Timeline(
            [(s + t, e + t) for t, line in runs if line is not None for s, e in line.compute],
            [(s + t, e + t) for t, line in runs if line is not None for s, e in line.comm],
        )
    return replace(
        last,
        iteration_s=last.iteration_s + extra,
        forward_s=last.forward_s + extra,
        backward_s=last.backward_s + extra,
        timelines=timelines,
    )


def _per_backward(step: Step, zero: int) -> tuple[Comm, ...]:
    """The gradient collectives of a weight's step that run after every backward: ZeRO-2/3's
    reduce-scatter (`pricing.weight_parts` lists it first, then ZeRO-2's all-gather of the updated
    shards, one per copy group each)."""
    if zero == 3:
        return step.grad_sync
    if zero == 2:
        return step.grad_sync[: len(step.grad_sync) // 2]
    return ()
