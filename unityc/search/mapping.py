"""The machine-mapping dynamic program (Unity §5.2): a view for every op of a candidate graph.

It minimizes the sum of op and edge costs (`opcost.py`) over the views of the graph's ops
(sources take the placement their reader wants), recursing over the series-parallel structure:

* a chain of *bottlenecks* (ops every path through the subgraph crosses, no edge skipping
  them): a Viterbi pass over their views, the ops between two bottlenecks solved knowing both
  views, plus the edges joining two bottlenecks directly;
* independent components: all on the whole device block one after the other (times add), or
  the first side by side with the rest on two disjoint blocks (times max, memory max);
* otherwise (not series-parallel), nested deeper than `MAX_DEPTH`, or past the
  `MAX_SUBPROBLEMS` one mapping may solve, views are chosen greedily in topological order.

A graph whose decomposition nests deeper than `MAX_DEPTH` (a deep model's weight transposes
start paths of their own, so each level peels one layer's tail off the chain) is decomposed
again *flat*: ops of weights alone go with their reader's piece (`_bottlenecks`), and the
layers make one chain. Shallower graphs keep the nested decomposition, whose independent
components (a weight's transpose beside the layer reading it) offer side-by-side choices the
flat one does not.

Sub-results are cached across candidates by a structural hash of the subgraph, the views of the
ops around it and the device block, so a rewrite re-prices only what it changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from unityc.cost.pricing import ComputeModel, type_info
from unityc.graph import Graph, Ref
from unityc.machine.spec import Machine
from unityc.search.opcost import (
    INF,
    INFEASIBLE,
    ZERO,
    Cost,
    MappingOptions,
    Prices,
    Problem,
)
from unityc.search.views import Block, View, canonical_view, task_degrees, uniform_node_size

MAX_DEPTH = 100
"""The deepest nesting of series-parallel subproblems the DP recurses into (each level takes a
few Python frames). A graph nested deeper is decomposed again flat (see above); one nested deeper
even so, e.g. 200 branches summed by a chain of adds, has its deeper subproblems mapped greedily
instead of overflowing the interpreter's stack."""

MAX_SUBPROBLEMS = 2000
"""Series-parallel subproblems one `map` solves (cache misses; a transformer layer's graph needs
a few dozen): a graph that is series-parallel only in many small pieces, such as an LSTM unrolled
over time (its gates in parallel inside each step, the steps joined by two states), has
exponentially many (boundary views x nesting), and pricing one candidate took minutes. Past the
budget, the remaining subproblems are mapped greedily (and not cached: a later mapping with its
budget left solves them exactly)."""

MAX_CACHED = 500_000
"""Sub-results kept across mappings; past it the cache starts over (memory stays bounded)."""


def _of_weights(p: Problem, nid: int) -> bool:
    """Whether an op reads weights alone (a weight's transpose or reshape)."""
    operands = p.graph.nodes[nid].operands
    return bool(operands) and all(r is not None and p.graph.nodes[r[0]].op == "pcg.weight" for r in operands)


class _TooDeep(Exception):
    """The nested decomposition passed `MAX_DEPTH`: `map` starts over, flat."""


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
    splits: dict[bool, Any] = field(default_factory=dict)
    """How it decomposes, nested (False) or flat (True), computed on first need:
    ("parallel", components), ("series", _Chain) or ("greedy", None)."""


class Mapper(Prices):
    """Maps graphs onto one machine with one cost model; caches across graphs."""

    def __init__(
        self,
        machine: Machine,
        compute: ComputeModel,
        optimizer: str = "sgd",
        options: MappingOptions | None = None,
    ):
        super().__init__(machine, compute, optimizer, options)
        self.per_node = uniform_node_size(machine) or machine.num_devices
        self._sub: dict[Any, _Sub] = {}
        self._depth = 0
        """How deeply `_solve` is nested now."""
        self._left = MAX_SUBPROBLEMS
        """Subproblems the current `map` may still solve by decomposition (`MAX_SUBPROBLEMS`)."""
        self._flat = False
        """Whether the current `map` decomposes flat (its nested decomposition passed
        `MAX_DEPTH`): ops of weights alone go with their readers' pieces."""

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
        p = self._problem(graph, fixed or {}, requires, roots)
        block = block or Block(0, self.machine.num_devices)
        everything = frozenset(p.ops)
        if len(self._sub) > MAX_CACHED:
            self._sub.clear()
        sub = self._solve_all(p, everything, block) if everything else _Sub(ZERO, 0.0, ())
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

    def _solve_all(self, p: Problem, ops: frozenset[int], block: Block) -> _Sub:
        """All the ops: decomposed nested, or flat where the nested decomposition passes
        `MAX_DEPTH` (what the nested attempt solved stays cached, exact)."""
        self._left, self._flat = MAX_SUBPROBLEMS, False
        try:
            return self._solve(p, ops, {}, block)
        except _TooDeep:
            self._left, self._flat = MAX_SUBPROBLEMS, True
            return self._solve(p, ops, {}, block)
        finally:
            self._flat = False

    def _solve(self, p: Problem, ops: frozenset[int], ext: Mapping[int, View], block: Block) -> _Sub:
        shape = self._shape(p, ops)
        boundary = tuple((what, ext[q]) for q, what in shape.boundary if q in ext)
        key = (shape.base, boundary, block, self._flat)
        hit = self._sub.get(key)
        if hit is not None:
            return hit
        if len(ops) == 1:
            result = self._solve_leaf(p, next(iter(ops)), ext, block)
        elif self._left <= 0:  # this mapping's budget is spent: greedily, and not kept
            return self._greedy(p, ops, ext, block)
        elif self._depth >= MAX_DEPTH and not self._flat:
            raise _TooDeep
        elif self._depth >= MAX_DEPTH:  # too deep to recurse on even flat: map it greedily
            result = self._greedy(p, ops, ext, block)
        else:
            self._left -= 1
            self._depth += 1
            try:
                result = self._solve_split(p, ops, ext, block)
            finally:
                self._depth -= 1
        self._sub[key] = result
        return result

    def _solve_leaf(self, p: Problem, nid: int, ext: Mapping[int, View], block: Block) -> _Sub:
        best: _Sub = _Sub(INFEASIBLE, INF, ())
        for view in self._views(p, nid, block):
            cost = self._leaf(p, nid, view, ext)
            objective = cost.objective(self.options.memory_weight)
            if objective < best.objective:
                best = _Sub(cost, objective, (view,))
        return best

    def _decompose(self, p: Problem, ops: frozenset[int]) -> tuple[str, Any]:
        splits = self._shape(p, ops).splits
        if self._flat not in splits:
            components = self._components(p, ops)
            if len(components) > 1:
                splits[self._flat] = ("parallel", components)
            else:
                chain = self._bottlenecks(p, ops)
                splits[self._flat] = ("greedy", None) if chain is None else ("series", chain)
        return splits[self._flat]

    def _solve_split(self, p: Problem, ops: frozenset[int], ext: Mapping[int, View], block: Block) -> _Sub:
        kind, how = self._decompose(p, ops)
        if kind == "parallel":
            return self._parallel(p, ops, how, ext, block)
        if kind == "greedy":
            return self._greedy(p, ops, ext, block)
        return self._series(p, ops, how, ext, block)

    def _series(
        self, p: Problem, ops: frozenset[int], chain: _Chain, ext: Mapping[int, View], block: Block
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

    def _parallel(
        self,
        p: Problem,
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

    def _greedy(self, p: Problem, ops: frozenset[int], ext: Mapping[int, View], block: Block) -> _Sub:
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

    def _components(self, p: Problem, ops: frozenset[int]) -> list[frozenset[int]]:
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

    def _bottlenecks(self, p: Problem, ops: frozenset[int]) -> _Chain | None:
        """The ops every path through the (connected) ops crosses, in order, with the ops
        before, between and after them; else the ops that no edge skips (ops reading only
        outside tensors may then come after them); None if there are none. Flat (`_flat`), an
        op of weights alone (a weight's transpose, read by its layer's linear) starts no path
        of its own: it goes with its reader's piece, as the weight itself would. Counted as an
        entry, it leaves strict cuts only past the last layer's, so each level of the recursion
        peels one linear off the tail (nested: a 16-layer GPT-3 stage is 100 levels deep)."""
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
        if self._flat:
            for i, nid in enumerate(order):
                if entry[i] and _of_weights(p, nid):
                    entry[i] = False
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

    def _shape(self, p: Problem, ops: frozenset[int]) -> _Shape:
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

    def _unpack(self, p: Problem, ops: frozenset[int], views: Sequence[View]) -> dict[int, View]:
        return dict(zip(self._shape(p, ops).canonical, views, strict=True))


__all__ = ["Block", "Cost", "Mapped", "Mapper", "MappingOptions", "View"]
