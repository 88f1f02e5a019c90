"""A graph's pipeline layers and their per-layer costs, what the partition DP
(`partition.py`) and the pipelined plans (`pipeline.py`) are built on.

*Layers.* The graph's pipeline cut points (`pipeline_cuts`: ops after which one activation
crosses, besides values computed from inputs and constants alone) cut it into L layers; a stage
(`Stage`) is a run of consecutive layers on a group of consecutive devices.

*Profiles* (`LayerCosts`). A stage of layers i..j on a group of w consecutive devices runs them
data parallel (stage replication): each device computes a micro-batch of B/(M w) rows. Each
layer's forward and backward time is priced by the cost model's per-op pricing
(`estimate.build_steps`) on the graph of one such micro-batch placed on one device of each kind
the machine has; the group runs at its slowest device's pace (`of`); or, with tensor-parallel
stages, on the Megatron layout of the group mapped by the mapping DP (`of_tensor`). A weight read
by layers of several stages (a tied embedding) is held by each of those stages, and its
gradient all-reduced over all its holders once per iteration (`TiedWeight`), as the plan
(`pipeline.untie`) and its program do.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from unityc.cost.compute import Piece, forward_work
from unityc.cost.estimate import (
    build_steps,
    compute_model,
    node_attrs,
    saved_values,
)
from unityc.cost.pricing import phase, piece
from unityc.cost.profile import ProfileCache
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph
from unityc.graph.microbatch import microbatch_graph
from unityc.graph.simplify import fuse_collectives, simplify
from unityc.machine.spec import Machine
from unityc.search.layout import Layout
from unityc.search.plans import Pricing, input_batch
from unityc.search.strategies import megatron_layouts, sync_batch_norm
from unityc.search.views import Block, View, canonical_view, task_degrees, to_attr
from unityc.search.vocabulary import pad_vocabulary


def forward_flops(graph: Graph, nid: int) -> float:
    """Forward FLOPs of an op (all its tasks), what `layer_of` balances when it merges layers."""
    node = graph.nodes[nid]
    if node.op.startswith("parallel.") or node.is_source:
        return 0.0
    operands = [None if r is None else _piece(graph.type_of(r)) for r in node.operands]
    work = forward_work(node.op, node_attrs(node), operands, [_piece(t) for t in node.types])
    return work.flops * node.types[0].num_pieces


def _piece(t: TensorType) -> Piece:
    return Piece(t.piece_shape, str(t.element_type))


class PipelineError(ValueError):
    """A pipeline the graph or the machine cannot have."""


@dataclass(frozen=True)
class Stage:
    """Layers [first, last) on devices [start, start + width)."""

    first: int
    last: int
    start: int
    width: int


@dataclass(frozen=True)
class Partition:
    stages: tuple[Stage, ...]
    objective: float
    """The DP's objective: the slowest stage's (or link's) time per iteration."""
    tensor: int = 1
    """Tensor-parallel degree inside every stage (Megatron layout; 1: data parallel only)."""


def pipeline_cuts(graph: Graph) -> list[int]:
    """Ops after which the pipeline may be cut: in topological order, the values made up to the
    op and read after it are one activation (a value that depends on a weight) and any number of
    values computed from inputs and constants alone (an attention mask, position ids), which the
    later stages read as well. `split.cut_points` (one tensor crossing) is the strict case."""
    order = [nid for nid in graph.topological() if not graph.nodes[nid].is_source]
    pos = {nid: i for i, nid in enumerate(order)}
    weighted: set[int] = set()
    last_use: dict[int, int] = {}
    for nid in order:
        node = graph.nodes[nid]
        for r in node.operand_refs():
            src = graph.nodes[r[0]]
            if src.op == "pcg.weight" or r[0] in weighted:
                weighted.add(nid)
            if r[0] in pos:
                last_use[r[0]] = max(last_use.get(r[0], -1), pos[nid])
    outputs = {r[0] for r in graph.outputs}
    cuts: list[int] = []
    live: set[int] = set()
    for i, nid in enumerate(order[:-1]):
        live.add(nid)
        live = {v for v in live if last_use.get(v, -1) > i}
        heavy = [v for v in live if v in weighted]
        node = graph.nodes[nid]
        if len(heavy) == 1 and heavy[0] == nid and len(node.types) == 1 and nid not in outputs:
            cuts.append(nid)
    return cuts


def layer_of(graph: Graph, max_layers: int | None = None) -> tuple[list[int], dict[int, int]]:
    """The graph's cut ops (`pipeline_cuts`) and each non-source op's layer (a cut op ends its
    layer); with `max_layers`, only that many layers, cut where forward FLOPs are most even."""
    cuts = pipeline_cuts(graph)
    if max_layers is not None and len(cuts) + 1 > max_layers:
        cuts = _even(graph, cuts, max_layers)
    marks = set(cuts)
    layer: dict[int, int] = {}
    k = 0
    for nid in graph.topological():
        if graph.nodes[nid].is_source:
            continue
        layer[nid] = k
        if nid in marks:
            k += 1
    return cuts, layer


def _even(graph: Graph, cuts: list[int], layers: int) -> list[int]:
    """`layers` - 1 of `cuts`, spreading forward FLOPs evenly."""
    running: dict[int, float] = {}
    total = 0.0
    for nid in graph.topological():
        if not graph.nodes[nid].is_source:
            total += forward_flops(graph, nid) + 1.0
            running[nid] = total
    chosen: list[int] = []
    low = 0
    for k in range(1, layers):
        high = len(cuts) - (layers - 1 - k)
        target = k * total / layers
        i = min(range(low, high), key=lambda j: abs(running[cuts[j]] - target))
        chosen.append(cuts[i])
        low = i + 1
    return chosen


def batch_size(graph: Graph) -> int:
    batch = input_batch(graph)
    if batch is None:
        raise PipelineError("the graph has no batched input: nothing to pipeline")
    return batch


@dataclass(frozen=True)
class TiedWeight:
    """A weight read by several layers, in a profile: a stage holding some of its readers but not
    the first holds a copy of its own (`untie`), and a stage holding some but not all of them
    all-reduces its gradient with the other holders once per iteration (`staged._tied_reduce`)."""

    layers: frozenset[int]
    """The layers reading it (the profile charges its bytes and update to the first)."""
    nbytes: float
    """One device's piece."""
    update_s: float
    """Its optimizer step on one device."""
    sync_s: float = 0.0
    """The gradient sync the profile charges it inside the group (the all-reduce replaces it)."""
    offsets: tuple[int, ...] | None = None
    """The devices (from the group's first) holding one of its pieces; None: every device."""


def _reader_layers(
    graph: Graph, nid: int, layer: Mapping[int, int], users: Mapping[int, list[int]]
) -> set[int]:
    """The layers of the ops reading node `nid`, through parallel ops."""
    out: set[int] = set()
    stack = list(users[nid])
    while stack:
        u = stack.pop()
        if graph.nodes[u].op.startswith("parallel."):
            stack.extend(users[u])
        elif u in layer:
            out.add(layer[u])
    return out


@dataclass
class LayerCosts:
    """Per-layer costs of `graph` on one device of each kind, per micro-batch of `rows` rows."""

    graph: Graph
    machine: Machine
    cost: str = "roofline"
    optimizer: str = "sgd"
    profile: ProfileCache | None = None
    max_layers: int | None = None
    """Coarsen the split points to at most this many layers (big graphs)."""
    _cache: dict[tuple[int, int], dict[str, list[float]]] = field(default_factory=dict)
    _failed: dict[tuple[int, int], str] = field(default_factory=dict)
    """Micro-batch sizes the graph cannot have, and why (asked again and again by the DP)."""
    _tied: dict[tuple[int, int], tuple[TiedWeight, ...]] = field(default_factory=dict)
    """The tied weights of each profile (`tied`)."""
    _partitions: dict[tuple[str, int | None, bool], tuple[Partition, int] | None] = field(
        default_factory=dict
    )
    """`best_partition`'s results (schedule, stages, tensor): the search's candidates and the
    pipedream baseline solve the same DP."""

    @cached_property
    def layers(self) -> tuple[list[int], dict[int, int]]:
        return layer_of(self.graph, self.max_layers)

    @property
    def count(self) -> int:
        return len(self.layers[0]) + 1

    @cached_property
    def batch(self) -> int:
        return batch_size(self.graph)

    def kind_device(self, kind_name: str) -> int:
        return next(d.index for d in self.machine.devices if d.kind.name == kind_name)

    def of(self, device: int, rows: int) -> dict[str, list[float]]:
        """{"fwd", "bwd", "saved", "copies", "weights", "update", "out"}: per layer, on `device`'s
        kind ("copies": of "saved", the bf16 weight copies made once per step, `memory.step_weight_copy`)."""
        device = self.kind_device(self.machine.kind_of(device).name)
        key = (device, rows)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if key in self._failed:
            raise PipelineError(self._failed[key])
        if self.batch % rows:
            raise PipelineError(f"{rows} rows do not divide the batch of {self.batch}")
        try:
            micro = microbatch_graph(self.graph, self.batch // rows)
        except ValueError as e:
            self._failed[key] = f"micro-batches of {rows} rows: {e}"
            raise PipelineError(self._failed[key]) from None
        for nid, node in micro.nodes.items():
            micro.with_view(nid, to_attr(canonical_view(task_degrees(node.types[0]), device), self.machine))
        b, order, steps, _ = build_steps(
            micro, self.machine, compute_model(self.cost, self.profile), self.optimizer
        )
        cuts, layer = self.layers
        users = self.graph.users()
        L = len(cuts) + 1
        out = {k: [0.0] * L for k in ("fwd", "bwd", "saved", "copies", "weights", "update", "out")}
        tied: list[TiedWeight] = []
        for nid, step in zip(order, steps, strict=True):
            node = micro.nodes[nid]
            k = layer.get(nid)
            if k is None:  # a source: its first reader's layer
                k = min((layer[u] for u in users[nid] if u in layer), default=0)
            out["fwd"][k] += max((s for _, s in step.fwd_compute), default=0.0) + phase(step.fwd_comm)
            out["bwd"][k] += max((s for _, s in step.bwd_compute), default=0.0) + phase(step.bwd_comm)
            update = max((s for _, s in step.update), default=0.0)
            out["update"][k] += update
            if node.op == "pcg.weight" and (nid, 0) in b.gets_grad:
                nbytes = piece(node.types[0]).nbytes  # type: ignore[union-attr]
                out["weights"][k] += nbytes
                readers = _reader_layers(self.graph, nid, layer, users)
                if len(readers) > 1:
                    tied.append(TiedWeight(frozenset(readers), nbytes, update))
        self._tied[key] = tuple(tied)
        for v in saved_values(micro, order, b.gets_grad):
            k = layer.get(v[0], 0)
            out["saved"][k] += piece(micro.type_of(v)).nbytes  # type: ignore[union-attr]
        for nid, held in _kept_internals(b.graph, b.internal):  # as `estimate` counts them
            out["saved"][layer.get(nid, 0)] += held.get(device, 0.0)
        for nid, held in b.step_copies_of.items():  # of "saved": one per step, not per micro-batch
            out["copies"][layer.get(nid, 0)] += held.get(device, 0.0)
        for i, c in enumerate(cuts):
            out["out"][i] = piece(micro.nodes[c].types[0]).nbytes  # type: ignore[union-attr]
        for name in ("fwd", "bwd", "saved", "copies", "weights", "update"):
            out["sum_" + name] = list(itertools.accumulate(out[name], initial=0.0))
        self._cache[key] = out
        return out

    def of_tensor(self, width: int, tensor: int, rows: int) -> dict[str, list[float]]:
        """As `of`, for a stage group of `width` devices running the Megatron layout (tensor
        parallel `tensor` x data parallel width / tensor) on a micro-batch of `rows` rows (the
        group's), mapped by the mapping DP; per layer on the group's busiest device, with the
        group's gradient syncs ("sync")."""
        key = (-width, tensor * 1_000_000 + rows)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if self.batch % rows or rows % (width // tensor):
            raise PipelineError(f"{rows} rows per micro-batch do not split over {width // tensor} replicas")
        try:  # (its vocabulary padded as `pipeline.materialize` pads it: its node ids kept)
            micro = pad_vocabulary(microbatch_graph(self.graph, self.batch // rows), tensor)
        except ValueError as e:
            raise PipelineError(f"micro-batches of {rows} rows: {e}") from None
        _, layer = self.layers
        base = sync_batch_norm(micro)
        order = [
            n
            for n in base.topological()
            if not base.nodes[n].is_source and not base.nodes[n].op.startswith("parallel.")
        ]
        seq, k = [], 0
        for nid in order:
            k = layer.get(nid, k)
            seq.append(k)
        plan = fuse_collectives(
            simplify(megatron_layouts(micro, Layout(data=width // tensor, tensor=tensor))[0].graph)
        )
        where = carry_stages(plan, base, order, seq)
        for nid, view in block_views(plan, self.machine, width).items():
            plan.with_view(nid, to_attr(view, self.machine))
        b, steps_order, steps, _ = build_steps(
            plan, self.machine, compute_model(self.cost, self.profile), self.optimizer
        )
        cuts = self.layers[0]
        out = {
            k: [0.0] * (len(cuts) + 1)
            for k in ("fwd", "bwd", "saved", "copies", "weights", "update", "out", "sync")
        }
        users = plan.users()
        compute = {n: where[n] for n in plan.nodes if not plan.nodes[n].is_source}
        tied: list[TiedWeight] = []
        for nid, step in zip(steps_order, steps, strict=True):
            node = plan.nodes[nid]
            k = where[nid]
            out["fwd"][k] += max((s for _, s in step.fwd_compute), default=0.0) + phase(step.fwd_comm)
            out["bwd"][k] += max((s for _, s in step.bwd_compute), default=0.0) + phase(step.bwd_comm)
            update = max((s for _, s in step.update), default=0.0)
            out["update"][k] += update
            out["sync"][k] += phase(step.after_backward)
            if node.op == "pcg.weight" and (nid, 0) in b.gets_grad:
                nbytes = piece(node.types[0]).nbytes  # type: ignore[union-attr]
                out["weights"][k] += nbytes
                readers = _reader_layers(plan, nid, compute, users)
                if len(readers) > 1:
                    first = next(iter(b.where[(nid, 0)]))
                    holders = sorted(d for c, d in b.where[(nid, 0)].items() if c[:-1] == first[:-1])
                    sync = phase(step.after_backward)
                    tied.append(TiedWeight(frozenset(readers), nbytes, update, sync, tuple(holders)))
        self._tied[key] = tuple(tied)
        for v in saved_values(plan, steps_order, b.gets_grad):
            out["saved"][where[v[0]]] += piece(plan.type_of(v)).nbytes  # type: ignore[union-attr]
        for nid, held in _kept_internals(b.graph, b.internal):
            out["saved"][where[nid]] += max(held.values(), default=0.0)
        for nid, held in b.step_copies_of.items():
            out["copies"][where[nid]] += max(held.values(), default=0.0)
        for i, c in enumerate(cuts):
            out["out"][i] = piece(micro.nodes[c].types[0]).nbytes  # type: ignore[union-attr]
        for name in ("fwd", "bwd", "saved", "copies", "weights", "update", "sync"):
            out["sum_" + name] = list(itertools.accumulate(out[name], initial=0.0))
        self._cache[key] = out
        return out

    def tied(self, device: int, rows: int, width: int = 0, tensor: int = 1) -> tuple[TiedWeight, ...]:
        """The tied weights of the profile `of(device, rows)` (`width`: of `of_tensor`)."""
        if width:
            self.of_tensor(width, tensor, rows)
            return self._tied[(-width, tensor * 1_000_000 + rows)]
        self.of(device, rows)
        return self._tied[(self.kind_device(self.machine.kind_of(device).name), rows)]

    def feasible(self, device: int, rows: int) -> bool:
        """Whether the graph has a micro-batch of `rows` rows (batch norm needs 2 values)."""
        try:
            self.of(device, rows)
        except PipelineError:
            return False
        return True

    def total(self, device: int, rows: int, what: str, first: int, last: int) -> float:
        """Layers [first, last) of one entry of `of`."""
        pre = self.of(device, rows)["sum_" + what]
        return pre[last] - pre[first]

    def state_bytes(self, weights: float) -> float:
        """Weights + gradients + optimizer state for `weights` bytes of weights."""
        return weights * (2 + (2 if self.optimizer == "adam" else 0))


def _kept_internals(
    graph: Graph, internal: Mapping[int, Mapping[int, float]]
) -> list[tuple[int, Mapping[int, float]]]:
    """The tensors ops keep from forward besides their saved values (`steps.StepBuilder.internal`:
    attention's q, k, v, probabilities and context, autocast's bf16 copies), per op not
    recomputed, per device: what `estimate` adds to a device's activations, so the DP's stage
    memory is the estimate's. `graph`: the builder's (`steps.StepBuilder.graph`), where an
    attention recomputing only its core is not recomputed: it keeps all but its core's."""
    return [(nid, held) for nid, held in internal.items() if not graph.nodes[nid].recompute]


def weight_only(graph: Graph) -> set[int]:
    """The compute and parallel ops whose value depends on no input: functions of weights and
    constants alone (a weight's transpose, its cast). A rebuild places them where it likes (a
    weight's view is placed by its first reader, `rebuild.weight_views`), so no order of them is
    kept."""
    pure: set[int] = set()
    for nid in graph.topological():
        node = graph.nodes[nid]
        if node.is_source:
            if node.op != "pcg.input":
                pure.add(nid)
        elif all(r[0] in pure for r in node.operand_refs()):
            pure.add(nid)
    return {nid for nid in pure if not graph.nodes[nid].is_source}


def matched_ops(plan: Graph, base: Graph, order: Sequence[int]) -> list[tuple[int, int]]:
    """(node of `plan`, node of `base`) for each compute op (non-source, non-parallel) of
    `base` in `order` that depends on an input, `plan` being a rebuild of `base` (which keeps
    those ops in order); PipelineError if it does not."""
    pure_base, pure_plan = weight_only(base), weight_only(plan)
    kept = [n for n in order if n not in pure_base]
    rebuilt = [
        nid
        for nid in plan.topological()
        if not (plan.nodes[nid].is_source or plan.nodes[nid].op.startswith("parallel.") or nid in pure_plan)
    ]
    if [plan.nodes[n].op for n in rebuilt] != [base.nodes[n].op for n in kept]:
        raise PipelineError("the rebuilt plan changed the graph's ops: cannot carry the stages over")
    return list(zip(rebuilt, kept, strict=True))


def carry_stages(plan: Graph, base: Graph, order: Sequence[int], stages: Sequence[int]) -> dict[int, int]:
    """Each node's stage in `plan`, a rebuild of `base` whose compute ops (non-source,
    non-parallel, in topological order) are `order` with `stages`: the rebuild keeps those ops
    that read an input in order (`matched_ops`); parallel ops, sources and functions of weights
    alone take their first reader's stage (an output its producer's)."""
    by_base = dict(zip(order, stages, strict=True))
    stage: dict[int, int] = {nid: by_base[old] for nid, old in matched_ops(plan, base, order)}
    users = plan.users()
    for nid in reversed(plan.topological()):
        if nid in stage:
            continue
        readers = [stage[u] for u in users[nid] if u in stage]
        if readers:
            stage[nid] = min(readers)
        else:
            producers = [stage[r[0]] for r in plan.nodes[nid].operand_refs() if r[0] in stage]
            stage[nid] = max(producers, default=0)
    return stage


def block_views(plan: Graph, machine: Machine, width: int) -> dict[int, View]:
    """Views of every node on devices [0, width) by the mapping DP."""
    mapped = Pricing().mapper(machine).map(plan, block=Block(0, width))
    if not mapped.feasible:
        raise PipelineError(f"the stage layout has no feasible mapping on {width} devices")
    return mapped.views
