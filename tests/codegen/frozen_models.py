"""Models that freeze weights the way people fine-tune (issue 42), from tiny Hugging Face configs:

* `lora_llama`: a Llama whose every weight is frozen (`requires_grad=False`) but LoRA adapters
  (rank 4, plain `nn.Linear`s, no peft) beside the query and value projections;
* `frozen_bert`: a BERT encoder frozen under a trainable classification head;
* `whisper_encoder`: Whisper's encoder (the model itself freezes its sinusoidal
  `embed_positions`) under a trainable classification head.

Each factory returns (module, example inputs) and its forward returns the loss first."""

from __future__ import annotations

import torch
import transformers
from torch import nn

VOCAB, WIDTH, HEADS, FFN, SEQ, CLASSES, RANK = 64, 16, 2, 32, 8, 4, 4


class LoRA(nn.Module):
    """`base(x) + up(down(x)) * scale` with `base` frozen (LoRA, Hu et al. 2021)."""

    def __init__(self, base: nn.Linear, rank: int = RANK, alpha: float = 8.0) -> None:
        super().__init__()
        self.base = base
        self.down = nn.Linear(base.in_features, rank, bias=False)
        self.up = nn.Linear(rank, base.out_features, bias=False)
        nn.init.normal_(self.up.weight, std=0.02)  # not zero: the check sees both adapters' gradients
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.up(self.down(x)) * self.scale


class LoraLlama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=WIDTH * 2, intermediate_size=FFN, num_hidden_layers=2,
            num_attention_heads=HEADS * 2, num_key_value_heads=HEADS, max_position_embeddings=2 * SEQ,
            use_cache=False, pad_token_id=0,
        )  # fmt: skip
        config._attn_implementation = "eager"
        self.model = transformers.LlamaForCausalLM(config)
        self.model.requires_grad_(False)
        for layer in self.model.model.layers:
            layer.self_attn.q_proj = LoRA(layer.self_attn.q_proj)
            layer.self_attn.v_proj = LoRA(layer.self_attn.v_proj)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(input_ids=input_ids).logits
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1)), logits


class FrozenBert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.BertConfig(
            vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=HEADS,
            intermediate_size=FFN, max_position_embeddings=2 * SEQ, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )  # fmt: skip
        config._attn_implementation = "eager"
        self.body = transformers.BertModel(config, add_pooling_layer=False)
        self.body.requires_grad_(False)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.body(input_ids=input_ids).last_hidden_state
        logits = self.head(hidden[:, 0])
        return nn.functional.cross_entropy(logits, labels), logits


class WhisperClassifier(nn.Module):
    MELS, POSITIONS = 8, 8

    def __init__(self) -> None:
        super().__init__()
        config = transformers.WhisperConfig(
            num_mel_bins=self.MELS, d_model=WIDTH, encoder_layers=1, encoder_attention_heads=HEADS,
            encoder_ffn_dim=FFN, max_source_positions=self.POSITIONS, dropout=0.0,
            decoder_layers=1, decoder_attention_heads=HEADS, decoder_ffn_dim=FFN,
        )  # fmt: skip
        config._attn_implementation = "eager"
        self.body = transformers.WhisperModel(config).encoder  # freezes its embed_positions
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(
        self, input_features: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.body(input_features=input_features).last_hidden_state
        logits = self.head(hidden.mean(1))
        return nn.functional.cross_entropy(logits, labels), logits


def _tokens(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, VOCAB, (batch, SEQ), generator=generator)
    return ids, torch.randint(1, VOCAB, (batch, SEQ), generator=generator)


def lora_llama(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    ids, labels = _tokens(batch)
    return LoraLlama(), {"input_ids": ids, "labels": labels}


def frozen_bert(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    ids, _ = _tokens(batch)
    labels = torch.randint(0, CLASSES, (batch,), generator=torch.Generator().manual_seed(1))
    return FrozenBert(), {"input_ids": ids, "labels": labels}


def whisper_encoder(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    frames = 2 * WhisperClassifier.POSITIONS
    features = torch.randn(batch, WhisperClassifier.MELS, frames, generator=generator)
    labels = torch.randint(0, CLASSES, (batch,), generator=generator)
    return WhisperClassifier(), {"input_features": features, "labels": labels}
