"""The importer's contract: on every zoo model (small config) and on HuggingFace BERT, the
reference interpreter's outputs on the imported graph equal the module's own outputs, on the
same inputs and weights (fp32, relative error <= 1e-5; dropout off on both sides)."""

from __future__ import annotations

import pytest

from unityc.dialects import pcg
from unityc.frontend.check import check_import
from unityc.frontend.models import ModelSpec
from unityc.models import zoo

TOLERANCE = 1e-5


@pytest.mark.parametrize("model", [*zoo(), "hf:bert"])
def test_imported_graph_matches_module(model: str) -> None:
    module, checks = check_import(ModelSpec(model, "small"))
    assert checks, "the graph has no outputs"
    assert checks[0].shape == (), "the loss (a scalar) comes first"
    for c in checks:
        assert c.relative_error <= TOLERANCE, f"output {c.index} {list(c.shape)}: {c.relative_error:.2e}"
    module.verify()


@pytest.mark.parametrize("model", ["bert", "hf:bert"])
def test_attention_becomes_one_op(model: str) -> None:
    module, _ = check_import(ModelSpec(model, "small"))
    ops = [op for op in module.walk() if isinstance(op, pcg.PcgOp)]
    assert sum(isinstance(op, pcg.AttentionOp) for op in ops) == 2  # small configs have 2 layers
    assert not any(isinstance(op, pcg.SoftmaxOp | pcg.BatchMatmulOp) for op in ops)


def test_dlrm_interaction_is_a_gather_of_constant_pairs() -> None:
    module, _ = check_import(ModelSpec("dlrm", "small"))
    gathers = [op for op in module.walk() if isinstance(op, pcg.GatherOp)]
    assert len(gathers) == 1
    assert not any(isinstance(op, pcg.ConstantOp) for op in module.walk())


def test_overrides_and_batch_reach_the_model() -> None:
    module, checks = check_import(ModelSpec("mlp", "small", batch=3, overrides=(("hidden_dims", "[8, 8]"),)))
    assert all(c.relative_error <= TOLERANCE for c in checks)
    inputs = [op for op in module.walk() if isinstance(op, pcg.InputOp)]
    assert all(op.result.type.shape[0] == 3 for op in inputs)
    linears = [op for op in module.walk() if isinstance(op, pcg.LinearOp)]
    assert len(linears) == 4  # two towers of two layers
