"""Prints axioms and rules as canonical rule text that parses back to an equal AST.

Ops print by their short name where it is unambiguous, optional operands as keywords, and a
sub-term the target uses more than once (a multi-result op read at several indices, or a
shared operand) becomes a `let`, so multi-output rules stay readable.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import cache
from typing import Any

from xdsl.ir import Attribute
from xdsl.irdl import OptOperandDef, VarResultDef

from unityc.dialects.pcg_types import TensorType
from unityc.graph import op_class, op_classes
from unityc.rewrites.terms import (
    App,
    AttrVar,
    Axiom,
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
)

_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2}


def format_axiom(axiom: Axiom) -> str:
    text = f"axiom {axiom.name}: {format_term(axiom.lhs)} = {format_term(axiom.rhs)}"
    if axiom.conditions:
        text += " if " + ", ".join(format_cond(c) for c in axiom.conditions)
    return text


def format_rule(rule: Rule) -> str:
    header = f"rule {rule.name}" + (f" {json.dumps(rule.doc)}" if rule.doc else "") + ":"
    taken = {v.name for t in (*rule.source, *rule.target) for v in subterms(t) if isinstance(v, Var)}
    lets = _shared_terms(rule.target, taken)
    lines = [
        header,
        "    "
        + ", ".join(format_term(t) for t in rule.source)
        + " => "
        + ", ".join(format_term(t, lets) for t in rule.target),
    ]
    if lets:
        bindings = [f"{name} = {format_term(term, lets, own=term)}" for term, name in lets.items()]
        lines.append("    let " + ", ".join(bindings))
    if rule.params:
        lines.append("    where " + ", ".join(f"{n}: {format_domain(d)}" for n, d in rule.params))
    if rule.conditions:
        lines.append("    if " + ", ".join(format_cond(c) for c in rule.conditions))
    if rule.examples:
        lines.append("    example " + ", ".join(_format_binding(n, v) for n, v in rule.examples))
    return "\n".join(lines)


def format_domain(domain: Domain) -> str:
    if domain.kind == "dim":
        assert domain.term is not None
        return f"dim({format_term(domain.term)})"
    if domain.kind == "range":
        return f"range({domain.lo}, {domain.hi})"
    return "degree"


def format_cond(c: Cond) -> str:
    return f"{format_expr(c.left)} {c.op} {format_expr(c.right)}"


# --- terms ----------------------------------------------------------------------------------


def format_term(term: Term, lets: Mapping[App, str] | None = None, own: App | None = None) -> str:
    """`lets` maps shared sub-terms (at result 0) to their let names; `own` is the let being
    printed (it prints in full, its shared sub-terms by name)."""
    lets = lets or {}
    if isinstance(term, Var):
        return term.name
    key = replace(term, result=0)
    if key in lets and key != own:
        name = lets[key]
        return f"{name}.{term.result}" if term.result or _multi_result(term.op) else name
    text = short_name(term.op)
    if term.attrs:
        text += "[" + ", ".join(f"{n}={format_expr(e, lets)}" for n, e in term.attrs) + "]"
    text += "(" + ", ".join(_format_args(term, lets)) + ")"
    if key != own and (term.result or _multi_result(term.op)):
        text += f".{term.result}"
    return text


def _format_args(term: App, lets: Mapping[App, str]) -> Iterable[str]:
    slots = op_class(term.op).get_irdl_definition().operands
    optional = [isinstance(d, OptOperandDef) for _, d in slots]
    if len(slots) != len(term.args):  # variadic (concat): positional
        return [format_term(a, lets) for a in term.args if a is not None]
    out = []
    for (name, _), is_opt, arg in zip(slots, optional, term.args, strict=True):
        if arg is None:
            continue
        out.append(f"{name}={format_term(arg, lets)}" if is_opt else format_term(arg, lets))
    return out


@cache
def short_name(op: str) -> str:
    short = op.split(".", 1)[1]
    owners = [name for name in op_classes() if name.split(".", 1)[1] == short]
    return short if len(owners) == 1 else op


@cache
def _multi_result(op: str) -> bool:
    return any(isinstance(d, VarResultDef) for _, d in op_class(op).get_irdl_definition().results)


def _shared_terms(targets: Iterable[Term], taken: set[str]) -> dict[App, str]:
    """Sub-terms (at result 0) the targets use more than once, smallest first, named t0, t1, ..."""
    counts: Counter[App] = Counter()

    def walk(t: Term | None) -> None:
        if not isinstance(t, App):
            return
        key = replace(t, result=0)
        counts[key] += 1
        if counts[key] == 1:
            for a in t.args:
                walk(a)

    for t in targets:
        walk(t)
    shared = sorted((k for k, n in counts.items() if n > 1), key=lambda k: sum(1 for _ in subterms(k)))
    names: dict[App, str] = {}
    i = 0
    for key in shared:
        while f"t{i}" in taken:
            i += 1
        names[key] = f"t{i}"
        i += 1
    return names


# --- expressions ----------------------------------------------------------------------------


def format_expr(e: Expr, lets: Mapping[App, str] | None = None) -> str:
    match e:
        case Lit(value=v):
            return format_value(v)
        case AttrVar(name=n):
            return n
        case ListExpr(items=items):
            return "[" + ", ".join(format_expr(i, lets) for i in items) + "]"
        case Query(fn=fn, term=t, dim=d):
            inner = format_term(t, lets)
            return f"{fn}({inner})" if d is None else f"{fn}({inner}, {format_expr(d, lets)})"
        case BinOp(op=op, left=a, right=b):
            p = _PRECEDENCE[op]
            left = format_expr(a, lets)
            right = format_expr(b, lets)
            if isinstance(a, BinOp) and _PRECEDENCE[a.op] < p:
                left = f"({left})"
            if isinstance(b, BinOp) and _PRECEDENCE[b.op] <= p:
                right = f"({right})"
            return f"{left} {op} {right}"
    raise TypeError(f"not an expression: {e!r}")


def format_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = repr(v)
        if text in ("inf", "-inf", "nan"):
            raise ValueError(f"{text} cannot be written in the rule language")
        return text
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, tuple):
        return "[" + ", ".join(format_value(x) for x in v) + "]"
    if isinstance(v, Attribute):
        return json.dumps(str(v))
    raise TypeError(f"cannot print {v!r} as a rule value")


def _format_binding(name: str, value: Any) -> str:
    return f"{name}: {value}" if isinstance(value, TensorType) else f"{name} = {format_value(value)}"
