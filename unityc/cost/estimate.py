"""The cost model's adapter: a mapped PCG (an xDSL module) -> an `Estimate`.

It walks the graph function once, turns every op into a `schedule.Step` using the pure models
(`compute.op_cost`, `communication.price_group`, `memory`), simulates the iteration and sums the
parts. Conventions:

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
  gradient all-reduced across its copies; a weight replicated by `parallel.replicate` gets the
  replicate's backward (a reduce) instead.
* **Roofline bound**: the model's training FLOPs (every pcg op on logical shapes, forward and
  backward, plus the optimizer) over the machine's total peak FLOP/s for each op's dtype.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from unityc.cost.communication import PARALLEL_PATTERN, Coord, collective_time, parallel_groups, price_group
from unityc.cost.compute import (
    MATMUL_LIKE,
    SOURCES,
    OpCost,
    Piece,
    backward_work,
    compute_dtype,
    forward_work,
    kernel_time,
    op_cost,
)
from unityc.cost.memory import (
    DeviceMemory,
    attention_saved_bytes,
    check_optimizer,
    optimizer_state_bytes,
    saves,
    update_work,
)
from unityc.cost.profile import ProfileCache, op_key, profiled_cost
from unityc.cost.schedule import Comm, Step, simulate
from unityc.cost.units import format_bytes
from unityc.dialects.pcg_types import PcgOp, TensorType
from unityc.dialects.view import MachineViewAttr
from unityc.machine.spec import DeviceKind, Machine

COST_MODES = ("roofline", "profile")


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


@dataclass(frozen=True)
class DeviceRow:
    device: int
    kind: str
    compute_s: float
    comm_s: float
    busy_s: float
    memory: DeviceMemory
    capacity: float


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

    @property
    def busiest(self) -> DeviceRow:
        return max(self.devices, key=lambda d: (d.busy_s, -d.device))

    @property
    def update_s(self) -> float:
        return self.iteration_s - self.backward_s

    @property
    def roofline_ratio(self) -> float:
        return self.iteration_s / self.roofline_s if self.roofline_s > 0 else float("inf")

    def device(self, index: int) -> DeviceRow:
        return next(d for d in self.devices if d.device == index)


ComputeModel = Callable[
    [str, Mapping[str, Any], Sequence[Piece | None], Sequence[Piece], DeviceKind, Sequence[bool]], OpCost
]


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


def piece(t: TensorType | None, logical: bool = False) -> Piece | None:
    if t is None:
        return None
    return Piece(t.shape if logical else t.piece_shape, str(t.element_type))


def placement(t: TensorType, view: MachineViewAttr | None, machine: Machine) -> dict[Coord, int]:
    """The device of each piece (task) of a result of type `t` under `view`."""
    degrees = t.task_degrees()
    coords = itertools.product(*(range(d) for d in degrees))
    if view is None:
        return {c: 0 for c in coords}
    big = [i for i, d in enumerate(degrees) if d > 1]
    where: dict[Coord, int] = {}
    for c in coords:
        node, local = view.placement([c[i] for i in big])
        where[c] = machine.global_device(view.start, node, local)
    return where


def graph_function(module: ModuleOp) -> func.FuncOp:
    funcs = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    if len(funcs) != 1:
        raise ValueError(f"estimate expects exactly one func.func (the graph), found {len(funcs)}")
    return funcs[0]


def _present_operands(op: PcgOp) -> list[tuple[TensorType | None, SSAValue | None]]:
    """(type, value) per operand in definition order; (None, None) for an absent optional one."""
    values = iter(op.operands)
    return [(t, None if t is None else next(values)) for t in op.typed_operands()]


def _phase(comms: Sequence[Comm]) -> float:
    """How long a set of collectives takes alone (those sharing a device serialize)."""
    per: dict[int, float] = defaultdict(float)
    for c in comms:
        for d in c.devices:
            per[d] += c.seconds
    return max(per.values(), default=0.0)


class _Builder:
    def __init__(self, machine: Machine, compute: ComputeModel, optimizer: str):
        self.machine = machine
        self.compute = compute
        self.optimizer = optimizer
        self.ids: dict[SSAValue, int] = {}
        self.where: dict[SSAValue, dict[Coord, int]] = {}
        self.mult: dict[int, int] = {}
        self.requires: set[SSAValue] = set()
        self.gets_grad: set[SSAValue] = set()
        self.memory: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.transfers = 0
        self.unplaced = 0
        self.model_flops = 0.0
        self.roofline_s = 0.0

    def vid(self, v: SSAValue) -> int:
        return self.ids.setdefault(v, len(self.ids))

    # --- gradients ---------------------------------------------------------------------------

    def mark_gradients(self, ops: Sequence[PcgOp], loss: SSAValue | None) -> None:
        for op in ops:
            name = op.name
            floats = [r for r in op.results if piece(r.type).dtype in ("f16", "bf16", "f32", "f64")]  # type: ignore[union-attr]
            if name == "pcg.weight" or (name not in SOURCES and any(o in self.requires for o in op.operands)):
                self.requires.update(floats)
        if loss is not None and loss in self.requires:
            self.gets_grad.add(loss)
        for op in reversed(ops):
            if any(r in self.gets_grad for r in op.results):
                self.gets_grad.update(o for o in op.operands if o in self.requires)

    # --- steps -------------------------------------------------------------------------------

    def step(self, index: int, op: PcgOp) -> tuple[Step, OpRow]:
        t0 = op.results[0].type
        assert isinstance(t0, TensorType)
        view = op.attributes.get("view")
        if view is None:
            self.unplaced += 1
        where = placement(t0, view if isinstance(view, MachineViewAttr) else None, self.machine)
        for r in op.results:
            self.where[r] = where
        operand_mult = max((self.mult[self.vid(o)] for o in op.operands), default=1)
        result_mult = operand_mult
        if op.name == "parallel.pipeline":
            result_mult = operand_mult * op.attrs()["degree"]
        elif op.name == "parallel.batch":
            result_mult = max(operand_mult // op.attrs()["degree"], 1)
        for r in op.results:
            self.mult[self.vid(r)] = result_mult
        name = op.results[0].name_hint or f"{index}"
        if op.name == "pcg.weight":
            return self.weight_step(op, t0, where, name)
        if op.name.startswith("parallel."):
            return self.parallel_step(op, t0, where, name, max(operand_mult, result_mult))
        return self.compute_step(op, where, name, operand_mult)

    def _base(self, op: PcgOp, m: int) -> dict[str, Any]:
        return {
            "operands": tuple(self.vid(o) for o in op.operands),
            "results": tuple(self.vid(r) for r in op.results),
            "multiplicity": m,
            "has_backward": any(r in self.gets_grad for r in op.results) and op.name not in SOURCES,
            "grad_operands": tuple(o in self.gets_grad for o in op.operands),
        }

    def compute_step(self, op: PcgOp, where: dict[Coord, int], name: str, m: int) -> tuple[Step, OpRow]:
        base = self._base(op, m)
        typed = _present_operands(op)
        operands = [piece(t) for t, _ in typed]
        results = [piece(r.type) for r in op.results]  # type: ignore[arg-type]
        grads = [v is not None and v in self.gets_grad for _, v in typed]
        backward = base["has_backward"]
        attrs = op.attrs() if op.name not in SOURCES else {}
        tasks, fwd_comm, bwd_comm = self.tasks_and_transfers(op, where, typed, grads)
        costs: dict[str, OpCost] = {}
        fwd: list[tuple[int, float]] = []
        bwd: list[tuple[int, float]] = []
        for device, count in tasks.items():
            kind = self.machine.kind_of(device)
            if kind.name not in costs:
                costs[kind.name] = self.compute(op.name, attrs, operands, results, kind, grads)
            fwd.append((device, count * costs[kind.name].fwd_s))
            bwd.append((device, count * costs[kind.name].bwd_s if backward else 0.0))
        cost = next(iter(costs.values()))
        flops = sum(tasks.values()) * m * (cost.fwd.flops + (cost.bwd.flops if backward else 0))
        self.add_model_flops(op, attrs, typed, grads if backward else [False] * len(grads), m)
        extra = 0.0
        if backward and op.name == "pcg.attention":
            extra = self.attention_memory(attrs, operands, results[0], tasks, m)
        step = Step(
            name=name,
            fwd_comm=tuple(fwd_comm),
            fwd_compute=tuple(fwd),
            bwd_compute=tuple(bwd),
            bwd_comm=tuple(bwd_comm),
            **base,
        )
        row = OpRow(
            name=name,
            kind=op.name,
            label=self.label(op),
            devices=tuple(sorted(tasks)),
            fwd_compute_s=m * max(s for _, s in fwd),
            bwd_compute_s=m * max(s for _, s in bwd),
            fwd_comm_s=m * _phase(fwd_comm),
            bwd_comm_s=m * _phase(bwd_comm),
            pattern="p2p" if fwd_comm else "",
            collectives=len(fwd_comm),
            comm_bytes=max((c.nbytes for c in fwd_comm), default=0),
            flops=flops,
            memory=extra,
        )
        return step, row

    def tasks_and_transfers(
        self, op: PcgOp, where: dict[Coord, int], typed: list, grads: Sequence[bool]
    ) -> tuple[dict[int, int], list[Comm], list[Comm]]:
        """Tasks per device, and the p2p transfers of operand pieces that live elsewhere (each
        piece sent once per device; gradients return the same way in backward)."""
        form = op.parallel_form()
        tasks: dict[int, int] = defaultdict(int)
        fwd: list[Comm] = []
        bwd: list[Comm] = []
        sent: set[tuple[int, Coord, int]] = set()
        for task in form.tasks():
            device = where[form.coord(form.results[0], task)]
            tasks[device] += 1
            for layout, (t, v), wants in zip(form.operands, typed, grads, strict=True):
                if layout is None or v is None:
                    continue
                coord = form.coord(layout, task)
                source = self.where[v][coord]
                if source == device or (self.vid(v), coord, device) in sent:
                    continue
                sent.add((self.vid(v), coord, device))
                nbytes = piece(t).nbytes  # type: ignore[union-attr]
                seconds = collective_time("p2p", nbytes, (source, device), self.machine)
                fwd.append(Comm((source, device), seconds, nbytes))
                if wants:
                    bwd.append(Comm((device, source), seconds, nbytes))
                self.transfers += 1
        return tasks, fwd, bwd

    def attention_memory(
        self, attrs: Mapping[str, Any], operands: list, result: Piece, tasks: Mapping[int, int], m: int
    ) -> float:
        """Attention's internal saved tensors, added to its devices; returns the total."""
        batch, sq, e = operands[0].shape
        eh = operands[3].shape[0]
        per_task = attention_saved_bytes(
            batch,
            sq,
            operands[1].shape[1],
            eh,
            attrs["heads"] * eh // e,
            result.nbytes // max(result.numel, 1),
        )
        for device, count in tasks.items():
            self.memory[device]["activations"] += per_task * count * m
        return float(per_task * sum(tasks.values()) * m)

    def add_model_flops(
        self, op: PcgOp, attrs: Mapping[str, Any], typed: list, grads: Sequence[bool], m: int
    ) -> None:
        logical = [piece(t, logical=True) for t, _ in typed]
        results = [piece(r.type, logical=True) for r in op.results]  # type: ignore[arg-type]
        flops = forward_work(op.name, attrs, logical, results).flops
        flops += backward_work(op.name, attrs, logical, results, grads).flops
        flops *= m
        dtype = compute_dtype(logical, results)
        self.model_flops += flops
        self.roofline_s += flops / self.machine.total_peak_flops(dtype, op.name in MATMUL_LIKE)

    def parallel_step(
        self, op: PcgOp, t: TensorType, where: dict[Coord, int], name: str, m: int
    ) -> tuple[Step, OpRow]:
        base = self._base(op, m)
        source = op.operands[0]
        in_t = source.type
        assert isinstance(in_t, TensorType)
        pattern = PARALLEL_PATTERN[op.name]
        in_bytes, out_bytes = piece(in_t).nbytes, piece(t).nbytes  # type: ignore[union-attr]
        fwd: list[Comm] = []
        bwd: list[Comm] = []
        for group in parallel_groups(op.name, op.attrs(), in_t.task_degrees()):
            g = price_group(pattern, group, self.where[source], where, in_bytes, out_bytes, self.machine)
            if not g.devices:
                continue
            fwd.append(Comm(g.devices, g.fwd_s, g.nbytes))
            if base["grad_operands"][0]:
                bwd.append(Comm(g.devices, g.bwd_s, g.nbytes))
        step = Step(name=name, fwd_comm=tuple(fwd), bwd_comm=tuple(bwd), **base)
        row = OpRow(
            name=name,
            kind=op.name,
            label=self.label(op),
            devices=tuple(sorted({d for c in fwd for d in c.devices} or set(where.values()))),
            fwd_comm_s=m * _phase(fwd),
            bwd_comm_s=m * _phase(bwd),
            pattern=pattern if fwd else "",
            collectives=len(fwd),
            comm_bytes=max((c.nbytes for c in fwd), default=0),
        )
        return step, row

    def weight_step(self, op: PcgOp, t: TensorType, where: dict[Coord, int], name: str) -> tuple[Step, OpRow]:
        p = piece(t)
        assert p is not None
        wants = op.results[0] in self.gets_grad
        pieces: dict[int, int] = defaultdict(int)
        for device in where.values():
            pieces[device] += 1
        held = 0.0
        update: list[tuple[int, float]] = []
        element = p.nbytes // max(p.numel, 1)
        for device, count in pieces.items():
            nbytes = count * p.nbytes
            self.memory[device]["weights"] += nbytes
            held += nbytes
            if not wants:
                continue
            state = optimizer_state_bytes(self.optimizer, nbytes)
            self.memory[device]["gradients"] += nbytes
            self.memory[device]["optimizer"] += state
            held += nbytes + state
            work = update_work(self.optimizer, count * p.numel, element)
            update.append((device, kernel_time(work, p.dtype, self.machine.kind_of(device))))
        sync = self.gradient_sync(t, where, p.nbytes) if wants else []
        if wants:
            flops = update_work(self.optimizer, t.num_pieces // t.copy_degree * p.numel, element).flops
            self.model_flops += flops
            self.roofline_s += flops / self.machine.total_peak_flops(p.dtype)
        base = {**self._base(op, 1), "has_backward": False}
        step = Step(name=name, grad_sync=tuple(sync), update=tuple(update), **base)
        row = OpRow(
            name=name,
            kind=op.name,
            label=self.label(op),
            devices=tuple(sorted(pieces)),
            bwd_comm_s=_phase(sync),
            pattern="all_reduce" if sync else "",
            collectives=len(sync),
            comm_bytes=p.nbytes if sync else 0,
            memory=held,
        )
        return step, row

    def gradient_sync(self, t: TensorType, where: dict[Coord, int], nbytes: int) -> list[Comm]:
        """All-reduce of the gradients of a weight's copies (copy degree > 1, used directly)."""
        if t.copy_degree == 1:
            return []
        copies: dict[Coord, list[int]] = defaultdict(list)
        for coord, device in where.items():
            copies[coord[:-1]].append(device)
        sync = []
        for devices in copies.values():
            distinct = tuple(dict.fromkeys(devices))
            seconds = collective_time("all_reduce", nbytes, distinct, self.machine)
            if seconds > 0:
                sync.append(Comm(distinct, seconds, nbytes))
        return sync

    def label(self, op: PcgOp) -> str:
        key = op.attrs().get("key") if op.name in ("pcg.input", "pcg.weight") else None
        return f"{op.name} {key}" if key else op.name

    # --- memory ------------------------------------------------------------------------------

    def saved_activations(self, ops: Sequence[PcgOp]) -> dict[SSAValue, float]:
        """Adds what backward keeps to the devices holding it; returns bytes per value."""
        saved: set[SSAValue] = set()
        for op in ops:
            if not any(r in self.gets_grad for r in op.results) or op.name in SOURCES:
                continue
            rule = saves(op.name)
            if rule == "operands":
                saved.update(o for o in op.operands if getattr(o.owner, "name", "") != "pcg.weight")
            elif rule == "result":
                saved.update(op.results)
        per_value: dict[SSAValue, float] = {}
        for v in saved:
            t = v.type
            assert isinstance(t, TensorType)
            nbytes = piece(t).nbytes * self.mult[self.vid(v)]  # type: ignore[union-attr]
            for device in self.where[v].values():
                self.memory[device]["activations"] += nbytes
            per_value[v] = nbytes * len(self.where[v])
        return per_value


def estimate_module(
    module: ModuleOp,
    machine: Machine,
    cost: str = "roofline",
    optimizer: str = "sgd",
    profile: ProfileCache | None = None,
) -> Estimate:
    """Estimate one training iteration of the graph in `module` on `machine`."""
    check_optimizer(optimizer)
    if cost not in COST_MODES:
        raise ValueError(f"unknown cost model '{cost}' (known: {', '.join(COST_MODES)})")
    if cost == "profile" and profile is None:
        raise ValueError('cost="profile" needs a profile cache file (profile="cache.json")')
    compute = profile_model(profile) if cost == "profile" and profile is not None else roofline_model()
    graph = graph_function(module)
    ops: list[PcgOp] = []
    loss: SSAValue | None = None
    for op in graph.body.block.ops:
        if isinstance(op, func.ReturnOp):
            loss = op.operands[0] if op.operands else None
        elif isinstance(op, PcgOp):
            ops.append(op)
        else:
            raise ValueError(f"estimate cannot price '{op.name}': only pcg and parallel ops are known")
    b = _Builder(machine, compute, optimizer)
    b.mark_gradients(ops, loss)
    steps: list[Step] = []
    rows: list[OpRow] = []
    for i, op in enumerate(ops):
        step, row = b.step(i, op)
        steps.append(step)
        rows.append(row)
    saved = b.saved_activations(ops)
    rows = [
        replace(row, memory=row.memory + sum(saved.get(r, 0.0) for r in op.results))
        for row, op in zip(rows, ops, strict=True)
    ]
    schedule = simulate(steps, b.mult, b.vid(loss) if loss is not None and loss in b.ids else None)
    for s in steps:
        for c in (*s.fwd_comm, *s.bwd_comm, *s.grad_sync):
            for d in c.devices:
                b.memory[d]["buffers"] = max(b.memory[d]["buffers"], c.nbytes)
    used = sorted(set(schedule.timelines) | set(b.memory))
    devices = tuple(
        DeviceRow(
            device=d,
            kind=machine.kind_of(d).name,
            compute_s=schedule.timelines[d].compute_s if d in schedule.timelines else 0.0,
            comm_s=schedule.timelines[d].comm_s if d in schedule.timelines else 0.0,
            busy_s=schedule.timelines[d].busy_s if d in schedule.timelines else 0.0,
            memory=DeviceMemory(**b.memory[d]),
            capacity=machine.kind_of(d).memory,
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
    for d in devices:
        if d.memory.total > d.capacity:
            notes.append(
                f"device {d.device} needs {format_bytes(d.memory.total)}, "
                f"more than its {format_bytes(d.capacity)}"
            )
    return Estimate(
        machine=machine,
        cost=cost,
        optimizer=optimizer,
        rows=tuple(rows),
        devices=devices,
        iteration_s=schedule.iteration_s,
        forward_s=schedule.forward_s,
        backward_s=schedule.backward_s,
        plan_flops=sum(r.flops for r in rows),
        model_flops=b.model_flops,
        roofline_s=b.roofline_s,
        notes=tuple(notes),
    )
