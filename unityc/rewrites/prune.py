"""Pruning candidates implied by smaller ones (TASO's redundancy pruning), with union-find.

Within a bucket every graph computes the same outputs; a pair needs no rule of its own when its
two graphs are already connected by steps that smaller rules justify. Graphs are the elements
of a union-find. They are joined
- by the pairs `candidates.py` found congruent (implied by their operands' pairs), and
- by rewriting: each accepted rule with ops on both sides (as a concrete rule, both directions;
  a rule with a bare variable side, `combine(partition(x)) => x`, cannot be applied backwards by
  the search, so it justifies nothing here: else `relu(x) => combine(relu(partition(x)))`
  would be implied and never generated) is applied at every
  match of every graph of the buckets not yet connected, and each result is joined to the graph
  it came from (results are elements too, so two graphs that rewrite to one graph, enumerated or
  not, are connected: TASO's test).
Candidates are taken smallest first (largest side, then both sides together, then the most
input variables: the most general), in rounds of equal size; a candidate whose graphs are
already connected is implied, otherwise it is accepted and joins them. Pairs equal up to
renaming their inputs are accepted once (isomorphic).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from tqdm import tqdm

from unityc.graph import Graph
from unityc.rewrites.candidates import Buckets, Pair, members
from unityc.rewrites.generalize import LEVELS, canonical_key, concrete_pair, generalize
from unityc.rewrites.match import CompiledRule, GraphIndex
from unityc.rewrites.terms import Rule


class UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def add(self) -> int:
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, i: int) -> int:
        root = i
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[i] != root:
            self.parent[i], i = root, self.parent[i]
        return root

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[max(ra, rb)] = min(ra, rb)
        return True


@dataclass
class PruneCounts:
    isomorphic: int = 0
    implied: int = 0
    accepted: int = 0
    rewrites_tried: int = 0
    rewrite_joins: int = 0
    rounds: list[tuple[str, int, int]] = field(default_factory=list)
    """(size, candidates, accepted) per round."""


@dataclass(frozen=True)
class Accepted:
    pair: Pair
    concrete: tuple[Rule, Rule | None]
    """The concrete rule from the smaller graph and, when both sides have ops, back."""


RoundHook = Callable[[list[Accepted]], list[Rule]]


def _concrete_rules(accepted: list[Accepted]) -> list[Rule]:
    """Both directions of each candidate with ops on both sides."""
    return [r for a in accepted if a.concrete[1] is not None for r in (a.concrete[0], a.concrete[1])]


def size_key(buckets: Buckets, pair: Pair) -> tuple[int, int, int]:
    """Largest side, both sides, then more input variables first: the more general of two
    candidates of one size (add(x, y) => add(y, x) before add(x, add(x, y)) => ...) goes first."""
    ga, gb = buckets.graphs[pair.a], buckets.graphs[pair.b]
    return (max(ga.n_ops, gb.n_ops), ga.n_ops + gb.n_ops, -len(ga.inputs))


def concrete_rule(buckets: Buckets, source: int, target: int) -> Rule | None:
    """The fully concrete rule from one graph to the other (None if the source has no op)."""
    if buckets.graphs[source].n_ops == 0:
        return None
    pair = concrete_pair(buckets.graphs[source], buckets.graphs[target])
    return replace(generalize(pair, LEVELS[-1]), name=f"c{source}_{target}")


class Pruner:
    def __init__(self, buckets: Buckets, implied: Sequence[Pair], degrees: Sequence[int] = (2,)):
        self.buckets = buckets
        self.degrees = tuple(degrees)
        self.uf = UnionFind(len(buckets.graphs))
        for p in implied:
            self.uf.union(p.a, p.b)
        self.groups = list(members(buckets))
        self.index = {(buckets.bucket_of[i], buckets.shapes[i]): i for i in range(len(buckets.graphs))}
        self.rules: list[CompiledRule] = []
        self.applied: list[int] = [0] * len(self.groups)
        """How many of `rules` each bucket's graphs have been rewritten with."""
        self.counts = PruneCounts()

    def run(
        self, pairs: Sequence[Pair], on_round: RoundHook | None = None, progress: bool = True
    ) -> list[Accepted]:
        """The accepted candidates, smallest first. `on_round` gets each round's accepted ones
        and returns the rules that connect graphs from the next round on (by default their
        concrete rules; the generator passes the verified, generalized ones)."""
        hook = on_round or _concrete_rules
        ordered = sorted(pairs, key=lambda p: (size_key(self.buckets, p), p.a, p.b))
        accepted: list[Accepted] = []
        seen: set[str] = set()
        bar = tqdm(total=len(ordered), desc="prune", unit="pair", disable=not progress, leave=False)
        for key, group in itertools.groupby(ordered, key=lambda p: size_key(self.buckets, p)):
            self._rewrite_all()
            round_pairs = list(group)
            fresh: list[Accepted] = []
            for pair in round_pairs:
                bar.update()
                if self.uf.find(pair.a) == self.uf.find(pair.b):
                    self.counts.implied += 1
                    continue
                self.uf.union(pair.a, pair.b)
                candidate = self._candidate(pair)
                iso = canonical_key(candidate.concrete[0].source, candidate.concrete[0].target)
                if iso in seen:
                    self.counts.isomorphic += 1
                    continue
                seen.add(iso)
                fresh.append(candidate)
            bar.set_postfix_str(f"{key[0]} ops: verifying {len(fresh)}")
            self.rules.extend(CompiledRule(r) for r in hook(fresh))
            accepted.extend(fresh)
            size = f"{key[0]} ops (both sides {key[1]}), {-key[2]} inputs"
            self.counts.rounds.append((size, len(round_pairs), len(fresh)))
        bar.close()
        self.counts.accepted = len(accepted)
        return accepted

    def _candidate(self, pair: Pair) -> Accepted:
        forward = concrete_rule(self.buckets, pair.a, pair.b)
        backward = concrete_rule(self.buckets, pair.b, pair.a)
        if forward is None:  # a is the bare input: only b -> a applies
            assert backward is not None  # a bucket never holds two bare-input graphs
            return Accepted(pair, (backward, None))
        return Accepted(pair, (forward, backward))

    def _rewrite_all(self) -> None:
        """Applies the rules not yet applied to every graph of every unconnected bucket."""
        for b, group in enumerate(self.groups):
            start = self.applied[b]
            if start == len(self.rules):
                continue
            self.applied[b] = len(self.rules)
            if len({self.uf.find(i) for i in group}) == 1:  # connected: no candidate left
                continue
            for i in group:
                self._rewrite(i, b, self.rules[start:])

    def _rewrite(self, i: int, bucket: int, rules: Sequence[CompiledRule]) -> None:
        graph = self.buckets.graphs[i].graph
        index = GraphIndex(graph)
        for rule in rules:
            if rule.anchor_op not in index.by_op:
                continue
            for match in rule.matches(graph, self.degrees, index):
                self.counts.rewrites_tried += 1
                new = rule.apply(graph, match, index)
                if new is None:
                    continue
                key = (bucket, _shape(new))
                j = self.index.get(key)
                if j is None:  # not enumerated (or larger): still a meeting point of rewrites
                    j = self.index[key] = self.uf.add()
                if self.uf.union(i, j):
                    self.counts.rewrite_joins += 1


def _shape(graph: Graph) -> int:
    pruned = graph.copy()
    return pruned.prune().structural_hash()
