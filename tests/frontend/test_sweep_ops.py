"""What the Hugging Face sweep found missing imports, and the graphs match their modules:
complex arithmetic as real ops on the parts, a sum of a boolean mask."""

from __future__ import annotations

from pathlib import Path

from unityc.dialects import pcg
from unityc.frontend import ModelSpec
from unityc.frontend.check import check_import

MODELS = Path(__file__).parent / "sweep_ops.py"


def test_complex_rotary_imports_exactly() -> None:
    """view_as_complex -> complex products, sums and a real scale -> view_as_real: only real
    ops in the graph, values and gradients as the module's."""
    module, checks = check_import(ModelSpec(f"{MODELS}:complex_rotary"))
    assert any(isinstance(op, pcg.SplitOp) for op in module.walk())  # the pairs taken apart
    assert any(isinstance(op, pcg.ConcatOp) for op in module.walk())  # and put back
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for weight in ("q", "k", "head"):
        assert any(c.what.startswith(f"gradient of '{weight}.") for c in checks)


def test_boolean_count_and_int32_ids_import_exactly() -> None:
    """A sum of a boolean mask (the non-pad count) and int32 ids into an embedding."""
    module, checks = check_import(ModelSpec(f"{MODELS}:counted_tokens"))
    assert any(isinstance(op, pcg.ReduceOp) for op in module.walk())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'embed.") for c in checks)


def test_scatter_into_filled_tables_imports_exactly() -> None:
    """scatter of the top-k logits into -inf (then a sigmoid) and of False into a True mask."""
    module, checks = check_import(ModelSpec(f"{MODELS}:scattered_router"))
    assert any(isinstance(op, pcg.CompareTensorsOp) for op in module.walk())  # the one-hots
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for weight in ("router", "scorer", "head"):
        assert any(c.what.startswith(f"gradient of '{weight}.") for c in checks)


def test_masked_fill_by_infinities_imports_exactly() -> None:
    """masked_fill by -inf before a softmax and where(mask, x, inf) before a min: each infinite
    side is ±log1p(-w) of its 0/1 weight (no 0·inf), values and gradients as the module's."""
    module, checks = check_import(ModelSpec(f"{MODELS}:infinite_mask"))
    assert any(isinstance(op, pcg.Log1pOp) for op in module.walk())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for weight in ("embed", "q", "k", "head"):
        assert any(c.what.startswith(f"gradient of '{weight}.") for c in checks)


def test_float64_reference_keeps_float64_where_the_module_names_float32() -> None:
    """The module's own `.to(torch.float32)` and `softmax(dtype=torch.float32)` run in float64
    in the gradient check's reference, so an exact graph agrees to float64 rounding (with them
    rounded to float32 the gradients were 2.8e-7 apart here, CPM-Ant's 4e-5)."""
    _, checks = check_import(ModelSpec(f"{MODELS}:float32_variance"))
    compared = [c for c in checks if c.what == "loss" or c.what.startswith("gradient of")]
    assert len(compared) == 1 + 11  # the loss; 3 linears and scales, the head
    assert max(c.relative_error for c in compared) < 1e-10


def test_float64_reference_makes_the_float64_floor() -> None:
    """`torch.full((), torch.finfo(w.dtype).min)` in the float64 reference asks float32 (the
    default dtype) to hold -1.8e308: the reference makes it float64 instead of overflowing."""
    _, checks = check_import(ModelSpec(f"{MODELS}:dtype_floor"))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'q.") for c in checks)


def test_a_runtime_assertion_on_a_read_back_number_is_left_out() -> None:
    """`assert lengths.max().item() <= seq` exports as max -> `_local_scalar_dense` -> `le` ->
    `_assert_scalar`: those ops compute nothing returned, so the graph leaves them out (the
    integer max and `.item()` have no lowering) and the rest imports exactly."""
    module, checks = check_import(ModelSpec(f"{MODELS}:asserted_lengths"))
    assert not any(isinstance(op, pcg.ReduceOp) and op.attrs()["kind"] == "amax" for op in module.walk())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'embed.") for c in checks)


def test_no_grad_blocks_and_detach_pass_no_gradient() -> None:
    """What a `torch.no_grad()` block computes and what `detach()` returns carry no gradient
    back (`pcg.stop_gradient`): the gradients are the module's (with the gradient flowing
    through them, those of `cell` and `score` differ)."""
    module, checks = check_import(ModelSpec(f"{MODELS}:no_grad_cycles"))
    assert sum(isinstance(op, pcg.StopGradientOp) for op in module.walk()) == 2  # the block's z, the gate
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for weight in ("cell", "inject", "score", "head"):
        assert any(c.what.startswith(f"gradient of '{weight}.") for c in checks)
