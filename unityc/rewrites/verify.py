"""Proves rules from the operator axioms with Z3, after a numeric check.

`prove` asserts every axiom (quantified, with triggers), the rule's conditions and parameter
domains, the facts that hold because the source and the target are well-typed (their dims lie
in range, their degrees are at least 2), and that some output pair differs. Unsat means the
rule follows from the axioms: *proven*. A model or Z3 giving up means no proof was found:
*unproven*, usually because an axiom is missing. `check_rule` first runs the numeric check,
so that a wrong rule is *refuted* with a concrete counterexample instead.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import z3

from unityc.rewrites.numeric import as_rule, numeric_check
from unityc.rewrites.query_facts import general_facts, key_facts
from unityc.rewrites.terms import App, Axiom, Domain, Rule, subterms
from unityc.rewrites.z3_encoding import Encoder, EncodingError, FuncKey, Symbols, attr_sorts, axiom_formulas

DEFAULT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Proof:
    rule: Rule
    status: str
    """'proven', 'unproven' or 'refuted'."""
    detail: str
    seconds: float
    """Total time (numeric check and Z3)."""
    z3_seconds: float = 0.0
    """Time Z3 took (0 when it did not run)."""

    @property
    def proven(self) -> bool:
        return self.status == "proven"


@dataclass
class _AxiomSet:
    formulas: list[tuple[str, list[z3.BoolRef]]]
    keys: set[FuncKey]


class _Context:
    """Z3 symbols and encoded axioms, built once per process and reused by every proof."""

    def __init__(self) -> None:
        self.symbols = Symbols()
        self.general = general_facts(self.symbols)
        self.axiom_sets: dict[tuple[Axiom, ...], _AxiomSet] = {}
        self.facts: dict[FuncKey, list[z3.BoolRef]] = {}

    def axioms(self, axioms: Sequence[Axiom]) -> _AxiomSet:
        key = tuple(axioms)
        if key not in self.axiom_sets:
            formulas: list[tuple[str, list[z3.BoolRef]]] = []
            keys: set[FuncKey] = set()
            for axiom in axioms:
                encoded, used = axiom_formulas(axiom, self.symbols)
                formulas.append((axiom.name, encoded))
                keys |= used
            self.axiom_sets[key] = _AxiomSet(formulas, keys)
        return self.axiom_sets[key]

    def key_facts(self, key: FuncKey) -> list[z3.BoolRef]:
        if key not in self.facts:
            self.facts[key] = key_facts(key, self.symbols)
        return self.facts[key]


_CONTEXT: _Context | None = None


def _context() -> _Context:
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = _Context()
    return _CONTEXT


def encode_axiom(axiom: Axiom) -> str | None:
    """Why the axiom cannot be used by the prover (e.g. it has no trigger), or None."""
    try:
        axiom_formulas(axiom, _context().symbols)
    except EncodingError as e:
        return str(e)
    return None


def prove(rule: Rule | Axiom, axioms: Sequence[Axiom], timeout_s: float = DEFAULT_TIMEOUT_S) -> Proof:
    """Z3 only: 'proven' or 'unproven' (never 'refuted')."""
    rule = as_rule(rule)
    start = time.perf_counter()
    try:
        ctx = _context()
        axiom_set = ctx.axioms(axioms)  # encoded once per axiom set: not part of the rule's time
        start = time.perf_counter()
        solver, differ = _solver(rule, ctx, axiom_set, timeout_s)
    except (EncodingError, z3.Z3Exception) as e:
        return Proof(rule, "unproven", f"cannot encode: {e}", time.perf_counter() - start)
    # Hypotheses that contradict each other (a target dim that is never in range, conditions
    # that never hold) would prove anything: such a rule never applies, so it is not proven.
    if solver.check() == z3.unsat:
        seconds = time.perf_counter() - start
        why = "vacuous: its conditions or the well-typedness of its sides can never hold"
        return Proof(rule, "unproven", why, seconds, seconds)
    solver.add(differ)
    result = solver.check()
    seconds = time.perf_counter() - start
    if result == z3.unsat:
        return Proof(rule, "proven", f"from {len(axioms)} axioms", seconds, seconds)
    if result == z3.sat:
        why = "the axioms allow the sides to differ (missing axiom?)"
        return Proof(rule, "unproven", why, seconds, seconds)
    reason = solver.reason_unknown()
    if "timeout" in reason or "canceled" in reason:
        why = f"no proof within {timeout_s:g} s"
    elif "incomplete quantifiers" in reason:
        why = "no chain of axioms connects the two sides"
    else:
        why = f"no proof found ({reason})"
    return Proof(rule, "unproven", f"{why} (missing axiom?)", seconds, seconds)


def _solver(
    rule: Rule, ctx: _Context, axiom_set: _AxiomSet, timeout_s: float
) -> tuple[z3.Solver, z3.BoolRef]:
    """A solver holding the axioms and the rule's hypotheses, and the claim that some output
    pair differs (to add once the hypotheses are known to be consistent)."""
    symbols = ctx.symbols
    sorts = attr_sorts([*rule.source, *rule.target, *_domain_terms(rule)], rule.conditions)
    enc = Encoder(symbols, {}, {name: symbols.const(f"rule.{name}", s) for name, s in sorts.items()})
    source = [enc.term(t) for t in rule.source]
    target = [enc.term(t) for t in rule.target]
    hyps = [enc.cond(c) for c in rule.conditions]
    hyps += [_domain(enc, name, d) for name, d in rule.params]
    hyps += _typing_facts(enc, rule)
    hyps += enc.dim_facts + enc.side

    solver = z3.Solver()
    solver.set("timeout", max(1, int(timeout_s * 1000)))
    # E-matching only: an unprovable rule gives up at once instead of searching for a model
    # (auto_config would otherwise restart the search until the timeout)
    solver.set("smt.mbqi", False)
    solver.set("smt.auto_config", False)
    solver.add(*ctx.general)
    for _, formulas in axiom_set.formulas:
        solver.add(*formulas)
    # a fixed order: whether a proof is found must not depend on string hashing
    for key in sorted(axiom_set.keys | enc.keys, key=repr):
        solver.add(*ctx.key_facts(key))
    solver.add(*hyps)
    return solver, z3.Or(*[s != t for s, t in zip(source, target, strict=True)])


def _domain_terms(rule: Rule) -> list:
    return [d.term for _, d in rule.params if d.term is not None]


def _domain(enc: Encoder, name: str, domain: Domain) -> z3.BoolRef:
    v = enc.attrs[name]
    if domain.kind == "degree":
        return v >= 2  # type: ignore[return-value]
    if domain.kind == "range":
        return z3.And(domain.lo <= v, v < domain.hi)
    assert domain.term is not None
    return z3.And(v >= 0, v < enc.symbols.query("rank", enc.term(domain.term)))


def _typing_facts(enc: Encoder, rule: Rule) -> list[z3.BoolRef]:
    """Facts about operand types that hold because the source and target terms are well-typed."""
    q = enc.symbols.query
    facts: list[z3.BoolRef] = []
    for term in (*rule.source, *rule.target):
        for t in subterms(term):
            if not isinstance(t, App):
                continue
            args = [enc.term(a) for a in t.args if a is not None]
            if t.op == "pcg.linear":
                x, w = args[0], args[1]
                facts += [q("rank", x) >= 1, q("rank", w) == 2]
                facts.append(q("size", w, z3.IntVal(1)) == q("size", x, q("rank", x) - 1))
            elif t.op == "pcg.matmul":
                facts += [q("rank", args[0]) == 2, q("rank", args[1]) == 2]
            elif t.op == "pcg.attention":
                facts += [q("rank", a) == 3 for a in args[:3]]
            elif t.op == "pcg.concat":
                facts += [q("rank", a) == q("rank", args[0]) for a in args[1:]]
            elif t.op == "parallel.sum_concat":
                facts.append(q("type", args[0]) == q("type", args[1]))
    return facts


def check_rule(
    rule: Rule | Axiom,
    axioms: Sequence[Axiom],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    trials: int = 6,
    degrees: tuple[int, ...] = (2, 3),
) -> Proof:
    """Numeric check first (a wrong rule is 'refuted' with its counterexample), then Z3."""
    start = time.perf_counter()
    rule = as_rule(rule)
    numeric = numeric_check(rule, trials=trials, degrees=degrees)
    if not numeric.ok:
        message = numeric.counterexample or "numeric check failed"
        status = "unproven" if message.startswith("not checked") else "refuted"
        return Proof(rule, status, message, time.perf_counter() - start)
    verdict = prove(rule, axioms, timeout_s)
    detail = f"{verdict.detail}; numerically checked on {numeric.instances} instances"
    return Proof(rule, verdict.status, detail, time.perf_counter() - start, verdict.z3_seconds)
