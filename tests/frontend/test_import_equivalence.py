"""The importer's contract: on every zoo model (small config) and on HuggingFace BERT, GPT-2,
Llama (grouped-query attention) and ViT,
the reference interpreter's outputs on the imported graph equal the module's own outputs on the
same inputs and weights (fp32, relative error <= 1e-5 plus fp32's own error against float64 where
the model is ill-conditioned; dropout off on both sides), and so do the
loss and the gradient of every weight (float64, autograd through the interpreter's kernels)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from unityc.dialects import pcg
from unityc.frontend.check import _output_check, check_import
from unityc.interpreter import kernels
from unityc.models import zoo
from unityc.models.spec import ModelError, ModelSpec, load_model
from unityc.runtime.parts import stored_key

HF = ["hf:bert", "hf:gpt2", "hf:llama", "hf:vit"]


def _failures(checks: list) -> list[str]:
    return [
        f"{c.what} {list(c.shape)}: {c.relative_error:.2e} > {c.tolerance:.0e}" for c in checks if not c.ok
    ]


@pytest.mark.parametrize("model", [*zoo(), *HF])
def test_imported_graph_matches_module(model: str) -> None:
    module, checks = check_import(ModelSpec(model, "small"))
    assert checks, "the graph has no outputs"
    assert checks[0].shape == (), "the loss (a scalar) comes first"
    assert not _failures(checks)
    weights = {stored_key(op.attrs()["key"]) for op in module.walk() if isinstance(op, pcg.WeightOp)}
    gradients = [c for c in checks if c.what.startswith("gradient of ")]
    assert len(gradients) == len(weights), "one gradient check per stored weight (parts: their tensor)"
    assert any(c.what == "loss" for c in checks)
    module.verify()
    if model in HF:
        _assert_fused(module)


def _assert_fused(module) -> None:
    """One pcg.attention per layer (the small configs have 2), nothing of attention left apart."""
    ops = list(module.walk())
    assert sum(isinstance(op, pcg.AttentionOp) for op in ops) == 2
    assert not any(isinstance(op, pcg.BatchMatmulOp | pcg.SoftmaxOp) for op in ops)


@pytest.mark.parametrize("model", ["hf:llama", "hf:gpt2"])
def test_sdpa_attention_fuses_exactly(model: str) -> None:
    """attn=sdpa: the SDPA core (a boolean mask from HF) lowers to the eager pattern and fuses."""
    module, checks = check_import(ModelSpec(model, "small", overrides=(("attn", "sdpa"),)))
    assert not _failures(checks)
    _assert_fused(module)


def test_hf_inputs_hold_pad_tokens_the_embedding_skips() -> None:
    """BERT's word embedding has padding_idx = pad_token_id; every other sequence of the example
    inputs ends in pad tokens, and the imported lookup carries the row."""
    loaded = load_model(ModelSpec("hf:bert", "small", batch=16), weights=False)
    ids = loaded.inputs["input_ids"]
    assert (ids[1::2, -4:] == 0).all() and (ids[0::2] != 0).any()
    mask = loaded.inputs["attention_mask"]  # BERT takes one: 0 exactly at the padded tails
    assert (mask[1::2, -4:] == 0).all() and mask[1::2, :-4].all() and mask[0::2].all()
    module, checks = check_import(ModelSpec("hf:bert", "small", batch=16))
    assert not _failures(checks)
    lookups = [op for op in module.walk() if isinstance(op, pcg.EmbeddingOp)]
    assert [op.attrs()["padding_idx"] for op in lookups] == [0, None, None]  # words, token types, positions


def test_attention_mask_is_opt_in_for_config_classes() -> None:
    """Aliases get the mask; `hf:<ConfigClass>` only with mask=True (OPT computes its positions
    as a cumsum of the mask, which does not import)."""
    assert "attention_mask" not in load_model(ModelSpec("hf:BertConfig"), weights=False).inputs
    spec = ModelSpec("hf:BertConfig", overrides=(("mask", "True"),))
    assert "attention_mask" in load_model(spec, weights=False).inputs


def test_check_names_the_weight_whose_gradient_differs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup that forgets padding_idx computes every output right and one gradient wrong:
    the check names that weight (hf:bert --batch 16 passed the forward-only check this way)."""

    def forgetful(task: kernels.Task, ids: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(ids, w)

    monkeypatch.setitem(kernels.KERNELS, pcg.EmbeddingOp, forgetful)
    _, checks = check_import(ModelSpec("hf:bert", "small", batch=16))
    assert _failures(checks) == [
        f"gradient of 'model.bert.embeddings.word_embeddings.weight' [128, 32]: "
        f"{next(c for c in checks if not c.ok).relative_error:.2e} > 1e-06"
    ]
    assert all(c.ok for c in checks if c.what.startswith("output"))


def test_pad_row_in_any_vocabulary_half() -> None:
    """pad_token_id 100 (in the upper half of the 128-row vocabulary) is exact too."""
    _, checks = check_import(ModelSpec("hf:bert", "small", overrides=(("pad", "100"),)))
    assert not _failures(checks)


def test_constants_folded_in_float32_do_not_fail_the_float64_check(tmp_path: Path) -> None:
    """A table computed from a buffer in forward (rotary-style) is folded into a float32
    constant, while the float64 reference computes it in float64: the check allows for that."""
    factory = tmp_path / "table.py"
    factory.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(8, 8)\n"
        "        freq = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))\n"
        "        self.register_buffer('inv_freq', freq, persistent=False)\n"
        "    def forward(self, x):\n"
        "        angles = torch.outer(torch.arange(x.shape[1]).float(), self.inv_freq)\n"
        "        y = self.fc(x) * torch.cat([angles.cos(), angles.sin()], dim=-1)\n"
        "        return (y * y).mean(), y\n"
        "def make():\n"
        "    return M(), {'x': torch.randn(2, 5, 8)}\n"
    )
    _, checks = check_import(ModelSpec(f"{factory}:make"))
    assert not _failures(checks)
    assert max(c.relative_error for c in checks if c.what.startswith("gradient")) > 1e-9  # it is there


def test_output_check_follows_fp32s_own_error() -> None:
    """Two fp32 op orders of an ill-conditioned output (a stock EfficientNet-B0's logits: 1.3e-4
    apart) each err against float64 by about as much as they differ: the forward check allows
    1e-5 plus that error, element by element; an output 1 % off still fails, and so does the
    same difference where no float64 output is at hand."""
    generator = torch.Generator().manual_seed(0)
    exact = torch.randn(4, 10, generator=generator, dtype=torch.float64)
    rounding = 1e-4 * torch.randn(4, 10, generator=generator, dtype=torch.float64)
    module_fp32, graph_fp32 = (exact + rounding).float(), (exact - rounding).float()
    widened = _output_check("output 1", graph_fp32, module_fp32, exact)
    assert widened.ok and widened.relative_error > 1e-5 and widened.within
    assert not _output_check("output 1", module_fp32 * 1.01, module_fp32, exact).ok
    assert not _output_check("output 1", graph_fp32, module_fp32, None).ok


def test_model_without_parameters_checks_its_outputs(tmp_path: Path) -> None:
    factory = tmp_path / "plain.py"
    factory.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = torch.relu(x)\n"
        "        return (y * y).mean(), y\n"
        "def make():\n"
        "    return M(), {'x': torch.randn(4, 8)}\n"
    )
    _, checks = check_import(ModelSpec(f"{factory}:make"))
    assert [c.what for c in checks] == ["output 0", "output 1"]
    assert not _failures(checks)


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
    assert not _failures(checks)
    inputs = [op for op in module.walk() if isinstance(op, pcg.InputOp)]
    assert all(op.result.type.shape[0] == 3 for op in inputs)
    linears = [op for op in module.walk() if isinstance(op, pcg.LinearOp)]
    assert len(linears) == 4  # two towers of two layers


def test_llama_reads_each_kv_head_from_its_query_group() -> None:
    """hf:llama has 4 query heads and 2 KV heads: the importer's repeat_kv (K and V broadcast
    from 2 heads to 4) fuses into one grouped-query `pcg.attention` per layer (`kv_heads 2`:
    query head h reads KV head h // 2), whose K and V projections have 2 heads' rows; the import
    is exact (loss and every gradient)."""
    loaded = load_model(ModelSpec("hf:llama"), weights=False)
    config = loaded.module.model.config
    assert (config.num_attention_heads, config.num_key_value_heads) == (4, 2)
    module, checks = check_import(ModelSpec("hf:llama"))
    assert not _failures(checks)
    attentions = [op for op in module.walk() if isinstance(op, pcg.AttentionOp)]
    assert len(attentions) == 2  # one per layer
    for op in attentions:
        attrs = op.attrs()
        assert (attrs["heads"], attrs["kv_heads"]) == (4, 2)
        assert op.wk.type.shape[0] == op.wq.type.shape[0] // 2  # K projects to 2 heads' rows


def test_vit_classifies_images_with_a_cls_token() -> None:
    """hf:vit: 32x32 images of 8x8 patches (a stride-8 convolution), the CLS token broadcast
    over the batch and put in front of the 16 patches, one label per image."""
    loaded = load_model(ModelSpec("hf:vit"), weights=False)
    assert loaded.inputs["pixel_values"].shape == (2, 3, 32, 32)
    assert loaded.inputs["labels"].shape == (2,)
    module, checks = check_import(ModelSpec("hf:vit"))
    assert not _failures(checks)
    (conv,) = [op for op in module.walk() if isinstance(op, pcg.Conv2dOp)]
    assert list(conv.attrs()["stride"]) == [8, 8]
    (concat,) = [op for op in module.walk() if isinstance(op, pcg.ConcatOp)]
    assert [tuple(o.type.shape) for o in concat.operands] == [(2, 1, 32), (2, 16, 32)]


def test_kv_heads_follow_the_heads_unless_set() -> None:
    """`hf:<ConfigClass>` with KV heads has one per query head unless `kv_heads` is given;
    hf:llama keeps its 2 KV heads; an image model has no text settings."""

    def heads(model: str, *overrides: tuple[str, str]) -> tuple[int, int]:
        config = load_model(ModelSpec(model, overrides=overrides), weights=False).module.model.config
        return config.num_attention_heads, config.num_key_value_heads

    assert heads("hf:MistralConfig", ("heads", "8")) == (8, 8)
    assert heads("hf:MistralConfig", ("kv_heads", "1")) == (4, 1)
    assert heads("hf:llama", ("heads", "8")) == (8, 2)
    with pytest.raises(ModelError, match="'hf:vit' has no setting 'seq'"):
        load_model(ModelSpec("hf:vit", overrides=(("seq", "64"),)), weights=False)
