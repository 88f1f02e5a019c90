"""The machine-mapping dynamic program (Unity §5.2): a view for every op of a candidate graph.

The cost of a mapping is a sum over ops of their compute (forward + backward on the busiest
device), plus a sum over edges of the data movement an edge implies: the collectives of a
parallel op (from where its input lives to where its output goes) and the point-to-point
transfers of operand pieces held on another device than the task reading them, forward and
backward. Weights (and other sources) are not variables: each takes the placement its first
reader wants (the device of the task reading each piece), so reading it moves nothing; its
optimizer step and the all-reduce of its gradient copies (weighted by `sync_weight`, as the
gradient sync mostly overlaps the backward pass) are charged to that reader. The objective is
`time + memory_weight * memory`, memory being a per-device upper bound (what each op keeps on
its busiest device, summed).

The DP recurses over the series-parallel structure of the graph's ops (sources left out):

* a *sequential split* at a bottleneck b (every other op is an ancestor or a descendant of b
  and no edge skips b): for each view v of b, the ops before b (knowing b's view) + b + the ops
  after b (knowing b's view);
* a *parallel split* when the ops fall into independent components: all on the whole device
  block one after the other (times add), or side by side on two disjoint blocks (times max);
* otherwise (not series-parallel) views are chosen greedily in topological order.

Sub-results are cached across candidates by a structural hash of the subgraph, the views of the
ops around it and the device block, so a rewrite re-prices only what it changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from unityc.cost.compute import SOURCES
from unityc.cost.estimate import attention_task_bytes, gradient_flags, node_attrs, node_form_of, saved_values
from unityc.cost.pricing import (
    ComputeModel,
    compute_parts,
    parallel_parts,
    phase,
    piece,
    tasks_and_transfers,
    type_info,
    weight_parts,
)
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Node, Ref, full_attrs
from unityc.machine.spec import Machine
from unityc.search.views import (
    Block,
    View,
    as_view,
    canonical_view,
    task_degrees,
    uniform_node_size,
    view_placement,
    views_in,
)

INF = float("inf")
OVERFLOW_SECONDS = 1e3
"""Charged per capacity's worth of memory an op alone needs beyond its device's capacity."""


@dataclass(frozen=True)
class MappingOptions:
    sync_weight: float = 0.5
    """Share of a weight's gradient all-reduce charged to the iteration (the rest overlaps)."""
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
class Mapped:
    """A mapping of one graph: its cost and a view for every node (sources included)."""

    cost: Cost
    objective: float
    views: dict[int, View]

    @property
    def feasible(self) -> bool:
        return math.isfinite(self.objective)


@dataclass
class _Sub:
    """A cached sub-result: cost and views in the subgraph's canonical node order."""

    cost: Cost
    objective: float
    views: tuple[View, ...]


@dataclass(frozen=True)
class _Chain:
    """A series decomposition: bottleneck ops, and the ops before the first, between each two,
    and after the last (len(pieces) == len(cuts) + 1)."""

    cuts: tuple[int, ...]
    pieces: tuple[frozenset[int], ...]


@dataclass
class _Shape:
    """A subproblem's structure: its hash, canonical order, and the edges to ops outside it."""

    base: int
    canonical: tuple[int, ...]
    boundary: tuple[tuple[int, Any], ...]
    """(outside op, what the edge is) for every edge between the ops and an op outside them."""
    split: Any = None
    """How it decomposes (computed on first need): ("parallel", components), ("series",
    _Chain) or ("greedy", None)."""


@dataclass
class _Problem:
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
    shapes: dict[frozenset[int], _Shape] = field(default_factory=dict)


class Mapper:
    """Maps graphs onto one machine with one cost model; caches across graphs."""

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
        self.per_node = uniform_node_size(machine) or machine.num_devices
        self._node: dict[Any, tuple[Cost, tuple[View | None, ...]]] = {}
        self._edge: dict[Any, float] = {}
        self._sub: dict[Any, _Sub] = {}
        self.evaluations = 0

    # --- the entry point -----------------------------------------------------------------------

    def map(
        self,
        graph: Graph,
        fixed: Mapping[int, View] | None = None,
        requires: Iterable[Ref] = (),
        roots: Iterable[Ref] | None = None,
        block: Block | None = None,
    ) -> Mapped:
        """The best mapping of `graph`. `fixed` pins views (sources or ops); `requires` and
        `roots` say which tensors want gradients and where they flow back from, for subgraphs
        (see `estimate.gradient_flags`)."""
        self.evaluations += 1
        p = self._problem(graph, fixed or {}, requires, roots)
        block = block or Block(0, self.machine.num_devices)
        everything = frozenset(p.ops)
        sub = self._solve(p, everything, {}, block) if everything else _Sub(ZERO, 0.0, ())
        if not math.isfinite(sub.objective):
            return Mapped(INFEASIBLE, INF, {})
        total = sub.cost
        views = self._unpack(p, everything, sub.views) if everything else {}
        for nid, view in list(views.items()):
            for (_, source), sview in zip(p.attached[nid], self._node_cost(p, nid, view)[1], strict=True):
                if sview is not None:
                    views[source] = sview
        for nid, node in graph.nodes.items():  # sources nobody places (read by nothing): device 0
            if nid not in views:
                views[nid] = canonical_view(task_degrees(node.types[0]), block.start)
        return Mapped(total, total.objective(self.options.memory_weight), views)

    def cost_of(
        self,
        graph: Graph,
        views: Mapping[int, View],
        fixed: Mapping[int, View] | None = None,
        requires: Iterable[Ref] = (),
        roots: Iterable[Ref] | None = None,
    ) -> Cost:
        """The DP's cost of one given assignment of views to the ops (all ops on one timeline:
        the sum of node and edge costs, as when nothing runs side by side)."""
        p = self._problem(graph, fixed or {}, requires, roots)
        total = ZERO
        for nid in p.ops:
            view = p.fixed.get(nid, views[nid])
            earlier = {q: views[q] for _, q, _ in p.producers[nid]}
            total = total.then(self._leaf(p, nid, view, {q: p.fixed.get(q, v) for q, v in earlier.items()}))
        return total

    # --- per-graph preparation -----------------------------------------------------------------

    def _problem(
        self, graph: Graph, fixed: Mapping[int, View], requires: Iterable[Ref], roots: Iterable[Ref] | None
    ) -> _Problem:
        order = graph.topological()
        _, gets_grad = gradient_flags(graph, order, requires, roots)
        saved = saved_values(graph, order, gets_grad)
        ops = [nid for nid in order if not graph.nodes[nid].is_source or nid in fixed]
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
                graph, nid, attached[nid], gets_grad, saved, fixed.get(nid)
            )
        position = {nid: i for i, nid in enumerate(order)}
        return _Problem(
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
    ) -> tuple[Any, int]:
        """What a node's own cost depends on (besides its view), and a hash of it."""
        node = graph.nodes[nid]
        operand_types = tuple(None if r is None else graph.type_of(r) for r in node.operands)
        grads = tuple(r is not None and r in gets_grad for r in node.operands)
        results = [(nid, i) for i in range(len(node.types))]
        backward = any(r in gets_grad for r in results) and node.op not in SOURCES
        kept = tuple(r in saved for r in results)
        sources = tuple((i, graph.nodes[s].op, (s, 0) in gets_grad) for i, s in attached)
        key = node.attr("key") if node.is_source else None
        signature = (node.op, node.attrs, operand_types, node.types, grads, backward, kept, sources, key)
        types = tuple(None if t is None else type_info(t).key for t in operand_types)
        results_key = tuple(type_info(t).key for t in node.types)
        digest = hash((node.op, node.attrs, types, results_key, grads, backward, kept, sources, key, fixed))
        return signature, digest

    # --- node and edge costs -------------------------------------------------------------------

    def _node_cost(self, p: _Problem, nid: int, view: View) -> tuple[Cost, tuple[View | None, ...]]:
        """An op's own cost at `view` (compute, what it keeps, the sources it places) and the
        views of its attached sources."""
        key = (p.sig[nid], view)
        hit = self._node.get(key)
        if hit is not None:
            return hit
        node = p.graph.nodes[nid]
        _, _, operand_types, _, grads, backward, kept, _, _ = p.signature[nid]
        degrees = task_degrees(node.types[0])
        where = view_placement(degrees, view)
        memory: dict[int, float] = {}
        time = 0.0
        form = None
        if not node.op.startswith("parallel."):
            form = node_form_of(node, operand_types)
            attrs = node_attrs(node)
            none = [None] * len(operand_types)
            parts = compute_parts(
                self.machine, self.compute, node.op, attrs, form, where, operand_types, none, none,
                node.types, list(grads), backward,
            )  # fmt: skip
            time += max(s for _, s in parts.fwd) + max(s for _, s in parts.bwd)
            if backward and node.op == "pcg.attention":
                per_task = attention_task_bytes(attrs, operand_types, node.types[0])
                for device, count in parts.tasks.items():
                    memory[device] = memory.get(device, 0.0) + per_task * count
        for t, keep in zip(node.types, kept, strict=True):
            if keep:
                nbytes = piece(t).nbytes  # type: ignore[union-attr]
                for device in where.values():
                    memory[device] = memory.get(device, 0.0) + nbytes
        source_views: list[View | None] = []
        for i, source in p.attached[nid]:
            t = operand_types[i]
            assert t is not None
            sview, extra = self._source_view(p, nid, node, form, where, view, i, t)
            source_views.append(sview)
            time += extra
            src = p.graph.nodes[source]
            if src.op != "pcg.weight":
                continue
            parts = weight_parts(
                self.machine,
                self.optimizer,
                t,
                view_placement(task_degrees(t), sview),
                (source, 0) in p.gets_grad,
            )
            time += self.options.sync_weight * phase(parts.sync) + max(
                (s for _, s in parts.update), default=0.0
            )
            for device, held in parts.held.items():
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

    def _source_view(
        self, p: _Problem, nid: int, node: Node, form: Any, where: Mapping[Any, int], view: View, i: int,
        t: TensorType,
    ) -> tuple[View, float]:  # fmt: skip
        """Where a source read by operand `i` goes: each piece on the device of the task reading
        it when a view can say so (no transfer), else row-major from the reader's start (its
        transfers are charged)."""
        degrees = task_degrees(t)
        if form is not None:
            derived: dict[Any, int] = {}
            for task in form.tasks():
                coord = form.coord(form.operands[i], task)
                derived.setdefault(coord, where[form.coord(form.results[0], task)])
            if len(derived) == math.prod(degrees):
                sview = as_view(degrees, derived)
                if sview is not None:
                    return sview, 0.0
        sview = canonical_view(degrees, view.start)
        if max(view_placement(degrees, sview).values()) >= self.machine.num_devices:
            sview = canonical_view(degrees, 0)
        return sview, self._edge_cost(p, t, sview, nid, view, i)

    def _edge_cost(self, p: _Problem, t: TensorType, pview: View, nid: int, view: View, i: int) -> float:
        """Moving operand `i` of op `nid` (at `view`), of type `t` placed at `pview`."""
        key = (type_info(t).key, pview, p.sig[nid], view, i)
        hit = self._edge.get(key)
        if hit is not None:
            return hit
        node = p.graph.nodes[nid]
        _, _, operand_types, _, grads, _, _, _, _ = p.signature[nid]
        source_where = view_placement(task_degrees(t), pview)
        where = view_placement(task_degrees(node.types[0]), view)
        if node.op.startswith("parallel."):
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
        else:
            form = node_form_of(node, operand_types)
            only = [source_where if j == i else None for j in range(len(operand_types))]
            keys = list(range(len(operand_types)))
            _, fwd_t, bwd_t = tasks_and_transfers(form, where, operand_types, keys, only, grads, self.machine)
            seconds = phase(fwd_t) + phase(bwd_t)
        self._edge[key] = seconds
        return seconds

    def _views(self, p: _Problem, nid: int, block: Block) -> tuple[View, ...]:
        if nid in p.fixed:
            return (p.fixed[nid],)
        degrees = task_degrees(p.graph.nodes[nid].types[0])
        return views_in(degrees, block, self.options.max_starts)

    def _leaf(self, p: _Problem, nid: int, view: View, ext: Mapping[int, View]) -> Cost:
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

    def _solve(self, p: _Problem, ops: frozenset[int], ext: Mapping[int, View], block: Block) -> _Sub:
        shape = self._shape(p, ops)
        key = (shape.base, tuple((what, ext[q]) for q, what in shape.boundary if q in ext), block)
        hit = self._sub.get(key)
        if hit is not None:
            return hit
        if len(ops) == 1:
            result = self._solve_leaf(p, next(iter(ops)), ext, block)
        else:
            result = self._solve_split(p, ops, ext, block)
        self._sub[key] = result
        return result

    def _solve_leaf(self, p: _Problem, nid: int, ext: Mapping[int, View], block: Block) -> _Sub:
        best: _Sub = _Sub(INFEASIBLE, INF, ())
        for view in self._views(p, nid, block):
            cost = self._leaf(p, nid, view, ext)
            objective = cost.objective(self.options.memory_weight)
            if objective < best.objective:
                best = _Sub(cost, objective, (view,))
        return best

    def _decompose(self, p: _Problem, ops: frozenset[int]) -> tuple[str, Any]:
        shape = self._shape(p, ops)
        if shape.split is None:
            components = self._components(p, ops)
            if len(components) > 1:
                shape.split = ("parallel", components)
            else:
                chain = self._bottlenecks(p, ops)
                shape.split = ("greedy", None) if chain is None else ("series", chain)
        return shape.split

    def _solve_split(self, p: _Problem, ops: frozenset[int], ext: Mapping[int, View], block: Block) -> _Sub:
        kind, how = self._decompose(p, ops)
        if kind == "parallel":
            return self._parallel(p, ops, how, ext, block)
        if kind == "greedy":
            return self._greedy(p, ops, ext, block)
        return self._series(p, ops, how, ext, block)

    def _series(
        self, p: _Problem, ops: frozenset[int], chain: _Chain, ext: Mapping[int, View], block: Block
    ) -> _Sub:
        """Bottlenecks b1..bk with the ops between them: a Viterbi pass over the bottlenecks'
        views, each step adding the ops between two bottlenecks (solved knowing both views)
        and the edges that join the two directly."""
        w = self.options.memory_weight
        # per bottleneck: its view -> (cost so far, (previous bottleneck's view, piece solved))
        states: dict[View, tuple[Cost, Any]] = {}
        b0 = chain.cuts[0]
        for view in self._views(p, b0, block):
            cost = self._leaf(p, b0, view, ext)
            head = None
            if chain.pieces[0]:
                head = self._solve(p, chain.pieces[0], {**ext, b0: view}, block)
                cost = cost.then(head.cost)
            states[view] = (cost, (None, head))
        history = [states]
        for i in range(1, len(chain.cuts)):
            a, b = chain.cuts[i - 1], chain.cuts[i]
            piece = chain.pieces[i]
            nxt: dict[View, tuple[Cost, Any]] = {}
            for view in self._views(p, b, block):
                leaf = self._leaf(p, b, view, ext)
                best: tuple[float, Cost, Any] | None = None
                for prev, (cost, _) in states.items():
                    if not math.isfinite(cost.time):
                        continue
                    step = leaf.then(Cost(self._direct(p, a, prev, b, view), 0.0))
                    sub = None
                    if piece:
                        sub = self._solve(p, piece, {**ext, a: prev, b: view}, block)
                        step = step.then(sub.cost)
                    total = cost.then(step)
                    objective = total.objective(w)
                    if best is None or objective < best[0]:
                        best = (objective, total, (prev, sub))
                if best is not None:
                    nxt[view] = (best[1], best[2])
            states = nxt
            history.append(states)
        last = chain.cuts[-1]
        final: tuple[float, Cost, View, _Sub | None] | None = None
        for view, (cost, _) in states.items():
            total, tail = cost, None
            if chain.pieces[-1]:
                tail = self._solve(p, chain.pieces[-1], {**ext, last: view}, block)
                total = total.then(tail.cost)
            objective = total.objective(w)
            if final is None or objective < final[0]:
                final = (objective, total, view, tail)
        if final is None or not math.isfinite(final[0]):
            return _Sub(INFEASIBLE, INF, ())
        objective, total, view, tail = final
        views: dict[int, View] = {}
        if tail is not None:
            views.update(self._unpack(p, chain.pieces[-1], tail.views))
        for i in reversed(range(len(chain.cuts))):
            views[chain.cuts[i]] = view
            prev, sub = history[i][view][1]
            if sub is not None:
                views.update(self._unpack(p, chain.pieces[i], sub.views))
            if prev is None:
                break
            view = prev
        return _Sub(total, objective, tuple(views[n] for n in self._shape(p, ops).canonical))

    def _direct(self, p: _Problem, a: int, a_view: View, b: int, b_view: View) -> float:
        """Edges from op `a` straight into op `b`."""
        return sum(
            self._edge_cost(p, p.graph.type_of((a, r)), a_view, b, b_view, i)
            for c, i, r in p.consumers[a]
            if c == b
        )

    def _parallel(
        self,
        p: _Problem,
        ops: frozenset[int],
        components: list[frozenset[int]],
        ext: Mapping[int, View],
        block: Block,
    ) -> _Sub:
        """Independent components: one after the other on `block`, or the first beside the rest."""
        order = self._shape(p, ops).canonical
        subs = [self._solve(p, c, ext, block) for c in components]
        best = _Sub(INFEASIBLE, INF, ())
        if all(math.isfinite(sub.objective) for sub in subs):
            serial = ZERO
            views: dict[int, View] = {}
            for c, sub in zip(components, subs, strict=True):
                serial = serial.then(sub.cost)
                views.update(self._unpack(p, c, sub.views))
            best = _Sub(serial, serial.objective(self.options.memory_weight), tuple(views[n] for n in order))
        if not self.options.side_by_side:
            return best
        first, rest = components[0], frozenset().union(*components[1:])
        for size in self._split_sizes(block):
            left, right = Block(block.start, size), Block(block.start + size, block.size - size)
            for a_block, b_block in ((left, right), (right, left)):
                a = self._solve(p, first, ext, a_block)
                if not math.isfinite(a.objective):
                    continue
                b = self._solve(p, rest, ext, b_block)
                cost = a.cost.beside(b.cost)
                objective = cost.objective(self.options.memory_weight)
                if objective < best.objective:
                    views = {**self._unpack(p, first, a.views), **self._unpack(p, rest, b.views)}
                    best = _Sub(cost, objective, tuple(views[n] for n in order))
        return best

    def _split_sizes(self, block: Block) -> list[int]:
        n = block.size
        if n < 2:
            return []
        if n <= 4:
            return list(range(1, n // 2 + 1))
        sizes = {n // 2} if n % 2 == 0 else set()
        sizes |= {n // k for k in (3, 4) if n % k == 0}
        if n > self.per_node:  # whole nodes
            sizes = {s for s in sizes if s % self.per_node == 0} or {
                self.per_node * (n // self.per_node // 2)
            }
        return sorted(s for s in sizes if 0 < s < n)[-3:]

    def _greedy(self, p: _Problem, ops: frozenset[int], ext: Mapping[int, View], block: Block) -> _Sub:
        """Not series-parallel: each op, in topological order, takes its best view given the
        views of the ops it reads (edges are charged when their second end is placed)."""
        known = dict(ext)
        total = ZERO
        for nid in sorted(ops, key=p.position.__getitem__):
            best: tuple[float, Cost, View] | None = None
            for view in self._views(p, nid, block):
                cost = self._leaf(p, nid, view, known)
                objective = cost.objective(self.options.memory_weight)
                if best is None or objective < best[0]:
                    best = (objective, cost, view)
            if best is None:
                return _Sub(INFEASIBLE, INF, ())
            known[nid] = best[2]
            total = total.then(best[1])
        order = self._shape(p, ops).canonical
        return _Sub(total, total.objective(self.options.memory_weight), tuple(known[n] for n in order))

    # --- structure -----------------------------------------------------------------------------

    def _components(self, p: _Problem, ops: frozenset[int]) -> list[frozenset[int]]:
        """Weakly connected components of the ops (edges inside `ops` only), in a stable order."""
        seen: set[int] = set()
        out: list[frozenset[int]] = []
        for start in sorted(ops, key=p.position.__getitem__):
            if start in seen:
                continue
            stack, comp = [start], set()
            while stack:
                nid = stack.pop()
                if nid in comp:
                    continue
                comp.add(nid)
                stack.extend(q for _, q, _ in p.producers[nid] if q in ops and q not in comp)
                stack.extend(c for c, _, _ in p.consumers[nid] if c in ops and c not in comp)
            seen |= comp
            out.append(frozenset(comp))
        return out

    def _bottlenecks(self, p: _Problem, ops: frozenset[int]) -> _Chain | None:
        """The ops every path through the (connected) ops crosses, in order, with the ops
        before, between and after them; else the ops that no edge skips (ops reading only
        outside tensors may then come after them); None if there are none."""
        order = sorted(ops, key=p.position.__getitem__)
        pos = {nid: i for i, nid in enumerate(order)}
        n = len(order)
        jumps = [0] * (n + 1)
        entry = [True] * n
        exit_ = [True] * n
        for nid in order:
            for _, q, _ in p.producers[nid]:
                if q not in ops:
                    continue
                a, b = pos[q], pos[nid]
                entry[b] = False
                exit_[a] = False
                if b > a + 1:
                    jumps[a + 1] += 1
                    jumps[b] -= 1
        exits_before = [0] * (n + 1)
        for i in range(n):
            exits_before[i + 1] = exits_before[i] + exit_[i]
        entries_after = [0] * (n + 1)
        for i in reversed(range(n)):
            entries_after[i] = entries_after[i + 1] + entry[i]
        crossing = 0
        strict: list[int] = []
        relaxed: list[int] = []
        for i in range(n):
            crossing += jumps[i]
            if crossing:
                continue
            relaxed.append(i)
            if not exits_before[i] and not entries_after[i + 1]:  # every op is before or after it
                strict.append(i)
        cuts = strict or relaxed  # strict ones keep independent branches together
        if not cuts:
            return None
        pieces = [frozenset(order[lo + 1 : hi]) for lo, hi in zip([-1, *cuts], [*cuts, n], strict=True)]
        return _Chain(tuple(order[i] for i in cuts), tuple(pieces))

    def _shape(self, p: _Problem, ops: frozenset[int]) -> _Shape:
        """The structure of a subproblem (memoized per graph)."""
        hit = p.shapes.get(ops)
        if hit is not None:
            return hit
        up: dict[int, int] = {}
        for nid in sorted(ops, key=p.position.__getitem__):
            inner = tuple(sorted((i, up[q], r) for i, q, r in p.producers[nid] if q in ops))
            up[nid] = hash((p.sig[nid], inner))
        canonical = tuple(sorted(ops, key=lambda n: (up[n], p.position[n])))
        boundary: list[tuple[int, Any]] = []
        for index, nid in enumerate(canonical):
            for i, q, r in p.producers[nid]:
                if q not in ops:
                    boundary.append((q, ("in", index, i, type_info(p.graph.type_of((q, r))).key)))
            for c, i, r in p.consumers[nid]:
                if c not in ops:
                    boundary.append((c, ("out", index, r, p.sig[c], i)))
        shape = _Shape(hash(tuple(sorted(up.values()))), canonical, tuple(boundary))
        p.shapes[ops] = shape
        return shape

    def _unpack(self, p: _Problem, ops: frozenset[int], views: Sequence[View]) -> dict[int, View]:
        return dict(zip(self._shape(p, ops).canonical, views, strict=True))


__all__ = ["Block", "Cost", "Mapped", "Mapper", "MappingOptions", "View"]
