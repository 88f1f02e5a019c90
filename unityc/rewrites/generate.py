"""`unityc-rules generate`: TASO's method, extended with parallel degrees as Unity does.

1. enumerate every graph of up to `max_ops` ops over fixed inputs (`enumeration.py`);
2. fingerprint each by its outputs on fixed random inputs, degrees included (`fingerprint.py`);
3. pair graphs with equal fingerprints and prune: different inputs, trivial, common subgraph,
   identity in context, congruent (`candidates.py`), then implied by smaller rules and
   isomorphic (`prune.py`), smallest candidates first, round by round;
4. generalize each accepted candidate, in both directions (a side that is a bare variable is
   never a source: it cannot be matched), and verify it with `check_rule` (numeric check, then
   Z3 from the shipped axioms) in a `multiprocessing` pool (`generalize.py`, `verification.py`).
   The rules a round proves prune the candidates of the next rounds;
5. write the proven rules, deduplicated, to `generated.rules` with `REPORT.md` and `report.json`.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph
from unityc.rewrites.candidates import Buckets, bucket, candidate_pairs
from unityc.rewrites.enumeration import EnumConfig, Enumeration, Enumerator
from unityc.rewrites.fingerprint import Fingerprinter
from unityc.rewrites.generalize import (
    LEVELS,
    base_name,
    canonical_key,
    concrete_pair,
    describe,
    generalizations,
    op_names,
)
from unityc.rewrites.match import CompiledRule, GraphIndex
from unityc.rewrites.parser import load_axioms
from unityc.rewrites.prune import Accepted, Pruner
from unityc.rewrites.terms import Builder, Domain, EvalError, Rule, build, tensor_vars
from unityc.rewrites.verification import DirectionResult, Task, init_worker, run_task, verify_direction

LIBRARY_DIR = Path(__file__).parent / "library"
REPROVE_S = 2.0
"""The longest proof a library rule may take when the library is proven in order."""


@dataclass
class Direction:
    """One direction of an accepted candidate and how it verified."""

    candidate: int
    source_ops: int
    target_ops: int
    result: DirectionResult


@dataclass
class Generation:
    config: EnumConfig
    enumeration: Enumeration = field(default_factory=Enumeration)
    buckets: Buckets | None = None
    accepted: list[Accepted] = field(default_factory=list)
    directions: list[Direction] = field(default_factory=list)
    rules: list[tuple[Rule, Direction]] = field(default_factory=list)
    """The library: proven rules, named and documented, without duplicates."""
    duplicates: int = 0
    instances: int = 0
    uncompilable: list[tuple[str, str]] = field(default_factory=list)
    slow: list[tuple[Rule, str]] = field(default_factory=list)
    """Proven rules left out because their proof is slow in library order (see `_reprove`)."""
    times: dict[str, float] = field(default_factory=dict)
    jobs: int = 1
    timeout_s: float = 5.0


@contextmanager
def _timed(times: dict[str, float], phase: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        times[phase] = times.get(phase, 0.0) + time.perf_counter() - start


class _Verifier:
    """Verifies each round's accepted candidates (in a pool when jobs > 1) and hands the rules
    that checked out back to the pruner."""

    def __init__(self, gen: Generation, pool: multiprocessing.pool.Pool | None, axioms: list, progress: bool):
        self.gen = gen
        self.pool = pool
        self.axioms = axioms
        self.progress = progress

    def __call__(self, fresh: list[Accepted]) -> list[Rule]:
        assert self.gen.buckets is not None
        graphs = self.gen.buckets.graphs
        tasks: list[Task] = []
        sizes: dict[int, list[tuple[int, int]]] = {}
        for candidate in fresh:
            key = len(self.gen.accepted)
            self.gen.accepted.append(candidate)
            a, b = candidate.pair.a, candidate.pair.b
            directions = [(a, b), (b, a)] if graphs[a].n_ops else [(b, a)]
            sizes[key] = [(graphs[s].n_ops, graphs[t].n_ops) for s, t in directions]
            levels = tuple(tuple(generalizations(concrete_pair(graphs[s], graphs[t]))) for s, t in directions)
            tasks.append(Task(key, levels))
        with _timed(self.gen.times, "verify"):
            results = self._run(tasks)
        edges: list[Rule] = []
        for key, outcome in results:
            for (n_src, n_tgt), result in zip(sizes[key], outcome, strict=True):
                self.gen.directions.append(Direction(key, n_src, n_tgt, result))
            if len(outcome) == 2 and all(r.status in ("proven", "unproven") for r in outcome):
                edges += [replace(r.rule, name=f"edge{key}_{i}") for i, r in enumerate(outcome)]
        return [rule for rule in edges if _compiles(rule) is None]

    def _run(self, tasks: list[Task]) -> list[tuple[int, tuple[DirectionResult, ...]]]:
        bar = tqdm(total=len(tasks), desc="verify", unit="cand", disable=not self.progress, leave=False)
        out = []
        if self.pool is None:
            for task in tasks:
                directions = tuple(
                    verify_direction(d, self.axioms, self.gen.timeout_s) for d in task.directions
                )
                out.append((task.key, directions))
                bar.update()
        else:
            for item in self.pool.imap_unordered(run_task, tasks, chunksize=4):
                out.append(item)
                bar.update()
        bar.close()
        return sorted(out, key=lambda item: item[0])


def _compiles(rule: Rule) -> str | None:
    """Why the matcher cannot compile the rule, or None."""
    try:
        CompiledRule(rule)
    except (ValueError, KeyError, TypeError) as e:
        return str(e)
    return None


def generate(
    config: EnumConfig | None = None,
    jobs: int = 2,
    timeout_s: float = 5.0,
    progress: bool = True,
    fingerprinter: Fingerprinter | None = None,
) -> Generation:
    """Runs every phase; returns what the report needs (writes nothing)."""
    gen = Generation(config or EnumConfig(), jobs=jobs, timeout_s=timeout_s)
    start = time.perf_counter()
    axioms = load_axioms()
    with _timed(gen.times, "enumerate"):
        gen.enumeration = Enumerator(gen.config, fingerprinter).run(progress)
    with _timed(gen.times, "pair"):
        gen.buckets = bucket(gen.enumeration.graphs)
        pairs, congruent = candidate_pairs(gen.buckets)
    pool = None
    if jobs > 1:
        pool = multiprocessing.get_context("fork").Pool(
            jobs, initializer=init_worker, initargs=(axioms, timeout_s)
        )
    try:
        pruner = Pruner(gen.buckets, congruent, degrees=(gen.config.degree,))
        with _timed(gen.times, "prune+verify"):
            pruner.run(pairs, _Verifier(gen, pool, axioms, progress), progress)
        gen.prune_counts = pruner.counts  # type: ignore[attr-defined]
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    gen.times["prune"] = gen.times.pop("prune+verify") - gen.times.get("verify", 0.0)
    with _timed(gen.times, "write"):
        _collect(gen)
    with _timed(gen.times, "reprove"):
        _reprove(gen, axioms, progress)
    gen.times["total"] = time.perf_counter() - start
    return gen


def _reprove(gen: Generation, axioms: list, progress: bool) -> None:
    """Proves the library once more in file order in one process, as `unityc-rules verify`
    will, and drops the rules whose proof is slow there: Z3's time depends on what the solver
    saw before, and a few multi-output rules that proved quickly in a worker take over the
    limit in this order."""
    from unityc.rewrites.verify import prove

    kept: list[tuple[Rule, Direction]] = []
    for rule, d in tqdm(gen.rules, desc="re-prove", unit="rule", disable=not progress, leave=False):
        verdict = prove(rule, axioms, gen.timeout_s)
        if verdict.proven and verdict.seconds <= REPROVE_S:
            kept.append((rule, d))
            continue
        why = "no proof" if not verdict.proven else f"proof took {verdict.seconds:.1f} s"
        gen.slow.append((rule, f"{why} when the library is proven in order ({verdict.detail})"))
    gen.rules = kept


def _collect(gen: Generation) -> None:
    """The proven directions without duplicates (equal up to variable names) and without
    instances of more general proven rules (add(x, x) => ... when add(x, y) => ... holds),
    named and documented."""
    by_key: dict[str, tuple[Rule, Direction]] = {}
    for d in gen.directions:
        if d.result.status != "proven":
            continue
        rule = d.result.rule
        key = canonical_key(rule.source, rule.target, (rule.conditions, rule.params))
        if key in by_key:
            gen.duplicates += 1
            continue
        by_key[key] = (rule, d)
    general_first = sorted(by_key.items(), key=lambda kv: (*_generality(*kv[1]), kv[0]))
    kept: list[tuple[Rule, Direction, CompiledRule]] = []
    for _, (rule, d) in general_first:
        if _compiles(rule) is not None:
            gen.uncompilable.append((base_name(rule), str(_compiles(rule))))
            continue
        same_size = [c for r, k, c in kept if (k.source_ops, k.target_ops) == (d.source_ops, d.target_ops)]
        if is_instance(rule, same_size):
            gen.instances += 1
            continue
        kept.append((rule, d, CompiledRule(replace(rule, name=base_name(rule)))))
    kept.sort(key=lambda item: (item[1].source_ops + item[1].target_ops, base_name(item[0]), _text(item[0])))
    names: dict[str, int] = {}
    for rule, d, _ in kept:
        base = base_name(rule)
        names[base] = names.get(base, 0) + 1
        name = base if names[base] == 1 else f"{base}_{names[base]}"
        doc = describe(rule, d.result.level or "concrete", d.source_ops, d.target_ops)
        gen.rules.append((replace(rule, name=name, doc=doc), d))


def _generality(rule: Rule, d: Direction) -> tuple[int, int, int]:
    """Sort key: smaller rules first, then more tensor variables, then more general levels."""
    levels = [level.name for level in LEVELS]
    level = levels.index(d.result.level) if d.result.level in levels else len(levels)
    return (d.source_ops + d.target_ops, -len(tensor_vars(rule.source)), level)


def _text(rule: Rule) -> str:
    return canonical_key(rule.source, rule.target, (rule.conditions, rule.params))


def is_instance(rule: Rule, general: list[CompiledRule]) -> bool:
    """Whether `general` rewrites the rule's source (built on its example) into each of its
    targets (one per parameter value): the rule then adds nothing."""
    built = _example_graphs(rule)
    if built is None:
        return False
    source, targets = built
    index = GraphIndex(source)
    reached: set[int] = set()
    for compiled in general:
        if compiled.anchor_op not in index.by_op:
            continue
        for match in compiled.matches(source, (2,), index):
            new = compiled.apply(source, match, index)
            if new is not None:
                reached.add(new.prune().structural_hash())
    return targets <= reached


def _example_graphs(rule: Rule) -> tuple[Graph, set[int]] | None:
    """The rule's source built on its example (outputs: the source's) and the structural hashes
    of its target built the same way, for every parameter value (degree 2); None if the source
    or no target builds."""
    graph = Graph()
    tensors = {n: graph.add_source("pcg.input", n, v) for n, v in rule.examples if isinstance(v, TensorType)}
    env = {n: v for n, v in rule.examples if not isinstance(v, TensorType)}
    try:
        builder = Builder(graph, tensors, env)
        graph.outputs = tuple(builder.ref(t) for t in rule.source)
        choices = [_domain_values(d, builder) for _, d in rule.params]
    except (FormError, EvalError, KeyError, ValueError):
        return None
    targets: set[int] = set()
    for values in itertools.product(*choices):
        other = graph.copy()
        try:
            other.outputs = build(
                other,
                rule.target,
                tensors,
                {**env, **dict(zip([n for n, _ in rule.params], values, strict=True))},
            )
        except (FormError, EvalError, KeyError, ValueError):
            continue
        targets.add(other.prune().structural_hash())
    return (graph.prune(), targets) if targets else None


def _domain_values(domain: Domain, builder: Builder) -> range | tuple[int, ...]:
    if domain.kind == "dim" and domain.term is not None:
        return range(builder.type_of(domain.term).rank)
    if domain.kind == "range":
        return range(domain.lo, domain.hi)
    return (2,)


def op_counts(rules: list[tuple[Rule, Direction]]) -> dict[str, int]:
    """How many rules mention each op (on either side)."""
    counts: dict[str, int] = {}
    for rule, _ in rules:
        for op in set(op_names(rule.source) + op_names(rule.target)):
            counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def run(
    max_ops: int = 3,
    out_dir: str | os.PathLike[str] | None = None,
    jobs: int = 2,
    timeout_s: float = 5.0,
    progress: bool = True,
) -> Generation:
    """Generates the library into `out_dir` (default: the package's library folder):
    generated.rules, REPORT.md and report.json, each written whole or not at all."""
    if max_ops < 1:
        raise ValueError(f"max_ops must be at least 1, got {max_ops}")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    target = Path(out_dir) if out_dir is not None else LIBRARY_DIR
    if target.exists() and not target.is_dir():
        raise ValueError(f"{target}: not a directory")
    gen = generate(EnumConfig(max_ops=max_ops), jobs=jobs, timeout_s=timeout_s, progress=progress)
    target.mkdir(parents=True, exist_ok=True)
    from unityc.rewrites.report import write_outputs  # cycle: the report reads this module's Generation

    write_outputs(gen, target)
    if progress:
        statuses = {
            s: sum(d.result.status == s for d in gen.directions) for s in ("proven", "unproven", "refuted")
        }
        print(
            f"{len(gen.rules)} rules written to {target / 'generated.rules'} in {gen.times['total']:.0f} s "
            f"({len(gen.accepted)} candidates; directions: {statuses['proven']} proven, "
            f"{statuses['unproven']} unproven, {statuses['refuted']} refuted); see REPORT.md"
        )
    return gen
