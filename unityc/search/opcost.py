"""What the machine-mapping DP prices: ops and edges of a candidate graph at given views.

The cost of a mapping is a sum over ops of their compute (forward + backward on the busiest
device), plus a sum over edges of the data movement an edge implies: the collectives of a
parallel op (from where its input lives to where its output goes) and the point-to-point
transfers of operand pieces held on another device than the task reading them, forward and
backward. Weights (and other sources) are not variables: each takes the placement its first
reader wants (the device of the task reading each piece), so reading it moves nothing; its
optimizer step and the all-reduce of its gradient copies (weighted by `sync_weight`, see
`SYNC_WEIGHT`) are charged to that reader. Side ops (`graph.side_ops`: an attention mask
built from the inputs alone, read by every layer) are placed like sources, unpriced here:
otherwise the edges from them to every layer would leave the DP no bottleneck (the whole
graph one subproblem, its cache keyed by every layer's views); `estimate` prices them. The
objective is
`time + memory_weight * memory`, memory being a per-device upper bound (what each op keeps on
its busiest device, summed); an op that alone overflows its devices is charged
`OVERFLOW_SECONDS` per capacity's worth. Everything is priced by `cost/pricing.py`, the
functions `estimate` uses, and cached across candidates by what it depends on.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unityc.cost.attention_bytes import attention_core_task_bytes
from unityc.cost.backward import core_recomputed
from unityc.cost.communication import Coord
from unityc.cost.compute import SOURCES
from unityc.cost.estimate import attention_task_bytes, gradient_flags, node_attrs, node_form_of, saved_values
from unityc.cost.pricing import (
    ComputeModel,
    Placed,
    Placement,
    as_array,
    compute_parts,
    form_coords,
    form_grid,
    parallel_parts,
    phase,
    piece,
    sum_concat_parts,
    transfers_phase,
    type_info,
    weight_parts,
)
from unityc.cost.roles import placement_reps
from unityc.dialects.forms import Form
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Node, Ref, full_attrs, side_ops
from unityc.graph.precision import priced_graph
from unityc.machine.spec import Machine
from unityc.search.views import (
    Block,
    View,
    as_view,
    canonical_view,
    last_device,
    task_degrees,
    view_array,
    view_placement,
    views_in,
)

INF = float("inf")
OVERFLOW_SECONDS = 1e3
"""Charged per capacity's worth of memory an op alone needs beyond its device's capacity."""


DP_ROLE_THRESHOLD = 512
"""The DP prices ops and edges by roles (`Prices._by_roles`) on machines of more devices than
this: finding an op's roles costs about a millisecond of array work, more than pricing its
tasks one by one below a few hundred devices (zoo BERT's search at 128 GPUs: 1.6 CPU s per
device, 2.3 by roles; at 2,048: 4.0 and 3.1)."""


SYNC_WEIGHT = 1.0
"""Share of a weight's gradient all-reduce charged to the iteration: all of it, as the runtime
syncs after the backward (below 1 would model a runtime that overlaps the two)."""


def reader_placement(
    form: Form, i: int, where: Mapping[Coord, int] | np.ndarray, degrees: tuple[int, ...]
) -> np.ndarray | None:
    """Each piece of operand `i` on the device of the first task reading it (tasks in order),
    if every piece is read, as an array shaped by `degrees`; over all tasks at once. `where`:
    the op's placement, or its array."""
    grid = form_grid(form)
    own = where if isinstance(where, np.ndarray) else as_array(where, form.degrees_of_result())
    readers = own[form_coords(form, form.results[0], grid)].ravel()
    pieces = np.ravel_multi_index(form_coords(form, form.operands[i], grid), degrees).ravel()  # type: ignore[arg-type]
    read, first = np.unique(pieces, return_index=True)
    if len(read) != math.prod(degrees):
        return None
    return readers[first].reshape(degrees)


@dataclass(frozen=True)
class MappingOptions:
    sync_weight: float = SYNC_WEIGHT
    memory_weight: float = 0.0
    """Seconds charged per byte of the per-device memory bound (0: memory is free)."""
    max_starts: int = 2
    """Placements of an op with fewer tasks than its block's devices (block-aligned starts)."""
    side_by_side: bool = True
    """Whether independent branches may run side by side on disjoint device blocks."""


@dataclass(frozen=True)
class Cost:
    time: float
    memory: float

    def objective(self, memory_weight: float) -> float:
        return self.time + memory_weight * self.memory

    def then(self, other: Cost) -> Cost:
        return Cost(self.time + other.time, self.memory + other.memory)

    def beside(self, other: Cost) -> Cost:
        return Cost(max(self.time, other.time), max(self.memory, other.memory))


ZERO = Cost(0.0, 0.0)
INFEASIBLE = Cost(INF, INF)


@dataclass
class Problem:
    """What pricing one candidate graph needs, computed once per graph."""

    graph: Graph
    order: list[int]
    position: dict[int, int]
    ops: list[int]
    """The DP's variables: non-source nodes, and sources with a fixed view."""
    producers: dict[int, list[tuple[int, int, int]]]
    """Per op: (operand index, producer op, result index) for operands produced by ops."""
    consumers: dict[int, list[tuple[int, int, int]]]
    """Per op: (consumer op, operand index, result index)."""
    attached: dict[int, list[tuple[int, int]]]
    """Per op: (operand index, source node) for sources it places."""
    signature: dict[int, Any]
    sig: dict[int, int]
    """Hashes of the signatures (what cache keys hold)."""
    fixed: Mapping[int, View]
    gets_grad: set[Ref]
    shapes: dict[frozenset[int], Any] = field(default_factory=dict)
    """Per subset of ops, its structure (the DP's memo, see `mapping._Shape`)."""


class Prices:
    """Prices ops and edges on one machine with one cost model; caches across graphs."""

    def __init__(
        self,
        machine: Machine,
        compute: ComputeModel,
        optimizer: str = "sgd",
        options: MappingOptions | None = None,
    ):
        self.machine = machine
        self.compute = compute
        self.optimizer = optimizer
        self.options = options or MappingOptions()
        self.by_roles = machine.num_devices > DP_ROLE_THRESHOLD
        """Whether ops and edges are priced on one device per role (`_by_roles`)."""
        self._reps: dict[Any, np.ndarray] = {}
        """Representative masks (`placement_reps`) by what they depend on: forms, shapes, views."""
        self._node: dict[Any, tuple[Cost, tuple[View | None, ...]]] = {}
        self._edge: dict[Any, float] = {}

    def _problem(
        self, graph: Graph, fixed: Mapping[int, View], requires: Iterable[Ref], roots: Iterable[Ref] | None
    ) -> Problem:
        graph = priced_graph(graph)  # values in the element types the program runs them in
        order = graph.topological()
        _, gets_grad = gradient_flags(graph, order, requires, roots)
        saved = saved_values(graph, order, gets_grad)
        core = core_recomputed(graph, order)
        side = side_ops(graph)  # like sources: they would join every layer to the first
        ops = [nid for nid in order if (not graph.nodes[nid].is_source and nid not in side) or nid in fixed]
        is_op = set(ops)
        producers: dict[int, list[tuple[int, int, int]]] = {nid: [] for nid in ops}
        consumers: dict[int, list[tuple[int, int, int]]] = {nid: [] for nid in ops}
        attached: dict[int, list[tuple[int, int]]] = {nid: [] for nid in ops}
        placed: set[int] = set()
        for nid in ops:
            for i, ref in enumerate(graph.nodes[nid].operands):
                if ref is None:
                    continue
                if ref[0] in is_op:
                    producers[nid].append((i, ref[0], ref[1]))
                    consumers[ref[0]].append((nid, i, ref[1]))
                elif ref[0] not in placed:
                    placed.add(ref[0])
                    attached[nid].append((i, ref[0]))
        signature: dict[int, Any] = {}
        sig: dict[int, int] = {}
        for nid in ops:
            signature[nid], sig[nid] = self._signature(
                graph, nid, attached[nid], gets_grad, saved, fixed.get(nid), nid in core
            )
        position = {nid: i for i, nid in enumerate(order)}
        return Problem(
            graph, order, position, ops, producers, consumers, attached, signature, sig, fixed, gets_grad
        )

    def _signature(
        self,
        graph: Graph,
        nid: int,
        attached: list[tuple[int, int]],
        gets_grad: set[Ref],
        saved: Mapping[Ref, None],
        fixed: View | None,
        core: bool = False,
    ) -> tuple[Any, int]:
        """What a node's own cost depends on (besides its view), and a hash of it; `core`: an
        attention recomputing only its core (`backward.core_recomputed`)."""
        node = graph.nodes[nid]
        operand_types = tuple(None if r is None else graph.type_of(r) for r in node.operands)
        grads = tuple(r is not None and r in gets_grad for r in node.operands)
        results = [(nid, i) for i in range(len(node.types))]
        backward = any(r in gets_grad for r in results) and node.op not in SOURCES
        kept = tuple(r in saved for r in results)
        sources = tuple((i, graph.nodes[s].op, (s, 0) in gets_grad) for i, s in attached)
        key = node.attr("key") if node.is_source else None
        facts = (grads, backward, kept, sources, key, core)
        signature = (node.op, node.attrs, operand_types, node.types, *facts)
        types = tuple(None if t is None else type_info(t).key for t in operand_types)
        results_key = tuple(type_info(t).key for t in node.types)
        digest = hash((node.op, node.attrs, types, results_key, *facts, fixed))
        return signature, digest

    # --- node and edge costs -------------------------------------------------------------------

    def _node_cost(self, p: Problem, nid: int, view: View) -> tuple[Cost, tuple[View | None, ...]]:
        """An op's own cost at `view` (compute, what it keeps, the sources it places) and the
        views of its attached sources. On a machine of more than `DP_ROLE_THRESHOLD` devices the
        op and the weights it places are priced on one device per role (`_by_roles`): the same
        cost, at a price that does not grow with the devices."""
        key = (p.sig[nid], view)
        hit = self._node.get(key)
        if hit is not None:
            return hit
        node = p.graph.nodes[nid]
        _, _, operand_types, _, grads, backward, kept, _, _, core = p.signature[nid]
        degrees = task_degrees(node.types[0])
        form = None if node.op.startswith("parallel.") else node_form_of(node, operand_types)
        where: Placement
        weights: Sequence[Placement]
        types = self._attached_types(p, nid)
        if self.by_roles:
            source_views, moved = self._source_views(p, nid, node, form, view_array(degrees, view), view)
            placed = [(task_degrees(t), v) for t, v in zip(types, source_views, strict=True)]
            where, weights = self._by_roles(form, degrees, view, placed)
        else:
            where = view_placement(degrees, view)
            source_views, moved = self._source_views(p, nid, node, form, where, view)
            weights = [view_placement(task_degrees(t), v) for t, v in zip(types, source_views, strict=True)]
        memory: dict[int, float] = {}
        time = 0.0
        if form is not None:
            attrs = node_attrs(node)
            none = [None] * len(operand_types)
            parts = compute_parts(
                self.machine, self.compute, node.op, attrs, form, where, operand_types, none, none,
                node.types, list(grads), backward,
            )  # fmt: skip
            time += max(s for _, s in parts.fwd) + max(s for _, s in parts.bwd)
            if backward and node.op == "pcg.attention":
                per_task = attention_task_bytes(attrs, operand_types, node.types[0])
                if core:  # its core's internals are made again in backward (`steps.StepBuilder.core`)
                    per_task -= attention_core_task_bytes(attrs, operand_types, node.types[0])
                for device, count in parts.tasks.items():
                    memory[device] = memory.get(device, 0.0) + per_task * count
        for t, keep in zip(node.types, kept, strict=True):
            if keep:
                nbytes = piece(t).nbytes  # type: ignore[union-attr]
                for device in where.values():
                    memory[device] = memory.get(device, 0.0) + nbytes
        for (i, source), source_where, extra in zip(p.attached[nid], weights, moved, strict=True):
            time += extra
            src = p.graph.nodes[source]
            if src.op != "pcg.weight":
                continue
            t = operand_types[i]
            assert t is not None
            wparts = weight_parts(self.machine, self.optimizer, t, source_where, (source, 0) in p.gets_grad)
            time += self.options.sync_weight * phase(wparts.after_backward) + max(
                (s for _, s in wparts.update), default=0.0
            )
            for device, held in wparts.held.items():
                memory[device] = memory.get(device, 0.0) + sum(held.values())
        overflow = max(
            (nbytes / self.machine.kind_of(d).memory - 1 for d, nbytes in memory.items()), default=0.0
        )
        if overflow > 0:  # this op alone does not fit its devices: ruled out unless nothing fits
            time += OVERFLOW_SECONDS * overflow
        cost = Cost(time, max(memory.values(), default=0.0))
        result = (cost, tuple(source_views))
        self._node[key] = result
        return result

    def _attached_types(self, p: Problem, nid: int) -> list[TensorType]:
        """The types of the sources op `nid` places, in `p.attached` order."""
        types = p.signature[nid][2]
        return [types[i] for i, _ in p.attached[nid]]

    def _source_views(
        self, p: Problem, nid: int, node: Node, form: Form | None, where: Placement | np.ndarray, view: View
    ) -> tuple[list[View], list[float]]:
        """The views of the sources op `nid` places (at `view`, its pieces at `where`) and the
        seconds of moving each (`_source_view`)."""
        views: list[View] = []
        moved: list[float] = []
        for (i, _), t in zip(p.attached[nid], self._attached_types(p, nid), strict=True):
            sview, extra = self._source_view(p, nid, node, form, where, view, i, t)
            views.append(sview)
            moved.append(extra)
        return views, moved

    def _by_roles(
        self,
        form: Form | None,
        degrees: tuple[int, ...],
        view: View,
        sources: list[tuple[tuple[int, ...], View]],
    ) -> tuple[Placed, list[Placed]]:
        """The op's placement (`degrees` at `view`) and its sources' (degrees, view) as `Placed`
        on the representatives of the roles of their devices (`roles.placement_reps`: the op's
        pieces and its tasks along each factor, the sources' pieces and copy groups; found once
        per form and views, which ops of one kind share)."""
        own = view_array(degrees, view)
        arrays = [view_array(d, v) for d, v in sources]
        key = (form, degrees, view, tuple(sources))
        mask = self._reps.get(key)
        if mask is None:
            grid = [] if form is None else [own[form_coords(form, form.results[0], form_grid(form))]]
            mask = self._reps[key] = placement_reps(self.machine, [own, *arrays, *grid])
        return Placed(own, mask), [Placed(a, mask) for a in arrays]

    def _source_view(
        self, p: Problem, nid: int, node: Node, form: Any, where: Mapping[Any, int] | np.ndarray,
        view: View, i: int, t: TensorType,
    ) -> tuple[View, float]:  # fmt: skip
        """Where a source read by operand `i` goes: each piece on the device of the task reading
        it when a view can say so (no transfer), else row-major from the reader's start (its
        transfers are charged). Its copies may be numbered in any order (a task reads any copy
        of its piece on its own device, `transfers.read_from`): the view is sought with each
        piece's copies in device order (a view's strides are positive), so that readers whose
        copy index runs over two task factors (a position table read at sequence x data) still
        find theirs in place."""
        degrees = task_degrees(t)
        if form is not None:
            derived = reader_placement(form, i, where, degrees)
            if derived is not None:
                sview = as_view(degrees, np.sort(derived, axis=-1))
                if sview is not None:
                    return sview, 0.0
        sview = canonical_view(degrees, view.start)
        if last_device(degrees, sview) >= self.machine.num_devices:
            sview = canonical_view(degrees, 0)
        return sview, self._edge_cost(p, t, sview, nid, view, i)

    def _edge_cost(self, p: Problem, t: TensorType, pview: View, nid: int, view: View, i: int) -> float:
        """Moving operand `i` of op `nid` (at `view`), of type `t` placed at `pview` (a source
        read from any of its copies, `transfers.read_from`)."""
        node = p.graph.nodes[nid]
        ref = node.operands[i]
        any_copy = ref is not None and p.graph.nodes[ref[0]].is_source
        key = (type_info(t).key, pview, p.sig[nid], view, i, any_copy)
        hit = self._edge.get(key)
        if hit is not None:
            return hit
        _, _, operand_types, _, grads, _, _, _, _, _ = p.signature[nid]
        if not node.op.startswith("parallel."):  # over the views' arrays: no dict of every piece
            t_i = operand_types[i]
            assert t_i is not None
            form = node_form_of(node, operand_types)
            own, source = view_array(task_degrees(node.types[0]), view), view_array(task_degrees(t), pview)
            seconds = transfers_phase(form, own, i, t_i, source, grads[i], self.machine, any_copy)
            self._edge[key] = seconds
            return seconds
        source_where: Placement
        where: Placement
        if self.by_roles and node.op != "parallel.sum_concat":
            source, own = view_array(task_degrees(t), pview), view_array(task_degrees(node.types[0]), view)
            reps_key = (node.op, node.attrs, source.shape, pview, own.shape, view)
            mask = self._reps.get(reps_key)
            if mask is None:
                mask = self._reps[reps_key] = placement_reps(self.machine, [source, own], (node, source, own))
            source_where, where = Placed(source, mask), Placed(own, mask)
        else:
            source_where = view_placement(task_degrees(t), pview)
            where = view_placement(task_degrees(node.types[0]), view)
        if node.op == "parallel.sum_concat":
            only: list[Any] = [source_where if j == i else None for j in range(len(operand_types))]
            fwd, bwd = sum_concat_parts(self.machine, operand_types, only, node.types[0], where, grads)
        else:
            fwd, bwd = parallel_parts(
                self.machine,
                node.op,
                full_attrs(node.op, node.attrs),
                t,
                source_where,
                node.types[0],
                where,
                grads[0],
            )
        seconds = phase(fwd) + phase(bwd)
        self._edge[key] = seconds
        return seconds

    def _views(self, p: Problem, nid: int, block: Block) -> tuple[View, ...]:
        if nid in p.fixed:
            return (p.fixed[nid],)
        degrees = task_degrees(p.graph.nodes[nid].types[0])
        return views_in(degrees, block, self.options.max_starts)

    def _leaf(self, p: Problem, nid: int, view: View, ext: Mapping[int, View]) -> Cost:
        """An op at `view` with the edges to the ops around it whose views are known."""
        cost, _ = self._node_cost(p, nid, view)
        moved = 0.0
        for i, producer, result in p.producers[nid]:
            if producer in ext:
                moved += self._edge_cost(p, p.graph.type_of((producer, result)), ext[producer], nid, view, i)
        for consumer, i, result in p.consumers[nid]:
            if consumer in ext:
                moved += self._edge_cost(p, p.graph.type_of((nid, result)), view, consumer, ext[consumer], i)
        return Cost(cost.time + moved, cost.memory)

    # --- the recursion -------------------------------------------------------------------------

    def _direct(self, p: Problem, a: int, a_view: View, b: int, b_view: View) -> float:
        """Edges from op `a` straight into op `b`."""
        return sum(
            self._edge_cost(p, p.graph.type_of((a, r)), a_view, b, b_view, i)
            for c, i, r in p.consumers[a]
            if c == b
        )
