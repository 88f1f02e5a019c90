"""TASO-style enumeration of every small PCG over a fixed set of input tensors.

A depth-first search adds one op at a time to a graph that holds every input tensor as a source,
reusing the values already computed (only the new node is evaluated) and skipping graphs already
seen (a key made of the structural hashes of the op nodes, so the same graph reached in another
order, or with a duplicate node, is visited once). A graph's outputs are the op results nothing
reads; graphs with at most `max_outputs` of them are emitted with a fingerprint (see
`fingerprint.py`). Input tensors alone (0 ops, one or more of them) are emitted too, so that rules
whose target is a bare variable (`combine(partition(x)) => x`) can be found.

What keeps the search small (each is a restriction TASO does not make, said where it is made):
- operand choice is driven by types: the valid (op, attributes, operand types) combinations are
  computed once, so a state only tries operands whose types type-check (`Graph.add`'s inference);
- inputs of one type are interchangeable: a graph must use them in order (y only with x), since a
  graph over y alone is one over x renamed (pairs are compared up to renaming anyway);
- several outputs only when they are results of one op or of ops of one kind, connected through
  a shared tensor (two linears reading x; a split): the multi-output rules worth having;
- most ops are tried at rank 2 (`OpSpec.ranks`): rules found there are generalized to any rank;
- the last op must leave at most `max_outputs` unread results, which is checked before it runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm
from xdsl.dialects.builtin import f32

from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Node, Ref, canonical_attrs, infer_types, op_classes
from unityc.graph.evaluate import run_node, source_pieces
from unityc.interpreter.pieces import Pieces
from unityc.rewrites.fingerprint import Fingerprinter, OutputPrint, TypeKey, type_key


@dataclass(frozen=True)
class InputSpec:
    name: str
    type: TensorType
    reserved: bool = False
    """Read only where an op spec names it (attention's weights), never as a general operand."""


AttrChoices = Callable[[Sequence[TensorType], "EnumConfig"], Iterator[dict[str, Any]]]
OperandLayout = Callable[[Sequence[Ref], dict[str, Ref]], list[Ref | None]]


@dataclass(frozen=True)
class OpSpec:
    """How to apply one op: how many pool tensors it reads, which attributes to try for their
    types, and how the chosen tensors (plus reserved inputs) become its flat operand list."""

    op: str
    arity: int
    attrs: AttrChoices
    layout: OperandLayout | None = None
    ranks: tuple[int, ...] | None = None
    """Operand ranks tried (None: any). Rank-generic rules are found at rank 2 and generalized,
    so most ops are tried at rank 2 only; rank 3 serves attention and batch split/concat."""
    same_shape: bool = False
    """Operands must have equal shapes (no broadcasting)."""

    def accepts(self, types: Sequence[TensorType]) -> bool:
        if self.ranks is not None and any(t.rank not in self.ranks for t in types):
            return False
        return not self.same_shape or all(t.shape == types[0].shape for t in types)

    def operands(self, chosen: Sequence[Ref], reserved: dict[str, Ref]) -> list[Ref | None]:
        return list(chosen) if self.layout is None else self.layout(chosen, reserved)


def _no_attrs(types: Sequence[TensorType], config: EnumConfig) -> Iterator[dict[str, Any]]:
    yield {}


def _dims(types: Sequence[TensorType], config: EnumConfig) -> Iterator[dict[str, Any]]:
    for d in range(types[0].rank):
        yield {"dim": d}


def _perms(types: Sequence[TensorType], config: EnumConfig) -> Iterator[dict[str, Any]]:
    rank = types[0].rank
    for perm in itertools.permutations(range(rank)):
        if list(perm) != list(range(rank)):
            yield {"perm": list(perm)}


def _halves(types: Sequence[TensorType], config: EnumConfig) -> Iterator[dict[str, Any]]:
    for d, size in enumerate(types[0].shape):
        if size % 2 == 0:
            yield {"dim": d, "sizes": [size // 2, size // 2]}


def _dim_degree(types: Sequence[TensorType], config: EnumConfig) -> Iterator[dict[str, Any]]:
    for d in range(types[0].rank):
        yield {"dim": d, "degree": config.degree}


def _degree(types: Sequence[TensorType], config: EnumConfig) -> Iterator[dict[str, Any]]:
    yield {"degree": config.degree}


def _heads(types: Sequence[TensorType], config: EnumConfig) -> Iterator[dict[str, Any]]:
    yield {"heads": config.heads}


def _linear_layout(chosen: Sequence[Ref], reserved: dict[str, Ref]) -> list[Ref | None]:
    return [chosen[0], chosen[1], None]


def _self_attention_layout(chosen: Sequence[Ref], reserved: dict[str, Ref]) -> list[Ref | None]:
    (x,) = chosen
    weights = [reserved[w] for w in ATTENTION_WEIGHTS]
    return [x, x, x, *weights, None, None, None, None, None]


ATTENTION_WEIGHTS = ("wq", "wk", "wv", "wo")
"""The reserved inputs attention reads as its projections (self-attention: q = k = v)."""

RANK2 = (2,)
OP_SPECS: dict[str, OpSpec] = {
    spec.op: spec
    for spec in (
        OpSpec("pcg.relu", 1, _no_attrs, ranks=RANK2),
        OpSpec("pcg.sigmoid", 1, _no_attrs, ranks=RANK2),
        OpSpec("pcg.tanh", 1, _no_attrs, ranks=RANK2),
        OpSpec("pcg.softmax", 1, _dims, ranks=RANK2),
        OpSpec("pcg.transpose", 1, _perms, ranks=RANK2),
        OpSpec("pcg.split", 1, _halves, ranks=(2, 3)),
        OpSpec("pcg.add", 2, _no_attrs, ranks=RANK2, same_shape=True),
        OpSpec("pcg.mul", 2, _no_attrs, ranks=RANK2, same_shape=True),
        OpSpec("pcg.matmul", 2, _no_attrs, ranks=RANK2),
        OpSpec("pcg.linear", 2, _no_attrs, _linear_layout, ranks=RANK2),
        OpSpec("pcg.concat", 2, _dims, ranks=(2, 3)),
        OpSpec("pcg.attention", 1, _heads, _self_attention_layout, ranks=(3,)),
        OpSpec("parallel.partition", 1, _dim_degree),
        OpSpec("parallel.combine", 1, _dim_degree),
        OpSpec("parallel.replicate", 1, _degree),
        OpSpec("parallel.reduce", 1, _degree),
        OpSpec("parallel.sum_concat", 2, _no_attrs),
    )
}


def _t(shape: Sequence[int], shard: Sequence[int] | None = None, sum_: int = 1, copy: int = 1) -> TensorType:
    return TensorType(shape, f32, shard, sum_, copy)


DEFAULT_INPUTS: tuple[InputSpec, ...] = (
    InputSpec("x", _t([4, 4])),
    InputSpec("y", _t([4, 4])),
    InputSpec("z", _t([4, 4])),
    InputSpec("xs", _t([4, 4], sum_=2)),
    InputSpec("ys", _t([4, 4], sum_=2)),
    InputSpec("xp", _t([4, 4], [2, 1])),
    InputSpec("t", _t([4, 4, 4])),
    *(InputSpec(w, _t([4, 4]), reserved=True) for w in ATTENTION_WEIGHTS),
)


@dataclass(frozen=True)
class EnumConfig:
    inputs: tuple[InputSpec, ...] = DEFAULT_INPUTS
    ops: tuple[str, ...] = tuple(OP_SPECS)
    max_ops: int = 3
    max_outputs: int = 2
    degree: int = 2
    heads: int = 2
    seed: int = 0

    def specs(self) -> list[OpSpec]:
        """The op specs to use: ops the dialects do not define (yet) are left out."""
        known = op_classes()
        return [OP_SPECS[op] for op in self.ops if op in known]


@dataclass(frozen=True)
class Enumerated:
    """One enumerated graph: its outputs (in fingerprint order) and the inputs it reads."""

    graph: Graph
    n_ops: int
    inputs: frozenset[str]
    fingerprint: tuple[OutputPrint, ...]
    prints: dict[Ref, OutputPrint]
    """The fingerprint of every tensor in the graph (to compare sub-graphs)."""


@dataclass
class _State:
    graph: Graph
    values: dict[Ref, Pieces]
    prints: dict[Ref, OutputPrint]
    tids: dict[Ref, int]
    """Interned type of each tensor (hashing xDSL types is slow; small ints are not)."""
    hashes: dict[int, int]
    key: frozenset[int]
    unused: tuple[Ref, ...]
    inputs: frozenset[Ref]
    """The pool inputs the graph reads."""
    n_ops: int


@dataclass
class Enumeration:
    """The result: every emitted graph, and how many graphs of each size were visited."""

    graphs: list[Enumerated] = field(default_factory=list)
    visited: dict[int, int] = field(default_factory=dict)
    emitted: dict[int, int] = field(default_factory=dict)
    attempts: int = 0
    rejected: int = 0


Option = tuple[tuple[tuple[str, Any], ...], tuple[TensorType, ...], tuple[int, ...]]
"""A valid application for given operand types: (attributes, result types, their type ids)."""


class Enumerator:
    def __init__(self, config: EnumConfig, fingerprinter: Fingerprinter | None = None):
        self.config = config
        self.specs = config.specs()
        self.fingerprinter = fingerprinter or Fingerprinter(seed=config.seed)
        self.seen: set[frozenset[int]] = set()
        self.type_ids: dict[TypeKey, int] = {}
        self.types: list[TensorType] = []
        self.options: dict[tuple[str, tuple[int, ...]], list[Option]] = {}
        self.result = Enumeration()
        self.base = self._base()

    def intern(self, t: TensorType) -> int:
        key = type_key(t)
        if key not in self.type_ids:
            self.type_ids[key] = len(self.types)
            self.types.append(t)
        return self.type_ids[key]

    def _base(self) -> _State:
        graph = Graph()
        values: dict[Ref, Pieces] = {}
        prints: dict[Ref, OutputPrint] = {}
        tids: dict[Ref, int] = {}
        hashes: dict[int, int] = {}
        for spec in self.config.inputs:
            ref = graph.add_source("pcg.input", spec.name, spec.type)
            values[ref] = source_pieces(graph.nodes[ref[0]], self.config.seed, torch.float64)
            prints[ref] = self.fingerprinter.output(spec.type, values[ref])
            tids[ref] = self.intern(spec.type)
            hashes[ref[0]] = hash(("pcg.input", spec.name, tids[ref]))
        inputs = self.config.inputs
        self.n_inputs = len(inputs)
        self.names = {(i, 0): s.name for i, s in enumerate(inputs)}
        self.reserved = {s.name: (i, 0) for i, s in enumerate(inputs) if s.reserved}
        self.pool_inputs = [(i, 0) for i, s in enumerate(inputs) if not s.reserved]
        classes: dict[int, list[Ref]] = {}
        for ref in self.pool_inputs:
            classes.setdefault(tids[ref], []).append(ref)
        self.symmetric = [members for members in classes.values() if len(members) > 1]
        return _State(graph, values, prints, tids, hashes, frozenset(), (), frozenset(), 0)

    # --- the search -------------------------------------------------------------------------

    def run(self, progress: bool = True) -> Enumeration:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny tensors: thread start-up costs more than it saves
        try:
            self._emit_bare_inputs()
            children = list(self._children(self.base))
            bar = tqdm(total=len(children), desc="enumerate", unit="root", disable=not progress, leave=False)
            for child in children:
                self._visit(child)
                bar.update()
            bar.close()
        finally:
            torch.set_num_threads(threads)
        return self.result

    def _visit(self, state: _State) -> None:
        self.result.visited[state.n_ops] = self.result.visited.get(state.n_ops, 0) + 1
        if self._emittable(state.graph, state.unused, state.inputs):
            self._emit(state)
        if state.n_ops >= self.config.max_ops:
            return
        for child in self._children(state):
            self._visit(child)

    def _children(self, state: _State) -> Iterator[_State]:
        last = state.n_ops + 1 == self.config.max_ops
        pool = list(self.pool_inputs)
        for nid in state.hashes:
            if nid >= self.n_inputs:
                pool.extend((nid, i) for i in range(len(state.graph.nodes[nid].types)))
        if last:
            skip = self.out_of_order(state.inputs)
            pool = [r for r in pool if r not in skip]
        by_type: dict[int, list[Ref]] = {}
        for ref in pool:
            by_type.setdefault(state.tids[ref], []).append(ref)
        for spec in self.specs:
            for combo in itertools.product(by_type, repeat=spec.arity):
                for option in self._options(spec, combo):
                    yield from self._apply(state, spec, combo, option, by_type, last)

    def _options(self, spec: OpSpec, combo: tuple[int, ...]) -> list[Option]:
        """The valid attribute choices for these operand types, with their result types (cached:
        validity depends on the operand types only)."""
        key = (spec.op, combo)
        if key in self.options:
            return self.options[key]
        options: list[Option] = []
        operand_types = [self.types[t] for t in combo]
        if spec.accepts(operand_types):
            placeholders = [(-1 - i, 0) for i in range(len(combo))]
            by_ref = dict(zip(placeholders, operand_types, strict=True))
            layout = spec.operands(placeholders, self.reserved)
            flat = tuple(None if r is None else by_ref.get(r) or self.base.graph.type_of(r) for r in layout)
            for attrs in spec.attrs(operand_types, self.config):
                canonical = canonical_attrs(spec.op, attrs)
                try:
                    types = infer_types(spec.op, canonical, flat)
                except FormError:
                    continue
                options.append((canonical, types, tuple(self.intern(t) for t in types)))
        self.options[key] = options
        return options

    def _apply(
        self,
        state: _State,
        spec: OpSpec,
        combo: tuple[int, ...],
        option: Option,
        by_type: dict[int, list[Ref]],
        last: bool,
    ) -> Iterator[_State]:
        canonical, types, tids = option
        graph = state.graph
        refs = tuple((graph.next_id, i) for i in range(len(types)))
        # The last op must leave at most max_outputs results unread: it reads enough of them.
        must_read = len(state.unused) + len(types) - self.config.max_outputs if last else 0
        unread = set(state.unused)
        for chosen in itertools.product(*(by_type[t] for t in combo)):
            if must_read > 0 and len(unread.intersection(chosen)) < must_read:
                continue
            self.result.attempts += 1
            operands = spec.operands(chosen, self.reserved)
            unused = tuple(r for r in state.unused if r not in operands) + refs
            inputs = state.inputs | {r for r in chosen if r[0] < self.n_inputs}
            node = Node(spec.op, tuple(operands), canonical, types)
            if last and not self._emittable(graph, unused, inputs, node):
                self.result.rejected += 1
                continue
            operand_hashes = tuple(None if r is None else (state.hashes[r[0]], r[1]) for r in operands)
            h = hash((spec.op, canonical, tids, operand_hashes))
            if h in state.key:
                continue  # a duplicate node (common subexpression)
            key = state.key | {h}
            if key in self.seen:
                continue
            self.seen.add(key)
            yield self._extend(state, node, tids, h, key, unused, inputs)

    def _extend(
        self,
        state: _State,
        node: Node,
        tids: tuple[int, ...],
        h: int,
        key: frozenset[int],
        unused: tuple[Ref, ...],
        inputs: frozenset[Ref],
    ) -> _State:
        graph = state.graph.copy()
        refs = graph.add_node(node)
        values = dict(state.values)
        prints = dict(state.prints)
        for ref, value in zip(refs, run_node(graph, node, values, torch.float64), strict=True):
            values[ref] = value
            prints[ref] = self.fingerprinter.output(node.types[ref[1]], value)
        new_tids = {**state.tids, **dict(zip(refs, tids, strict=True))}
        hashes = {**state.hashes, refs[0][0]: h}
        return _State(graph, values, prints, new_tids, hashes, key, unused, inputs, state.n_ops + 1)

    # --- which graphs are emitted -----------------------------------------------------------

    def _emittable(
        self, graph: Graph, unused: tuple[Ref, ...], inputs: frozenset[Ref], new: Node | None = None
    ) -> bool:
        """At most `max_outputs` outputs; several only if they are results of one op or of ops
        of one kind, connected through shared nodes or inputs (the multi-output rules worth
        having merge such ops); symmetric inputs used in order (a graph over y alone is one
        over x, renamed)."""
        if not unused or len(unused) > self.config.max_outputs or not self._in_order(inputs):
            return False
        if len(unused) == 1:
            return True
        producers = {r[0] for r in unused}
        if len(producers) == 1:
            return True  # results of one op (split)
        ops = {
            (new if nid == graph.next_id and new is not None else graph.nodes[nid]).op for nid in producers
        }
        if len(ops) > 1:
            return False  # several outputs come from one op, or from ops of one kind (to be merged)
        first, *rest = (self._ancestors(graph, r, new) for r in unused)
        return all(first & other for other in rest)

    def out_of_order(self, inputs: frozenset[Ref]) -> set[Ref]:
        """Symmetric inputs a last op may not read: beyond the next two unused of their class."""
        out: set[Ref] = set()
        for members in self.symmetric:
            used = sum(1 for m in members if m in inputs)
            out.update(members[used + 2 :])
        return out

    def _in_order(self, inputs: frozenset[Ref]) -> bool:
        for members in self.symmetric:
            used = sum(1 for m in members if m in inputs)
            if any(m not in inputs for m in members[:used]):
                return False
        return True

    def _ancestors(self, graph: Graph, ref: Ref, new: Node | None) -> set[int]:
        """Node ids a tensor depends on (itself included), reserved inputs excluded."""
        seen: set[int] = set()
        stack = [ref[0]]
        while stack:
            nid = stack.pop()
            if nid in seen:
                continue
            seen.add(nid)
            node = new if nid == graph.next_id and new is not None else graph.nodes[nid]
            stack.extend(r[0] for r in node.operand_refs())
        return seen - {r[0] for r in self.reserved.values()}

    def _emit(self, state: _State) -> None:
        outputs = sorted(state.unused, key=lambda r: state.prints[r])
        graph = state.graph.copy()
        graph.outputs = tuple(outputs)
        graph.prune()
        inputs = frozenset(self.names[(nid, 0)] for nid, n in graph.nodes.items() if n.is_source)
        fp = tuple(state.prints[r] for r in outputs)
        prints = {r: p for r, p in state.prints.items() if r[0] in graph.nodes}
        self.result.graphs.append(Enumerated(graph, state.n_ops, inputs, fp, prints))
        self.result.emitted[state.n_ops] = self.result.emitted.get(state.n_ops, 0) + 1

    def _emit_bare_inputs(self) -> None:
        for count in range(1, self.config.max_outputs + 1):
            for refs in itertools.combinations(self.pool_inputs, count):
                if not self._in_order(frozenset(refs)):
                    continue
                outputs = sorted(refs, key=lambda r: self.base.prints[r])
                graph = self.base.graph.copy()
                graph.outputs = tuple(outputs)
                graph.prune()
                fp = tuple(self.base.prints[r] for r in outputs)
                prints = {r: self.base.prints[r] for r in refs}
                names = frozenset(self.names[r] for r in refs)
                self.result.graphs.append(Enumerated(graph, 0, names, fp, prints))
                self.result.emitted[0] = self.result.emitted.get(0, 0) + 1


def enumerate_graphs(config: EnumConfig, progress: bool = True) -> Enumeration:
    """Every graph of up to `config.max_ops` ops over the inputs, with its fingerprint."""
    return Enumerator(config).run(progress)
