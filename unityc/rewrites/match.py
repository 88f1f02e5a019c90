"""Rules compiled into matchers over the compact `Graph` (what the search and `apply-rules` run).

`CompiledRule(rule)` turns a rule's source terms into pattern nodes once, and plans the order
in which a match binds them: the first source output's op is the *anchor* (tried at every graph
node of that op), then operands are followed down from bound nodes (each has one candidate: the
producer), and the other outputs of a multi-output rule are found among the users of tensors
already bound (or, failing that, among all nodes of their op). Binding checks the op, the
operand count, attributes (literals equal, attribute variables bound on first use, to None where
an optional property is unset, properties the pattern does not write must be unset) and tensor
variables (one variable, one tensor; distinct variables may bind one tensor).

A complete binding is a match when (TASO's conditions) no matched node other than an output has
a user outside the match, rewriting would not create a cycle, and the rule's conditions hold;
parameters (attribute variables only the target uses) are then enumerated from their domains.
`apply` (in `apply.py`) builds the target and splices it in.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import product
from typing import Any

from xdsl.irdl import OptOperandDef, VarOperandDef

from unityc.dialects.pcg_types import TensorType
from unityc.dialects.syntax import Kind
from unityc.graph import Graph, Node, Ref, op_class
from unityc.rewrites.apply import splice, target_nodes
from unityc.rewrites.terms import (
    App,
    AttrVar,
    BinOp,
    Cond,
    Domain,
    EvalError,
    Expr,
    ListExpr,
    Lit,
    Query,
    Rule,
    Term,
    Var,
    eval_expr,
    expr_vars,
    holds,
)


@dataclass(frozen=True, slots=True)
class NodeArg:
    """An operand that is result `result` of pattern node `node`."""

    node: int
    result: int


PatternArg = str | NodeArg | None
"""A tensor variable's name, another pattern node's result, or an absent optional operand."""


@dataclass(frozen=True, slots=True)
class PatternNode:
    op: str
    args: tuple[PatternArg, ...]
    attrs: tuple[tuple[str, Expr, Any], ...]
    """(property, expression, its value when unset: False for flags, None otherwise)."""
    names: frozenset[str]


@dataclass(frozen=True, slots=True)
class Step:
    """How one pattern node finds its candidates: 'anchor' and 'scan' try every node of its op,
    'operand' reads the producer of `parent`'s operand `position`, 'user' the users of `via`."""

    node: int
    kind: str
    parent: int = -1
    position: int = -1
    via: PatternArg = None


@dataclass(frozen=True)
class Match:
    """A binding of a rule's source in one graph."""

    rule: str
    nodes: tuple[int, ...]
    """The graph node bound to each pattern node."""
    roots: tuple[Ref, ...]
    """The tensors the source outputs denote, in order."""
    tensors: tuple[tuple[str, Ref], ...]
    env: tuple[tuple[str, Any], ...]
    """Attribute variables, parameters included."""
    params: tuple[tuple[str, Any], ...]
    position: int
    """Program-order position of the anchor node (first matches first)."""


class GraphIndex:
    """What matching needs of a graph, computed once and shared by every rule."""

    def __init__(self, graph: Graph):
        self.graph = graph
        order = graph.topological()
        self.position = {nid: i for i, nid in enumerate(order)}
        self.by_op: dict[str, list[int]] = {}
        for nid in order:
            self.by_op.setdefault(graph.nodes[nid].op, []).append(nid)
        self.users = graph.users()
        self.output_nodes = frozenset(r[0] for r in graph.outputs)


# --- compiling ----------------------------------------------------------------------------


@cache
def _arity(op: str) -> int | None:
    """The number of flattened operands of `op`, None if it is variadic."""
    definitions = [d for _, d in op_class(op).get_irdl_definition().operands]
    if any(isinstance(d, VarOperandDef) and not isinstance(d, OptOperandDef) for d in definitions):
        return None
    return len(definitions)


@cache
def _unset_values(op: str) -> dict[str, Any]:
    return {p: (False if kind is Kind.FLAG else None) for p, kind, _ in op_class(op).PROPS}


class _Normalizer:
    """Pads every App's operands with absent optionals to the op's arity (the Builder and the
    graph use flattened operands), keeping one object per distinct term."""

    def __init__(self, rule: str):
        self.rule = rule
        self.seen: dict[Term, Term] = {}

    def term(self, t: Term) -> Term:
        if t in self.seen:
            return self.seen[t]
        out: Term = t
        if isinstance(t, App):
            try:
                arity = _arity(t.op)
            except KeyError as e:
                raise ValueError(f"rule '{self.rule}': {e.args[0]}") from None
            args = tuple(None if a is None else self.term(a) for a in t.args)
            if arity is not None and len(args) > arity:
                raise ValueError(f"rule '{self.rule}': {t.op} takes {arity} operands, got {len(args)}")
            if arity is not None:
                args += (None,) * (arity - len(args))
            unknown = {name for name, _ in t.attrs} - set(_unset_values(t.op))
            if unknown:
                raise ValueError(f"rule '{self.rule}': {t.op} has no property {sorted(unknown)[0]!r}")
            out = App(t.op, args, tuple((n, self.expr(e)) for n, e in t.attrs), t.result)
        self.seen[t] = out
        return out

    def expr(self, e: Expr) -> Expr:
        match e:
            case Query(fn=fn, term=t, dim=d):
                return Query(fn, self.term(t), None if d is None else self.expr(d))
            case ListExpr(items=items):
                return ListExpr(tuple(self.expr(i) for i in items))
            case BinOp(op=op, left=a, right=b):
                return BinOp(op, self.expr(a), self.expr(b))
        return e

    def cond(self, c: Cond) -> Cond:
        return Cond(c.op, self.expr(c.left), self.expr(c.right))

    def domain(self, d: Domain) -> Domain:
        return Domain(d.kind, None if d.term is None else self.term(d.term), d.lo, d.hi)


def _query_terms(e: Expr) -> Iterator[Term]:
    match e:
        case Query(term=t, dim=d):
            yield t
            if d is not None:
                yield from _query_terms(d)
        case ListExpr(items=items):
            for item in items:
                yield from _query_terms(item)
        case BinOp(left=a, right=b):
            yield from _query_terms(a)
            yield from _query_terms(b)


class CompiledRule:
    """A rule compiled once into a matcher; see the module docstring."""

    def __init__(self, rule: Rule):
        norm = _Normalizer(rule.name)
        self.rule = rule
        self.name = rule.name
        self.source: tuple[Term, ...] = tuple(norm.term(t) for t in rule.source)
        self.target: tuple[Term, ...] = tuple(norm.term(t) for t in rule.target)
        conditions = tuple(norm.cond(c) for c in rule.conditions)
        self.params: tuple[tuple[str, Domain], ...] = tuple((n, norm.domain(d)) for n, d in rule.params)
        if not self.source or len(self.source) != len(self.target):
            raise ValueError(
                f"rule '{rule.name}': {len(self.source)} source outputs but {len(self.target)} target outputs"
            )
        self._target_nodes = target_nodes(self.target)
        self.pattern: list[PatternNode] = []
        self._index: dict[App, int] = {}
        self.roots: tuple[tuple[int, int], ...] = tuple(self._root(t) for t in self.source)
        self.root_nodes = frozenset(p for p, _ in self.roots)
        self.anchor_op = self.pattern[self.roots[0][0]].op
        self.steps = self._plan()
        self._parents = self._parent_uses()
        bound = {n for p in self.pattern for _, e, _ in p.attrs for n in expr_vars(e)}
        param_names = {n for n, _ in self.params}
        self.pre_conditions = tuple(c for c in conditions if not self._uses(c, param_names))
        self.post_conditions = tuple(c for c in conditions if self._uses(c, param_names))
        unbound = (
            {n for c in conditions for e in (c.left, c.right) for n in expr_vars(e)} - bound - param_names
        )
        if unbound:
            raise ValueError(f"rule '{rule.name}': condition uses unbound variable '{sorted(unbound)[0]}'")
        self._resolvers = self._resolvable_terms(conditions)

    # --- pattern construction -----------------------------------------------------------

    def _root(self, term: Term) -> tuple[int, int]:
        if not isinstance(term, App):
            raise ValueError(f"rule '{self.name}': a source output must be an op, not the variable '{term}'")
        return self._node(term), term.result

    def _node(self, term: App) -> int:
        key = App(term.op, term.args, term.attrs, 0)
        if key in self._index:
            return self._index[key]
        args: list[PatternArg] = []
        for a in term.args:
            if a is None or isinstance(a, Var):
                args.append(None if a is None else a.name)
            else:
                args.append(NodeArg(self._node(a), a.result))
        unset = _unset_values(term.op)
        attrs = tuple((n, e, unset[n]) for n, e in term.attrs)
        self.pattern.append(
            PatternNode(term.op, tuple(args), attrs, frozenset(unset) & {n for n, _ in term.attrs})
        )
        self._index[key] = len(self.pattern) - 1
        return len(self.pattern) - 1

    def _plan(self) -> tuple[Step, ...]:
        steps: list[Step] = []
        planned: set[int] = set()
        known: set[str] = set()

        def add(step: Step) -> None:
            steps.append(step)
            planned.add(step.node)
            for position, a in enumerate(self.pattern[step.node].args):
                if isinstance(a, str):
                    known.add(a)
                elif isinstance(a, NodeArg) and a.node not in planned:
                    add(Step(a.node, "operand", parent=step.node, position=position))

        def is_known(a: PatternArg) -> bool:
            return a in known or (isinstance(a, NodeArg) and a.node in planned)

        add(Step(self.roots[0][0], "anchor"))
        while len(planned) < len(self.pattern):
            pending = [p for p in range(len(self.pattern)) if p not in planned]
            linked = next(((p, a) for p in pending for a in self.pattern[p].args if is_known(a)), None)
            if linked is not None:
                add(Step(linked[0], "user", via=linked[1]))
            else:  # shares nothing with what is bound so far: try every node of its op
                add(Step(pending[0], "scan"))
        return tuple(steps)

    def _parent_uses(self) -> list[list[tuple[int, int, int]]]:
        """For each pattern node, (parent, operand position, result) of every pattern use."""
        uses: list[list[tuple[int, int, int]]] = [[] for _ in self.pattern]
        for p, node in enumerate(self.pattern):
            for position, a in enumerate(node.args):
                if isinstance(a, NodeArg):
                    uses[a.node].append((p, position, a.result))
        return uses

    def _uses(self, c: Cond, names: set[str]) -> bool:
        return any(n in names for e in (c.left, c.right) for n in expr_vars(e))

    def _resolvable_terms(self, conditions: Sequence[Cond]) -> dict[int, PatternArg]:
        """Where to find the tensor of each term that a query (in conditions, domains or source
        attributes) asks about, keyed by the term object's id (the compiled rule keeps them)."""
        exprs: list[Expr] = [e for c in conditions for e in (c.left, c.right)]
        exprs += [e for p in self.pattern for _, e, _ in p.attrs]
        terms = [t for e in exprs for t in _query_terms(e)]
        terms += [d.term for _, d in self.params if d.term is not None]
        resolvers: dict[int, PatternArg] = {}
        for t in terms:
            if isinstance(t, Var):
                resolvers[id(t)] = t.name
                continue
            key = App(t.op, t.args, t.attrs, 0)
            if key not in self._index:
                raise ValueError(
                    f"rule '{self.name}': a query asks about {t.op}, which the source does not match"
                )
            resolvers[id(t)] = NodeArg(self._index[key], t.result)
        return resolvers

    # --- matching -----------------------------------------------------------------------

    def matches(
        self,
        graph: Graph,
        degrees: Sequence[int] = (2,),
        index: GraphIndex | None = None,
        fixed: Mapping[str, Any] | None = None,
    ) -> Iterator[Match]:
        """Every match, anchors in program order. `fixed` pins parameters to given values."""
        index = index if index is not None else GraphIndex(graph)
        if self.anchor_op not in index.by_op:
            return
        state = _State(graph, index, len(self.pattern), self._resolvers)
        for nodes in self._bind(state, 0):
            yield from self._complete(state, nodes, degrees, fixed or {})

    def _bind(self, s: _State, i: int) -> Iterator[tuple[int, ...]]:
        if i == len(self.steps):
            yield tuple(s.nodes)  # type: ignore[arg-type]
            return
        step = self.steps[i]
        for nid in self._candidates(s, step):
            if nid in s.used:
                continue
            mark = s.bind_node(step.node, nid)
            if self._agrees(s, step.node, nid):
                yield from self._bind(s, i + 1)
            s.unbind(step.node, nid, mark)

    def _candidates(self, s: _State, step: Step) -> Sequence[int]:
        op = self.pattern[step.node].op
        if step.kind == "operand":
            ref = s.graph.nodes[s.nodes[step.parent]].operands[step.position]  # type: ignore[index]
            expected = self.pattern[step.parent].args[step.position]
            assert isinstance(expected, NodeArg)
            ok = ref is not None and ref[1] == expected.result and s.graph.nodes[ref[0]].op == op
            return (ref[0],) if ok else ()  # type: ignore[index]
        if step.kind == "user":
            ref = s.ref_of(step.via)
            if ref is None:
                return ()
            return [u for u in s.index.users.get(ref[0], ()) if s.graph.nodes[u].op == op]
        return s.index.by_op.get(op, ())

    def _agrees(self, s: _State, p: int, nid: int) -> bool:
        """Whether graph node nid fits pattern node p given what is bound (binding variables)."""
        pattern, node = self.pattern[p], s.graph.nodes[nid]
        if len(node.operands) != len(pattern.args):
            return False
        if not self._operands_agree(s, pattern, node) or not self._attrs_agree(s, pattern, node):
            return False
        operands = s.graph.nodes
        return all(
            s.nodes[q] is None or operands[s.nodes[q]].operands[pos] == (nid, r)  # type: ignore[index]
            for q, pos, r in self._parents[p]
        )

    def _operands_agree(self, s: _State, pattern: PatternNode, node: Node) -> bool:
        for a, ref in zip(pattern.args, node.operands, strict=True):
            if a is None or ref is None:
                if a is not ref:
                    return False
            elif isinstance(a, str):
                bound = s.tensors.get(a)
                if bound is None:
                    s.bind_tensor(a, ref)
                elif bound != ref:
                    return False
            elif s.nodes[a.node] is not None and (s.nodes[a.node], a.result) != ref:
                return False
        return True

    def _attrs_agree(self, s: _State, pattern: PatternNode, node: Node) -> bool:
        for name, _ in node.attrs:
            if name not in pattern.names:
                return False
        return all(_unify(s, e, node.attr(name, unset)) for name, e, unset in pattern.attrs)

    def _complete(
        self, s: _State, nodes: tuple[int, ...], degrees: Sequence[int], fixed: Mapping[str, Any]
    ) -> Iterator[Match]:
        """Checks a full binding (TASO's conditions, deferred attributes, conditions) and
        enumerates parameters."""
        if not self._closed(s, nodes) or self._makes_cycle(s, nodes):
            return
        env = dict(s.env)
        try:
            if not all(eval_expr(e, env, s.type_of) == v for e, v in s.deferred):
                return
            if not all(holds(c, env, s.type_of) for c in self.pre_conditions):
                return
            domains = [self._domain(s, name, d, degrees, fixed) for name, d in self.params]
        except (EvalError, TypeError):  # TypeError: a comparison with an unset property
            return
        roots = tuple((nodes[p], r) for p, r in self.roots)
        tensors = tuple(s.tensors.items())
        position = s.index.position[nodes[self.roots[0][0]]]
        for values in product(*domains):
            params = tuple((n, v) for (n, _), v in zip(self.params, values, strict=True))
            full = {**env, **dict(params)}
            try:
                if not all(holds(c, full, s.type_of) for c in self.post_conditions):
                    continue
            except (EvalError, TypeError):
                continue
            yield Match(self.name, nodes, roots, tensors, tuple(full.items()), params, position)

    def _closed(self, s: _State, nodes: tuple[int, ...]) -> bool:
        """TASO: a matched node that is not a source output has no user outside the match."""
        for p, nid in enumerate(nodes):
            if p in self.root_nodes:
                continue
            if nid in s.index.output_nodes or any(u not in s.used for u in s.index.users.get(nid, ())):
                return False
        return True

    def _makes_cycle(self, s: _State, nodes: tuple[int, ...]) -> bool:
        """Whether a tensor the target reads depends on a source output (only possible when the
        source has several outputs: a single output's inputs all lie above it)."""
        if len(self.root_nodes) < 2:
            return False
        inputs = {ref[0] for ref in s.tensors.values()}
        roots = {nodes[p] for p in self.root_nodes}
        if inputs & roots:
            return True
        position = s.index.position
        limit = max(position[n] for n in inputs) if inputs else -1
        stack, seen = list(roots), set(roots)
        while stack:
            for user in s.index.users.get(stack.pop(), ()):
                if user in inputs:
                    return True
                if user not in seen and position[user] < limit:
                    seen.add(user)
                    stack.append(user)
        return False

    def apply(self, graph: Graph, match: Match, index: GraphIndex | None = None) -> Graph | None:
        """A new graph with the match replaced by the target; None if the target is ill-typed
        or its outputs' types differ from the source's. `index` (of `graph`) saves work."""
        users = index.users if index is not None and index.graph is graph else graph.users()
        tensors, env = dict(match.tensors), dict(match.env)
        return splice(graph, self.target, match.roots, tensors, env, match.nodes, users, self._target_nodes)

    def _domain(
        self, s: _State, name: str, d: Domain, degrees: Sequence[int], fixed: Mapping[str, Any]
    ) -> Sequence[Any]:
        if d.kind == "degree":
            values: Sequence[Any] = tuple(degrees)
            if name in fixed:
                return (fixed[name],) if isinstance(fixed[name], int) and fixed[name] > 0 else ()
            return values
        if d.kind == "dim":
            assert d.term is not None
            values = range(s.type_of(d.term).rank)
        elif d.kind == "range":
            values = range(d.lo, d.hi)
        else:
            raise EvalError(f"unknown domain '{d.kind}'")
        if name in fixed:
            return (fixed[name],) if fixed[name] in values else ()
        return values


def compile_rules(rules: Iterable[Rule]) -> list[CompiledRule]:
    return [CompiledRule(r) for r in rules]


def rewrites(
    graph: Graph, compiled: Sequence[CompiledRule], degrees: Sequence[int] = (2,)
) -> Iterator[tuple[Match, Graph]]:
    """Every (match, rewritten graph) of every rule, rule by rule, anchors in program order."""
    index = GraphIndex(graph)
    for rule in compiled:
        for match in rule.matches(graph, degrees, index):
            new = rule.apply(graph, match, index)
            if new is not None:
                yield match, new


def first_rewrite(
    graph: Graph,
    compiled: Sequence[CompiledRule],
    degrees: Sequence[int] = (2,),
    fixed: Mapping[str, Any] | None = None,
) -> tuple[CompiledRule, Match, Graph] | None:
    """The rewrite whose anchor comes first in program order (ties: the earlier rule)."""
    index = GraphIndex(graph)
    best: tuple[int, CompiledRule, Match, Graph] | None = None
    for rule in compiled:
        for match in rule.matches(graph, degrees, index, fixed):
            if best is not None and match.position >= best[0]:
                break
            new = rule.apply(graph, match, index)
            if new is not None:
                best = (match.position, rule, match, new)
                break
    return None if best is None else best[1:]


def _unify(s: _State, e: Expr, value: Any) -> bool:
    """Matches an attribute expression against a node's property value, binding variables."""
    match e:
        case Lit(value=v):
            return v == value
        case AttrVar(name=n):  # an unset optional property binds None (flags: False)
            bound = s.env.get(n, _MISSING)
            if bound is _MISSING:
                s.bind_attr(n, value)
                return True
            return bound == value
        case ListExpr(items=items):
            if not isinstance(value, tuple) or len(value) != len(items):
                return False
            return all(_unify(s, item, v) for item, v in zip(items, value, strict=True))
    s.defer(e, value)  # arithmetic or a query: checked once every variable is bound
    return True


_MISSING = object()


class _State:
    """The partial binding of one matching run; variables bound since a mark can be undone."""

    def __init__(self, graph: Graph, index: GraphIndex, size: int, resolvers: dict[int, PatternArg]):
        self.graph = graph
        self.index = index
        self.resolvers = resolvers
        self.nodes: list[int | None] = [None] * size
        self.used: set[int] = set()
        self.tensors: dict[str, Ref] = {}
        self.env: dict[str, Any] = {}
        self.deferred: list[tuple[Expr, Any]] = []
        self.trail: list[str | None] = []
        """Tensor variables ('t:name'), attribute variables ('a:name') and deferred checks (None)."""

    def bind_node(self, p: int, nid: int) -> int:
        self.nodes[p] = nid
        self.used.add(nid)
        return len(self.trail)

    def unbind(self, p: int, nid: int, mark: int) -> None:
        """Undoes bind_node(p, nid) and every variable bound since it returned `mark`."""
        self.nodes[p] = None
        self.used.discard(nid)
        while len(self.trail) > mark:
            entry = self.trail.pop()
            if entry is None:
                self.deferred.pop()
            elif entry[0] == "t":
                del self.tensors[entry[2:]]
            else:
                del self.env[entry[2:]]

    def bind_tensor(self, name: str, ref: Ref) -> None:
        self.tensors[name] = ref
        self.trail.append("t:" + name)

    def bind_attr(self, name: str, value: Any) -> None:
        self.env[name] = value
        self.trail.append("a:" + name)

    def defer(self, e: Expr, value: Any) -> None:
        self.deferred.append((e, value))
        self.trail.append(None)

    def ref_of(self, a: PatternArg) -> Ref | None:
        if isinstance(a, str):
            return self.tensors.get(a)
        if isinstance(a, NodeArg) and self.nodes[a.node] is not None:
            return (self.nodes[a.node], a.result)  # type: ignore[return-value]
        return None

    def type_of(self, term: Term) -> TensorType:
        ref = self.ref_of(self.resolvers.get(id(term)))
        if ref is None:
            raise EvalError(f"the match does not bind {term}")
        return self.graph.type_of(ref)
