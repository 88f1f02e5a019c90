"""Substitution search (Unity §5.1, TASO's cost-based backtracking search).

A queue of candidate graphs ordered by cost: pop the best, apply every rule at every match
(`rewrites.match.rewrites`), simplify each result (parallel-op identities, `simplify.py`), skip
graphs already seen (by `Graph.structural_hash`), drop those whose lower bound (`bounds.py`)
is beyond `alpha` x the best cost so far, price the rest with the machine-mapping DP, and queue
those within `alpha` x the best. The search stops when the queue is empty, after `budget`
expansions, after `work` neighbours looked at (the unit of work: each is rewritten, simplified
and hashed, most are priced), or at a deadline. Every priced candidate is kept (the caller
picks among them, e.g. the best one for each boundary partitioning).
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from unityc.cost.pricing import type_info
from unityc.graph import Graph
from unityc.graph.simplify import simplify
from unityc.rewrites.match import CompiledRule, rewrites
from unityc.search.mapping import Mapped


@dataclass
class Candidate:
    graph: Graph
    mapped: Mapped
    digest: int
    depth: int = 0
    """How many rewrites produced it from the start graph."""

    @property
    def objective(self) -> float:
        return self.mapped.objective


@dataclass
class SearchStats:
    expanded: int = 0
    priced: int = 0
    duplicates: int = 0
    pruned: int = 0
    bounded: int = 0
    """Neighbours dropped by their lower bound, unpriced."""
    looked: int = 0
    """Neighbours looked at (the work budget's unit)."""
    seconds: float = 0.0
    stopped_by: str = "queue empty"


@dataclass(frozen=True)
class SubstitutionOptions:
    alpha: float = 1.05
    budget: int | None = 200
    """Expansions (pops) at most; None: until the queue is empty."""
    deadline: float | None = None
    """A `time.monotonic()` value after which the search stops."""
    work: int | None = None
    """Neighbours looked at, at most (None: no limit)."""
    per_output: int = 0
    """Candidates priced per type of the graph's first output even when their bound is beyond
    alpha (the caller may want the best few for each output partitioning, see `unity.py`)."""


@dataclass
class SearchOutcome:
    best: Candidate
    candidates: list[Candidate] = field(default_factory=list)
    """Every feasible candidate priced, the start graph included, best first."""
    stats: SearchStats = field(default_factory=SearchStats)


def neighbours(
    graph: Graph,
    rules: Sequence[CompiledRule],
    degrees: Sequence[int],
    keep: Sequence[int],
    devices: int | None = None,
) -> Iterator[Graph]:
    """Every graph one rule application away, simplified; with `devices`, none with an op of
    more tasks than that (no machine view could place it)."""
    for _, new in rewrites(graph, rules, degrees):
        if devices is not None and _too_wide(graph, new, devices):
            continue
        yield simplify(new, keep)


def _too_wide(old: Graph, new: Graph, devices: int) -> bool:
    """Whether a node the rewrite created has more tasks than devices."""
    for nid in range(old.next_id, new.next_id):
        node = new.nodes.get(nid)
        if node is not None and type_info(node.types[0]).tasks > devices:
            return True
    return False


def best_first(
    starts: Graph | Sequence[Graph],
    price: Callable[[Graph], Mapped],
    rules: Sequence[CompiledRule],
    degrees: Sequence[int],
    options: SubstitutionOptions,
    keep: Sequence[int] = (),
    devices: int | None = None,
    bound: Callable[[Graph], float] | None = None,
) -> SearchOutcome:
    """The best-first search from `starts` (the first is the graph as given; others are seeds);
    `keep` names sources whose type must not change; `devices` bounds an op's task count;
    `bound` is a lower bound of `price(graph).objective` (a candidate whose bound is beyond
    alpha x the best is not priced)."""
    began = time.monotonic()
    stats = SearchStats()
    seen: set[int] = set()
    explored: list[Candidate] = []
    tie = itertools.count()
    queue: list[tuple[float, int, Candidate]] = []
    best: Candidate | None = None
    per_type: dict[Any, int] = {}
    """Feasible candidates priced per type of the first output."""
    for graph in [starts] if isinstance(starts, Graph) else starts:
        graph = simplify(graph.copy(), keep)
        digest = graph.structural_hash()
        if digest in seen:
            continue
        seen.add(digest)
        candidate = Candidate(graph, price(graph), digest)
        stats.priced += 1
        if best is None or candidate.objective < best.objective:
            best = candidate
        if candidate.mapped.feasible:
            explored.append(candidate)
            out_type = graph.type_of(graph.outputs[0]) if graph.outputs else None
            per_type[out_type] = per_type.get(out_type, 0) + 1
            heapq.heappush(queue, (candidate.objective, next(tie), candidate))
    assert best is not None, "best_first needs a start graph"
    while queue:
        objective, _, candidate = heapq.heappop(queue)
        if math.isfinite(best.objective) and objective > options.alpha * best.objective:
            stats.stopped_by = "alpha"
            break
        if options.budget is not None and stats.expanded >= options.budget:
            stats.stopped_by = "budget"
            break
        stopped = _stop(options, stats)
        if stopped:
            stats.stopped_by = stopped
            break
        stats.expanded += 1
        for new in neighbours(candidate.graph, rules, degrees, keep, devices):
            stopped = _stop(options, stats)
            if stopped:
                stats.stopped_by = stopped
                break
            stats.looked += 1
            digest = new.structural_hash()
            if digest in seen:
                stats.duplicates += 1
                continue
            seen.add(digest)
            out_type = new.type_of(new.outputs[0]) if new.outputs else None
            wanted = per_type.get(out_type, 0) < options.per_output
            if not wanted and bound is not None and bound(new) > options.alpha * best.objective:
                stats.bounded += 1
                continue
            mapped = price(new)
            stats.priced += 1
            if not mapped.feasible:
                continue
            found = Candidate(new, mapped, digest, candidate.depth + 1)
            explored.append(found)
            per_type[out_type] = per_type.get(out_type, 0) + 1
            if found.objective < best.objective:
                best = found
            if found.objective <= options.alpha * best.objective:
                heapq.heappush(queue, (found.objective, next(tie), found))
            else:
                stats.pruned += 1
        if stats.stopped_by in ("work", "time limit"):
            break
    stats.seconds = time.monotonic() - began
    explored.sort(key=lambda c: c.objective)
    return SearchOutcome(best, explored, stats)


def _stop(options: SubstitutionOptions, stats: SearchStats) -> str | None:
    """Why the search must stop now (its work budget or the deadline), if it must."""
    if options.work is not None and stats.looked >= options.work:
        return "work"
    if options.deadline is not None and time.monotonic() > options.deadline:
        return "time limit"
    return None
