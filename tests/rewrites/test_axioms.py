"""The shipped operator axioms: true (numeric check), usable by Z3 (a trigger), and each one
proves itself from the set, so the encoding of both sides agrees."""

from __future__ import annotations

import pytest

from unityc.rewrites.numeric import numeric_check
from unityc.rewrites.parser import load_axioms
from unityc.rewrites.terms import Axiom
from unityc.rewrites.verify import encode_axiom, prove

AXIOMS = load_axioms()


def test_the_axiom_set() -> None:
    names = [a.name for a in AXIOMS]
    assert len(names) == len(set(names)), "names are unique"
    assert len(AXIOMS) >= 100
    files = {a.loc.path.rsplit("/", 1)[-1] for a in AXIOMS if a.loc}
    assert files == {"algebra.rules", "parallel.rules"}
    for required in (
        "combine_partition",
        "partition_combine",
        "relu_partition",
        "matmul_reduce_lhs",
        "matmul_reduce_rhs",
        "attention_heads",
        "attention_batch",
        "reduce_sum_concat",
        "linear_partition_out",
        "linear_partition_inner",
        "matmul_concat_inner",
        "split_concat_first",
        "softmax_partition",
    ):
        assert required in names


@pytest.mark.parametrize("axiom", AXIOMS, ids=[a.name for a in AXIOMS])
def test_axiom_holds_numerically(axiom: Axiom) -> None:
    result = numeric_check(axiom, trials=8)
    assert result.ok, result.counterexample
    assert result.instances == 8


@pytest.mark.parametrize("axiom", AXIOMS, ids=[a.name for a in AXIOMS])
def test_axiom_is_usable_and_proves_itself(axiom: Axiom) -> None:
    assert encode_axiom(axiom) is None
    verdict = prove(axiom, AXIOMS, timeout_s=10)
    assert verdict.status == "proven", verdict.detail
