"""apply-rules: apply rewrite rules (the verified library, or a user's `.rules` file) to a graph.

    unityc-opt m.mlir -p 'apply-rules{file="my.rules" names="a,b" params="d=1,k=2" degrees="2" limit=1}'

Options: `file` (a rules file; empty: the library), `names` (the rules to use, comma-separated;
empty: all of them), `params` (pins parameters, e.g. `d=1,k=2`), `degrees` (the degrees a
`degree` parameter ranges over, comma-separated), `limit` (how many rewrites to apply). Each
rewrite takes the first match in program order (ties: the rule named first) whose target is
well-typed. A user's rules are proven with the shipped axioms before anything is applied: an
unproven or refuted rule is refused with the reason. The graph is left unchanged when no rule
matches.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.utils.exceptions import PassFailedException

from unityc.dialects.source import LocatedError
from unityc.graph import Graph, Ref, from_module, to_module
from unityc.rewrites.match import CompiledRule, compile_rules, first_rewrite
from unityc.rewrites.parser import RuleSyntaxError, load_axioms, load_library, parse_rules
from unityc.rewrites.terms import Rule

if TYPE_CHECKING:
    from unityc.rewrites.verify import Proof


class ApplyRulesPattern(RewritePattern):
    """Compiled rules as one xDSL RewritePattern on the graph function.

    The pattern converts the function to a `Graph` once, applies up to `limit` rewrites there
    with the same compiled matchers the search uses, and converts back once. We chose this over
    matching xDSL IR directly because building a rule's target needs the graph's cached type
    inference and `terms.Builder`; a second matcher and builder over SSA values would duplicate
    both, while the conversion is linear in the graph and lossless (`from_module`/`to_module`).
    """

    def __init__(
        self, rules: Sequence[CompiledRule], degrees: Sequence[int], fixed: Mapping[str, Any], limit: int
    ):
        self.rules = rules
        self.degrees = tuple(degrees)
        self.fixed = dict(fixed)
        self.remaining = limit
        self.applied: list[str] = []

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: func.FuncOp, rewriter: PatternRewriter) -> None:
        module = op.parent_op()
        if self.remaining <= 0 or not isinstance(module, ModuleOp):
            return
        graph = from_module(module)
        while self.remaining > 0:
            found = first_rewrite(graph, self.rules, self.degrees, self.fixed)
            if found is None:
                break
            rule, match, new = found
            # keep the node dict in program order, so "first match" and the printed IR follow it
            new.nodes = {nid: new.nodes[nid] for nid in _program_order(graph, new, match.roots)}
            graph = new
            self.applied.append(rule.name)
            self.remaining -= 1
        self.remaining = 0  # one application per pass run: nothing more matches after the loop
        if not self.applied:
            return
        rebuilt = to_module(graph).body.block.first_op
        assert isinstance(rebuilt, func.FuncOp)
        rebuilt.detach()
        rebuilt.sym_name = op.sym_name
        rewriter.replace(op, rebuilt)


def _program_order(old: Graph, new: Graph, roots: Sequence[Ref]) -> list[int]:
    """The nodes of `new` in a topological order that keeps `old`'s (program) order, the new ops
    standing where the op they replace stood (ties: creation order, which puts operands first)."""
    place = {nid: i for i, nid in enumerate(old.nodes)}
    here = min(place[r[0]] for r in roots)
    users = new.users()
    waiting = {nid: len({r[0] for r in node.operand_refs()}) for nid, node in new.nodes.items()}
    ready = [(place.get(nid, here), nid) for nid, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, nid = heapq.heappop(ready)
        order.append(nid)
        for user in users[nid]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (place.get(user, here), user))
    return order


@dataclass(frozen=True)
class ApplyRulesPass(ModulePass):
    """Rewrites with rules (the module docstring says what each option does)."""

    name = "apply-rules"

    file: str = ""
    names: str = ""
    params: str = ""
    degrees: str = "2"
    limit: int = 1

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.limit < 0:
            raise PassFailedException(f"apply-rules: limit must be 0 or more, got {self.limit}")
        degrees = _parse_degrees(self.degrees)
        rules = _select(_load(self.file), self.names, self.file or "the rule library")
        try:
            compiled = compile_rules(rules)
        except ValueError as e:
            raise PassFailedException(f"apply-rules: {e}") from None
        fixed = _parse_params(self.params, compiled)
        if self.file:  # the library is proven when it is generated (and by its tests)
            _prove(rules)
        pattern = ApplyRulesPattern(compiled, degrees, fixed, self.limit)
        try:
            PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
        except ValueError as e:  # the module is not one graph function of pcg/parallel ops
            raise PassFailedException(f"apply-rules: {e}") from None


def _load(path: str) -> list[Rule]:
    if not path:
        return load_library()
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise PassFailedException(f"apply-rules: cannot read rules file '{path}': {e.strerror}") from None
    try:
        return parse_rules(text, path).rules
    except RuleSyntaxError as e:  # located like unityc-opt's own diagnostics
        raise LocatedError(f"{e.path}:{e.line}:{e.column}: error: {e.reason}") from None


def _select(rules: list[Rule], names: str, where: str) -> list[Rule]:
    if not rules:
        raise PassFailedException(f"apply-rules: {where} has no rules")
    if not names.strip():
        return rules
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    by_name = {r.name: r for r in rules}
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        known = ", ".join(list(by_name)[:12]) + (", ..." if len(by_name) > 12 else "")
        raise PassFailedException(
            f"apply-rules: no rule named {', '.join(repr(n) for n in unknown)} in {where} (it has: {known})"
        )
    return [by_name[n] for n in wanted]


@cache
def _verdict(rule: Rule) -> Proof:
    """The verifier's verdict, once per rule and process (--split-input-file runs the pass per
    chunk)."""
    from unityc.rewrites.verify import check_rule  # heavy: z3 and torch, for a user's rules only

    return check_rule(rule, load_axioms())


def _prove(rules: Sequence[Rule]) -> None:
    """Refuses any rule the verifier does not prove from the shipped axioms."""
    for rule in rules:
        verdict = _verdict(rule)
        if verdict.status == "proven":
            continue
        where = f" ({rule.loc})" if rule.loc is not None else ""
        why = "is refuted" if verdict.status == "refuted" else "is not proven from the axioms"
        raise PassFailedException(
            f"apply-rules: rule '{rule.name}'{where} {why}: {verdict.detail}; not applied"
        )


def _parse_degrees(text: str) -> tuple[int, ...]:
    items = [s.strip() for s in text.split(",")]
    if not all(s.isdigit() and int(s) > 0 for s in items):
        raise PassFailedException(
            f"apply-rules: degrees must be positive integers separated by commas, got '{text}'"
        )
    return tuple(int(s) for s in items)


def _parse_params(text: str, rules: Sequence[CompiledRule]) -> dict[str, int]:
    fixed: dict[str, int] = {}
    declared = {name for r in rules for name, _ in r.params}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, value = (p.strip() for p in item.partition("="))
        if not sep or not name.isidentifier() or not value.lstrip("-").isdigit():
            raise PassFailedException(
                f"apply-rules: params must be NAME=INTEGER separated by commas, got '{item}'"
            )
        if name not in declared:
            have = ", ".join(sorted(declared)) or "none"
            raise PassFailedException(
                f"apply-rules: no selected rule has a parameter '{name}' (their parameters: {have})"
            )
        fixed[name] = int(value)
    return fixed
