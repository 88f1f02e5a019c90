"""From a pair of enumerated graphs to `Rule`s, most general first.

The pair's input tensors become tensor variables (renamed x, y, z, ... in order of first use).
Then attribute values are abstracted, level by level, until a level verifies:
1. `general`: every dim becomes a dim variable (equal values, one variable), every degree the
   degree variable `k`, split sizes expressions (`size(w1, 0)` when a concat of the same sizes
   is at hand, else halves of the split dimension). Variables the source binds are matched;
   those only the target uses are parameters (`d: dim(x)`, `k: degree`);
2. `distinct`: as 1, with distinct dim variables required to differ;
3. `pinned`: as 2, with every variable's rank, sum and copy degree as in the enumeration;
4. `dims`: dims as enumerated, pinned; 5. `concrete`: every value as enumerated, pinned.
Each level carries the *typing conditions* of the ops only its target has (what makes the target
build whenever the source does: `k divides size(x, d) / shard(x, d)` before a partition,
`rank(x) == 2` before a matmul, ...), derived through the ops that keep shapes and degrees.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from unityc.dialects import parallel, pcg
from unityc.dialects.pcg_types import PcgOp, TensorType
from unityc.graph import Graph, Ref
from unityc.rewrites.enumeration import Enumerated
from unityc.rewrites.printer import short_name
from unityc.rewrites.terms import (
    App,
    AttrVar,
    BinOp,
    Cond,
    Domain,
    Expr,
    ListExpr,
    Lit,
    Query,
    Rule,
    Term,
    Var,
    subterms,
    tensor_vars,
)

VAR_NAMES = ("x", "y", "z", "w", "u", "v", "a", "b", "c", "p", "q")
DIM_NAMES = ("d", "e", "f", "g")
DEGREE_NAMES = ("k", "m", "n")


def _names(*ops: type[PcgOp]) -> tuple[str, ...]:
    """The op names of the rule language's terms for these op classes."""
    return tuple(op.name for op in ops)


DIM_OPS = _names(parallel.PartitionOp, parallel.CombineOp, pcg.SoftmaxOp, pcg.ConcatOp, pcg.SplitOp)

# Ops whose result has its (first) operand's shape and rank.
SHAPE_KEEPING = frozenset(
    _names(
        pcg.ReluOp,
        pcg.SigmoidOp,
        pcg.TanhOp,
        pcg.SoftmaxOp,
        pcg.AddOp,
        pcg.MulOp,
        pcg.AttentionOp,
        parallel.PartitionOp,
        parallel.CombineOp,
        parallel.ReplicateOp,
        parallel.ReduceOp,
        parallel.SumConcatOp,
    )
)
BINARY_ELEMENTWISE = frozenset(_names(pcg.AddOp, pcg.MulOp, parallel.SumConcatOp))
NONLINEAR = frozenset(_names(pcg.ReluOp, pcg.SigmoidOp, pcg.TanhOp, pcg.SoftmaxOp, pcg.AttentionOp))


@dataclass(frozen=True)
class Level:
    name: str
    dims: bool
    degrees: bool
    sizes: bool
    distinct: bool
    pinned: bool = False
    """Variables keep the example's rank, sum and copy degrees (axioms often ask for them)."""


LEVELS = (
    Level("general", True, True, True, False),
    Level("distinct", True, True, True, True),
    Level("pinned", True, True, True, True, True),
    Level("dims", False, True, True, False, True),
    Level("concrete", False, False, False, False, True),
)


@dataclass(frozen=True)
class ConcretePair:
    """One direction of a candidate: terms over renamed variables, with concrete types."""

    source: tuple[Term, ...]
    target: tuple[Term, ...]
    types: Mapping[Term, TensorType]
    var_types: tuple[tuple[str, TensorType], ...]


def graph_terms(graph: Graph, names: Mapping[str, str], types: dict[Term, TensorType]) -> tuple[Term, ...]:
    """The graph's outputs as terms; input keys renamed by `names`; records each term's type."""
    base: dict[int, Term] = {}

    def ref_term(ref: Ref) -> Term:
        term = base[ref[0]]
        if isinstance(term, App) and ref[1]:
            term = App(term.op, term.args, term.attrs, ref[1])
        types[term] = graph.type_of(ref)
        return term

    for nid in graph.topological():
        node = graph.nodes[nid]
        if node.is_source:
            base[nid] = Var(names[node.attr("key")])
            types[base[nid]] = node.types[0]
            continue
        args = tuple(None if r is None else ref_term(r) for r in node.operands)
        base[nid] = App(node.op, args, tuple((k, Lit(v)) for k, v in node.attrs), 0)
    return tuple(ref_term(r) for r in graph.outputs)


def concrete_pair(source: Enumerated, target: Enumerated) -> ConcretePair:
    """Both sides as terms, inputs renamed in order of first use (source, then target)."""
    raw: dict[Term, TensorType] = {}
    keys = {k: k for g in (source, target) for k in g.inputs}
    order = tensor_vars([*graph_terms(source.graph, keys, raw), *graph_terms(target.graph, keys, raw)])
    names = {key: VAR_NAMES[i] for i, key in enumerate(order)}
    types: dict[Term, TensorType] = {}
    src = graph_terms(source.graph, names, types)
    tgt = graph_terms(target.graph, names, types)
    var_types = tuple((names[k], types[Var(names[k])]) for k in order)
    return ConcretePair(src, tgt, types, var_types)


def canonical_key(source: Sequence[Term], target: Sequence[Term], extra: Any = ()) -> str:
    """Equal for rules equal up to the names of their variables (already canonical here)."""
    return repr((tuple(source), tuple(target), extra))


# --- generalization -------------------------------------------------------------------------


@dataclass
class _Generalizer:
    level: Level
    types: Mapping[Term, TensorType]
    names: dict[tuple[str, Any], str] = field(default_factory=dict)
    bound: set[str] = field(default_factory=set)
    params: list[tuple[str, Domain]] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    memo: dict[Term, Term] = field(default_factory=dict)
    concrete: dict[Term, TensorType] = field(default_factory=dict)
    concats: list[App] = field(default_factory=list)
    source_terms: set[Term] = field(default_factory=set)
    in_source: bool = True

    def side(self, terms: Sequence[Term]) -> tuple[Term, ...]:
        return tuple(self.term(t) for t in terms)

    def term(self, t: Term) -> Term:
        if t in self.memo:
            return self.memo[t]
        if isinstance(t, Var):
            out: Term = t
        else:
            args = tuple(None if a is None else self.term(a) for a in t.args)
            attrs = tuple((name, self.attr(t, name, e, args)) for name, e in t.attrs)
            out = App(t.op, args, attrs, t.result)
            if t.op == "pcg.concat" and len(args) == 2:
                self.concats.append(out)
        self.memo[t] = out
        self.concrete[out] = self.types[t]
        if self.in_source:
            self.source_terms.add(out)
            if isinstance(out, App):
                self.source_terms.add(App(out.op, out.args, out.attrs, 0))
        return out

    def attr(self, t: App, name: str, e: Expr, args: tuple[Term | None, ...]) -> Expr:
        assert isinstance(e, Lit)
        value = e.value
        if name == "dim" and t.op in DIM_OPS and self.level.dims:
            return self.variable("dim", value, args)
        if name == "degree" and self.level.degrees:
            return self.variable("degree", value, args)
        if name == "heads" and self.level.degrees and self.in_source:
            return self.variable("heads", value, args)
        if name == "sizes" and self.level.sizes:
            return self.sizes(t, value, args)
        return e

    def variable(self, kind: str, value: Any, args: tuple[Term | None, ...]) -> Expr:
        key = (kind, value)
        if key in self.names:
            return AttrVar(self.names[key])
        if kind == "heads" and not self.in_source:
            return Lit(value)
        pool = {"dim": DIM_NAMES, "degree": DEGREE_NAMES, "heads": ("h",)}[kind]
        used = sum(1 for k in self.names if k[0] == kind)
        if used >= len(pool):
            return Lit(value)
        name = pool[used]
        self.names[key] = name
        self.env[name] = value
        if self.in_source:
            self.bound.add(name)
        elif kind == "dim":
            operand = args[0]
            assert operand is not None
            self.params.append((name, Domain("dim", self.source_base(operand))))
        else:
            self.params.append((name, Domain("degree")))
        return AttrVar(name)

    def sizes(self, t: App, value: tuple[int, ...], args: tuple[Term | None, ...]) -> Expr:
        """Split sizes: the operands of a concat with these sizes, else halves, else literal."""
        for concat in reversed(self.concats):
            parts = [a for a in concat.args if a is not None]
            dim = self.concat_dim(concat)
            if dim is None or len(parts) != len(value):
                continue
            if all(self.concrete[p].shape[dim[1]] == s for p, s in zip(parts, value, strict=True)):
                return ListExpr(tuple(Query("size", p, dim[0]) for p in parts))
        operand = args[0]
        dim_expr = dict(t.attrs).get("dim")
        if operand is None or len(set(value)) != 1 or dim_expr is None:
            return Lit(value)
        split_dim = self.memo_attr(t, "dim", dim_expr)
        half = BinOp("/", Query("size", operand, split_dim), Lit(len(value)))
        return ListExpr(tuple(half for _ in value))

    def concat_dim(self, concat: App) -> tuple[Expr, int] | None:
        expr = dict(concat.attrs).get("dim")
        if expr is None:
            return None
        value = (
            expr.value
            if isinstance(expr, Lit)
            else self.env.get(expr.name)
            if isinstance(expr, AttrVar)
            else None
        )
        return None if value is None else (expr, value)

    def memo_attr(self, t: App, name: str, e: Expr) -> Expr:
        assert isinstance(e, Lit)
        if name == "dim" and self.level.dims and ("dim", e.value) in self.names:
            return AttrVar(self.names[("dim", e.value)])
        return e

    def source_base(self, term: Term) -> Term:
        """A source term (or variable) of the same rank: what a `dim(...)` domain may name."""
        while isinstance(term, App) and term not in self.source_terms:
            first = next((a for a in term.args if a is not None), None)
            if first is None:
                break
            term = first
        return term


def generalize(pair: ConcretePair, level: Level) -> Rule:
    """The pair's rule at one level of generality (unnamed, undocumented)."""
    gen = _Generalizer(level, pair.types)
    source = gen.side(pair.source)
    gen.in_source = False
    target = gen.side(pair.target)
    conditions = [c for c in typing_conditions(gen, (*source, *target)) if not _trivial(c)]
    if level.distinct:
        dims = [n for (kind, _), n in gen.names.items() if kind == "dim"]
        conditions += [Cond("!=", AttrVar(a), AttrVar(b)) for i, a in enumerate(dims) for b in dims[i + 1 :]]
    if level.pinned:
        conditions += list(_equal_types(gen, (*source, *target)))
        for name, t in pair.var_types:
            v = Var(name)
            conditions += [Cond("==", Query("rank", v), Lit(t.rank))]
            conditions += [
                Cond("==", Query(q, v), Lit(n)) for q, n in (("sum", t.sum_degree), ("copy", t.copy_degree))
            ]
    # Parameters stay out of the example: the numeric checker samples them from their domains.
    examples = (*pair.var_types, *sorted((n, v) for n, v in gen.env.items() if n in gen.bound))
    unique = tuple(dict.fromkeys(_oriented(c) for c in conditions))
    return Rule("", source, target, unique, tuple(gen.params), "", examples)


def _oriented(c: Cond) -> Cond:
    """`a == b` and `b == a` as one condition."""
    if c.op in ("==", "!=") and repr(c.right) < repr(c.left):
        return Cond(c.op, c.right, c.left)
    return c


def _equal_types(gen: _Generalizer, terms: Sequence[Term]) -> Iterator[Cond]:
    """Operands of element-wise binary ops that have one type in the enumeration keep it (the
    axioms of add and matmul over add ask for it); only operands the source binds."""
    for root in terms:
        for t in subterms(root):
            if not isinstance(t, App) or t.op not in BINARY_ELEMENTWISE or None in t.args:
                continue
            a, b = t.args
            bound = all(isinstance(u, Var) or u in gen.source_terms for u in (a, b))
            if bound and a != b and gen.concrete[a] == gen.concrete[b]:  # type: ignore[index]
                yield Cond("==", Query("type", a), Query("type", b))  # type: ignore[arg-type]


def generalizations(pair: ConcretePair) -> list[tuple[str, Rule]]:
    """The rule at each level (most general first), without repeats."""
    out: list[tuple[str, Rule]] = []
    seen: set[str] = set()
    for level in LEVELS:
        rule = generalize(pair, level)
        key = canonical_key(rule.source, rule.target, (rule.conditions, rule.params))
        if key not in seen:
            seen.add(key)
            out.append((level.name, rule))
    return out


def _trivial(c: Cond) -> bool:
    """`k divides s * k` and `2 divides 4`: true whatever the match."""
    if c.op != "divides":
        return False
    if isinstance(c.left, Lit) and isinstance(c.right, Lit):
        return c.right.value % c.left.value == 0
    return isinstance(c.right, BinOp) and c.right.op == "*" and c.left in (c.right.left, c.right.right)


# --- typing conditions of the target --------------------------------------------------------


def typing_conditions(gen: _Generalizer, terms: Sequence[Term]) -> Iterator[Cond]:
    """Conditions under which the target's own ops type-check, in terms of source tensors;
    and, on both sides, that element-wise operands have one rank (no broadcasting: the axioms
    about them ask for it)."""
    seen: set[Term] = set()
    for root in terms:
        for t in subterms(root):
            if not isinstance(t, App) or t in seen:
                continue
            seen.add(t)
            if t.op in BINARY_ELEMENTWISE:
                yield from _same_rank(gen, t)
            if t not in gen.source_terms:
                yield from _op_conditions(gen, t)


def _same_rank(gen: _Generalizer, t: App) -> Iterator[Cond]:
    bases = [None if a is None else _rank_base(gen, a) for a in t.args]
    if None in bases or bases[0] == bases[1]:
        return
    yield Cond("==", Query("rank", bases[0]), Query("rank", bases[1]))  # type: ignore[arg-type]


def _op_conditions(gen: _Generalizer, t: App) -> Iterator[Cond]:
    attrs = dict(t.attrs)
    x = t.args[0]
    if x is None:
        return
    dim, degree = attrs.get("dim"), attrs.get("degree")
    if t.op == "parallel.partition" and dim is not None and degree is not None:
        size, shard = _size(gen, x, dim), _shard(gen, x, dim)
        if size is not None and shard is not None:
            yield Cond("divides", degree, _simplify(BinOp("/", size, shard)))
    elif t.op == "parallel.combine" and dim is not None and degree is not None:
        shard = _shard(gen, x, dim)
        if shard is not None:
            yield Cond("divides", degree, shard)
    elif t.op == "parallel.reduce" and degree is not None:
        total = _sum(gen, x)
        if total is not None:
            yield Cond("divides", degree, total)
    elif t.op in ("pcg.softmax", "pcg.split") and dim is not None:
        shard = _shard(gen, x, dim)
        if shard is not None and shard != Lit(1):
            yield Cond("==", shard, Lit(1))
        sizes = attrs.get("sizes")
        if isinstance(sizes, ListExpr) and isinstance(sizes.items[0], BinOp):
            size = _size(gen, x, dim)
            if size is not None:
                yield Cond("divides", Lit(len(sizes.items)), size)
    elif t.op == "pcg.concat" and dim is not None:
        for a in t.args:
            shard = None if a is None else _shard(gen, a, dim)
            if shard is not None and shard != Lit(1):
                yield Cond("==", shard, Lit(1))
    if t.op in ("pcg.matmul", "pcg.transpose", "pcg.linear"):
        for a in t.args:
            base = None if a is None else _rank_base(gen, a)
            if base is not None:
                yield Cond("==", Query("rank", base), Lit(gen.concrete[base].rank))


def _down(gen: _Generalizer, t: Term) -> Term | None:
    """The operand whose shape a shape-keeping op keeps, or None at a source term."""
    if isinstance(t, Var) or t in gen.source_terms or not isinstance(t, App) or t.op not in SHAPE_KEEPING:
        return None
    return t.args[0]


def _size(gen: _Generalizer, t: Term, dim: Expr) -> Expr | None:
    while (below := _down(gen, t)) is not None:
        t = below
    return Query("size", t, dim) if isinstance(t, Var) or t in gen.source_terms else None


def _shard(gen: _Generalizer, t: Term, dim: Expr) -> Expr | None:
    if isinstance(t, Var) or t in gen.source_terms:
        return Query("shard", t, dim)
    if not isinstance(t, App) or t.op not in SHAPE_KEEPING or t.args[0] is None:
        return None
    inner = _shard(gen, t.args[0], dim)
    attrs = dict(t.attrs)
    if inner is None or t.op not in ("parallel.partition", "parallel.combine"):
        return inner
    other = attrs.get("dim")
    if other == dim:
        return _simplify(BinOp("*" if t.op == "parallel.partition" else "/", inner, attrs["degree"]))
    if isinstance(other, Lit) and isinstance(dim, Lit):
        return inner
    return None  # a partition on another dim variable: unknown without a case split


def _sum(gen: _Generalizer, t: Term) -> Expr | None:
    if isinstance(t, Var) or t in gen.source_terms:
        return Query("sum", t)
    if not isinstance(t, App) or t.args[0] is None:
        return None
    if t.op in NONLINEAR:
        return Lit(1)
    if t.op == "parallel.reduce":
        inner = _sum(gen, t.args[0])
        return None if inner is None else _simplify(BinOp("/", inner, dict(t.attrs)["degree"]))
    if t.op == "parallel.sum_concat":
        inner = _sum(gen, t.args[0])
        return None if inner is None else BinOp("*", inner, Lit(2))
    if t.op in ("parallel.partition", "parallel.combine", "parallel.replicate", "pcg.add"):
        return _sum(gen, t.args[0])
    return None


def _rank_base(gen: _Generalizer, t: Term) -> Term | None:
    """A source tensor of the same rank (every op here keeps rank)."""
    while not (isinstance(t, Var) or t in gen.source_terms):
        if not isinstance(t, App) or t.args[0] is None:
            return None
        t = t.args[0]
    return t


def _simplify(e: Expr) -> Expr:
    if isinstance(e, BinOp) and e.right == Lit(1) and e.op in ("*", "/"):
        return e.left
    return e


# --- names and docs ------------------------------------------------------------------------


def op_names(terms: Sequence[Term]) -> list[str]:
    """Short op names in data-flow order (operands first), each node once."""
    seen: set[Term] = set()
    names: list[str] = []
    for root in terms:
        for t in subterms(root):
            if isinstance(t, App):
                key = App(t.op, t.args, t.attrs, 0)
                if key not in seen:
                    seen.add(key)
                    names.append(short_name(t.op).split(".")[-1])
    return names


def base_name(rule: Rule) -> str:
    src = "_".join(op_names(rule.source)) or "id"
    tgt = "_".join(op_names(rule.target)) or "id"
    return f"{src}_to_{tgt}"


SCOPES = {
    "general": "any dims and degrees",
    "distinct": "any distinct dims, any degree",
    "pinned": "any distinct dims, any degree, the ranks and sum/copy degrees shown",
    "dims": "the dims, ranks and sum/copy degrees shown, any degree",
    "concrete": "the values, ranks and sum/copy degrees shown",
}
"""What each level's rules hold for, as the docs say it."""

PARALLEL_SHORT = {"partition", "combine", "replicate", "reduce", "sum_concat"}


def describe(rule: Rule, level: str, n_source: int, n_target: int) -> str:
    """A one-line doc: what the rule does and for which attribute values it holds."""
    src, tgt = op_names(rule.source), op_names(rule.target)
    added = sorted(set(tgt) - set(src) & PARALLEL_SHORT)
    removed = sorted(set(src) - set(tgt) & PARALLEL_SHORT)
    if added and not removed:
        kind = f"introduces {', '.join(added)}"
    elif removed and not added:
        kind = f"removes {', '.join(removed)}"
    elif set(src) & PARALLEL_SHORT or set(tgt) & PARALLEL_SHORT:
        kind = "moves parallel ops"
    else:
        kind = "algebraic"
    scope = SCOPES[level]
    shown = lambda ops: " then ".join(ops) or "the input itself"  # noqa: E731
    return f"{shown(src)} = {shown(tgt)} ({kind}; {n_source} -> {n_target} ops; holds for {scope})"
