"""The numeric rule check: correct rules pass on random parallel instances, wrong ones fail
with a counterexample that names the instance and the first difference."""

from __future__ import annotations

import re

import pytest

from unityc.rewrites.numeric import numeric_check
from unityc.rewrites.parser import parse_rules


def rule(text: str):
    parsed = parse_rules(text, "t.rules")
    return (parsed.rules or parsed.axioms)[0]


CORRECT = [
    "rule relu_part: relu(x) => combine[dim=d, degree=k](relu(partition[dim=d, degree=k](x)))"
    " where d: dim(x), k: degree if k * shard(x, d) divides size(x, d)",
    "rule add_comm: add(a, b) => add(b, a)",
    "rule mm_reduce: matmul(parallel.reduce[degree=k](x), y)"
    " => parallel.reduce[degree=k](matmul(x, replicate[degree=k](y)))",
    "rule sum_concat: add(a, b) => parallel.reduce[degree=2](parallel.sum_concat(a, b))"
    " if type(a) == type(b)",
    "rule merge: linear(x, w1), linear(x, w2) => y.0, y.1"
    " let y = split[dim=-1, sizes=[size(w1, 0), size(w2, 0)]](linear(x, concat[dim=0](w1, w2)))"
    " if shard(w1, 0) == 1, shard(w2, 0) == 1, sum(w1) == sum(w2)",
    "axiom split_concat: concat[dim=d](split[dim=d, sizes=[s, t]](x).0, split[dim=d, sizes=[s, t]](x).1) = x",
    "rule heads: attention[heads=h](q, kk, v, wq, wk, wv, wo)"
    " => parallel.reduce[degree=k](attention[heads=h](replicate[degree=k](q), replicate[degree=k](kk),"
    " replicate[degree=k](v), partition[dim=0, degree=k](wq),"
    " partition[dim=0, degree=k](wk), partition[dim=0, degree=k](wv), partition[dim=1, degree=k](wo)))"
    " where k: degree if k * shard(wq, 0) divides h",
]


@pytest.mark.parametrize("text", CORRECT, ids=lambda t: t.split(":")[0].split()[-1])
def test_correct_rules_pass(text: str) -> None:
    result = numeric_check(rule(text), trials=6)
    assert result.ok, result.counterexample
    assert result.instances == 6
    assert result.counterexample is None


def test_wrong_value_gives_a_counterexample() -> None:
    result = numeric_check(rule("rule bad: relu(add(a, b)) => add(relu(a), relu(b))"))
    assert not result.ok
    message = result.counterexample or ""
    assert re.match(
        r"instance a: !pcg\.tensor<[^>]+>, b: !pcg\.tensor<[^>]+>: output 0 differs: ", message
    ), message
    assert re.search(
        r"max abs difference [0-9.e-]+ at \[[0-9, ]*\] \(source [-0-9.e]+, target [-0-9.e]+\)", message
    )


def test_wrong_type_is_caught() -> None:
    result = numeric_check(
        rule("rule bad: combine[dim=e, degree=k](partition[dim=d, degree=k](x)) => x"), trials=40
    )
    assert not result.ok
    assert "output 0 types differ: source !pcg.tensor" in (result.counterexample or "")


def test_partial_sums_must_be_reduced_with_copies() -> None:
    # without the replicate, the second operand is not paired with every partial sum
    result = numeric_check(
        rule("rule bad: matmul(parallel.reduce[degree=k](x), y) => parallel.reduce[degree=k](matmul(x, y))")
    )
    assert not result.ok
    assert "the target does not build" in (result.counterexample or "")


def test_a_target_that_does_not_build_fails_unless_a_condition_excludes_it() -> None:
    text = (
        "rule col: linear(x, w) => combine[dim=rank(x) - 1, degree=k]("
        "linear(replicate[degree=k](x), partition[dim=0, degree=k](w))) where k: degree"
    )
    unguarded = numeric_check(rule(text), trials=10)
    assert not unguarded.ok
    assert "the target does not build: parallel.partition: degree" in (unguarded.counterexample or "")
    guarded = numeric_check(rule(text + " if k * shard(w, 0) divides size(w, 0)"), trials=10)
    assert guarded.ok, guarded.counterexample


def test_a_rule_whose_source_never_builds_is_not_checked() -> None:
    result = numeric_check(rule("rule r: softmax[dim=7](x) => x"))
    assert not result.ok and result.instances == 0
    assert (result.counterexample or "").startswith("not checked: no instance builds")
    assert "dimension 7 is out of range" in (result.counterexample or "")


def test_examples_fix_the_instance() -> None:
    text = "rule bad: relu(x) => x example x: !pcg.tensor<6x2xf32, shard [3, 1]>"
    result = numeric_check(rule(text))
    assert not result.ok
    assert (result.counterexample or "").startswith(
        "instance x: !pcg.tensor<6x2xf32, shard [3, 1]>: output 0 differs"
    )
    ok = numeric_check(rule("rule r: relu(x) => relu(relu(x)) example x: !pcg.tensor<6x2xf32, shard [3, 1]>"))
    assert ok.ok and 1 <= ok.instances <= 2, (
        "a fully bound example is one instance; a couple of value draws do"
    )


def test_examples_leave_unbound_variables_random() -> None:
    text = "rule r: relu(x) => combine[dim=d, degree=2](relu(partition[dim=d, degree=2](x))) where d: dim(x)"
    result = numeric_check(rule(text + " example x: !pcg.tensor<4x4x4xf32>"), trials=5)
    assert result.ok and result.instances == 5


def test_instances_are_seeded() -> None:
    bad = rule("rule bad: sigmoid(add(a, b)) => add(sigmoid(a), sigmoid(b))")
    assert numeric_check(bad, seed=3) == numeric_check(bad, seed=3)
    assert numeric_check(bad, seed=3).counterexample != numeric_check(bad, seed=4).counterexample


def test_parallel_instances_are_drawn() -> None:
    """Variables get shard, sum and copy degrees, so a rule that mishandles them cannot pass."""
    summed = numeric_check(
        rule("rule r: parallel.reduce[degree=k](x) => parallel.reduce[degree=k](identity(x))")
    )
    assert summed.ok and summed.instances == 6, "inputs with partial sums are drawn"
    relu = numeric_check(rule("rule bad: parallel.reduce[degree=k](x) => parallel.reduce[degree=k](relu(x))"))
    assert "the target does not build: pcg.relu: operand 'input' has sum degree" in (
        relu.counterexample or ""
    )
    sharded = numeric_check(
        rule("rule bad: combine[dim=d, degree=k](x) => combine[dim=d, degree=k](softmax[dim=d](x))")
    )
    assert "softmax normalizes along it" in (sharded.counterexample or "")
