"""The ops issue 42 adds import, and the graphs match their modules: `aten.log1p` as
`pcg.log1p`, `aten.repeat` as concatenations of copies."""

from __future__ import annotations

from pathlib import Path

from unityc.dialects import pcg
from unityc.frontend import ModelSpec
from unityc.frontend.check import check_import


def test_log1p_imports_exactly() -> None:
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'issue42_ops.py'}:make"))
    assert any(isinstance(op, pcg.Log1pOp) for op in module.walk())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'fc.") for c in checks)


def test_repeat_imports_exactly() -> None:
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'issue42_ops.py'}:tiled"))
    concats = [op for op in module.walk() if isinstance(op, pcg.ConcatOp)]
    assert len(concats) >= 3  # rows x2, columns x3, the new leading dim x2 (the target's folds)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'fc.") for c in checks)


def test_group_norm_imports_exactly() -> None:
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'issue42_ops.py'}:feature_encoder"))
    norms = [op for op in module.walk() if isinstance(op, pcg.LayerNormOp)]
    assert len(norms) == 2  # each group norm: a layer norm of its groups
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'norm.") for c in checks)
    assert any(c.what.startswith("gradient of 'halves.") for c in checks)


def test_weight_norm_imports_exactly() -> None:
    """`aten.linalg_vector_norm` (weight norm's ||v||) as sqrt(sum(v * v)); both of the
    parametrization's weights get their gradients."""
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'issue42_ops.py'}:positional_conv"))
    assert any(isinstance(op, pcg.SqrtOp) for op in module.walk())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for original in ("original0", "original1"):  # g and v
        key = f"gradient of 'conv.parametrizations.weight.{original}'"
        assert any(c.what.startswith(key) for c in checks)


def test_minimum_maximum_expm1_import_exactly() -> None:
    """`aten.minimum` with a number-like buffer, `aten.maximum` of two tensors, `aten.expm1`."""
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'issue42_ops.py'}:xielu"))
    assert any(isinstance(op, pcg.CompareTensorsOp) for op in module.walk())  # the maximum
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for weight in ("fc", "gate"):
        assert any(c.what.startswith(f"gradient of '{weight}.") for c in checks)


def test_hf_wav2vec2_imports_exactly() -> None:
    """`hf:wav2vec2`: raw audio clips through the conv feature encoder (group norm), the
    weight-normed positional conv and the transformer, one label per clip."""
    spec = ModelSpec("hf:wav2vec2", overrides=(("dropout", "0.0"),))
    module, checks = check_import(spec)
    inputs = {op.attrs()["key"]: op.results[0].type for op in module.walk() if isinstance(op, pcg.InputOp)}
    assert set(inputs) == {"input_values", "labels"}
    assert sum(isinstance(op, pcg.AttentionOp) for op in module.walk()) == 2
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'model.wav2vec2.encoder.pos_conv_embed.") for c in checks)
    assert any(c.what.startswith("gradient of 'model.wav2vec2.feature_extractor.") for c in checks)


def test_abs_and_clamp_by_tensors_import_exactly() -> None:
    """`aten.abs` (PhiMoE's router) as `pcg.abs`, gradients sign(x) as torch's; `clamp` by
    tensors as comparisons and selections, the number-bounded one as `pcg.clamp`."""
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'issue42_ops.py'}:sparse_mixer_gate"))
    assert sum(isinstance(op, pcg.AbsOp) for op in module.walk()) == 2
    assert sum(isinstance(op, pcg.CompareTensorsOp) for op in module.walk()) == 2  # the two bounds
    assert sum(isinstance(op, pcg.ClampOp) for op in module.walk()) == 1
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for weight in ("fc", "cap"):
        assert any(c.what.startswith(f"gradient of '{weight}.") for c in checks)


def test_logsumexp_imports_exactly() -> None:
    """`torch.logsumexp` (Granite-SWA's attention sink) through `pcg.log` and `pcg.abs`."""
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'issue42_ops.py'}:attention_sink"))
    assert any(isinstance(op, pcg.LogOp) for op in module.walk())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for weight in ("q", "k", "sink"):
        assert any(c.what.startswith(f"gradient of '{weight}") for c in checks)


def test_norm_of_a_zero_row_has_torchs_gradient() -> None:
    """`vector_norm` of an all-zero row: torch's gradient there is 0; sqrt's would be inf, and
    the gradients nan."""
    _, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'issue42_ops.py'}:zero_row_norm"))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'q.") for c in checks)
