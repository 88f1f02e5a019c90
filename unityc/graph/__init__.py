"""A compact, hashable PCG for the rewrite engine and the search.

xDSL modules are too slow to clone per search candidate (see XDSL_NOTES "Speed"), so rules and
the search work on `Graph`: a dict of immutable `Node`s (op name, operand references, properties
as hashable Python values, result types, machine view). It converts losslessly to and from the
pcg dialect (`from_module`, `to_module`), infers result types with the dialect's own inference
(cached), and hashes structurally so that equal graphs built in different orders are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from xdsl.ir import Attribute

from unityc.dialects.node import SOURCE_OPS, Node, Ref
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import GraphPlan, OpPlan
from unityc.dialects.precision import PRECISION
from unityc.dialects.registry import canonical_attrs, full_attrs, infer_types, op_class, op_classes
from unityc.dialects.syntax import Kind
from unityc.dialects.view import MachineViewAttr

KEPT_FUNCTION_ATTRS = (PRECISION,)
"""Graph-function attributes that say how the model trains, not how a plan runs it: rewrites,
segments, rebuilt and pipelined plans keep them."""


def prop_kinds(name: str) -> dict[str, Kind]:
    return {p: kind for p, kind, _ in op_class(name).PROPS}


def _producers(node: Node) -> list[int]:
    """The ids of the nodes `node` reads, each once, in operand order."""
    return list(dict.fromkeys(r[0] for r in node.operands if r is not None))


@dataclass
class Graph:
    """A PCG: nodes by id and the graph's outputs (the loss first, as in the pcg dialect)."""

    nodes: dict[int, Node] = field(default_factory=dict)
    outputs: tuple[Ref, ...] = ()
    module_attrs: dict[str, Attribute] = field(default_factory=dict)
    next_id: int = 0
    function_attrs: dict[str, Attribute] = field(default_factory=dict)
    """The graph function's attributes (a pipelined plan's `unityc.schedule`, ...)."""

    # --- building ---------------------------------------------------------------------------

    def add(
        self, op: str, operands: Sequence[Ref | None] = (), view: MachineViewAttr | None = None, **attrs: Any
    ) -> tuple[Ref, ...]:
        """Adds an op, inferring its result types; returns its results. Raises FormError."""
        canonical = canonical_attrs(op, attrs)
        types = infer_types(op, canonical, tuple(None if r is None else self.type_of(r) for r in operands))
        return self.add_node(Node(op, tuple(operands), canonical, types, OpPlan(view)))

    def add_source(self, op: str, key: str, t: TensorType) -> Ref:
        return self.add_node(Node(op, (), (("key", key),), (t,)))[0]

    def add_node(self, node: Node) -> tuple[Ref, ...]:
        nid = self.next_id
        self.next_id += 1
        self.nodes[nid] = node
        return tuple((nid, i) for i in range(len(node.types)))

    def kept_function_attrs(self) -> dict[str, Attribute]:
        """The graph function's attributes that every graph made from this one keeps (its
        precision), unlike a plan's (`unityc.schedule`, ...)."""
        return {k: v for k, v in self.function_attrs.items() if k in KEPT_FUNCTION_ATTRS}

    def copy(self) -> Graph:
        nodes = dict(self.nodes)
        return Graph(nodes, self.outputs, self.module_attrs, self.next_id, dict(self.function_attrs))

    # --- reading ----------------------------------------------------------------------------

    def type_of(self, ref: Ref) -> TensorType:
        return self.nodes[ref[0]].types[ref[1]]

    def users(self) -> dict[int, list[int]]:
        """For each node, the nodes that read one of its results (with repeats removed)."""
        out: dict[int, list[int]] = {nid: [] for nid in self.nodes}
        for nid, node in self.nodes.items():
            for src in dict.fromkeys(r[0] for r in node.operand_refs()):
                out[src].append(nid)
        return out

    def topological(self) -> list[int]:
        """Node ids, producers before users (stable: ties keep insertion order): a depth-first
        post-order from each node in insertion order. Hot in the search (thousands of graphs),
        so a node whose producers are all placed is placed without a stack."""
        nodes = self.nodes
        order: list[int] = []
        done: set[int] = set()
        for root in nodes:
            if root in done:
                continue
            producers = _producers(nodes[root])
            if all(p in done for p in producers):
                done.add(root)
                order.append(root)
                continue
            open_: set[int] = {root}
            stack: list[tuple[int, Iterator[int]]] = [(root, iter(producers))]
            while stack:
                nid, pending = stack[-1]
                nxt = next(pending, None)
                if nxt is None:
                    stack.pop()
                    open_.discard(nid)
                    done.add(nid)
                    order.append(nid)
                elif nxt in open_:
                    raise ValueError(f"the graph has a cycle through node {nxt}")
                elif nxt not in done:
                    open_.add(nxt)
                    stack.append((nxt, iter(_producers(nodes[nxt]))))
        return order

    def live(self) -> set[int]:
        """Nodes an output depends on."""
        seen: set[int] = set()
        stack = [r[0] for r in self.outputs]
        while stack:
            nid = stack.pop()
            if nid in seen:
                continue
            seen.add(nid)
            stack.extend(r[0] for r in self.nodes[nid].operand_refs())
        return seen

    def prune(self) -> Graph:
        """Drops nodes no output depends on."""
        keep = self.live()
        self.nodes = {nid: n for nid, n in self.nodes.items() if nid in keep}
        return self

    def node_hashes(self) -> dict[int, int]:
        """A structural hash per node: its op, properties, view and its operands' hashes."""
        hashes: dict[int, int] = {}
        for nid in self.topological():
            node = self.nodes[nid]
            operands = tuple(None if r is None else (hashes[r[0]], r[1]) for r in node.operands)
            hashes[nid] = hash((node.op, node.attrs, node.types, node.plan, operands))
        return hashes

    def structural_hash(self) -> int:
        """Equal for graphs that differ only in node ids and insertion order."""
        hashes = self.node_hashes()
        return hash((tuple((hashes[n], i) for n, i in self.outputs), frozenset(hashes.values())))

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes.values():
            counts[node.op] = counts.get(node.op, 0) + 1
        return counts

    # --- rewriting --------------------------------------------------------------------------

    def redirect(self, mapping: Mapping[Ref, Ref]) -> None:
        """Makes every reader of a tensor in `mapping` (and the outputs) read its image."""
        if not mapping:
            return
        for nid, node in list(self.nodes.items()):
            if any(r in mapping for r in node.operand_refs()):
                operands = tuple(None if r is None else mapping.get(r, r) for r in node.operands)
                self.nodes[nid] = replace(node, operands=operands)
        self.outputs = tuple(mapping.get(r, r) for r in self.outputs)

    def with_view(self, nid: int, view: MachineViewAttr | None) -> None:
        self.nodes[nid] = self.nodes[nid].with_plan(view=view)

    @property
    def plan(self) -> GraphPlan:
        """The graph-level plan in the function's attributes (pipeline, accumulation)."""
        return GraphPlan.from_attributes(self.function_attrs)

    def set_plan(self, plan: GraphPlan) -> None:
        self.function_attrs = plan.written_to(self.function_attrs)


def with_plan_of(new: Node, old: Node) -> Node:
    """`new` (a rebuilt `old`, placed by the caller) with `old`'s plan carried to it by
    `OpPlan.carried_to`, the rule every rewrite uses: stage and recomputation, ZeRO where `new`
    is a weight still held in copies; `new`'s own view."""
    carried = old.plan.carried_to(new.op, new.types[0] if new.types else None).with_(view=new.view)
    return new if carried == new.plan else replace(new, plan=carried)


def sources(graph: Graph) -> Iterable[tuple[int, Node]]:
    return ((nid, n) for nid, n in graph.nodes.items() if n.is_source)


def side_ops(graph: Graph) -> set[int]:
    """Values computed from inputs and constants alone (reading no weight, even indirectly)
    that several other ops read, and the ops they are computed from: an attention mask built
    from the padding mask and read by every layer. The search's splitting and machine mapping
    treat them like sources (edges from them to every layer would leave no cut). A parallel op
    of such a value or of a constant is one too (in a plan, GQA's zero constant or the mask
    replicated once for every layer), a parallel op of an input is not (it moves the batch for
    its readers), nor what reads it; weightless ops feeding one reader only (a reshape of the
    labels) stay with it."""
    weighted: set[int] = set()
    weightless: list[int] = []
    light: set[int] = set()
    for nid in graph.topological():
        node = graph.nodes[nid]
        if node.is_source:
            if node.op == "pcg.weight":
                weighted.add(nid)
        elif any(r[0] in weighted for r in node.operand_refs()):
            weighted.add(nid)
        elif node.op.startswith("parallel.") and not any(
            graph.nodes[r[0]].op == "pcg.constant" or r[0] in light for r in node.operand_refs()
        ):
            weighted.add(nid)  # it moves an input for its readers
        else:
            weightless.append(nid)
            light.add(nid)
    # per weightless op, up to two ops outside them that read it (directly or through others)
    readers: dict[int, set[int]] = {nid: set() for nid in weightless}
    users = graph.users()
    for nid in reversed(weightless):
        found = readers[nid]
        for user in users[nid]:
            found |= readers.get(user, {user})
            if len(found) > 1:
                break
    return {nid for nid in weightless if len(readers[nid]) > 1}


from unityc.graph.convert import from_module, to_module  # noqa: E402

__all__ = [
    "SOURCE_OPS",
    "Graph",
    "Node",
    "Ref",
    "canonical_attrs",
    "from_module",
    "full_attrs",
    "infer_types",
    "op_class",
    "op_classes",
    "side_ops",
    "sources",
    "to_module",
    "with_plan_of",
]
