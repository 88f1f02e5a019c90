"""Terms, expressions and axioms as Z3 formulas (TASO's method).

Tensors are values of an uninterpreted sort `Tensor` (a value is a type with its degrees and a
logical value). Each op, per result index, per pattern of present optional operands and per
length of its list properties, is an uninterpreted function `Tensor^n x attrs -> Tensor`:
ints and list items are Int arguments, floats Real, strings and dtypes String, flags Bool.
A dim property of a pcg op is normalized (`-1` is `rank(x) - 1`), so both spellings meet.
Type queries (size, rank, shard, sum, copy, type) are uninterpreted functions too, with a
few facts per op (`query_facts.py`) that conditions need.

An axiom becomes one quantified formula per side usable as a trigger: the side is written
with a fresh pattern variable at every property position (E-matching needs plain variables
there) and equations tying those variables to the property expressions.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import z3
from xdsl.ir import Attribute

from unityc.dialects.syntax import Kind
from unityc.graph import op_class
from unityc.rewrites.terms import (
    App,
    AttrVar,
    Axiom,
    BinOp,
    Cond,
    Expr,
    ListExpr,
    Lit,
    Query,
    Term,
    Var,
    expr_vars,
    subterms,
    term_attr_vars,
)

# pcg properties holding dims that may be negative (counted from the end)
NORMALIZED = {
    ("pcg.softmax", "dim"),
    ("pcg.concat", "dim"),
    ("pcg.split", "dim"),
    ("pcg.gather", "dim"),
    ("pcg.reduce", "dims"),
}
SORT_OF_KIND = {
    Kind.INT: "Int",
    Kind.INTS: "Int",
    Kind.FLOAT: "Real",
    Kind.STR: "String",
    Kind.TYPE: "String",
}
SORT_OF_KIND[Kind.FLAG] = "Bool"


class EncodingError(Exception):
    """A rule or axiom the encoding cannot express (e.g. a list-valued attribute variable)."""


@dataclass(frozen=True)
class FuncKey:
    op: str
    result: int
    operands: tuple[bool, ...]
    """Which operands are present (optional ones may be absent)."""
    attrs: tuple[tuple[str, str, int], ...]
    """(property, sort, number of arguments) per property; sort 'absent' when unset."""

    def name(self) -> str:
        present = "".join("T" if p else "_" for p in self.operands)
        attrs = ",".join(f"{p}:{s}{n if s != 'absent' else ''}" for p, s, n in self.attrs)
        return f"{self.op}#{self.result}({present}){{{attrs}}}"


class Symbols:
    """The sorts and function symbols of one Z3 context, created on first use."""

    def __init__(self) -> None:
        self.tensor = z3.DeclareSort("Tensor")
        self.tensor_type = z3.DeclareSort("TensorType")
        i, t = z3.IntSort(), self.tensor
        self.queries = {
            "rank": z3.Function("rank", t, i),
            "size": z3.Function("size", t, i, i),
            "shard": z3.Function("shard", t, i, i),
            "sum": z3.Function("sum", t, i),
            "copy": z3.Function("copy", t, i),
            "type": z3.Function("type", t, self.tensor_type),
        }
        # Integer division by a value that is not a constant is nonlinear: Z3 can spend its whole
        # timeout looking for a model. Proofs only need such terms to match, so they are
        # uninterpreted (weaker, hence sound).
        self.divides = z3.Function("divides", i, i, z3.BoolSort())
        self.idiv = z3.Function("idiv", i, i, i)
        self.imul = z3.Function("imul", i, i, i)
        self.imod = z3.Function("imod", i, i, i)
        self.funcs: dict[FuncKey, z3.FuncDeclRef] = {}
        self.fresh = itertools.count()

    def func(self, key: FuncKey) -> z3.FuncDeclRef:
        decl = self.funcs.get(key)
        if decl is None:
            sorts = [self.tensor] * sum(key.operands)
            for _, sort, count in key.attrs:
                if sort != "absent":
                    sorts += [sort_named(sort)] * count
            decl = z3.Function(key.name(), *sorts, self.tensor)
            self.funcs[key] = decl
        return decl

    def query(self, fn: str, t: z3.ExprRef, dim: z3.ArithRef | None = None) -> z3.ExprRef:
        if dim is None:
            return self.queries[fn](t)
        return self.queries[fn](t, normalize(dim, self.queries["rank"](t)))

    def const(self, name: str, sort: str) -> z3.ExprRef:
        return z3.Const(name, self.tensor if sort == "Tensor" else sort_named(sort))

    def fresh_const(self, sort: str) -> z3.ExprRef:
        return self.const(f"_p{next(self.fresh)}", sort)


def sort_named(sort: str) -> z3.SortRef:
    sorts = {"Int": z3.IntSort, "Real": z3.RealSort, "String": z3.StringSort, "Bool": z3.BoolSort}
    return sorts[sort]()


def normalize(dim: z3.ArithRef, rank: z3.ArithRef) -> z3.ArithRef:
    """A dim counted from the end (negative) as counted from the start; literal dims fold."""
    if z3.is_int_value(dim):
        value = dim.as_long()  # type: ignore[attr-defined]
        return dim if value >= 0 else z3.simplify(rank + value)  # type: ignore[return-value]
    return z3.If(dim < 0, dim + rank, dim)  # type: ignore[return-value]


# --- attribute variable sorts ---------------------------------------------------------------


def attr_sorts(terms: Sequence[Term], conds: Sequence[Cond] = ()) -> dict[str, str]:
    """The Z3 sort of each attribute variable, from the properties it is the value of."""
    sorts: dict[str, str] = {}
    for term in terms:
        for t in subterms(term):
            if not isinstance(t, App):
                continue
            kinds = {name: kind for name, kind, _ in op_class(t.op).PROPS}
            for prop, e in t.attrs:
                kind = kinds[prop]
                if isinstance(e, AttrVar) and kind is Kind.INTS:
                    raise EncodingError(
                        f"list attribute variable '{e.name}' ({t.op} {prop}) has no fixed length"
                    )
                if isinstance(e, AttrVar):
                    _set_sort(sorts, e.name, SORT_OF_KIND[kind])
                elif isinstance(e, ListExpr):
                    for item in e.items:
                        if isinstance(item, AttrVar):
                            _set_sort(sorts, item.name, "Int")
    others = {v for term in terms for v in term_attr_vars(term)}
    others |= {v for c in conds for e in (c.left, c.right) for v in expr_vars(e)}
    for name in others:
        sorts.setdefault(name, "Int")
    return sorts


def _set_sort(sorts: dict[str, str], name: str, sort: str) -> None:
    if sorts.setdefault(name, sort) != sort:
        raise EncodingError(f"attribute variable '{name}' is used as both {sorts[name]} and {sort}")


# --- terms and expressions ------------------------------------------------------------------


@dataclass
class Encoder:
    """Encodes the terms, expressions and conditions of one rule or axiom."""

    symbols: Symbols
    tensors: dict[str, z3.ExprRef]
    attrs: dict[str, z3.ExprRef]
    side: list[z3.BoolRef] = field(default_factory=list)
    """Definedness conditions met along the way (exact divisions)."""
    keys: set[FuncKey] = field(default_factory=set)
    """Function symbols used."""
    dim_facts: list[z3.BoolRef] = field(default_factory=list)
    """Range facts of the dims of the terms encoded (true wherever the term is well-typed)."""

    def term(self, term: Term) -> z3.ExprRef:
        if isinstance(term, Var):
            if term.name not in self.tensors:
                self.tensors[term.name] = self.symbols.const(term.name, "Tensor")
            return self.tensors[term.name]
        args = [self.term(a) for a in term.args if a is not None]
        kinds = {name: kind for name, kind, _ in op_class(term.op).PROPS}
        given = dict(term.attrs)
        signature: list[tuple[str, str, int]] = []
        values: list[z3.ExprRef] = []
        for prop, kind in kinds.items():
            e = given.get(prop)
            if kind is Kind.FLAG:
                e = Lit(False) if e is None else e
            if e is None:
                signature.append((prop, "absent", 0))
                continue
            items = _items(e) if kind is Kind.INTS else [e]
            sort = SORT_OF_KIND[kind]
            signature.append((prop, sort, len(items)))
            values += [self.position(term, prop, item, sort, args) for item in items]
        key = FuncKey(term.op, term.result, tuple(a is not None for a in term.args), tuple(signature))
        self.keys.add(key)
        return self.symbols.func(key)(*args, *values)

    def position(self, app: App, prop: str, e: Expr, sort: str, args: list[z3.ExprRef]) -> z3.ExprRef:
        """The value at one property position of `app` (its operands already encoded)."""
        value = self.expr(e, sort)
        if (app.op, prop) in NORMALIZED and args:
            rank = self.symbols.query("rank", args[0])
            self.dim_facts.append(z3.And(-rank <= value, value < rank))
            return normalize(value, rank)  # type: ignore[arg-type]
        if app.op.startswith("parallel.") and prop in ("dim", "src", "dst") and args:
            self.dim_facts.append(z3.And(value >= 0, value < self.symbols.query("rank", args[0])))
        if app.op.startswith("parallel.") and prop == "degree":
            self.dim_facts.append(value >= 2)
        return value

    def expr(self, e: Expr, sort: str = "Int") -> z3.ExprRef:
        match e:
            case Lit(value=v):
                return _literal(v, sort)
            case AttrVar(name=n):
                if n not in self.attrs:
                    self.attrs[n] = self.symbols.const(n, sort)
                return self.attrs[n]
            case Query(fn=fn, term=t, dim=d):
                return self.symbols.query(fn, self.term(t), None if d is None else self.expr(d))  # type: ignore[arg-type]
            case BinOp(op=op, left=a, right=b):
                return self.arith(op, self.expr(a, sort), self.expr(b, sort))
            case ListExpr():
                raise EncodingError("a list is only allowed as a list property's value")
        raise EncodingError(f"cannot encode {e!r}")

    def arith(self, op: str, a: Any, b: Any) -> z3.ExprRef:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        self.side.append(b != 0)
        symbolic = z3.is_int(b) and not z3.is_int_value(z3.simplify(b))
        if op == "/" and symbolic:
            self.side.append(self.symbols.imod(a, b) == 0)
            return self.symbols.idiv(a, b)
        if op == "%" and symbolic:
            return self.symbols.imod(a, b)
        if op == "/":
            if z3.is_int(a) and z3.is_int(b):
                self.side.append(a % b == 0)
            return a / b
        # Python's %: the result has the sign of the divisor (Z3's mod is never negative)
        r = a % b
        return z3.If(z3.Or(b > 0, r == 0), r, r + b)

    def cond(self, c: Cond) -> z3.BoolRef:
        sort = "Real" if _is_real(c.left, self) or _is_real(c.right, self) else "Int"
        if any(isinstance(e, Query) and e.fn == "type" for e in (c.left, c.right)):
            sort = "Type"
        left, right = self.expr(c.left, sort), self.expr(c.right, sort)
        match c.op:
            case "==":
                return left == right  # type: ignore[return-value]
            case "!=":
                return left != right  # type: ignore[return-value]
            case "<":
                return left < right  # type: ignore[operator]
            case "<=":
                return left <= right  # type: ignore[operator]
            case ">":
                return left > right  # type: ignore[operator]
            case ">=":
                return left >= right  # type: ignore[operator]
            case "divides":
                return self.divides(c.left, left, right)
        raise EncodingError(f"unknown comparison '{c.op}'")

    def divides(self, e: Expr, left: Any, right: Any) -> z3.BoolRef:
        """`left divides right`: native for a constant divisor; else an uninterpreted predicate
        that also states what a product divisor implies (a*b | c gives a | c and b | c)."""
        if z3.is_int_value(z3.simplify(left)):
            return z3.And(left != 0, right % left == 0)
        facts = [self.symbols.divides(left, right)]
        if isinstance(e, BinOp) and e.op == "*":
            facts += [self.divides(part, self.expr(part), right) for part in (e.left, e.right)]
        return z3.And(*facts)


def _items(e: Expr) -> list[Expr]:
    if isinstance(e, Lit) and isinstance(e.value, tuple):
        return [Lit(v) for v in e.value]
    if isinstance(e, ListExpr):
        return list(e.items)
    raise EncodingError(f"list property value {e!r} has no fixed length")


def _literal(v: Any, sort: str) -> z3.ExprRef:
    if isinstance(v, bool):
        return z3.BoolVal(v)
    if isinstance(v, int):
        return z3.RealVal(v) if sort == "Real" else z3.IntVal(v)
    if isinstance(v, float):
        return z3.RealVal(repr(v))
    if isinstance(v, str):
        return z3.StringVal(v)
    if isinstance(v, Attribute):
        return z3.StringVal(str(v))
    raise EncodingError(f"cannot encode the value {v!r}")


def _is_real(e: Expr, enc: Encoder) -> bool:
    match e:
        case Lit(value=v):
            return isinstance(v, float)
        case AttrVar(name=n):
            return n in enc.attrs and z3.is_real(enc.attrs[n])
        case BinOp(left=a, right=b):
            return _is_real(a, enc) or _is_real(b, enc)
    return False


# --- axioms ---------------------------------------------------------------------------------


class PatternEncoder(Encoder):
    """Encodes one side of an axiom as a trigger: a fresh variable at each property position
    (the first plain use of an attribute variable is that variable itself)."""

    def __init__(self, plain: Encoder):
        super().__init__(plain.symbols, plain.tensors, plain.attrs)
        self.plain = plain
        self.seen: set[str] = set()
        self.fresh: list[z3.ExprRef] = []
        self.hyps: list[z3.BoolRef] = []

    def position(self, app: App, prop: str, e: Expr, sort: str, args: list[z3.ExprRef]) -> z3.ExprRef:
        normalized = (app.op, prop) in NORMALIZED and bool(args)
        if isinstance(e, AttrVar) and e.name not in self.seen:
            self.seen.add(e.name)
            var = self.plain.expr(e, sort)
            if normalized:
                self.hyps.append(var >= 0)  # type: ignore[operator]
            return var
        fresh = self.symbols.fresh_const(sort)
        self.fresh.append(fresh)
        self.hyps.append(fresh == Encoder.position(self.plain, app, prop, e, sort, args))  # type: ignore[arg-type]
        return fresh


def axiom_formulas(axiom: Axiom, symbols: Symbols) -> tuple[list[z3.BoolRef], set[FuncKey]]:
    """One quantified formula per side of the axiom that can serve as its trigger."""
    sorts = attr_sorts([axiom.lhs, axiom.rhs], axiom.conditions)
    formulas: list[z3.BoolRef] = []
    keys: set[FuncKey] = set()
    for trigger, other in ((axiom.lhs, axiom.rhs), (axiom.rhs, axiom.lhs)):
        if not isinstance(trigger, App):
            continue
        plain = Encoder(symbols, {}, {n: symbols.const(f"{axiom.name}.{n}", s) for n, s in sorts.items()})
        pattern = PatternEncoder(plain)
        lhs = pattern.term(trigger)
        trigger_tensors = {v.name for v in subterms(trigger) if isinstance(v, Var)}
        needed_tensors = {v.name for v in subterms(other) if isinstance(v, Var)}
        if not needed_tensors <= trigger_tensors or not set(sorts) <= pattern.seen:
            continue
        rhs = plain.term(other)
        conds = [plain.cond(c) for c in axiom.conditions]
        body = z3.Implies(z3.And(*pattern.hyps, *conds, *plain.side), lhs == rhs)
        bound = [plain.tensors[n] for n in sorted(trigger_tensors)]
        bound += [plain.attrs[n] for n in sorted(sorts)] + pattern.fresh
        formulas.append(z3.ForAll(bound, body, patterns=[lhs]))
        keys |= pattern.keys | plain.keys
    if not formulas:
        raise EncodingError(
            f"axiom '{axiom.name}' has no trigger: one side must be an op term holding every variable"
        )
    return formulas, keys
