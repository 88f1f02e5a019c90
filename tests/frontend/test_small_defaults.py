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
