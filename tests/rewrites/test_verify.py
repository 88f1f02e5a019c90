"""The Z3 verifier: wrong rules never prove, multi-step rules do, every library rule does, and
check_rule refutes a wrong rule with the numeric counterexample first."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from unityc.rewrites.numeric import as_rule, numeric_check
from unityc.rewrites.parser import format_rule, load_axioms, load_library, parse_rules
from unityc.rewrites.terms import App, Lit, Rule, Term
from unityc.rewrites.verify import check_rule, prove

AXIOMS = load_axioms()


def rules(text: str) -> dict[str, Rule]:
    return {r.name: r for r in parse_rules(text, "t.rules").rules}


WRONG = rules(
    """
rule relu_additive: relu(add(a, b)) => add(relu(a), relu(b))
rule partition_combine_other_dims: combine[dim=e, degree=k](partition[dim=d, degree=k](x)) => x
rule partition_combine_fixed_dims: combine[dim=1, degree=2](partition[dim=0, degree=2](x)) => x
rule partition_combine_other_degree: combine[dim=d, degree=3](partition[dim=d, degree=2](x)) => x
rule matmul_reduce_no_replicate:
    matmul(parallel.reduce[degree=k](x), y) => parallel.reduce[degree=k](matmul(x, y))
rule reduce_copies: parallel.reduce[degree=k](replicate[degree=k](x)) => x
rule replicate_is_identity: x => replicate[degree=k](x) where k: degree
rule softmax_on_partitioned_dim:
    softmax[dim=s](partition[dim=d, degree=k](x)) => partition[dim=d, degree=k](softmax[dim=s](x))
rule softmax_same_dim_negative:
    softmax[dim=-1](partition[dim=1, degree=2](x)) => partition[dim=1, degree=2](softmax[dim=-1](x))
    if rank(x) == 2
rule matmul_commutes: matmul(a, b) => matmul(b, a)
rule sub_commutes: sub(a, b) => sub(b, a)
rule split_swaps: split[dim=d, sizes=[s, t]](concat[dim=d](a, b)).0 => b
rule column_parallel_wrong_dim:
    linear(x, w) => combine[dim=rank(x) - 1, degree=k](
        linear(replicate[degree=k](x), partition[dim=1, degree=k](w)))
    where k: degree
rule heads_wrong_wo_dim:
    attention[heads=h](q, kk, v, wq, wk, wv, wo) => parallel.reduce[degree=k](attention[heads=h](
        replicate[degree=k](q), replicate[degree=k](kk), replicate[degree=k](v),
        partition[dim=0, degree=k](wq), partition[dim=0, degree=k](wk), partition[dim=0, degree=k](wv),
        partition[dim=0, degree=k](wo)))
    where k: degree
rule scales_add: scalar_mul[scale=s](scalar_mul[scale=t](x)) => scalar_mul[scale=s + t](x)
rule transpose_product_order:
    transpose[perm=[1, 0]](matmul(a, b)) => matmul(transpose[perm=[1, 0]](a), transpose[perm=[1, 0]](b))
rule partition_degrees_add:
    partition[dim=d, degree=j](partition[dim=d, degree=k](x)) => partition[dim=d, degree=k + j](x)
rule concat_commutes: concat[dim=d](a, b) => concat[dim=d](b, a)
rule sum_concat_twice: add(a, b) => parallel.reduce[degree=2](parallel.sum_concat(a, a)) if type(a) == type(b)
rule row_parallel_no_reduce:
    linear(x, w) => linear(partition[dim=rank(x) - 1, degree=k](x), partition[dim=1, degree=k](w))
    where k: degree
rule merge_linears_swapped: linear(x, w1), linear(x, w2) => y.1, y.0
    let y = split[dim=-1, sizes=[size(w1, 0), size(w2, 0)]](linear(x, concat[dim=0](w1, w2)))
"""
)


@pytest.mark.parametrize("name", WRONG)
def test_wrong_rules_do_not_prove(name: str) -> None:
    verdict = prove(WRONG[name], AXIOMS, timeout_s=5)
    assert verdict.status == "unproven", f"{name} must not prove"
    assert "missing axiom?" in verdict.detail


@pytest.mark.parametrize(
    "name", ["relu_additive", "partition_combine_fixed_dims", "scales_add", "matmul_commutes", "sub_commutes"]
)
def test_check_rule_refutes_wrong_rules_with_a_counterexample(name: str) -> None:
    verdict = check_rule(WRONG[name], AXIOMS)
    assert verdict.status == "refuted"
    assert verdict.detail.startswith("instance ")
    assert verdict.z3_seconds == 0.0, "Z3 does not run on a refuted rule"


MULTI_STEP = rules(
    """
rule relu_any_dim: relu(x) => combine[dim=d, degree=k](relu(partition[dim=d, degree=k](x)))
    where d: dim(x), k: degree if k * shard(x, d) divides size(x, d)
rule column_parallel:
    linear(x, w) => combine[dim=rank(x) - 1, degree=k](
        linear(replicate[degree=k](x), partition[dim=0, degree=k](w)))
    where k: degree if k * shard(w, 0) divides size(w, 0)
rule row_parallel:
    linear(x, w) => parallel.reduce[degree=k](
        linear(partition[dim=rank(x) - 1, degree=k](x), partition[dim=1, degree=k](w)))
    where k: degree if k * shard(w, 1) divides size(w, 1), sum(x) == 1, sum(w) == 1
rule mlp_pair:
    linear(relu(linear(x, w1)), w2) => parallel.reduce[degree=k](linear(relu(linear(replicate[degree=k](x),
        partition[dim=0, degree=k](w1))), partition[dim=1, degree=k](w2)))
    where k: degree if k * shard(w1, 0) divides size(w1, 0), sum(w2) == 1
rule softmax_after_relu_data_parallel:
    softmax[dim=-1](relu(x)) => combine[dim=0, degree=k](softmax[dim=-1](relu(partition[dim=0, degree=k](x))))
    where k: degree if rank(x) >= 2, k * shard(x, 0) divides size(x, 0)
rule merge_linears: linear(x, w1), linear(x, w2) => y.0, y.1
    let y = split[dim=-1, sizes=[size(w1, 0), size(w2, 0)]](linear(x, concat[dim=0](w1, w2)))
    if shard(w1, 0) == 1, shard(w2, 0) == 1, sum(w1) == sum(w2)
rule partition_twice:
    partition[dim=d, degree=2](partition[dim=d, degree=2](x)) => partition[dim=d, degree=4](x)
rule reduce_through_relu_free_chain:
    neg(matmul(parallel.reduce[degree=k](x), y))
    => parallel.reduce[degree=k](neg(matmul(x, replicate[degree=k](y))))
"""
)


@pytest.mark.parametrize("name", MULTI_STEP)
def test_multi_step_rules_prove(name: str) -> None:
    verdict = check_rule(MULTI_STEP[name], AXIOMS)
    assert verdict.status == "proven", verdict.detail
    assert verdict.z3_seconds < 2.0


LIBRARY = load_library()


@pytest.mark.parametrize("rule", LIBRARY, ids=[r.name for r in LIBRARY])
def test_every_library_rule_proves_and_checks(rule: Rule) -> None:
    verdict = check_rule(rule, AXIOMS)
    assert verdict.status == "proven", f"{rule.name}: {verdict.detail}"
    assert "numerically checked on" in verdict.detail


LAYOUTS = load_library(Path(__file__).parents[2] / "unityc" / "rewrites" / "layouts")
"""Rules justifying layouts the baselines build directly (Megatron's sequence parallelism)."""


@pytest.mark.parametrize("rule", LAYOUTS, ids=[r.name for r in LAYOUTS])
def test_every_layout_rule_proves_and_checks(rule: Rule) -> None:
    verdict = check_rule(rule, AXIOMS)
    assert verdict.status == "proven", f"{rule.name}: {verdict.detail}"
    assert "numerically checked on" in verdict.detail


def test_curated_rules_cover_the_paper() -> None:
    names = {r.name for r in LIBRARY}
    for required in (
        "relu_partition_any_dim",
        "linear_column_parallel",
        "linear_row_parallel",
        "linear_data_parallel",
        "attention_head_parallel",
        "attention_batch_parallel",
        "add_is_sum_concat_reduce",
        "reduce_matmul_lhs",
        "merge_linears",
        "megatron_mlp",
    ):
        assert required in names


def test_a_true_rule_without_its_axiom_is_unproven() -> None:
    (rule,) = rules("rule exp_of_sum: exp(add(a, b)) => mul(exp(a), exp(b)) if type(a) == type(b)").values()
    verdict = check_rule(rule, AXIOMS)
    assert verdict.status == "unproven"
    assert "missing axiom?" in verdict.detail and "numerically checked on 6 instances" in verdict.detail


def test_a_rule_without_a_fixed_list_length_cannot_be_encoded() -> None:
    (rule,) = rules(
        "rule r: transpose[perm=p](transpose[perm=p](x)) => transpose[perm=p](transpose[perm=p](x))"
    ).values()
    verdict = prove(rule, AXIOMS)
    assert verdict.status == "unproven"
    assert verdict.detail.startswith("cannot encode: list attribute variable 'p'")


def test_proofs_need_the_axioms() -> None:
    rule = MULTI_STEP["column_parallel"]
    assert prove(rule, AXIOMS).proven
    without = [a for a in AXIOMS if a.name != "linear_partition_out"]
    assert not prove(rule, without).proven


# --- soundness on mutants: small edits of true laws that the numeric check refutes ---------------


def _mutants(term: Term) -> Iterator[Term]:
    """Copies of `term` with one edit: operands swapped, an op dropped, a literal dim or
    degree changed, another result picked."""
    if not isinstance(term, App):
        return
    args = list(term.args)
    present = [i for i, a in enumerate(args) if a is not None]
    for i, j in itertools.combinations(present, 2):
        if args[i] != args[j]:
            swapped = list(args)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            yield replace(term, args=tuple(swapped))
    for n, (prop, e) in enumerate(term.attrs):
        if isinstance(e, Lit) and type(e.value) is int:
            attrs = list(term.attrs)
            attrs[n] = (prop, Lit(e.value + 1))
            yield replace(term, attrs=tuple(attrs))
    if term.result:
        yield replace(term, result=0)
    for i in present:
        yield args[i]  # type: ignore[misc]
        for inner in _mutants(args[i]):  # type: ignore[arg-type]
            edited = list(args)
            edited[i] = inner
            yield replace(term, args=tuple(edited))


def test_refuted_mutants_of_true_laws_never_prove() -> None:
    laws = [as_rule(a) for a in AXIOMS] + LIBRARY
    mutants = [
        replace(law, name=f"{law.name}_mutant{n}", target=(*law.target[:k], m, *law.target[k + 1 :]))
        for law in laws
        for k, t in enumerate(law.target)
        for n, m in enumerate(_mutants(t))
    ]
    sample = random.Random(0).sample(mutants, 150)
    refuted = 0
    for mutant in sample:
        result = numeric_check(mutant, trials=4)
        if result.ok or (result.counterexample or "").startswith("not checked"):
            continue
        refuted += 1
        verdict = prove(mutant, AXIOMS, timeout_s=5)
        assert verdict.status == "unproven", f"{format_rule(mutant)}\nis wrong: {result.counterexample}"
    assert refuted >= 100
