"""Splicing a rule's target into a graph in place of a match (see `CompiledRule.apply`).

The work is local to the match, because the search applies rules thousands of times per graph:
the graph is copied (a dict copy), the target is built with `terms.Builder`, only the readers of
the replaced tensors are redirected (found in the users map of the original graph), and dead
nodes are removed by following operands up from the matched nodes instead of a whole-graph prune.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from unityc.dialects.forms import FormError
from unityc.graph import Graph, Ref
from unityc.rewrites.terms import App, Builder, EvalError, Term, Var, eval_expr, subterms


class TargetBuilder(Builder):
    """`terms.Builder` for a compiled rule's target, whose equal sub-terms are one object: terms
    are looked up by identity instead of by a structural hash (which recurses through the whole
    term on every lookup and dominated the cost of applying a rule)."""

    def __init__(
        self, graph: Graph, tensors: Mapping[str, Ref], env: Mapping[str, Any], node_of: Mapping[int, int]
    ):
        super().__init__(graph, tensors, env)
        self.node_of = node_of
        """id(App) -> the node it denotes (`t.0` and `t.1` of one op share it)."""
        self.by_id: dict[int, Ref] = {}
        self.results: dict[int, tuple[Ref, ...]] = {}

    def ref(self, term: Term) -> Ref:
        ref = self.by_id.get(id(term))
        if ref is not None:
            return ref
        node = self.node_of.get(id(term))
        if isinstance(term, Var) or node is None:
            ref = super().ref(term)
        else:
            results = self.results.get(node)
            if results is None:
                operands = [None if a is None else self.ref(a) for a in term.args]
                attrs = {name: eval_expr(e, self.env, self.type_of) for name, e in term.attrs}
                results = self.results[node] = self.graph.add(term.op, operands, **attrs)
            if term.result >= len(results):
                raise EvalError(f"{term.op} has {len(results)} results, not {term.result + 1}")
            ref = results[term.result]
        self.by_id[id(term)] = ref
        return ref

    def new_nodes(self) -> set[int]:
        return super().new_nodes() | {refs[0][0] for refs in self.results.values()}


def target_nodes(target: Sequence[Term]) -> dict[int, int]:
    """The node each App of the target denotes, keyed by the App's id (see TargetBuilder)."""
    keys: dict[App, int] = {}
    node_of: dict[int, int] = {}
    for term in target:
        for t in subterms(term):
            if isinstance(t, App):
                node_of[id(t)] = keys.setdefault(App(t.op, t.args, t.attrs, 0), len(keys))
    return node_of


def splice(
    graph: Graph,
    target: Sequence[Term],
    roots: Sequence[Ref],
    tensors: Mapping[str, Ref],
    env: Mapping[str, Any],
    matched: Iterable[int],
    users: Mapping[int, Sequence[int]],
    node_of: Mapping[int, int] | None = None,
) -> Graph | None:
    """A new graph where the target (built on `tensors` and `env`) replaces the tensors `roots`;
    None if the target is ill-typed or an output's type differs from the tensor it replaces.
    `users` is the original graph's users map; `node_of` comes from `target_nodes(target)`."""
    new = graph.copy()
    builder = TargetBuilder(new, tensors, env, node_of if node_of is not None else target_nodes(target))
    try:
        outs = tuple(builder.ref(t) for t in target)
    except (FormError, EvalError, TypeError, ValueError):  # TypeError: arithmetic on a non-number
        return None
    if any(graph.type_of(s) != new.type_of(t) for s, t in zip(roots, outs, strict=True)):
        return None
    created = builder.new_nodes()
    extra_users: dict[int, set[int]] = {}
    for nid in created:
        for ref in new.nodes[nid].operand_refs():
            extra_users.setdefault(ref[0], set()).add(nid)
    mapping = {s: t for s, t in zip(roots, outs, strict=True) if s != t}
    _carry_plans(new, graph, roots, outs, created)
    _redirect(new, mapping, users, extra_users)
    _inherit_names(new, graph, mapping, created)
    _remove_dead(new, matched, users, extra_users)
    return new


def _carry_plans(
    new: Graph, old: Graph, roots: Sequence[Ref], outs: Sequence[Ref], created: set[int]
) -> None:
    """The created nodes take the plan of the tensor they replace (an inner node: the first
    root's), by `OpPlan.carried_to`: a staged, ZeRO or recomputed plan stays so under rules."""
    plans = {dst[0]: old.nodes[src[0]] for src, dst in zip(roots, outs, strict=True)}
    first = old.nodes[roots[0][0]] if roots else None
    if not any(n.plan for n in plans.values()):
        return
    for nid in created:
        node = new.nodes[nid]
        replaced = plans.get(nid, first)
        if replaced is None or not replaced.plan:
            continue
        plan = replaced.plan.carried_to(node.op, node.types[0] if node.types else None, replaced.types[0])
        new.nodes[nid] = replace(node, plan=plan)


def _redirect(
    graph: Graph, mapping: Mapping[Ref, Ref], users: Mapping[int, Sequence[int]], extra: dict[int, set[int]]
) -> None:
    """Graph.redirect, visiting only the readers of the replaced tensors' nodes."""
    readers = {u for src in mapping for u in users.get(src[0], ())}
    for nid in readers:
        node = graph.nodes[nid]
        if not any(r in mapping for r in node.operand_refs()):
            continue
        operands = tuple(None if r is None else mapping.get(r, r) for r in node.operands)
        graph.nodes[nid] = replace(node, operands=operands)
        for ref in operands:
            if ref is not None:
                extra.setdefault(ref[0], set()).add(nid)
    graph.outputs = tuple(mapping.get(r, r) for r in graph.outputs)


def _inherit_names(new: Graph, old: Graph, mapping: Mapping[Ref, Ref], created: set[int]) -> None:
    """A new single-result node that replaces a named tensor takes its name (for readable printed
    IR; the printer would give every result of a multi-result node that one name)."""
    for src, dst in mapping.items():
        node = new.nodes[dst[0]]
        hint = old.nodes[src[0]].hint
        if dst[0] in created and len(node.types) == 1 and node.hint is None and hint is not None:
            new.nodes[dst[0]] = replace(node, hint=hint)


def _remove_dead(
    graph: Graph, candidates: Iterable[int], users: Mapping[int, Sequence[int]], extra: Mapping[int, set[int]]
) -> None:
    """Removes the candidates nobody reads any more, then their producers that died with them."""
    outputs = {r[0] for r in graph.outputs}
    work = list(candidates)
    while work:
        nid = work.pop()
        if nid not in graph.nodes or nid in outputs:
            continue
        readers = [*users.get(nid, ()), *extra.get(nid, ())]
        if any(u in graph.nodes and any(r[0] == nid for r in graph.nodes[u].operand_refs()) for u in readers):
            continue
        work.extend(r[0] for r in graph.nodes.pop(nid).operand_refs())
