"""The TASO-style rule generator: enumeration, fingerprints, pruning, generalization, and the
checked-in library it produced."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from xdsl.dialects.builtin import f32

from unityc.dialects.pcg_types import TensorType
from unityc.rewrites.candidates import Buckets, bucket, candidate_pairs
from unityc.rewrites.enumeration import EnumConfig, Enumerator, InputSpec
from unityc.rewrites.fingerprint import Fingerprinter
from unityc.rewrites.generalize import LEVELS, SCOPES, op_names
from unityc.rewrites.generate import LIBRARY_DIR, Generation, generate, run
from unityc.rewrites.numeric import numeric_check
from unityc.rewrites.parser import parse_rules
from unityc.rewrites.printer import format_rule
from unityc.rewrites.prune import Pruner
from unityc.rewrites.report import write_outputs
from unityc.rewrites.terms import Rule


def t(*shape: int, shard: list[int] | None = None, sum_: int = 1) -> TensorType:
    return TensorType(list(shape), f32, shard, sum_)


def config(inputs: dict[str, TensorType], ops: tuple[str, ...], max_ops: int = 3) -> EnumConfig:
    return EnumConfig(inputs=tuple(InputSpec(n, ty) for n, ty in inputs.items()), ops=ops, max_ops=max_ops)


def sides(rule: Rule) -> tuple[list[str], list[str]]:
    return op_names(rule.source), op_names(rule.target)


def library(gen: Generation) -> list[Rule]:
    return [rule for rule, _ in gen.rules]


RELU_PARALLEL = ("pcg.relu", "parallel.partition", "parallel.combine")


@pytest.fixture(scope="module")
def relu_generation() -> Generation:
    return generate(config({"x": t(4, 4)}, RELU_PARALLEL), jobs=1, progress=False)


def test_relu_commutes_with_partition_and_is_partitionable_on_any_dim(relu_generation: Generation) -> None:
    rules = library(relu_generation)
    by_sides = {(tuple(s), tuple(d)): r for r in rules for s, d in [sides(r)]}
    assert (("partition", "relu"), ("relu", "partition")) in by_sides
    assert (("relu", "partition"), ("partition", "relu")) in by_sides
    any_dim = by_sides[(("relu",), ("partition", "relu", "combine"))]
    assert any_dim.params and {d.kind for _, d in any_dim.params} == {"dim", "degree"}
    assert (("partition", "combine"), ()) in by_sides  # combine(partition(x)) => x
    assert all(d.result.status == "proven" for _, d in relu_generation.rules)


def test_add_commutativity_and_sum_concat_are_found() -> None:
    ops = ("pcg.add", "parallel.reduce", "parallel.sum_concat")
    gen = generate(config({"x": t(4, 4), "y": t(4, 4)}, ops, max_ops=2), jobs=1, progress=False)
    texts = {format_rule(r).split("\n")[1].strip() for r in library(gen)}
    assert "add(x, y) => add(y, x)" in texts
    assert "add(x, y) => parallel.reduce[degree=2](sum_concat(x, y))" in texts
    assert "parallel.reduce[degree=2](sum_concat(x, y)) => add(x, y)" in texts


def test_fingerprint_collisions_are_refuted_not_shipped() -> None:
    # Without values, a fingerprint is the type alone: relu(x), tanh(x) and x all collide.
    blind = Fingerprinter(projections=0)
    gen = generate(
        config({"x": t(4, 4)}, ("pcg.relu", "pcg.tanh"), max_ops=1),
        jobs=1,
        progress=False,
        fingerprinter=blind,
    )
    statuses = {d.result.status for d in gen.directions}
    assert "collision" in statuses
    assert all(d.result.status == "proven" for _, d in gen.rules)
    assert not any({"relu", "tanh"} <= {*sides(r)[0], *sides(r)[1]} for r in library(gen))


def test_common_subgraph_and_trivial_pairs_are_dropped() -> None:
    enum = Enumerator(config({"x": t(4, 4), "y": t(4, 4)}, ("pcg.add", "pcg.relu"), max_ops=2)).run(False)
    buckets = bucket(enum.graphs)
    candidate_pairs(buckets)
    counts = buckets.counts
    assert counts.common_subgraph > 0  # add(relu(x), y) vs add(y, relu(x)) share relu(x)
    dropped = (
        "different_inputs",
        "trivial",
        "shared_subterm",
        "common_subgraph",
        "identity_in_context",
        "congruent",
    )
    assert counts.pairs == counts.kept + sum(getattr(counts, reason) for reason in dropped)
    twin = Buckets([enum.graphs[0], enum.graphs[0]], [0, 0])
    twin.op_hashes = [frozenset()] * 2
    twin.output_hashes = [frozenset()] * 2
    twin.shared = [False, False]
    twin.shapes = [1, 1]
    assert candidate_pairs(twin)[0] == [] and twin.counts.trivial == 1


def test_isomorphic_candidates_are_accepted_once() -> None:
    # x and w have different types, so both are enumerated; their relu/partition pairs are one
    # rule up to renaming.
    cfg = config({"x": t(4, 4), "w": t(2, 4)}, ("pcg.relu", "parallel.partition"), max_ops=2)
    buckets = bucket(Enumerator(cfg).run(False).graphs)
    kept, congruent = candidate_pairs(buckets)
    pruner = Pruner(buckets, congruent)
    accepted = pruner.run(kept, progress=False)
    assert pruner.counts.isomorphic > 0
    texts = [format_rule(a.concrete[0]) for a in accepted]
    assert len(texts) == len(set(texts))


def test_outputs_are_written_whole(tmp_path: Path, relu_generation: Generation) -> None:
    write_outputs(relu_generation, tmp_path)
    rules = parse_rules((tmp_path / "generated.rules").read_text()).rules
    assert [r.name for r in rules] == [r.name for r in library(relu_generation)]
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["library"]["rules"] == len(rules)
    assert "| total |" in (tmp_path / "REPORT.md").read_text()
    assert not list(tmp_path.glob(".*.tmp"))


def test_every_level_is_described() -> None:
    assert set(SCOPES) == {level.name for level in LEVELS}


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_ops"):
        run(max_ops=0, out_dir=tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        run(out_dir=tmp_path / "file")


def test_checked_in_library_parses_and_checks_numerically() -> None:
    path = LIBRARY_DIR / "generated.rules"
    rules = parse_rules(path.read_text(), str(path)).rules
    assert len(rules) > 50
    names = {r.name for r in rules}
    assert len(names) == len(rules)
    failures = [(r.name, why) for r in rules if (why := numeric_problem(r)) is not None]
    assert failures == []


def numeric_problem(rule: Rule) -> str | None:
    """The rule checked on its example; on random instances too when the checker re-samples the
    example's parameters and no sample meets the conditions within its two tries."""
    result = numeric_check(rule, trials=2)
    if not result.ok and (result.counterexample or "").startswith("not checked"):
        result = numeric_check(replace(rule, examples=()), trials=3, degrees=(2, 3, 4))
    return None if result.ok else result.counterexample


def test_checked_in_report_matches_the_library() -> None:
    data = json.loads((LIBRARY_DIR / "report.json").read_text())
    rules = parse_rules((LIBRARY_DIR / "generated.rules").read_text()).rules
    assert data["library"]["rules"] == len(rules)
    found = {item["rule"]: item["generated"] for item in data["landmarks"]}
    assert found["ReLU partitionable on any dim"]
    assert found["Add = sum_concat + reduce"]
    assert found["Reduce commutes with matmul"]
