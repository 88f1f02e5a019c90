"""The term language shared by operator axioms and rewrite rules (parsed from `.rules` files).

A *term* is a tensor variable or an op applied to terms (`relu(x)`,
`partition[dim=d, degree=k](x)`, `split[dim=0, sizes=[2, 2]](x).1`). Equal terms denote one
node, so a term list is a DAG: variables and sub-terms used twice are shared.

Attribute values are *expressions*: literals, attribute variables (`d`, `k`), lists, integer
arithmetic, and queries of a tensor's type (`size(x, d)`, `rank(x)`, `shard(x, d)`, `sum(x)`,
`copy(x)`, `type(x)`). Conditions compare expressions; `a divides b` is integer divisibility.

A rule maps source terms to target terms position by position. Attribute variables bound by
the source are matched; those that appear only in the target are *parameters*, declared with a
domain (`d: dim(x)` for 0..rank(x)-1, `k: degree` for the degrees the caller offers, or
`n: range(lo, hi)`), so one written rule covers every dim and degree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Ref

# --- expressions over attribute values ------------------------------------------------------


@dataclass(frozen=True)
class Lit:
    value: Any
    """int, float, str, bool, or a tuple of ints."""


@dataclass(frozen=True)
class AttrVar:
    name: str


@dataclass(frozen=True)
class ListExpr:
    items: tuple[Expr, ...]


@dataclass(frozen=True)
class BinOp:
    op: str
    """'+', '-', '*', '/' (exact integer division) or '%'."""
    left: Expr
    right: Expr


QUERIES = ("size", "rank", "shard", "sum", "copy", "type")


@dataclass(frozen=True)
class Query:
    """A fact of a tensor's type: size(t, d), rank(t), shard(t, d), sum(t), copy(t), or its whole
    type(t) (shape, element type and degrees; only compared with == and != to another type)."""

    fn: str
    term: Term
    dim: Expr | None = None


Expr = Lit | AttrVar | ListExpr | BinOp | Query

# --- tensor terms ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class App:
    op: str
    """Full op name, e.g. 'pcg.relu' or 'parallel.partition'."""
    args: tuple[Term | None, ...]
    """Operands in the op's definition order (flattened); None where an optional one is absent."""
    attrs: tuple[tuple[str, Expr], ...] = ()
    result: int = 0


Term = Var | App

COMPARISONS = ("==", "!=", "<", "<=", ">", ">=", "divides")


@dataclass(frozen=True)
class Cond:
    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Domain:
    """Where a parameter's values come from: 'dim' (of `term`), 'degree', or 'range'."""

    kind: str
    term: Term | None = None
    lo: int = 0
    hi: int = 0


@dataclass(frozen=True)
class Loc:
    path: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Axiom:
    name: str
    lhs: Term
    rhs: Term
    conditions: tuple[Cond, ...] = ()
    loc: Loc | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Rule:
    name: str
    source: tuple[Term, ...]
    target: tuple[Term, ...]
    conditions: tuple[Cond, ...] = ()
    params: tuple[tuple[str, Domain], ...] = ()
    doc: str = ""
    examples: tuple[tuple[str, Any], ...] = ()
    """Concrete bindings known to satisfy the rule (tensor var -> TensorType, attr var -> value)."""
    loc: Loc | None = field(default=None, compare=False)


@dataclass
class RuleFile:
    path: str
    axioms: list[Axiom] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)


# --- walking --------------------------------------------------------------------------------


def subterms(term: Term | None) -> Iterator[Term]:
    """Every sub-term, operands before the terms that use them (with repeats)."""
    if term is None:
        return
    if isinstance(term, App):
        for arg in term.args:
            yield from subterms(arg)
        for _, e in term.attrs:
            yield from expr_terms(e)
    yield term


def expr_terms(e: Expr) -> Iterator[Term]:
    match e:
        case Query(term=t, dim=d):
            yield from subterms(t)
            if d is not None:
                yield from expr_terms(d)
        case ListExpr(items=items):
            for item in items:
                yield from expr_terms(item)
        case BinOp(left=a, right=b):
            yield from expr_terms(a)
            yield from expr_terms(b)


def tensor_vars(terms: Sequence[Term]) -> list[str]:
    return list(dict.fromkeys(t.name for term in terms for t in subterms(term) if isinstance(t, Var)))


def expr_vars(e: Expr) -> Iterator[str]:
    match e:
        case AttrVar(name=n):
            yield n
        case ListExpr(items=items):
            for item in items:
                yield from expr_vars(item)
        case BinOp(left=a, right=b):
            yield from expr_vars(a)
            yield from expr_vars(b)
        case Query(term=t, dim=d):
            yield from term_attr_vars(t)
            if d is not None:
                yield from expr_vars(d)


def term_attr_vars(term: Term) -> Iterator[str]:
    for t in subterms(term):
        if isinstance(t, App):
            for _, e in t.attrs:
                yield from expr_vars(e)


# --- evaluation -----------------------------------------------------------------------------


class EvalError(Exception):
    """An expression has no value here (unbound variable, inexact division, bad dim)."""


def eval_expr(e: Expr, env: Mapping[str, Any], type_of: Callable[[Term], TensorType]) -> Any:
    match e:
        case Lit(value=v):
            return v
        case AttrVar(name=n):
            if n not in env:
                raise EvalError(f"attribute variable '{n}' is not bound")
            return env[n]
        case ListExpr(items=items):
            return tuple(eval_expr(i, env, type_of) for i in items)
        case BinOp(op=op, left=a, right=b):
            return _arith(op, eval_expr(a, env, type_of), eval_expr(b, env, type_of))
        case Query(fn=fn, term=term, dim=dim):
            t = type_of(term)
            if fn == "rank":
                return t.rank
            if fn == "sum":
                return t.sum_degree
            if fn == "copy":
                return t.copy_degree
            if fn == "type":
                return t
            d = eval_expr(dim, env, type_of) if dim is not None else 0
            if not isinstance(d, int) or not -t.rank <= d < t.rank:
                raise EvalError(f"{fn}: dim {d} out of range for rank {t.rank}")
            return t.shape[d] if fn == "size" else t.shard[d]
    raise EvalError(f"not an expression: {e!r}")


def _arith(op: str, a: Any, b: Any) -> Any:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if not isinstance(a, int) or not isinstance(b, int) or b == 0:
        raise EvalError(f"'{op}' needs integers and a non-zero divisor, got {a} and {b}")
    if op == "%":
        return a % b
    if a % b:
        raise EvalError(f"{a} / {b} is not exact")
    return a // b


def holds(c: Cond, env: Mapping[str, Any], type_of: Callable[[Term], TensorType]) -> bool:
    a, b = eval_expr(c.left, env, type_of), eval_expr(c.right, env, type_of)
    match c.op:
        case "==":
            return a == b
        case "!=":
            return a != b
        case "<":
            return a < b
        case "<=":
            return a <= b
        case ">":
            return a > b
        case ">=":
            return a >= b
        case "divides":
            return isinstance(a, int) and isinstance(b, int) and a != 0 and b % a == 0
    raise EvalError(f"unknown comparison '{c.op}'")


# --- building terms into a graph ------------------------------------------------------------


class Builder:
    """Adds terms to a graph: tensor variables read given tensors, equal terms share a node.

    Raises FormError (from type inference) when a term is ill-typed, EvalError when an
    attribute expression has no value.
    """

    def __init__(self, graph: Graph, tensors: Mapping[str, Ref], env: Mapping[str, Any]):
        self.graph = graph
        self.tensors = tensors
        self.env = env
        self.built: dict[Term, Ref] = {}
        self.nodes: dict[App, tuple[Ref, ...]] = {}

    def type_of(self, term: Term) -> TensorType:
        return self.graph.type_of(self.ref(term))

    def ref(self, term: Term) -> Ref:
        if term in self.built:
            return self.built[term]
        if isinstance(term, Var):
            if term.name not in self.tensors:
                raise EvalError(f"tensor variable '{term.name}' is not bound")
            ref = self.tensors[term.name]
        else:
            key = App(term.op, term.args, term.attrs, 0)
            if key not in self.nodes:
                operands = [None if a is None else self.ref(a) for a in term.args]
                attrs = {name: eval_expr(e, self.env, self.type_of) for name, e in term.attrs}
                self.nodes[key] = self.graph.add(term.op, operands, **attrs)
            results = self.nodes[key]
            if term.result >= len(results):
                raise EvalError(f"{term.op} has {len(results)} results, not {term.result + 1}")
            ref = results[term.result]
        self.built[term] = ref
        return ref

    def new_nodes(self) -> set[int]:
        return {refs[0][0] for refs in self.nodes.values()}


def build(
    graph: Graph, terms: Sequence[Term], tensors: Mapping[str, Ref], env: Mapping[str, Any]
) -> tuple[Ref, ...]:
    """Adds `terms` to `graph` (see Builder); returns their tensors."""
    builder = Builder(graph, tensors, env)
    return tuple(builder.ref(t) for t in terms)
