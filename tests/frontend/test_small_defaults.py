"""Small configs announce themselves (issue 42): an `hf:` import that sets some sizes and takes
the others from the small config says which (`unityc-import hf:GPT2Config hidden=12288 layers=96
heads=96` kept the small config's 64-wide MLP without a word)."""

from __future__ import annotations

import warnings

import pytest

from unityc.models.huggingface import SMALL, SmallDefaultsWarning, small_defaults
from unityc.models.spec import ModelSpec, load_model


def test_the_sizes_not_set_are_named() -> None:
    set_ = (("hidden", "12288"), ("layers", "96"), ("heads", "96"))
    assert small_defaults(SMALL, set_) == ["ffn=64", "vocab=128", "seq=16"]
    assert small_defaults(SMALL, (("dropout", "0.0"),)) == []  # no size set: the small config whole
    assert small_defaults(SMALL, ()) == []


def test_a_partly_sized_import_warns_and_a_whole_one_does_not() -> None:
    spec = ModelSpec("hf:gpt2", overrides=(("hidden", "64"), ("heads", "4")))
    with pytest.warns(
        SmallDefaultsWarning, match=r"layers=2, ffn=64, vocab=128, seq=16 are the small config's"
    ):
        load_model(spec, weights=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SmallDefaultsWarning)
        load_model(ModelSpec("hf:gpt2"), weights=False)
        load_model(ModelSpec("hf:gpt2", "paper", overrides=(("layers", "2"),)), weights=False)


def test_a_router_that_leaves_top_k_unset_gets_the_small_one() -> None:
    """DeepSeek-V2's config has num_experts_per_tok=None (torch.topk refuses it, so plain torch
    could not train the small config and the sweep skipped it): the small config's top-2."""
    loaded = load_model(ModelSpec("hf:DeepseekV2Config"), weights=False)
    configs = {id(m.config): m.config for m in loaded.module.modules() if hasattr(m, "config")}
    assert [c.num_experts_per_tok for c in configs.values()] == [2]
