"""Pricing one node of a mapped graph: the pure pieces `estimate` assembles into a schedule.

The estimate pass and the search's machine-mapping dynamic program both price nodes with these
functions, so a plan costs the same whichever of them looks at it. A *placement* says on which
device each piece of a tensor lives (coordinate: shard indices, sum index, copy index -> device).

* `compute_parts`: tasks per device of a pcg op, their forward and backward kernel times, and
  the point-to-point transfers of operand pieces held on another device than the task reading
  them (each piece sent once per device; gradients return the same way in backward);
* `parallel_parts`: the collectives of a parallel op, from where its input pieces live to where
  its output pieces go (`communication.parallel_groups` + `price_group`), and their duals;
* `weight_parts`: the bytes a weight holds per device (weights, gradients, optimizer state), its
  optimizer step, and the all-reduce of the gradients of its copies (copy degree > 1).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp, f32

from unityc.cost.communication import (
    PARALLEL_PATTERN,
    Coord,
    Group,
    collective_time,
    groups_touching,
    parallel_groups,
    price_group,
)
from unityc.cost.compute import CONTEXT_DEGREE, OpCost, Piece, kernel_time
from unityc.cost.context import context_exchanges
from unityc.cost.experts import expert_degree, experts_exchanges, op_load
from unityc.cost.memory import persistent_bytes, shard_numel, update_work
from unityc.cost.pieces import FLOAT_DTYPES as FLOAT_DTYPES
from unityc.cost.pieces import TypeInfo as TypeInfo
from unityc.cost.pieces import _piece, piece
from unityc.cost.pieces import type_info as type_info
from unityc.cost.schedule import Comm
from unityc.cost.transfers import (
    Placed,
    Placement,
    _first_of_each,
    _tasks,
    kind_index,
    tasks_and_transfers,
)
from unityc.cost.transfers import _aligned as _aligned
from unityc.cost.transfers import _array_transfers as _array_transfers
from unityc.cost.transfers import _loop_transfers as _loop_transfers
from unityc.cost.transfers import as_array as as_array
from unityc.cost.transfers import form_coords as form_coords
from unityc.cost.transfers import form_grid as form_grid
from unityc.cost.transfers import link_arrays as link_arrays
from unityc.cost.transfers import per_device as per_device
from unityc.cost.transfers import phase as phase
from unityc.cost.transfers import transfers_phase as transfers_phase
from unityc.dialects.container import graph_function
from unityc.dialects.diagnostics import located
from unityc.dialects.forms import Form
from unityc.dialects.pcg.attention import AttentionOp
from unityc.dialects.pcg.experts import EXPERT_FACTOR
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import op_plan
from unityc.dialects.spatial import Halo, window_halo
from unityc.dialects.view import MachineViewAttr
from unityc.graph import full_attrs, op_class
from unityc.machine.spec import DeviceKind, Machine
from unityc.runtime.patterns import zero_buckets

CopyGroup = tuple[int, ...]
Buckets = Mapping[CopyGroup, int] | int | None
"""The bytes of the ZeRO bucket a weight moves in, per copy group (`zero_bucket_bytes`), or one for all."""


ComputeModel = Callable[
    [str, Mapping[str, Any], Sequence[Piece | None], Sequence[Piece], DeviceKind, Sequence[bool]], OpCost
]


@lru_cache(maxsize=100_000)
def node_form(
    op: str, attrs: tuple[tuple[str, Any], ...], operand_types: tuple[TensorType | None, ...]
) -> Form:
    """The parallel form of an op (how its tasks read operand pieces), by the dialect's inference.
    Forms do not depend on element types: bf16 operands (a bf16-mixed graph as priced, see
    `graph.precision.priced_graph`) are read as f32, so mixed operands infer."""
    declared = [t if t is None or str(t.element_type) != "bf16" else _as_f32(t) for t in operand_types]
    return op_class(op).infer(declared, full_attrs(op, attrs))[0]


@lru_cache(maxsize=100_000)
def _as_f32(t: TensorType) -> TensorType:
    return TensorType(t.shape, f32, t.shard, t.sum_degree, t.copy_degree)


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
    if len(set(where.values())) < len(where):  # device offsets that run into the next node can collide
        device = next(d for d in where.values() if list(where.values()).count(d) > 1)
        raise ValueError(f"machine view {_view_text(view)} places two tasks on device {device}")
    return where


def check_views(module: ModuleOp, machine: Machine) -> None:
    """Each machine view of the module's graph places its op's tasks on distinct devices of
    `machine`; a located error at the first that does not."""
    for op in graph_function(module).body.block.ops:
        view = op_plan(op).view
        if view is None or not op.results:
            continue
        t = op.results[0].type
        assert isinstance(t, TensorType)  # the op verified its view against this type
        try:
            placement(t, view, machine)
        except ValueError as e:
            raise located(op, str(e)) from None


def _view_text(view: MachineViewAttr) -> str:
    dims = ", ".join(
        f"{'inter' if x else 'intra'} {s}" for s, x in zip(view.strides, view.inter, strict=True)
    )
    return f"#pcg.view<start {view.start}{', [' + dims + ']' if dims else ''}>"


@dataclass(frozen=True)
class ComputeParts:
    tasks: dict[int, int]
    """Tasks per device."""
    fwd: tuple[tuple[int, float], ...]
    """(device, seconds) of forward compute, one instance."""
    bwd: tuple[tuple[int, float], ...]
    fwd_comm: tuple[Comm, ...]
    bwd_comm: tuple[Comm, ...]
    cost: OpCost
    """The cost of one task (on the first device kind met)."""


def _task_groups(form: Form, where: Placement, factor: str) -> list[tuple[int, ...]]:
    """The devices of each group of tasks differing only in `factor`."""
    degree = dict(form.factors)[factor]
    groups: dict[tuple[tuple[str, int], ...], tuple[int, ...]] = {}
    for task in _tasks(form, where):
        rest = tuple(sorted((f, i) for f, i in task.items() if f != factor))
        if rest not in groups:
            groups[rest] = tuple(
                where[form.coord(form.results[0], {**task, factor: j})] for j in range(degree)
            )
    return list(groups.values())


def kernel_collectives(
    op: str,
    attrs: Mapping[str, Any],
    form: Form,
    where: Placement,
    operand_types: Sequence[TensorType | None],
    machine: Machine,
    grads: Sequence[bool] = (),
) -> tuple[list[Comm], list[Comm]]:
    """Collectives a kernel runs among its own tasks (forward, backward): the vocabulary-parallel
    cross-entropy's all-gather of row maxima and all-reduce of sums of exponentials (its dual in
    backward) across class shards, and the count of kept targets across row shards; a
    spatially split window's halo exchange (`halo_exchanges`)."""
    if op in ("pcg.conv2d", "pcg.pool2d"):
        return halo_exchanges(op, attrs, form, where, operand_types, machine, grads)
    if op != "pcg.cross_entropy":
        return [], []
    degrees = dict(form.factors)
    logits = operand_types[0]
    assert logits is not None
    rows = _piece(logits, False)
    row_bytes = rows.nbytes // rows.shape[1]
    fwd: list[Comm] = []
    bwd: list[Comm] = []

    def add(pattern: str, nbytes: int, devices: tuple[int, ...], backward: bool) -> None:
        comm = Comm(devices, collective_time(pattern, nbytes, devices, machine), nbytes)
        fwd.append(comm)
        if backward:
            bwd.append(comm)

    if degrees.get("v", 1) > 1:
        for devices in _task_groups(form, where, "v"):
            add("all_gather", row_bytes, devices, False)
            add("all_reduce", row_bytes, devices, True)
    if degrees.get("n", 1) > 1 and attrs.get("ignore_index") is not None and attrs["reduction"] == "mean":
        for devices in _task_groups(form, where, "n"):
            add("all_reduce", 8, devices, False)
    return fwd, bwd


def _windows(
    op: str, attrs: Mapping[str, Any], operand_types: Sequence[TensorType | None]
) -> list[tuple[int, ...]]:
    """(kernel, stride, padding, dilation) of a window op per spatial dim (height, width)."""

    def pair(name: str, default: int) -> tuple[int, int]:
        v = attrs.get(name)
        return (default, default) if v is None else (int(v[0]), int(v[1]))

    if op == "pcg.conv2d":
        w = operand_types[1]
        assert w is not None
        kernel, stride = (w.shape[2], w.shape[3]), pair("stride", 1)
        return [(kernel[i], stride[i], pair("padding", 0)[i], pair("dilation", 1)[i]) for i in (0, 1)]
    kernel, stride = pair("kernel", 1), pair("stride", 0)
    return [(kernel[i], stride[i] or kernel[i], pair("padding", 0)[i], 1) for i in (0, 1)]


def halo_exchanges(
    op: str,
    attrs: Mapping[str, Any],
    form: Form,
    where: Placement,
    operand_types: Sequence[TensorType | None],
    machine: Machine,
    grads: Sequence[bool] = (),
) -> tuple[list[Comm], list[Comm]]:
    """A spatially split window's halo exchange (`ctx.halo`): along height, then width (the
    rows extended by the height halo), each shard sends its neighbours the rows they read, by
    point-to-point transfers; in backward (where the input carries a gradient) the halo's
    gradients go back the same way."""
    degrees = dict(form.factors)
    x = operand_types[0]
    assert x is not None
    piece = list(_piece(x, False).shape)
    itemsize = _piece(x, False).nbytes // max(math.prod(piece), 1)
    fwd: list[Comm] = []
    bwd: list[Comm] = []
    for i, (factor, window) in enumerate(zip(("h", "w"), _windows(op, attrs, operand_types), strict=True)):
        if degrees.get(factor, 1) == 1:
            continue
        halo = window_halo(x.shape[2 + i], x.shard[2 + i], *window)
        assert isinstance(halo, Halo), halo  # the op's verifier accepted the form
        row_bytes = itemsize * math.prod(n for d, n in enumerate(piece) if d != 2 + i)
        for devices in _task_groups(form, where, factor):
            for a, b in itertools.pairwise(devices):
                for src, dst, rows in ((a, b, halo.above), (b, a, max(halo.below, 0))):
                    if rows == 0 or src == dst:
                        continue
                    nbytes = rows * row_bytes
                    comm = Comm((src, dst), collective_time("p2p", nbytes, (src, dst), machine), nbytes)
                    fwd.append(comm)
                    if grads and grads[0]:
                        bwd.append(Comm((dst, src), comm.seconds, nbytes))
        piece[2 + i] += halo.above + halo.below
    return fwd, bwd


def compute_parts(
    machine: Machine,
    compute: ComputeModel,
    op: str,
    attrs: Mapping[str, Any],
    form: Form,
    where: Placement,
    operand_types: Sequence[TensorType | None],
    operand_keys: Sequence[Any],
    operand_where: Sequence[Placement | None],
    result_types: Sequence[TensorType],
    grads: Sequence[bool],
    backward: bool,
    any_copy: Sequence[bool] | None = None,
) -> ComputeParts:
    """Kernel times per device and operand transfers of a pcg op placed at `where` (`any_copy`:
    the operands that are sources, read from any copy, `transfers.read_from`)."""
    operands = [piece(t) for t in operand_types]
    results = [_piece(t, False) for t in result_types]
    tasks, fwd_comm, bwd_comm = tasks_and_transfers(
        form, where, operand_types, operand_keys, operand_where, grads, machine, any_copy
    )
    kernel_fwd, kernel_bwd = kernel_collectives(op, attrs, form, where, operand_types, machine, grads)
    fwd_comm += kernel_fwd
    bwd_comm += kernel_bwd
    split = AttentionOp.context_split(attrs, operand_types) if op == "pcg.attention" else None
    if split is not None:
        attrs = {**attrs, CONTEXT_DEGREE: split[1]}
    costs: dict[str, OpCost] = {}
    devices = np.fromiter(tasks.keys(), dtype=np.int64, count=len(tasks))
    counts = np.fromiter(tasks.values(), dtype=np.int64, count=len(tasks))
    kinds = kind_index(machine)[devices]
    fwd_s = np.zeros(len(tasks))
    bwd_s = np.zeros(len(tasks))
    for k in _first_of_each(kinds):  # one price per kind, the kind of the first device met
        kind = machine.kind_of(int(devices[k]))
        costs[kind.name] = c = compute(op, attrs, operands, results, kind, grads)
        fwd_s[kinds == kinds[k]], bwd_s[kinds == kinds[k]] = c.fwd_s, c.bwd_s
    on = devices.tolist()
    fwd = list(zip(on, (counts * fwd_s).tolist(), strict=True))
    bwd = list(zip(on, (counts * bwd_s).tolist() if backward else [0.0] * len(on), strict=True))
    if not costs:  # priced by roles, and no representative runs it: a task on its first device
        first = int(where.array.flat[0]) if isinstance(where, Placed) else 0
        costs[""] = compute(op, attrs, operands, results, machine.kind_of(first), grads)
    cost = next(iter(costs.values()))
    if split is not None:
        wq, wk = piece(operand_types[3]), piece(operand_types[4])
        assert wq is not None and wk is not None
        groups = _task_groups(form, where, "c")
        ring_fwd, ring_bwd = context_exchanges(split[0], groups, wq, wk, results[0], machine, cost)
        fwd_comm += ring_fwd
        bwd_comm += ring_bwd if backward else []
    if op == "pcg.experts" and expert_degree(operand_types) > 1:  # dispatch and combine
        x, ids, gate_up = operands[0], operands[1], operand_types[3]
        assert x is not None and ids is not None and gate_up is not None
        load = op_load(x, ids, gate_up.shape[0])
        ep_fwd, ep_bwd = experts_exchanges(_task_groups(form, where, EXPERT_FACTOR), load, machine)
        fwd_comm += ep_fwd
        bwd_comm += ep_bwd if backward else []
    return ComputeParts(dict(tasks), tuple(fwd), tuple(bwd), tuple(fwd_comm), tuple(bwd_comm), cost)


def parallel_parts(
    machine: Machine,
    op: str,
    attrs: Mapping[str, Any],
    in_type: TensorType,
    in_where: Placement,
    out_type: TensorType,
    where: Placement,
    grad: bool,
) -> tuple[tuple[Comm, ...], tuple[Comm, ...]]:
    """The collectives of a parallel op (forward) and their duals (backward, if `grad`)."""
    pattern = PARALLEL_PATTERN[op]
    in_bytes, out_bytes = _piece(in_type, False).nbytes, _piece(out_type, False).nbytes
    fwd: list[Comm] = []
    bwd: list[Comm] = []
    for group in _groups(op, attrs, in_type.task_degrees(), in_where, where):
        g = price_group(pattern, group, in_where, where, in_bytes, out_bytes, machine)
        if not g.devices:
            continue
        fwd.append(Comm(g.devices, g.fwd_s, g.nbytes))
        if grad:
            bwd.append(Comm(g.devices, g.bwd_s, g.nbytes))
    return tuple(fwd), tuple(bwd)


def _groups(
    op: str, attrs: Mapping[str, Any], in_degrees: Sequence[int], in_where: Placement, where: Placement
) -> list[Group]:
    """A parallel op's groups: all, or those of the pieces `Placed` placements hold."""
    if isinstance(where, Placed) or isinstance(in_where, Placed):
        return groups_touching(op, attrs, in_degrees, in_where, where)
    return parallel_groups(op, attrs, in_degrees)


@dataclass(frozen=True)
class WeightParts:
    held: dict[int, dict[str, float]]
    """Bytes per device: weights, gradients, optimizer state (`memory.persistent_bytes`)."""
    update: tuple[tuple[int, float], ...]
    """(device, seconds) of the optimizer step."""
    sync: tuple[Comm, ...]
    """After the backward: with ZeRO-2/3 the gradients of the weight's copies reduce-scattered;
    with ZeRO-1/2 the updated shards all-gathered (priced here, on the same streams: the update
    between them is short and memory-bound)."""
    update_flops: float
    gather: tuple[Comm, ...] = ()
    """ZeRO-3: the all-gathers of the weight from its shards, before each use (in forward, and
    again in backward)."""
    full: dict[int, float] | None = None
    """ZeRO-2/3: per device, the bytes of the unsharded pieces (what a gather or an unreduced
    gradient holds for a moment)."""
    reduce: tuple[Comm, ...] = ()
    """Without ZeRO or with ZeRO-1: the gradients of the weight's copies all-reduced, one per
    copy group (the program buckets them and starts them during the backward, see
    `schedule.buckets`)."""

    @property
    def after_backward(self) -> tuple[Comm, ...]:
        """Every gradient collective, as if all ran after the backward."""
        return (*self.reduce, *self.sync)


def weight_parts(
    machine: Machine,
    optimizer: str,
    t: TensorType,
    where: Placement,
    wants: bool,
    zero: int = 0,
    buckets: Buckets = None,
    bf16_piece: bool = False,
) -> WeightParts:
    """What a weight of type `t` placed at `where` holds and does per iteration; `zero` shards
    it across its copies (see `memory.persistent_bytes`), whose collectives move in a bucket of
    `buckets[group]` bytes over each copy group (`zero_bucket_bytes`; the gradient all-reduce
    is bucketed by the schedule). A `bf16_piece` (`memory.is_bf16_piece`) holds its piece in
    bf16 beside the fp32 master shard, whose updated shards are all-gathered in bf16."""
    p = _piece(t, False)
    pieces = per_device(np.fromiter(where.values(), dtype=np.int64, count=len(where)))
    element = p.nbytes // max(p.numel, 1)
    n = t.copy_degree
    own = persistent_bytes(p.numel, element, n, zero, optimizer, wants, bf16_piece)
    updated = shard_numel(p.numel, n) if zero else p.numel
    held: dict[int, dict[str, float]]
    update: list[tuple[int, float]] = []
    if not wants:
        held = {device: {"weights": count * own.weights} for device, count in pieces.items()}
    else:
        held = {
            device: {
                "weights": count * own.weights,
                "gradients": count * own.gradients,
                "optimizer": count * own.optimizer,
            }
            for device, count in pieces.items()
        }
        devices = np.fromiter(pieces.keys(), dtype=np.int64, count=len(pieces))
        counts = np.fromiter(pieces.values(), dtype=np.int64, count=len(pieces))
        cases = counts * len(machine.devices) + kind_index(machine)[devices]  # piece count and kind
        seconds = np.zeros(len(pieces))
        for k in _first_of_each(cases):  # one kernel time per case, the kind of its first device
            work = update_work(optimizer, int(counts[k]) * updated, element)
            seconds[cases == cases[k]] = kernel_time(work, p.dtype, machine.kind_of(int(devices[k])))
        update = list(zip(devices.tolist(), seconds.tolist(), strict=True))
    sync: list[Comm] = []
    reduce: list[Comm] = []
    if wants:
        if zero >= 2:
            sync = copy_collectives(machine, "reduce_scatter", where, p.nbytes, buckets)
        else:
            reduce = copy_collectives(machine, "all_reduce", where, p.nbytes)
        if zero in (1, 2):
            gathered, bucket = (p.nbytes, buckets) if not bf16_piece else (p.numel * 2, _halved(buckets))
            sync += copy_collectives(machine, "all_gather", where, gathered, bucket)
    gather = copy_collectives(machine, "all_gather", where, p.nbytes, buckets) if zero == 3 else []
    flops = update_work(optimizer, t.num_pieces // t.copy_degree * p.numel, element).flops if wants else 0.0
    full = {d: float(count * p.nbytes) for d, count in pieces.items()} if zero >= 2 else None
    return WeightParts(held, tuple(update), tuple(sync), flops, tuple(gather), full, tuple(reduce))


def _halved(buckets: Buckets) -> Buckets:
    """The bucket sizes of fp32 pieces gathered in bf16 (a bucket of bf16 pieces,
    `runtime.zero.Bucket.all_gather`)."""
    if buckets is None or isinstance(buckets, int):
        return None if buckets is None else buckets // 2
    return {group: size // 2 for group, size in buckets.items()}


def copy_groups(where: Placement) -> list[tuple[int, ...] | range]:
    """The devices of each copy group of a tensor placed at `where` (the pieces that differ only
    in their copy index, the last coordinate), each listed once, in order of first appearance."""
    copies: dict[Coord, Sequence[int]] = {}
    if isinstance(where, Placed):
        for coord in where:
            if coord[:-1] not in copies:
                copies[coord[:-1]] = where.line(coord[:-1])
    else:
        lists: dict[Coord, list[int]] = defaultdict(list)
        for coord, device in where.items():
            lists[coord[:-1]].append(device)
        copies.update(lists)
    return [d if isinstance(d, range) else tuple(dict.fromkeys(d)) for d in copies.values()]


def copy_collectives(
    machine: Machine, pattern: str, where: Placement, nbytes: int, buckets: Buckets = None
) -> list[Comm]:
    """One collective of `pattern` over the copies of each piece of a tensor placed at `where`;
    `nbytes` is one whole piece. With `buckets` (per copy group, the bytes of the ZeRO bucket
    the piece moves in, `zero_bucket_bytes`; one int: every group's), the piece's share of the
    bucket's one collective: its time times nbytes / bucket, so the bucket's weights together
    cost one latency, as the program runs them (`unityc.runtime.zero`)."""
    out = []
    for distinct in copy_groups(where):
        bucket = buckets if isinstance(buckets, int) else (buckets or {}).get(tuple(distinct), 0)
        if bucket > nbytes:
            seconds = collective_time(pattern, bucket, distinct, machine) * nbytes / bucket
        else:
            seconds = collective_time(pattern, nbytes, distinct, machine)
        if seconds > 0:
            out.append(Comm(distinct, seconds, nbytes))
    return out


def zero_bucket_bytes(
    weights: Sequence[tuple[Hashable, str, int, Sequence[CopyGroup]]],
) -> list[dict[CopyGroup, int]]:
    """Per ZeRO weight ((kind, key, bytes of a piece, its copy groups), in plan order; the kind
    names its stage and dtype), the bytes of the bucket it moves in over each of its copy
    groups: the runtime's buckets (`runtime.zero.buckets_of`), cut per copy group, as every rank
    of a group cuts the weights it holds in that group (`patterns.zero_buckets`, one
    all-gather / reduce-scatter each)."""
    members: dict[CopyGroup, list[int]] = {}
    for i, (_, _, _, groups) in enumerate(weights):
        for group in groups:
            members.setdefault(group, []).append(i)
    out: list[dict[CopyGroup, int]] = [{} for _ in weights]
    for group, held in members.items():
        for cut in zero_buckets([weights[i][:2] for i in held]):
            total = sum(weights[held[j]][2] for j in cut)
            for j in cut:
                out[held[j]][group] = total
    return out


def sum_concat_parts(
    machine: Machine,
    operand_types: Sequence[TensorType],
    operand_where: Sequence[Placement | None],
    out_type: TensorType,
    where: Placement,
    grads: Sequence[bool],
) -> tuple[tuple[Comm, ...], tuple[Comm, ...]]:
    """`parallel.sum_concat`: result partial sum s is partial sum s of `a` (s < sum(a)), else
    partial sum s - sum(a) of `b`; a piece moves only if it sits on another device than the
    result piece it becomes (p2p), and its gradient comes back the same way. An operand whose
    placement is None is not considered."""
    fwd: list[Comm] = []
    bwd: list[Comm] = []
    first = operand_types[0].sum_degree
    nbytes = _piece(out_type, False).nbytes
    rank = out_type.rank
    for coord, device in where.items():
        s = coord[rank]
        index = 0 if s < first else 1
        source_where = operand_where[index]
        if source_where is None:
            continue
        source = source_where[(*coord[:rank], s - index * first, coord[rank + 1])]
        if source == device:
            continue
        seconds = collective_time("p2p", nbytes, (source, device), machine)
        fwd.append(Comm((source, device), seconds, nbytes, transfer=True))
        if grads[index]:
            bwd.append(Comm((device, source), seconds, nbytes, transfer=True))
    return tuple(fwd), tuple(bwd)
