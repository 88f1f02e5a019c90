"""Pipeline plans: stage partitioning (PipeDream's dynamic program), per-stage device groups,
micro-batch choice, and the plans of `pipedream`, `hetero-gpipe` and the joint search.

*Layers.* The graph's sequential split points (`split.cut_points`: ops after which one tensor
crosses) cut it into L layers; a stage is a run of consecutive layers.

*Profiles.* A stage of layers i..j on a group of w consecutive devices runs them data parallel
(stage replication): each device computes a micro-batch of B/(M w) rows. Each layer's forward and
backward time is priced by the cost model's per-op pricing (`estimate.build_steps`) on the graph
of one such micro-batch placed on one device of each kind the machine has (`LayerCosts`); the
group runs at its slowest device's pace. Its weights' gradients are all-reduced over the group
once per iteration, the optimizer steps its weights once; the tensor leaving its last layer goes
point to point to the next group (B/(M w) rows from each device, over the link between them). A
weight read by layers of several stages (a tied embedding) is held by each of those stages, and
its gradient all-reduced over all its holders once per iteration (`TiedWeight`), as the plan
(`untie`) and its program do.

*Partition DP* (`partition`, PipeDream §3.1): A(j, d) = the best pipeline of layers [0, j) on
devices [0, d): min over the last stage (layers [i, j) on devices [c, d)) of max(A(i, c),
stage time, transfer time into it), the stage time being M x (forward + backward) + sync + update
(the slowest stage bounds the pipeline in steady state). A stage's memory (weights, gradients,
optimizer state, and its activations times the micro-batches in flight, at most min(M, 1 + the
devices after it) under 1F1B) must fit its devices. Devices are taken in machine order; stages
may use fewer than all devices. `exhaustive_partition` enumerates the same space (tests).

*Plans.* `materialize` turns a partition into a pipelined plan: every op data parallel over its
stage's group (`rebuild` with the stage's width, so a tensor crossing to a stage of another width
is re-partitioned there), `stage` on every op, views on the group's devices, the schedule and
micro-batch count on the graph function; `estimate` then prices it by simulating the schedule.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from unityc.cost.communication import collective_time
from unityc.cost.compute import Piece, forward_work
from unityc.cost.estimate import (
    Estimate,
    build_steps,
    compute_model,
    estimate_graph,
    node_attrs,
    saved_values,
)
from unityc.cost.pipeline import StageCost
from unityc.cost.pricing import phase, piece
from unityc.cost.profile import ProfileCache
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import GraphPlan, Pipeline
from unityc.graph import Graph
from unityc.graph.microbatch import microbatch_graph
from unityc.graph.simplify import fuse_collectives, simplify
from unityc.machine.spec import Machine
from unityc.search.rebuild import rebuild
from unityc.search.strategies import _batch_forms, megatron_layouts, sync_batch_norm, tensor_degrees
from unityc.search.views import Block, View, canonical_view, task_degrees, to_attr


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
    sizes = {n.types[0].shape[0] for n in graph.nodes.values() if n.op == "pcg.input" and n.types[0].rank}
    if not sizes:
        raise PipelineError("the graph has no batched input: nothing to pipeline")
    return math.gcd(*sizes)


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
        """{"fwd", "bwd", "saved", "weights", "update", "out"}: per layer, on `device`'s kind."""
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
        out = {k: [0.0] * L for k in ("fwd", "bwd", "saved", "weights", "update", "out")}
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
        for i, c in enumerate(cuts):
            out["out"][i] = piece(micro.nodes[c].types[0]).nbytes  # type: ignore[union-attr]
        for name in ("fwd", "bwd", "saved", "weights", "update"):
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
        try:
            micro = microbatch_graph(self.graph, self.batch // rows)
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
        plan = fuse_collectives(simplify(megatron_layouts(micro, width // tensor, tensor)[0].graph))
        where = carry_stages(plan, [base.nodes[n].op for n in order], seq)
        for nid, view in _block_views(plan, self.machine, width).items():
            plan.with_view(nid, to_attr(view, self.machine))
        b, steps_order, steps, _ = build_steps(
            plan, self.machine, compute_model(self.cost, self.profile), self.optimizer
        )
        cuts = self.layers[0]
        out = {
            k: [0.0] * (len(cuts) + 1) for k in ("fwd", "bwd", "saved", "weights", "update", "out", "sync")
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
        for i, c in enumerate(cuts):
            out["out"][i] = piece(micro.nodes[c].types[0]).nbytes  # type: ignore[union-attr]
        for name in ("fwd", "bwd", "saved", "weights", "update", "sync"):
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


@dataclass
class StageModel:
    """Stage costs for the partition DP and for pricing partitions without building plans."""

    costs: LayerCosts
    microbatches: int
    schedule: str = "1f1b"
    tensor: int = 1
    """Tensor-parallel degree inside every stage (Megatron layout); 1: data parallel."""

    @property
    def machine(self) -> Machine:
        return self.costs.machine

    def rows(self, width: int) -> int | None:
        r, rest = divmod(self.costs.batch, self.microbatches * width)
        return r if r >= 1 and not rest else None

    def cost(
        self, first: int, last: int, start: int, width: int, next_width: int | None = None
    ) -> StageCost | None:
        """Layers [first, last) on devices [start, start + width); None if the batch does not split.
        With `next_width`, its send to the next stage (on the devices right after it)."""
        if self.tensor > 1:
            return self._tensor_cost(first, last, start, width, next_width)
        rows = self.rows(width)
        if rows is None or not self.costs.feasible(start, rows):
            return None
        devices = list(range(start, start + width))
        kinds = list({self.machine.kind_of(d).name: d for d in devices}.values())
        total = self.costs.total
        fwd = max(total(d, rows, "fwd", first, last) for d in kinds)
        bwd = max(total(d, rows, "bwd", first, last) for d in kinds)
        weights = total(kinds[0], rows, "weights", first, last)
        _, update, moved, tied_sync = self._tied_share(
            self.costs.tied(kinds[0], rows), first, last, start, width
        )
        sync = collective_time("all_reduce", weights - moved, devices, self.machine) if width > 1 else 0.0
        update += max(total(d, rows, "update", first, last) for d in kinds)
        send = 0.0 if next_width is None else self.transfer(last, start + width, next_width)
        return StageCost(
            fwd, bwd, send, 0.0, sync + tied_sync, update, total(kinds[0], rows, "saved", first, last)
        )

    def _tied_share(
        self, tied: Sequence[TiedWeight], first: int, last: int, start: int, width: int
    ) -> tuple[float, float, float, float]:
        """What the tied weights add to layers [first, last) on devices [start, start + width):
        (bytes of the copies it holds beyond the profile's, their update seconds, bytes the
        group's own gradient sync no longer moves, seconds of the copies' all-reduce). A stage
        holding some of a weight's readers holds a copy; if other stages hold readers too, its
        gradient is all-reduced over every holder once per iteration (as the program does):
        priced with the other holders on the devices of the other end of the pipeline (the
        first stage's, or the last's), where the embedding and the head of a model sit."""
        held = update = moved = seconds = 0.0
        D = self.machine.num_devices
        for t in tied:
            here = {k for k in t.layers if first <= k < last}
            if not here:
                continue
            owner = first <= min(t.layers) < last
            if not owner:
                held += t.nbytes
                update += t.update_s
            if here == t.layers:
                continue
            if owner:
                moved += t.nbytes
                seconds -= t.sync_s
            other = D - width if owner else 0
            offsets = range(width) if t.offsets is None else t.offsets
            devices = sorted({start + o for o in offsets} | {other + o for o in offsets})
            seconds += collective_time("all_reduce", t.nbytes, devices, self.machine)
        return held, update, moved, seconds

    def _tensor_profile(self, width: int) -> dict[str, list[float]] | None:
        rows, rest = divmod(self.costs.batch, self.microbatches)
        if rest or width % self.tensor:
            return None
        try:
            return self.costs.of_tensor(width, self.tensor, rows)
        except PipelineError:
            return None

    def _tensor_cost(
        self, first: int, last: int, start: int, width: int, next_width: int | None
    ) -> StageCost | None:
        p = self._tensor_profile(width)
        if p is None:
            return None

        def total(what: str) -> float:
            return p["sum_" + what][last] - p["sum_" + what][first]

        send = 0.0 if next_width is None else self.transfer(last, start + width, next_width)
        rows = self.costs.batch // self.microbatches
        _, update, _, sync = self._tied_share(
            self.costs.tied(0, rows, width, self.tensor), first, last, start, width
        )
        return StageCost(
            total("fwd"),
            total("bwd"),
            send,
            0.0,
            total("sync") + sync,
            total("update") + update,
            total("saved"),
        )

    def transfer(self, boundary: int, start: int, width: int) -> float:
        """The activation after layer `boundary` - 1 into a stage on devices [start, start +
        width): each of its devices receives its B/(M w) rows over the link from the device before."""
        link = self.machine.link(start - 1, start) if start > 0 else None
        if link is None or boundary < 1:
            return 0.0
        if self.tensor > 1:  # the activation is whole on each device of the group: sent once
            p = self._tensor_profile(width)
            return 0.0 if p is None else link.latency + p["out"][boundary - 1] / link.bandwidth
        rows = self.rows(width)
        if rows is None:
            return 0.0
        return link.latency + self.costs.of(start, rows)["out"][boundary - 1] / link.bandwidth

    def memory(self, first: int, last: int, width: int, inflight: int) -> float:
        if self.tensor > 1:
            p = self._tensor_profile(width)
            assert p is not None
            weights = p["sum_weights"][last] - p["sum_weights"][first]
            micro_rows = self.costs.batch // self.microbatches
            tied = self.costs.tied(0, micro_rows, width, self.tensor)
            weights += self._tied_share(tied, first, last, 0, width)[0]
            return self.costs.state_bytes(weights) + inflight * (p["sum_saved"][last] - p["sum_saved"][first])
        rows = self.rows(width)
        assert rows is not None and self.costs.feasible(0, rows)
        total = self.costs.total
        weights = total(0, rows, "weights", first, last)
        weights += self._tied_share(self.costs.tied(0, rows), first, last, 0, width)[0]
        return self.costs.state_bytes(weights) + inflight * total(0, rows, "saved", first, last)

    def capacity(self, start: int, width: int) -> float:
        return min(self.machine.kind_of(d).memory for d in range(start, start + width))

    def stage_time(self, c: StageCost) -> float:
        return self.microbatches * (c.forward_s + c.backward_s) + c.sync_s + c.update_s

    def inflight(self, devices_after: int) -> int:
        if self.schedule == "gpipe":
            return self.microbatches
        return min(self.microbatches, 1 + devices_after)


def partition(
    model: StageModel,
    devices: int | None = None,
    stages: int | None = None,
    widths: Sequence[int] | None = None,
) -> Partition | None:
    """PipeDream's DP (see the module docstring); None when nothing fits. `stages`: exactly that
    many stages (default: any); `widths`: the replications a stage may have (default: any)."""
    L = model.costs.count
    D = devices or model.machine.num_devices
    allowed = sorted(set(widths) if widths is not None else set(range(1, D + 1)))
    counts = [stages] if stages is not None else [None]
    # best[(j, d, s)]: layers [0, j) on devices [0, d) (in s stages, or any: s = None)
    best: dict[tuple[int, int, int | None], tuple[float, tuple[Stage, ...]]] = {}
    levels = range(1, (stages or 1) + 1) if stages is not None else [None]
    for s in levels:
        for j in range(1, L + 1):
            for d in range(1, D + 1):
                found: tuple[float, tuple[Stage, ...]] = (math.inf, ())
                for w in allowed:
                    c = d - w
                    if c < 0:
                        break
                    for i in range(0, j):
                        if (i == 0) != (c == 0):
                            continue
                        if i == 0:
                            if s not in (None, 1):
                                continue
                            prev: tuple[float, tuple[Stage, ...]] | None = (0.0, ())
                        else:
                            prev = best.get((i, c, None if s is None else s - 1))
                        if prev is None or prev[0] >= found[0]:
                            continue
                        value = _stage_value(model, i, j, c, w, D - d, prev[1])
                        if value is None:
                            continue
                        total = max(prev[0], value)
                        if total < found[0] or (total == found[0] and len(prev[1]) + 1 < len(found[1])):
                            found = (total, (*prev[1], Stage(i, j, c, w)))
                if found[1]:
                    best[(j, d, s)] = found
    finals = [v for (j, _, s), v in best.items() if j == L and s == counts[0]]
    if not finals:
        return None
    objective, chosen = min(finals, key=lambda v: (v[0], len(v[1])))
    return Partition(chosen, objective)


def _stage_value(
    model: StageModel, i: int, j: int, c: int, w: int, after: int, before: tuple[Stage, ...]
) -> float | None:
    cost = model.cost(i, j, c, w)
    if cost is None:
        return None
    if model.memory(i, j, w, model.inflight(after)) > model.capacity(c, w):
        return None
    value = model.stage_time(cost)
    if before:  # activations in, gradients back, on the link into it
        value = max(value, model.microbatches * 2 * model.transfer(i, c, w))
    return value


def partition_value(model: StageModel, stages: Sequence[Stage]) -> float | None:
    """The DP's objective for a given partition (what `exhaustive_partition` minimizes)."""
    total = 0.0
    D = model.machine.num_devices
    for k, st in enumerate(stages):
        end = st.start + st.width
        value = _stage_value(model, st.first, st.last, st.start, st.width, D - end, tuple(stages[:k]))
        if value is None:
            return None
        total = max(total, value)
    return total


def exhaustive_partition(model: StageModel, devices: int | None = None) -> Partition | None:
    """Every partition of the layers into stages on consecutive device groups (small graphs)."""
    L = model.costs.count
    D = devices or model.machine.num_devices
    best: Partition | None = None
    for s in range(1, min(L, D) + 1):
        for cuts in itertools.combinations(range(1, L), s - 1):
            bounds = (0, *cuts, L)
            for widths in itertools.product(range(1, D + 1), repeat=s):
                if sum(widths) > D:
                    continue
                starts = [sum(widths[:k]) for k in range(s)]
                stages = tuple(Stage(bounds[k], bounds[k + 1], starts[k], widths[k]) for k in range(s))
                value = partition_value(model, stages)
                if value is not None and (best is None or value < best.objective):
                    best = Partition(stages, value)
    return best


def stage_costs(model: StageModel, stages: Sequence[Stage]) -> list[StageCost]:
    """The `StageCost`s of a partition (what the schedule simulation takes)."""
    out = []
    for k, st in enumerate(stages):
        nxt = stages[k + 1].width if k + 1 < len(stages) else None
        c = model.cost(st.first, st.last, st.start, st.width, nxt)
        if c is None:
            raise PipelineError(f"stage {k}: the batch does not split into {model.microbatches} x {st.width}")
        back = model.transfer(st.first, st.start, st.width) if k > 0 else 0.0
        out.append(
            StageCost(c.forward_s, c.backward_s, c.send_s, back, c.sync_s, c.update_s, c.activation_bytes)
        )
    return out


# --- plans ------------------------------------------------------------------------------------


def materialize(
    graph: Graph,
    machine: Machine,
    stages: Sequence[Stage],
    schedule: str,
    microbatches: int,
    virtual: int = 1,
    max_layers: int | None = None,
    tensor: int = 1,
    untied: bool = True,
    sequence: bool = False,
) -> Graph:
    """The pipelined plan of a partition (see the module docstring); `graph` unparallelized.
    With `virtual` > 1, stage k runs on the group of stage k mod (S / virtual); `max_layers` as
    the partition's `LayerCosts` had it (its layers are those of `layer_of`). With `tensor` > 1
    every stage runs the Megatron layout (`strategies.megatron_layouts`, tensor parallel
    `tensor` x data parallel width / `tensor`) on its group, views chosen by the mapping DP on
    the first group and shifted to each stage's. A weight read on several stages is held by
    each (`untie`), or with `untied` false by its first reader's stage only, the later readers
    receiving it down the pipeline each micro-batch (and sending its gradient back). `sequence`:
    the Megatron layout with sequence parallelism."""
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
        return _batch_forms(operands, width[k]) if width[k] > 1 else []

    if tensor > 1:
        if len(set(width)) != 1 or width[0] % tensor:
            raise PipelineError(f"tensor-parallel stages need one width, a multiple of {tensor}: got {width}")
        layout = megatron_layouts(graph, width[0] // tensor, tensor, sequence=sequence)[0].graph
        plan = fuse_collectives(simplify(layout))
    else:
        plan = fuse_collectives(simplify(rebuild(base, propose)))
    # the loss stays in partial sums, one per pipeline (copies over a tensor-parallel group): each
    # pipeline's last stage seeds its own, no collective
    stage = carry_stages(plan, [base.nodes[n].op for n in order], stage_seq)
    _carry_names(plan, base, order)
    views = _block_views(plan, machine, width[0]) if tensor > 1 else None
    for nid, node in list(plan.nodes.items()):
        k = stage[nid]
        if views is not None:
            view = to_attr(views[nid]._replace(start=views[nid].start + start[k]), machine)
        else:
            view = to_attr(canonical_view(task_degrees(node.types[0]), start[k]), machine)
        plan.nodes[nid] = node.with_plan(stage=k, view=view)
    plan.function_attrs = plan.kept_function_attrs()
    plan.set_plan(GraphPlan(Pipeline(schedule, microbatches, virtual)))
    return plan


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
    rebuilt = [
        nid
        for nid in plan.topological()
        if not plan.nodes[nid].is_source and not plan.nodes[nid].op.startswith("parallel.")
    ]
    for nid, old in zip(rebuilt, order, strict=True):
        if plan.nodes[nid].hint is None:
            plan.nodes[nid] = replace(plan.nodes[nid], hint=base.nodes[old].hint)


def carry_stages(plan: Graph, ops: Sequence[str], stages: Sequence[int]) -> dict[int, int]:
    """Each node's stage in `plan`, a rebuild of a graph whose compute ops (non-source,
    non-parallel, in topological order) were `ops` with `stages`: the rebuild keeps those ops in
    order; parallel ops and sources take their first reader's stage (an output its producer's)."""
    order = [
        nid
        for nid in plan.topological()
        if not plan.nodes[nid].is_source and not plan.nodes[nid].op.startswith("parallel.")
    ]
    if [plan.nodes[n].op for n in order] != list(ops):
        raise PipelineError("the rebuilt plan changed the graph's ops: cannot carry the stages over")
    stage: dict[int, int] = dict(zip(order, stages, strict=True))
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


def _block_views(plan: Graph, machine: Machine, width: int) -> dict[int, View]:
    """Views of every node on devices [0, width) by the mapping DP."""
    from unityc.search.plans import Pricing

    mapped = Pricing().mapper(machine).map(plan, block=Block(0, width))
    if not mapped.feasible:
        raise PipelineError(f"the stage layout has no feasible mapping on {width} devices")
    return mapped.views


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
    return [m for m in (2**k for k in range(7)) if m <= limit and batch % m == 0]


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
    plan = materialize(graph, machine, part.stages, schedule, M, virtual, options.max_layers, part.tensor)
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
    from unityc.cost.pipeline import simulate_pipeline

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


def pipedream_plan(
    graph: Graph,
    machine: Machine,
    options: PipelineOptions | None = None,
    stages: int | None = None,
    costs: LayerCosts | None = None,
) -> PipelinePlan:
    """PipeDream: its partition DP (stage replication, per-stage device groups), the 1F1B
    schedule (flushed, as the IR's plans are; `estimate{schedule="2bw"}` prices 2BW), the
    micro-batch count whose simulated iteration is fastest. `costs`: the graph's layer costs,
    if already had (shared with other plans of the same graph and machine)."""
    options = options or PipelineOptions()
    graph = _plain(graph)
    found = best_partition(graph, machine, options, "1f1b", stages, costs)
    if found is None:
        raise PipelineError("pipedream: no partition fits the machine's memory")
    part, M = found
    return _finish("pipedream", graph, machine, part, "1f1b", M, options, describe(part, "1f1b", M))


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
    graph = _plain(graph)
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
    graph = _plain(graph)
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
    plan = materialize(
        graph, machine, stages, "interleaved-1f1b", micro, virtual, options.max_layers, part.tensor
    )
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
    costs are computed once for all of them, and pipedream's plan is the 1F1B DP's."""
    options = options or PipelineOptions()
    graph = _plain(graph)
    if machine.num_devices < 2:
        return []
    plans: list[PipelinePlan] = []
    costs = options.layer_costs(graph, machine)
    pipedream: PipelinePlan | None = None
    for schedule, staged in itertools.product(("1f1b", "gpipe"), (False, True) if tensor else (False,)):
        try:
            found = best_partition(graph, machine, options, schedule, costs=costs, tensor=staged)
        except (PipelineError, ValueError):
            continue
        if found is not None and len(found[0].stages) > 1:
            part, M = found
            plans.append(
                _finish("pipeline", graph, machine, part, schedule, M, options, describe(part, schedule, M))
            )
            if schedule == "1f1b" and not staged:  # pipedream_plan's own DP and plan
                pipedream = replace(plans[-1], name="pipedream")
            if schedule == "1f1b":
                with contextlib.suppress(PipelineError, ValueError):
                    plans.append(interleaved_plan(graph, machine, part, M, costs, options))
    for build in (
        lambda: pipedream or pipedream_plan(graph, machine, options, costs=costs),
        lambda: hetero_gpipe_plan(graph, machine, options, costs),
        lambda: even_split_plan(graph, machine, options),
    ):
        try:
            plans.append(build())
        except (PipelineError, ValueError):
            continue
    # a one-stage "pipeline" is the graph on one group: no pipeline (the search has those plans)
    return [p for p in plans if p.partition is None or len(p.partition.stages) > 1]


def _plain(graph: Graph) -> Graph:
    from unityc.search.unity import strip_views

    out = strip_views(graph)
    out.function_attrs = graph.kept_function_attrs()
    return out
