"""Numeric check of a rule or axiom: instantiate it on concrete types and random tensors,
run both sides with the reference interpreter's kernels, and compare.

An instance fixes every tensor variable's type (shape, element type, degrees) and every
attribute variable's value. Instances come from the rule's `example` when it has one,
otherwise from a seeded random search (see `sampling.py`) that picks operand types and
properties as the source is built, so only the instances whose source builds count. For each
instance the two sides must give outputs of equal types and equal logical values (within
1e-9 relative, in float64). A source that builds while the target does not is a failure
unless a condition excludes the instance.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Ref
from unityc.graph.evaluate import evaluate
from unityc.interpreter.pieces import CopiesDiffer, assemble
from unityc.rewrites.printer import format_value
from unityc.rewrites.rule_checks import attr_vars_of_rule, tensor_names
from unityc.rewrites.sampling import Sampler, SamplingBuilder
from unityc.rewrites.terms import Axiom, Builder, EvalError, Rule, Term, holds

TOLERANCE = 1e-9
BUILD_ERRORS = (FormError, EvalError, KeyError, ValueError, TypeError, IndexError, ZeroDivisionError)


@dataclass(frozen=True)
class NumericResult:
    ok: bool
    instances: int
    """How many instances built on both sides and were compared."""
    counterexample: str | None = None
    """Why the check failed: a counterexample, or 'not checked: ...' when nothing built."""


def as_rule(item: Rule | Axiom) -> Rule:
    """An axiom as a one-output rule from its left side to its right side."""
    if isinstance(item, Rule):
        return item
    return Rule(item.name, (item.lhs,), (item.rhs,), item.conditions, loc=item.loc)


def numeric_check(
    rule: Rule | Axiom, trials: int = 6, seed: int = 0, degrees: tuple[int, ...] = (2, 3)
) -> NumericResult:
    """Checks `trials` random instances (fewer when the rule's example leaves nothing to vary).
    An axiom is checked as the one-output rule from its left side to its right side."""
    rule = as_rule(rule)
    examples = dict(rule.examples)
    fixed = _fixed_example(rule, examples)
    attempts = min(trials, 2) if fixed else max(80, 60 * trials)
    skipped: Counter[str] = Counter()
    done = 0
    for attempt in range(attempts):
        rng = random.Random(seed * 1_000_003 + attempt)
        outcome = _check_instance(rule, examples, Sampler(rng, degrees), seed + attempt)
        if isinstance(outcome, _Skip):
            skipped[outcome.reason] += 1
            continue
        if outcome is not None:
            return NumericResult(False, done, outcome)
        done += 1
        if done >= trials:
            break
    if done == 0:
        reason = skipped.most_common(1)[0][0] if skipped else "no attempt was made"
        return NumericResult(False, 0, f"not checked: no instance builds in {attempts} tries ({reason})")
    return NumericResult(True, done)


@dataclass(frozen=True)
class _Skip:
    reason: str


def _fixed_example(rule: Rule, examples: Mapping[str, Any]) -> bool:
    """Whether the example binds every variable, so that instances differ only in values."""
    if not examples:
        return False

    return tensor_names(rule.source) | attr_vars_of_rule(rule) <= set(examples)


def _check_instance(
    rule: Rule, examples: Mapping[str, Any], sampler: Sampler, seed: int
) -> str | _Skip | None:
    """None when the instance checks out, a failure message, or _Skip when it does not apply."""
    graph = Graph()
    tensors: dict[str, Ref] = {}
    env: dict[str, Any] = {}
    for name, value in examples.items():
        if isinstance(value, TensorType):
            tensors[name] = graph.add_source("pcg.input", name, value)
        else:
            env[name] = value
    source_builder = SamplingBuilder(graph, tensors, env, sampler)
    source_builder.prepare(rule.source)
    try:
        source = tuple(source_builder.ref(t) for t in rule.source)
        values = evaluate(graph, seed=seed)
        expected = [assemble(values[r], "source") for r in source]
    except BUILD_ERRORS as e:
        return _Skip(f"source: {_first_line(e)}")
    except (CopiesDiffer, RuntimeError) as e:
        return _Skip(f"source does not run: {_first_line(e)}")
    for name, domain in rule.params:
        try:
            env[name] = sampler.param(domain, source_builder.type_of)
        except BUILD_ERRORS as e:
            return _Skip(f"parameter {name}: {_first_line(e)}")
    try:
        if not all(holds(c, env, source_builder.type_of) for c in rule.conditions):
            return _Skip("conditions do not hold")
    except BUILD_ERRORS as e:
        return _Skip(f"conditions: {_first_line(e)}")
    where = _describe(rule, graph, tensors, env)
    target_builder = Builder(graph, tensors, env)
    try:
        target = tuple(target_builder.ref(t) for t in rule.target)
    except BUILD_ERRORS as e:
        return f"instance {where}: the target does not build: {_first_line(e)}"
    try:
        evaluate(graph, seed=seed, values=values)
    except (RuntimeError, *BUILD_ERRORS) as e:
        return f"instance {where}: the target does not run: {_first_line(e)}"
    for i, (s, t) in enumerate(zip(source, target, strict=True)):
        problem = _compare(graph, values, s, t, expected[i])
        if problem is not None:
            return f"instance {where}: output {i} {problem}"
    return None


def _compare(graph: Graph, values: Mapping[Ref, Any], s: Ref, t: Ref, expected: torch.Tensor) -> str | None:
    source_type, target_type = graph.type_of(s), graph.type_of(t)
    if source_type != target_type:
        return f"types differ: source {source_type}, target {target_type}"
    try:
        got = assemble(values[t], "target")
    except CopiesDiffer as e:
        return f"is not a valid replication ({e})"
    if got.shape != expected.shape:
        return f"shapes differ: source {list(expected.shape)}, target {list(got.shape)}"
    if not got.is_floating_point():
        if torch.equal(got, expected):
            return None
        index = (got != expected).nonzero()[0].tolist()
        return (
            f"differs at {index} (source {expected[tuple(index)].item()}, target {got[tuple(index)].item()})"
        )
    a, b = expected.double(), got.double()
    both_nan = a.isnan() & b.isnan()
    diff = torch.where(both_nan, torch.zeros_like(a), (a - b).abs())
    diff = torch.nan_to_num(diff, nan=float("inf"))
    scale = max(1.0, float(torch.nan_to_num(a.abs(), nan=0.0, posinf=0.0).max()) if a.numel() else 1.0)
    if a.numel() == 0 or float(diff.max()) <= TOLERANCE * scale:
        return None
    worst = tuple(int(i) for i in torch.nonzero(diff == diff.max())[0].tolist())
    return (
        f"differs: max abs difference {float(diff.max()):.6g} at {list(worst)} "
        f"(source {a[worst].item():.6g}, target {b[worst].item():.6g})"
    )


def _describe(rule: Rule, graph: Graph, tensors: Mapping[str, Ref], env: Mapping[str, Any]) -> str:
    parts = [f"{name}: {graph.type_of(ref)}" for name, ref in tensors.items()]
    parts += [f"{name} = {_value(v)}" for name, v in env.items()]
    return ", ".join(parts) if parts else "(no variables)"


def _value(v: Any) -> str:
    try:
        return format_value(v)
    except (TypeError, ValueError):
        return repr(v)


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


__all__ = ["NumericResult", "Term", "as_rule", "numeric_check"]
