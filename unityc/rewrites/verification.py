"""Verifying a candidate: each direction, each level of generality, numeric check then Z3.

A worker process (`multiprocessing`) gets the axioms once. For a direction of a candidate it
walks the levels from the most general (see `generalize.py`) and runs `check_rule` (numeric
check on random instances of several degrees, dims and shapes, then Z3): a level refuted
numerically is skipped; the first that Z3 proves wins. A direction no level proves is
*unproven* (the most general level that checks numerically is reported, with Z3's reason: a
missing axiom); one that even the concrete level fails on its own enumerated instance is a
fingerprint *collision*.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from unityc.rewrites.numeric import numeric_check
from unityc.rewrites.terms import Axiom, Rule

_AXIOMS: list[Axiom] = []
_TIMEOUT_S = 5.0
NUMERIC_DEGREES = (2, 3, 4)
COMFORTABLE_S = 1.0
"""A proof (numeric check included) slower than this is tried again; most take ~0.05 s, and
those that take seconds sometimes take over the limit in another run (Z3's time depends on
what the solver context saw before)."""


@dataclass(frozen=True)
class Attempt:
    level: str
    status: str
    """What `check_rule` said at this level: 'proven', 'unproven' or 'refuted'."""
    detail: str


@dataclass(frozen=True)
class DirectionResult:
    status: str
    """'proven', 'unproven', 'refuted' (some level fails but no level proves) or 'collision'."""
    level: str | None
    rule: Rule
    """The proven rule; else the most general one that checks numerically; else the concrete one."""
    detail: str
    seconds: float
    attempts: tuple[Attempt, ...]


@dataclass(frozen=True)
class Task:
    key: int
    directions: tuple[tuple[tuple[str, Rule], ...], ...]
    """Per direction, its levels (most general first)."""


def init_worker(axioms: list[Axiom], timeout_s: float) -> None:
    global _AXIOMS, _TIMEOUT_S
    _AXIOMS = axioms
    _TIMEOUT_S = timeout_s
    torch.set_num_threads(1)  # tiny tensors; two workers on two cores


def run_task(task: Task) -> tuple[int, tuple[DirectionResult, ...]]:
    return task.key, tuple(verify_direction(levels, _AXIOMS, _TIMEOUT_S) for levels in task.directions)


def verify_direction(
    levels: tuple[tuple[str, Rule], ...], axioms: list[Axiom], timeout_s: float
) -> DirectionResult:
    from unityc.rewrites.verify import check_rule, prove

    start = time.perf_counter()
    attempts: list[Attempt] = []
    fallback: tuple[str, Rule, str] | None = None
    comfortable = min(COMFORTABLE_S, timeout_s / 4)
    for level, rule in levels:
        if fallback is not None:
            # A later level only restricts a level that already checked numerically (more
            # conditions, fewer variables): it checks too, so only Z3 is left to try.
            verdict = prove(rule, axioms, timeout_s)
        else:
            # Random instances (several degrees, dims, shapes) test the generality; the example
            # (the enumerated instance) only when the sampler finds no instance of the source.
            verdict = check_rule(
                replace(rule, examples=()), axioms, timeout_s, trials=3, degrees=NUMERIC_DEGREES
            )
            if verdict.status == "unproven" and verdict.detail.startswith("not checked"):
                verdict = check_rule(rule, axioms, timeout_s, trials=2)
        if verdict.proven and verdict.seconds > comfortable:
            # Z3's time varies from run to run: a slow proof is tried again, and a rule whose
            # proof is slow both times is left out of the library.
            again = prove(rule, axioms, timeout_s)
            if not again.proven or again.seconds > comfortable:
                slow = (
                    f"slow proof ({verdict.seconds:.1f} s, then {again.seconds:.1f} s; limit {timeout_s} s)"
                )
                verdict = replace(verdict, status="unproven", detail=slow)
        attempts.append(Attempt(level, verdict.status, verdict.detail))
        if verdict.proven:
            return DirectionResult(
                "proven", level, rule, verdict.detail, time.perf_counter() - start, tuple(attempts)
            )
        if verdict.status == "unproven" and fallback is None:
            fallback = (level, rule, verdict.detail)
    seconds = time.perf_counter() - start
    if fallback is not None:
        level, rule, detail = fallback
        return DirectionResult("unproven", level, rule, detail, seconds, tuple(attempts))
    concrete = levels[-1][1]
    own = numeric_check(concrete, trials=2)  # on the enumerated instance only
    collision = not own.ok and not (own.counterexample or "").startswith("not checked")
    detail = attempts[-1].detail if attempts else "no level to check"
    return DirectionResult(
        "collision" if collision else "refuted", None, concrete, detail, seconds, tuple(attempts)
    )
