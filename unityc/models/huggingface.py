"""`hf:bert`, `hf:gpt2`, `hf:llama`, `hf:vit`, `hf:wav2vec2`, `hf:<transformers config class>`: a
HuggingFace model from a config, with random weights and no download, wrapped so that its forward returns the
training loss."""

from __future__ import annotations

import inspect
import math
import warnings
from typing import Any

import torch
from torch import nn

from unityc.models.spec import ModelError, ModelSpec, config_with_overrides

# Alias -> (config class, model class). Language-model heads, so the loss covers every token;
# ViT classifies images (pixel_values, one label per image), wav2vec 2.0 audio clips (input_values,
# one label per clip).
ALIASES = {
    "bert": ("BertConfig", "BertForMaskedLM"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "vit": ("ViTConfig", "ViTForImageClassification"),
    "wav2vec2": ("Wav2Vec2Config", "Wav2Vec2ForSequenceClassification"),
}

# Settings every config gets, as (name in unityc, names a transformers config may use).
SMALL = {"hidden": 32, "layers": 2, "heads": 4, "ffn": 64, "vocab": 128, "seq": 16}
PAPER = {"seq": 512}
# What the small configs of some aliases set beyond SMALL: grouped-query attention (4 query
# heads read 2 KV heads) for Llama; 32x32 images of 8x8 patches and 10 classes for ViT.
ALIAS_SMALL: dict[str, dict[str, Any]] = {
    "llama": {"kv_heads": 2, "pad": 0},
    "vit": {"image": 32, "patch": 8, "classes": 10},
}
CONFIG_NAMES = {
    "hidden": ("hidden_size", "n_embd"),
    "layers": ("num_hidden_layers", "n_layer", "num_decoder_layers"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads",),
    "ffn": ("intermediate_size", "n_inner", "d_ff"),
    "vocab": ("vocab_size",),
    "pad": ("pad_token_id",),
    "image": ("image_size",),
    "patch": ("patch_size",),
    "classes": ("num_labels",),
    "experts": ("num_local_experts", "num_experts", "n_routed_experts"),
    "top_k": ("num_experts_per_tok",),
    "expert_ffn": ("moe_intermediate_size",),
    "shared_ffn": ("shared_expert_intermediate_size",),
    "expert_groups": ("n_group",),
    "group_k": ("topk_group",),
    "dense_layers": ("first_k_dense_replace",),
    "q_rank": ("q_lora_rank",),
    "kv_rank": ("kv_lora_rank",),
    "rope_dim": ("qk_rope_head_dim",),
    "nope_dim": ("qk_nope_head_dim",),
    "v_dim": ("v_head_dim",),
}
MOE_SMALL = {
    "experts": 4,
    "top_k": 2,
    "expert_ffn": 32,
    "shared_ffn": 32,
    "expert_groups": 2,
    "group_k": 1,
    "dense_layers": 1,
    "q_rank": 16,
    "kv_rank": 16,
    "rope_dim": 4,
    "nope_dim": 4,
    "v_dim": 8,
}
"""What the small config of a mixture-of-experts model sets, of the settings its config has: 4
experts, top-2 (DeepSeek-V3: 2 groups of which the best 1 is a candidate, the first layer dense,
small multi-head latent attention ranks and head dims)."""
BATCH = {"small": 2, "paper": 4}
SIZES = ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "seq", "image", "patch")
"""The settings that size a model: setting some of them on the small config keeps the others small."""


class SmallDefaultsWarning(UserWarning):
    """An `hf:` import set some sizes and took the others from the small config."""


def small_defaults(sizes: dict[str, Any], overrides: tuple[tuple[str, str], ...]) -> list[str]:
    """`name=value` of each size of the small config `sizes` kept while `overrides` set others
    (empty when they set none)."""
    given = {k for k, _ in overrides}
    if not given & set(SIZES):
        return []
    return [f"{k}={sizes[k]}" for k in SIZES if k in sizes and k not in given]


def build_hf(spec: ModelSpec, generator: torch.Generator) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    try:
        import transformers
    except ImportError:
        raise ModelError("hf: models need the 'transformers' package") from None
    name = spec.model.removeprefix("hf:")
    config_name, model_name = ALIASES.get(name, (name, ""))
    config_cls = getattr(transformers, config_name, None)
    if config_cls is None or not isinstance(config_cls, type):
        known = ", ".join(ALIASES)
        raise ModelError(f"'{spec.model}': not an alias ({known}) nor a transformers config class")
    if spec.config not in ("small", "paper"):
        raise ModelError(f"'{spec.model}' has no config '{spec.config}' (small, paper)")
    config = config_cls()
    # The example inputs hold an attention mask (0 at the padded tails) where the model takes
    # one; by default for the aliases only: some models compute more from it than the importer
    # lowers (OPT's positions are a cumsum of the mask), and they imported without it.
    sizes = {**SMALL, **ALIAS_SMALL.get(name, {})} if spec.config == "small" else PAPER
    if spec.config == "small":
        current = _current(config)
        # a router picks top_k of its experts: a config that leaves it unset (DeepSeek-V2's
        # num_experts_per_tok=None, which torch.topk refuses) gets the small one too
        moe = {"top_k"} if "experts" in current else set()
        sizes |= {k: v for k, v in MOE_SMALL.items() if k in current or k in moe}
    # an encoder-decoder (T5, BART) trains on its own `labels=` loss: its decoder reads the
    # labels shifted right (T5's `_shift_right`), so there is no loss without them
    seq2seq = bool(getattr(config, "is_encoder_decoder", False))
    defaults = {
        **_current(config),
        **sizes,
        "mask": name in ALIASES,
        "attn": "eager",
        "own_loss": seq2seq,
        "dropout": 0.1,
    }
    images = hasattr(config, "image_size") and not hasattr(config, "vocab_size")
    # a speech encoder (wav2vec 2.0, HuBERT, WavLM): raw audio through a strided conv stack, `seq`
    # frames of it; its vocab_size is a CTC head's, which the clip classifier does not use
    audio = hasattr(config, "conv_stride") and hasattr(config, "num_conv_pos_embeddings")
    text_only = ("vocab", "mask", "own_loss") if images or audio else ()
    for name in (*text_only, "seq") if images else text_only:
        defaults.pop(name, None)
    settings = config_with_overrides(defaults, spec.overrides, f"'{spec.model}'")
    kept = small_defaults(sizes, spec.overrides) if spec.config == "small" else []
    if kept:
        warnings.warn(
            SmallDefaultsWarning(
                f"'{spec.model}': {' '.join(f'{k}={v}' for k, v in spec.overrides)} set; {', '.join(kept)} "
                "are the small config's (set them too, or --config paper for the config's own)"
            ),
            stacklevel=2,
        )
    if "kv_heads" in settings and "kv_heads" not in sizes and "kv_heads" not in dict(spec.overrides):
        settings["kv_heads"] = settings["heads"]  # one KV head per query head unless set
    _apply(config, settings)
    if audio:
        _apply_audio(config, settings, spec.config == "small")
    if seq2seq and getattr(config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = config.pad_token_id or 0  # what T5's checkpoints set
    # eager: the bmm/softmax pattern the importer fuses into one op; sdpa lowers to the same
    if settings["attn"] not in ("eager", "sdpa"):
        raise ModelError(f"'{spec.model}': attn={settings['attn']}: use eager or sdpa")
    config._attn_implementation = settings["attn"]
    # MoE experts as the model defines them (the per-expert loop): its grouped_mm kernel has no
    # float64, which --check's gradients use; the importer exports them as one op either way
    config._experts_implementation = "eager"
    for flag in ("use_cache", "tie_word_embeddings"):
        if hasattr(config, flag):
            setattr(config, flag, False)
    for p in (
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "resid_pdrop",
        "embd_pdrop",
        "attn_pdrop",
    ):
        if hasattr(config, p):
            setattr(config, p, settings["dropout"])
    model = _model_for(transformers, config, model_name, spec.model)
    batch = spec.batch or BATCH[spec.config]
    if images:
        return _ImageLossFirst(model), image_inputs(config, batch, generator)
    if audio:
        return _AudioLossFirst(model), audio_inputs(config, batch, settings["seq"], generator)
    seq = settings["seq"]
    vocab = settings.get("vocab", getattr(config, "vocab_size", 2))
    wrapped = _LossFirst(model, settings["own_loss"])
    mask = settings["mask"] and wrapped.takes_mask
    return wrapped, example_inputs(config, batch, seq, vocab, mask, generator, settings["own_loss"])


def example_inputs(
    config: Any,
    batch: int,
    seq: int,
    vocab: int,
    mask: bool,
    generator: torch.Generator,
    ignore_padding: bool = False,
) -> dict[str, torch.Tensor]:
    """Random token ids and labels in which every other sequence ends in padding (the last
    quarter of it, at least one token): pad tokens (the config's `pad_token_id`, when it is a
    row of the vocabulary) and, if the model takes one, an attention mask that is 0 there, so
    that checks see the padding path (embedding `padding_idx`, masked attention). With
    `ignore_padding` the labels there are -100, as Hugging Face's collators make them for the
    model's own loss."""
    ids = torch.randint(0, vocab, (batch, seq), generator=generator)
    labels = torch.randint(0, vocab, (batch, seq), generator=generator)
    padded = torch.zeros(batch, seq, dtype=torch.bool)
    padded[1::2, seq - max(1, seq // 4) :] = True
    pad = getattr(config, "pad_token_id", None)
    if isinstance(pad, int) and 0 <= pad < vocab:
        ids = ids.masked_fill(padded, pad)
    if ignore_padding:
        labels = labels.masked_fill(padded, -100)
    inputs = {"input_ids": ids, "labels": labels}
    if mask:
        inputs["attention_mask"] = (~padded).long()
    return inputs


def image_inputs(config: Any, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random images (the config's channels and size) and one class label per image."""
    size = config.image_size
    pixels = torch.randn(batch, config.num_channels, size, size, generator=generator)
    labels = torch.randint(0, config.num_labels, (batch,), generator=generator)
    return {"pixel_values": pixels, "labels": labels}


def audio_inputs(config: Any, batch: int, frames: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random clips of `frames` encoder frames (the conv stack's stride product of samples each)
    and one class label per clip."""
    samples = frames * math.prod(config.conv_stride)
    clips = torch.randn(batch, samples, generator=generator)
    labels = torch.randint(0, config.num_labels, (batch,), generator=generator)
    return {"input_values": clips, "labels": labels}


def _apply_audio(config: Any, settings: dict[str, Any], small: bool) -> None:
    """A speech encoder's own settings: no layer drop and no SpecAugment masks (random choices
    made in Python, which an exported graph would freeze), its dropouts as `dropout`; at the
    small config the conv stack as wide as `hidden` and the positional conv at most 16 wide."""
    for name in ("layerdrop", "mask_time_prob", "mask_feature_prob"):
        if hasattr(config, name):
            setattr(config, name, 0.0)
    for part in ("hidden", "activation", "attention", "feat_proj", "final"):
        if hasattr(config, f"{part}_dropout"):
            setattr(config, f"{part}_dropout", settings["dropout"])
    if small:
        config.conv_dim = (settings["hidden"],) * len(config.conv_dim)
        config.num_conv_pos_embeddings = min(config.num_conv_pos_embeddings, 16)
        groups = config.num_conv_pos_embedding_groups
        config.num_conv_pos_embedding_groups = math.gcd(groups, settings["hidden"])


def _current(config: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for ours, names in CONFIG_NAMES.items():
        for n in names:
            if getattr(config, n, None) is not None:
                values[ours] = getattr(config, n)
                break
    return values


def _apply(config: Any, settings: dict[str, Any]) -> None:
    for ours, value in settings.items():
        for n in CONFIG_NAMES.get(ours, ()):
            if hasattr(config, n):
                setattr(config, n, value)
    for n in ("max_position_embeddings", "n_positions"):
        if hasattr(config, n):
            setattr(config, n, max(getattr(config, n) or 0, settings["seq"]))
    derived = isinstance(getattr(type(config), "head_dim", None), property)  # Falcon's: hidden / heads
    if getattr(config, "head_dim", None) and not derived and "hidden" in settings and "heads" in settings:
        config.head_dim = settings["hidden"] // settings["heads"]  # Llama's default is 128
    if getattr(config, "qk_rope_head_dim", None):  # DeepSeek's latent attention: rotary on the rope part
        config.head_dim = config.qk_rope_head_dim
        config.qk_head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
    if getattr(config, "rotary_dim", None) and "hidden" in settings and "heads" in settings:
        config.rotary_dim = min(config.rotary_dim, settings["hidden"] // settings["heads"])  # GPT-J's: 64


def _model_for(transformers: Any, config: Any, model_name: str, what: str) -> nn.Module:
    try:
        if model_name:
            return getattr(transformers, model_name)(config)
        for auto in (
            "AutoModelForCausalLM",
            "AutoModelForMaskedLM",
            "AutoModelForSeq2SeqLM",
            "AutoModelForImageClassification",
            "AutoModelForAudioClassification",
        ):
            try:
                return getattr(transformers, auto).from_config(config)
            except ValueError:
                continue
    except Exception as e:
        raise ModelError(f"'{what}': building the model failed: {type(e).__name__}: {e}") from None
    raise ModelError(
        f"'{what}': no causal, masked or sequence-to-sequence language-model or "
        f"image-classification head for {type(config).__name__}"
    )


class _LossFirst(nn.Module):
    """Calls the HF model and returns (loss, logits). By default the loss is computed here:
    cross-entropy over every token, with the labels shifted by one for causal models. With
    `own_loss` it is the model's own `labels=` loss (Hugging Face pads the shifted labels with
    ignore_index -100 and averages over the kept tokens; the example labels are -100 at the
    padding, as HF's collators make them)."""

    def __init__(self, model: nn.Module, own_loss: bool = False) -> None:
        super().__init__()
        self.model = model
        self.own_loss = own_loss
        self.causal = "CausalLM" in type(model).__name__ or "LMHead" in type(model).__name__
        self.takes_mask = "attention_mask" in inspect.signature(model.forward).parameters

    def forward(
        self, input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.own_loss:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
            return out.loss, out.logits
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        scores, targets = (logits[:, :-1], labels[:, 1:]) if self.causal else (logits, labels)
        loss = nn.functional.cross_entropy(scores.reshape(-1, scores.shape[-1]), targets.reshape(-1))
        return loss, logits


class _AudioLossFirst(nn.Module):
    """Calls an HF audio classifier and returns (loss, logits): cross-entropy of the logits
    against one label per clip."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_values: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(input_values=input_values).logits
        return nn.functional.cross_entropy(logits, labels), logits


class _ImageLossFirst(nn.Module):
    """Calls an HF image classifier and returns (loss, logits): cross-entropy of the logits
    against one label per image."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(pixel_values=pixel_values).logits
        return nn.functional.cross_entropy(logits, labels), logits
