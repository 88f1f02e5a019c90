"""A mapped PCG as schedule steps: `build_steps` walks the graph once in topological order and
turns every node into a `schedule.Step` (its tasks' compute, collectives, gradient sync and
update, priced per node by `pricing.py`) and a report row (`result.OpRow`), adding each device's
weights, gradients, optimizer state and saved activations to its memory. The plain estimate
(`estimate.py`) and the pipelined one (`staged.py`) both start from it. Priced by roles, the
steps run on one representative device per role (`cost/roles.py`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from unityc.cost.attention_bytes import attention_core_task_bytes, attention_task_bytes
from unityc.cost.backward import (
    core_recomputed,
    gradient_flags,
    pulled_gathers,
    recompute_regions,
    regathered,
    saved_readers,
)
from unityc.cost.communication import PARALLEL_PATTERN, Coord
from unityc.cost.compute import (
    MATMUL_LIKE,
    SOURCES,
    attention_core_work,
    backward_work,
    compute_dtype,
    forward_work,
    kernel_time,
    recompute_overhead,
)
from unityc.cost.experts import expert_degree, expert_memory, op_load
from unityc.cost.memory import (
    NORM_STATS,
    WEIGHT_VIEWS,
    autocast_copy_bytes,
    bf16_read,
    cast_operand,
    experts_saved_bytes,
    norm_stats_bytes,
    saves,
    step_weight_copy,
    weight_view,
)
from unityc.cost.overlap import beside, exposed, matmul_shares
from unityc.cost.pricing import (
    ComputeModel,
    ComputeParts,
    Placed,
    WeightParts,
    compute_parts,
    copy_groups,
    node_form,
    parallel_parts,
    phase,
    piece,
    placement,
    sum_concat_parts,
    type_info,
    weight_parts,
    zero_bucket_bytes,
)
from unityc.cost.result import OpRow
from unityc.cost.roles import Roles, device_arrays, find_roles
from unityc.cost.schedule import Comm, Step
from unityc.dialects.forms import Form
from unityc.dialects.pcg_types import TensorType, own_form
from unityc.graph import Graph, Node, Ref, full_attrs
from unityc.graph.precision import priced_graph
from unityc.machine.spec import Machine

WEIGHT_PATTERN = {
    0: "all_reduce",
    1: "all_reduce+all_gather",
    2: "reduce_scatter+all_gather",
    3: "reduce_scatter",
}
"""A weight's gradient sync by ZeRO stage (ZeRO-3 also all-gathers it before each use)."""


def node_attrs(node: Node) -> dict[str, Any]:
    """The properties a cost formula reads (none for sources)."""
    return {} if node.op in SOURCES else full_attrs(node.op, node.attrs)


def node_form_of(node: Node, operand_types: tuple[TensorType | None, ...]) -> Form:
    if node.is_source:
        return own_form(node.types[0])
    return node_form(node.op, node.attrs, operand_types)


class StepBuilder:
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
        """Internal saved tensors per device (attention's, norm statistics, autocast copies), by node id."""
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
        self.step_copies: dict[int, float] = defaultdict(float)
        """bf16-mixed: of each device's activations, the bf16 weight copies made once per step
        and shared by every micro-batch (`autocast_copies`)."""
        self.step_copies_of: dict[int, dict[int, float]] = {}
        """The same by node id, per device (of `internal`): the search's stage memory counts
        them once (`search.layers`)."""
        self.regather_copies: set[Ref] = set()
        """bf16-mixed: the sequence shards (`backward.regathered`) whose bf16 copy is counted."""
        self.gathers: dict[Ref, tuple[Comm, ...]] = {}
        """The forward collectives of each sequence-parallel all-gather's output (`regathered`)."""
        self.regathering: set[Ref] = set()
        self.pulled: dict[int, int] = {}
        """The all-gathers checkpoint regions run themselves (`backward.pulled_gathers`)."""
        """The all-gathers whose backward re-run is priced (`sequence_regathers`)."""
        self.reduce_beside: dict[int, dict[int, float]] = {}
        """Per sequence-parallel all-gather (node id) whose only reader runs its backward
        reduce-scatter beside the weight-gradient matmul, that matmul's seconds per device
        (`overlap`)."""
        self._users: dict[int, list[int]] | None = None
        self._bf16_reads: dict[Ref, bool] = {}
        self.core: set[int] = set()
        """The attentions that recompute only their core (`backward.core_recomputed`): priced
        as ops not recomputed (their plan's `recompute` is off in `graph`), but for what their
        core keeps (`core_held`) and its forward run again in backward."""
        self.core_held: dict[int, dict[int, float]] = {}
        """The core's internals (`memory.attention_core_saved_bytes`) of one micro-batch per
        device, by node id: made again in backward, transient bytes there (`peaks`)."""
        self.zero_buckets: dict[int, dict[tuple[int, ...], int]] = {}
        """The bytes of the bucket each ZeRO weight moves in over each of its copy groups, by
        node id (`bucket_zero_weights`)."""

    def users(self) -> dict[int, list[int]]:
        """The graph's readers of each node (`Graph.users`), made on first use."""
        if self._users is None:
            self._users = self.graph.users()
        return self._users

    def bf16_read(self, r: Ref) -> bool:
        """Whether value `r` is a bf16 piece or a view of one (`memory.bf16_read`), once per value:
        every reader of a weight asks."""
        held = self._bf16_reads.get(r)
        if held is None:
            held = self._bf16_reads[r] = bf16_read(self.graph, r, self.users(), self.gets_grad)
        return held

    def placed_at(self, nid: int) -> Placed:
        array = self.arrays[nid]
        if id(array) not in self.placed:
            self.placed[id(array)] = Placed(array, self.rep_mask)
        return self.placed[id(array)]

    def bucket_zero_weights(self, order: Sequence[int]) -> None:
        """Fills `zero_buckets`: the ZeRO weights in plan order cut into the program's buckets
        (`pricing.zero_bucket_bytes`: per copy group, a weight's kind being its stage, dtype and
        whether it is trained; a frozen weight is sharded only at ZeRO-3)."""
        weights: list[tuple[int, tuple[Any, ...], str, int, tuple[tuple[int, ...], ...]]] = []
        for nid in order:
            node = self.graph.nodes[nid]
            if node.op != "pcg.weight" or not node.zero or node.view is None:
                continue
            frozen = bool(node.attr("frozen"))
            if frozen and node.zero < 3:
                continue  # nothing of a frozen weight to shard but itself (`runtime.zero`)
            t = node.types[0]
            p = piece(t)
            assert p is not None
            where = placement(t, node.view, self.machine) if self.roles is None else self.placed_at(nid)
            groups = tuple(tuple(g) for g in copy_groups(where))
            kind = (node.zero, p.dtype, not frozen, self.bf16_read((nid, 0)))  # `runtime.zero._kind`
            weights.append((nid, kind, node.attr("key") or "", p.nbytes, groups))
        sizes = zero_bucket_bytes([w[1:] for w in weights])
        self.zero_buckets = {nid: size for (nid, *_), size in zip(weights, sizes, strict=True)}

    def count(self, device: int) -> int:
        """The devices `device` stands for (priced by roles: its role's)."""
        return 1 if self.roles is None else self.roles.count_of(device)

    def total(self, per_device: Mapping[int, float]) -> float:
        """A per-device quantity summed over every device (each representative for its role)."""
        if self.roles is None:
            return float(sum(per_device.values()))
        return float(
            sum(c * v for c, v in zip(self.roles.counts_of(per_device), per_device.values(), strict=True))
        )

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
            [r is not None and self.graph.nodes[r[0]].is_source for r in node.operands],
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
        if backward and node.op in NORM_STATS:
            x = piece(types[0])
            assert x is not None
            extra = self.internal_memory(
                nid, norm_stats_bytes(node.op, attrs["dims"], x.shape), parts.tasks, m
            )
        if backward and node.op == "pcg.experts":
            x, ids, gate_up = piece(types[0]), piece(types[1]), piece(types[3])
            assert x is not None and ids is not None and gate_up is not None
            per_task = experts_saved_bytes(ids.numel, x.shape[1], gate_up.shape[1] // 2, x.nbytes // x.numel)
            degree = expert_degree(types)
            if degree > 1:  # expert-parallel: the dispatched rows, as `runtime/experts.py` keeps them
                load = op_load(x, ids, degree * gate_up.shape[0])
                per_task = int(expert_memory(load, degree, gate_up.shape[1] // 2).saved)
            extra = self.internal_memory(nid, per_task, parts.tasks, m)
        if backward:
            extra += self.autocast_copies(nid, node, types, parts.tasks)
            extra += self.dropout_mask(nid, node, attrs, parts.tasks, m)
        fwd, bwd = parts.fwd, parts.bwd
        if node.recompute:  # its forward runs again in backward, and the checkpoint's hooks
            fwd = merge_work(fwd, self.recompute_overhead(parts.tasks, backward=False))
            if backward:
                bwd = merge_work(parts.fwd, parts.bwd, self.recompute_overhead(parts.tasks, backward=True))
        elif nid in self.core:  # only the core's forward again (and the checkpoint's hooks)
            fwd = merge_work(fwd, self.recompute_overhead(parts.tasks, backward=False))
            if backward:
                core = self.core_seconds(attrs, types, node.types, parts.fwd)
                bwd = merge_work(parts.bwd, core, self.recompute_overhead(parts.tasks, backward=True))
        step = Step(
            name=name,
            fwd_comm=parts.fwd_comm,
            fwd_compute=fwd,
            bwd_compute=bwd,
            bwd_gather=(*self.regathers(node), *self.sequence_regathers(node, parts)) if backward else (),
            bwd_comm=parts.bwd_comm,
            **base,
        )
        row = OpRow(
            name=name,
            kind=node.op,
            label=self.label(node),
            devices=tuple(sorted(parts.tasks)),
            fwd_compute_s=m * max(s for _, s in fwd),
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

    def core_seconds(
        self, attrs: Mapping[str, Any], types: Sequence[TensorType | None], results: Sequence[TensorType],
        fwd: Sequence[tuple[int, float]],
    ) -> tuple[tuple[int, float], ...]:  # fmt: skip
        """(device, seconds) of an attention's core forward (`compute.attention_core_work`), run
        again in backward by selective recomputation: of each device's forward seconds, the
        core's share of the roofline time of one task on its kind (so a profiled forward
        scales alike)."""
        operands = [piece(t) for t in types]
        pieces = [type_info(t).piece for t in results]
        dtype = compute_dtype(operands, pieces)
        whole = forward_work("pcg.attention", attrs, operands, pieces)
        core = attention_core_work(attrs, operands, pieces)
        share: dict[str, float] = {}
        out = []
        for device, seconds in fwd:
            kind = self.machine.kind_of(device)
            if kind.name not in share:
                total = kernel_time(whole, dtype, kind, True)
                share[kind.name] = kernel_time(core, dtype, kind, True) / total if total > 0 else 0.0
            out.append((device, seconds * share[kind.name]))
        return tuple(out)

    def recompute_overhead(self, tasks: Mapping[int, int], backward: bool) -> tuple[tuple[int, float], ...]:
        """(device, seconds) of a recomputed op's checkpoint hooks in a pass (`compute.RECOMPUTE_KERNELS`)."""
        kinds = {d: self.machine.kind_of(d) for d in tasks}
        return tuple((d, n * recompute_overhead(kinds[d].kernel_latency, backward)) for d, n in tasks.items())

    def device_total(self, devices: Iterable[int]) -> int:
        """How many devices these representatives stand for (0 when not priced by roles)."""
        return 0 if self.roles is None else sum(self.roles.counts_of(devices))

    def regathers(self, node: Node) -> tuple[Comm, ...]:
        """The all-gathers of the ZeRO-3 weights `node` reads again in backward: those it saves
        (the program frees them after forward and gathers them when its backward unpacks them),
        or all it reads if it is recomputed."""
        if saves(node.op, dict(node.attrs)) != "operands" and not node.recompute:
            return ()
        return tuple(
            c for r in node.operand_refs() if r[0] in self.weights for c in self.weights[r[0]].gather
        )

    def sequence_regathers(self, node: Node, parts: ComputeParts) -> tuple[Comm, ...]:
        """The sequence-parallel all-gathers run again in backward: each one whose output this
        op keeps as the shard (it saves its operands, outside a checkpoint region:
        `runtime.regather`) or whose output it recomputes (the gather runs inside its checkpoint
        region: `backward.pulled_gathers`), priced once, at its first such reader
        (consecutive readers' unpacks share one gather: q, k and v, or the MLP's gate and up).
        A kept shard's gather runs beside the reader's input-gradient matmul, and the gather's
        own reduce-scatter beside its weight-gradient matmul where it is the only reader
        (`overlap`: `reduce_beside`)."""
        keeps = saves(node.op, dict(node.attrs)) == "operands"
        out: list[Comm] = []
        for i, r in enumerate(node.operands):
            if r is None or r not in self.gathers or r in self.regathering or weight_view(self.graph, r):
                continue
            if node.recompute:
                if r[0] in self.pulled:
                    self.regathering.add(r)
                    out.extend(self.gathers[r])
                continue
            if not keeps or regathered(self.graph, r, self.gets_grad) is None:
                continue
            self.regathering.add(r)
            pieces = [None if o is None else piece(self.graph.type_of(o)) for o in node.operands]
            dgrad, wgrad = matmul_shares(node.op, node_attrs(node), pieces, i, parts.cost.bwd)
            out.extend(exposed(self.gathers[r], beside(dgrad, parts.bwd)))
            if wgrad > 0 and self.readings(r) == 1:
                self.reduce_beside[r[0]] = beside(wgrad, parts.bwd)
        return tuple(out)

    def readings(self, r: Ref) -> int:
        """How many operands of the graph read value `r`."""
        return sum(o == r for u in self.users().get(r[0], ()) for o in self.graph.nodes[u].operands)

    def attention_memory(
        self, nid: int, attrs: Mapping[str, Any], types: Sequence[TensorType | None], result: TensorType,
        tasks: Mapping[int, int], m: int,
    ) -> float:  # fmt: skip
        """Attention's internal saved tensors, added to its devices (to its backward's transient
        bytes if it is recomputed); returns the total kept from forward. One recomputing only
        its core (`core`) keeps all but the core's internals, made again in backward
        (`core_held`)."""
        per_task = attention_task_bytes(attrs, types, result)
        if nid in self.core:
            core = attention_core_task_bytes(attrs, types, result)
            self.core_held[nid] = {device: float(core * count) for device, count in tasks.items()}
            per_task -= core
        return self.internal_memory(nid, per_task, tasks, m)

    def internal_memory(self, nid: int, per_task: float, tasks: Mapping[int, int], m: int) -> float:
        """Tensors op `nid` keeps for its backward besides its operands and results, `per_task`
        bytes a task (attention's internals, a norm's statistics), added to its devices (to its
        backward's transient bytes if it is recomputed); returns the total kept from forward."""
        self.internal[nid] = {device: float(per_task * count * m) for device, count in tasks.items()}
        if self.graph.nodes[nid].recompute:
            return 0.0
        for device, count in tasks.items():
            self.memory[device]["activations"] += per_task * count * m
        return self.total(tasks) * per_task * m

    def autocast_copies(
        self, nid: int, node: Node, types: Sequence[TensorType | None], tasks: Mapping[int, int]
    ) -> float:
        """bf16-mixed: autocast casts each fp32 tensor a bf16 op (a matmul) reads to a bf16 copy
        that the op saves for its backward (`memory.cast_operand`): a weight or a view of one
        (`memory.weight_view`) once per forward, an activation once per reading op; and each
        bf16 tensor an fp32 op (a loss) reads to an fp32 copy (`memory.upcast_operand`). Held
        like attention's internal tensors (from forward to the op's backward, only then if it
        is recomputed). A trained weight's copy is made once per step and shared by the
        micro-batches (`memory.step_weight_copy`): its bytes also go to `step_copies`, which
        a pipeline's estimate counts once, not per micro-batch in flight. A recomputed op's
        copy of a weight view made outside its checkpoint region (`runtime.precision.step_cast`,
        taken before the region) is an input the checkpoint keeps: held by the view's node
        (`internal`, `step_copies_of`), once per step. Returns the bytes kept from forward."""
        per_task = once = 0
        inputs: dict[int, float] = {}
        for r, t in zip(node.operands, types, strict=True):
            if r is None or t is None or self.bf16_read(r):
                continue  # a bf16 piece is read as it is held
            shard = None if node.recompute else regathered(self.graph, r, self.gets_grad)
            if shard is not None and cast_operand(self.graph, nid, r):
                # the shard's bf16 copy, once for every op reading the gather (`runtime.regather`)
                if shard not in self.regather_copies:
                    self.regather_copies.add(shard)
                    per_task += 2 * type_info(self.graph.type_of(shard)).piece.numel
                continue
            nbytes = autocast_copy_bytes(self.graph, nid, r) * type_info(t).piece.numel
            per_task += nbytes
            shared = nbytes if nbytes and step_weight_copy(self.graph, nid, r, self.users()) else 0
            once += shared
            view = self.graph.nodes[r[0]]
            if shared and node.recompute and view.op in WEIGHT_VIEWS and not view.recompute:
                inputs[r[0]] = inputs.get(r[0], 0.0) + shared
        kept = sum(inputs.values())
        for device, count in tasks.items():
            for source, copy in inputs.items():  # kept by the view (not per micro-batch)
                held_by = self.internal.setdefault(source, {})
                held_by[device] = held_by.get(device, 0.0) + copy * count
                copies = self.step_copies_of.setdefault(source, {})
                copies[device] = copies.get(device, 0.0) + copy * count
                self.memory[device]["activations"] += copy * count
                self.step_copies[device] += copy * count
        if not per_task:
            return 0.0
        held = self.internal.setdefault(nid, {})
        for device, count in tasks.items():
            held[device] = held.get(device, 0.0) + (per_task - kept) * count
            if not node.recompute:
                self.memory[device]["activations"] += per_task * count
                self.step_copies[device] += once * count
                if once:
                    self.step_copies_of.setdefault(nid, {})[device] = once * count
        return self.total(tasks) * (kept if node.recompute else per_task)

    def dropout_mask(
        self, nid: int, node: Node, attrs: Mapping[str, Any], tasks: Mapping[int, int], m: int
    ) -> float:
        """A dropout (p > 0) keeps its keep-mask for backward, one byte (bool) an element of its
        piece: the program multiplies by it (`Context.dropout`), whose backward saves the mask,
        not the input. Held like attention's internal tensors; returns the bytes kept."""
        if node.op != "pcg.dropout" or not attrs.get("p", 0) > 0:
            return 0.0
        per_task = type_info(node.types[0]).piece.numel * m
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
        step, row = self._moving_step(base, node, name, where, fwd, bwd, m, PARALLEL_PATTERN[node.op])
        if node.op == "parallel.all_gather":
            self.gathers[(nid, 0)] = step.fwd_comm
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
        return self._moving_step(base, node, name, where, fwd, bwd, m, "p2p")

    def _moving_step(
        self,
        base: dict[str, Any],
        node: Node,
        name: str,
        where: dict[Coord, int],
        fwd_parts: Sequence[Comm],
        bwd_parts: Sequence[Comm],
        m: int,
        pattern: str,
    ) -> tuple[Step, OpRow]:
        """The step and report row of an op that only moves data (a parallel op, a summing
        concat): its collectives, on the devices they span (else where its result lies)."""
        (fwd, collectives), (bwd, _) = self.comms(fwd_parts), self.comms(bwd_parts)
        step = Step(name=name, fwd_comm=fwd, bwd_comm=bwd, **base)
        devices = {d for c in fwd for d in c.devices} or set(where.values())
        row = OpRow(
            name=name,
            kind=node.op,
            label=self.label(node),
            devices=tuple(sorted(devices)),
            num_devices=self.device_total(devices),
            fwd_comm_s=m * phase(fwd),
            bwd_comm_s=m * phase(bwd),
            pattern=pattern if fwd else "",
            collectives=collectives,
            comm_bytes=max((c.nbytes for c in fwd), default=0),
        )
        return step, row

    def weight_step(
        self, nid: int, node: Node, t: TensorType, where: dict[Coord, int], name: str
    ) -> tuple[Step, OpRow]:
        wants = (nid, 0) in self.gets_grad
        buckets = self.zero_buckets.get(nid)
        parts = weight_parts(
            self.machine, self.optimizer, t, where, wants, node.zero, buckets, self.bf16_read((nid, 0))
        )  # fmt: skip
        (sync, synced), (gather, _), (reduce, reduced) = (
            self.comms(parts.sync), self.comms(parts.gather), self.comms(parts.reduce)
        )  # fmt: skip
        parts = replace(parts, sync=sync, gather=gather, reduce=reduce)
        self.weights[nid] = parts
        held = 0.0
        counts = [1] * len(parts.held) if self.roles is None else self.roles.counts_of(parts.held)
        for (device, parts_held), count in zip(parts.held.items(), counts, strict=True):
            for what, nbytes in parts_held.items():
                self.memory[device][what] += nbytes
            held += count * sum(parts_held.values())
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
        """Adds what backward keeps to the devices keeping it (`kept_on`); returns bytes per
        value."""
        per_value: dict[Ref, float] = {}
        for v, savers in saved_readers(self.graph, order, self.gets_grad).items():
            on = self.kept_on(v, savers)
            for device, nbytes in on.items():
                self.memory[device]["activations"] += nbytes
            per_value[v] = self.total(on)
        return per_value

    def kept_on(self, v: Ref, savers: Sequence[int]) -> dict[int, float]:
        """Bytes of saved tensor `v` per device keeping it: the devices holding its pieces if an
        op among `savers` (those whose backward keeps it) runs there, and the devices of each
        saver that runs elsewhere (a pipeline stage reading the value of the stage before keeps
        the copy it received; the sending stage keeps nothing of it)."""
        on = self.bytes_on(v)
        one = max(on.values(), default=0.0)
        out: dict[int, float] = {}
        for nid in savers:
            devices = set(self.where[(nid, 0)].values())
            if devices & on.keys():
                out.update(on)
                continue
            out.update((d, one) for d in devices)
        return out

    def bytes_on(self, v: Ref, micro_batches: bool = True) -> dict[int, float]:
        """Bytes of tensor `v` per device holding pieces of it (all its micro-batches, or one)."""
        nbytes = piece(self.graph.type_of(v)).nbytes  # type: ignore[union-attr]
        if micro_batches:
            nbytes *= self.mult[self.vid(v)]
        out: dict[int, float] = defaultdict(float)
        for device in self.where[v].values():
            out[device] += nbytes
        return out


def merge_work(*parts: Sequence[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """(device, seconds) lists added up per device, in first-seen order."""
    total: dict[int, float] = {}
    for part in parts:
        for device, seconds in part:
            total[device] = total.get(device, 0.0) + seconds
    return tuple(total.items())


def build_steps(
    graph: Graph, machine: Machine, compute: ComputeModel, optimizer: str, roles: bool = False
) -> tuple[StepBuilder, list[int], list[Step], list[OpRow]]:
    """Every node as a schedule step and a report row, saved activations added to memory; each
    value in the element type the program runs it in (`graph.precision.priced_graph`). With
    `roles`, the steps run on one representative device per role (`cost/roles.py`)."""
    graph = priced_graph(graph)
    order = graph.topological()
    core = core_recomputed(graph, order)
    if core:  # priced as ops not recomputed, but for their core (`StepBuilder.core`)
        graph = graph.copy()
        for nid in core:
            graph.nodes[nid] = graph.nodes[nid].with_plan(recompute=False)
    b = StepBuilder(graph, machine, compute, optimizer, roles)
    b.core = core
    _, b.gets_grad = gradient_flags(graph, order)
    b.pulled = pulled_gathers(graph, order, recompute_regions(graph, order))
    b.bucket_zero_weights(order)
    steps: list[Step] = []
    rows: list[OpRow] = []
    for i, nid in enumerate(order):
        step, row = b.step(i, nid)
        steps.append(step)
        rows.append(row)
    for i, nid in enumerate(order):  # gathers whose reduce-scatter runs beside their reader's matmul
        if nid in b.reduce_beside:
            bwd = exposed(steps[i].bwd_comm, b.reduce_beside[nid])
            steps[i] = replace(steps[i], bwd_comm=bwd)
            rows[i] = replace(rows[i], bwd_comm_s=steps[i].multiplicity * phase(bwd))
    saved = b.saved_activations(order)
    rows = [
        replace(row, memory=row.memory + sum(saved.get(r, 0.0) for r in b.results(nid)))
        for row, nid in zip(rows, order, strict=True)
    ]
    return b, order, steps, rows


__all__ = [
    "WEIGHT_PATTERN",
    "StepBuilder",
    "build_steps",
    "merge_work",
    "node_attrs",
    "node_form_of",
]
