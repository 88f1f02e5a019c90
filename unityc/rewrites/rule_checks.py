"""Scope checks of parsed axioms and rules: which attribute variables the source binds, which
are parameters, and that every name is used where it means something.

A source binds an attribute variable where the variable is a whole property value
(`partition[dim=d]`) or a whole item of a list property (`split[sizes=[a, b]]`); a variable
used in the source only inside arithmetic or a query has no value to match. Variables that
occur only in the target or the conditions are parameters and need a `where` domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from lark import Tree

from unityc.dialects.syntax import Kind
from unityc.graph import op_class
from unityc.rewrites.terms import (
    App,
    AttrVar,
    Axiom,
    Cond,
    ListExpr,
    Rule,
    Term,
    Var,
    expr_vars,
    subterms,
    term_attr_vars,
)

if TYPE_CHECKING:
    from unityc.rewrites.parser import _Converter


def bound_attr_vars(terms: Iterable[Term]) -> set[str]:
    """Attribute variables a source pattern binds (whole property values or list items)."""
    bound: set[str] = set()
    for term in terms:
        for t in subterms(term):
            if not isinstance(t, App):
                continue
            for _, e in t.attrs:
                if isinstance(e, AttrVar):
                    bound.add(e.name)
                elif isinstance(e, ListExpr):
                    bound.update(i.name for i in e.items if isinstance(i, AttrVar))
    return bound


def attr_kinds(terms: Iterable[Term]) -> dict[str, Kind]:
    """The kind of property each attribute variable is the whole value of (first use)."""
    kinds: dict[str, Kind] = {}
    for term in terms:
        for t in subterms(term):
            if not isinstance(t, App):
                continue
            declared = {name: kind for name, kind, _ in op_class(t.op).PROPS}
            for prop, e in t.attrs:
                if isinstance(e, AttrVar):
                    kinds.setdefault(e.name, declared[prop])
    return kinds


def attr_vars_of_rule(rule: Rule) -> set[str]:
    """Every attribute variable with a value in an instance: bound by the source or a parameter."""
    return bound_attr_vars(rule.source) | {name for name, _ in rule.params}


def cond_vars(conds: Iterable[Cond]) -> Iterator[str]:
    for c in conds:
        yield from expr_vars(c.left)
        yield from expr_vars(c.right)


def tensor_names(terms: Iterable[Term]) -> set[str]:
    return {t.name for term in terms for t in subterms(term) if isinstance(t, Var)}


def check_axiom(axiom: Axiom, conv: _Converter) -> None:
    """The left side is the one instantiated first (numeric checks): it holds every variable."""
    sides = (axiom.lhs, axiom.rhs)
    for name in sorted(tensor_names([axiom.rhs]) - tensor_names([axiom.lhs])):
        raise conv.error(
            conv.tensor_locs.get(name), f"tensor variable '{name}' occurs only on the right side"
        )
    in_lhs = set(term_attr_vars(axiom.lhs))
    for name in sorted(set(term_attr_vars(axiom.rhs)) - in_lhs):
        raise conv.error(
            conv.attr_locs.get(name), f"attribute variable '{name}' occurs only on the right side"
        )
    in_terms = {v for side in sides for v in term_attr_vars(side)}
    for name in cond_vars(axiom.conditions):
        if name not in in_terms:
            raise conv.error(
                conv.attr_locs.get(name), f"attribute variable '{name}' occurs only in conditions"
            )
    _check_collisions(in_terms, tensor_names(sides), conv)


def check_rule_scopes(rule: Rule, conv: _Converter, where: Tree | None) -> None:
    bound = bound_attr_vars(rule.source)
    in_source = {v for term in rule.source for v in term_attr_vars(term)}
    for name in sorted(in_source - bound):
        raise conv.error(
            conv.attr_locs.get(name),
            f"attribute variable '{name}' is used in the source but never bound there "
            "(write it alone as a property value)",
        )
    params = {name for name, _ in rule.params}
    for name in sorted(params & bound):
        raise conv.error(
            _param_tree(where, name), f"'{name}' is bound by the source, so it is not a parameter"
        )
    used = {v for term in rule.target for v in term_attr_vars(term)} | set(cond_vars(rule.conditions))
    for _, domain in rule.params:
        if domain.term is not None:
            used.update(term_attr_vars(domain.term))
    for name in sorted(used - bound - params, key=lambda n: _order(conv, n)):
        raise conv.error(
            conv.attr_locs.get(name),
            f"parameter '{name}' has no domain: declare it with "
            f"'where {name}: dim(x)', '{name}: degree' or '{name}: range(lo, hi)'",
        )
    for name in sorted(params - used):
        raise conv.error(_param_tree(where, name), f"parameter '{name}' is not used")
    _check_collisions(bound | params, tensor_names(rule.source), conv)


def _check_collisions(attrs: set[str], tensors: set[str], conv: _Converter) -> None:
    for name in sorted(attrs & tensors):
        raise conv.error(conv.attr_locs.get(name), f"'{name}' names both a tensor and an attribute variable")


def _order(conv: _Converter, name: str) -> tuple[int, int]:
    token = conv.attr_locs.get(name)
    return (token.line or 0, token.column or 0) if token is not None else (0, 0)


def _param_tree(where: Tree | None, name: str) -> Tree | None:
    if where is None:
        return None
    for param in where.children:
        if str(param.children[0]) == name:
            return param
    return where
