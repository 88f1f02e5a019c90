"""A tiny Hugging Face BART (`BartForConditionalGeneration` from a config: encoder, decoder with
cross-attention, one token table `model.shared` read by the encoder's and the decoder's embedding
and by the LM head), trained on `(input_ids, decoder_input_ids, labels)`. The decoder inputs are
the labels shifted right by the caller, as Hugging Face's collators make them (the model's own
`shift_tokens_right` writes into a slice, which the importer does not lower yet).

Two things made its programs fail: the encoder's position ids fold into a constant of the full
batch size (8 x 16), so `gpipe` refused it and the zero baseline gathers the batch before adding
them; then the loss (and the decoder's tail) is held in copies on both ranks, and the ZeRO-3
weights read there got their reduce-scatter only on the rank that seeded the loss: a deadlock."""

from __future__ import annotations

import torch
import transformers
from torch import nn

VOCAB, WIDTH, HEADS, FFN, SEQ = 64, 16, 2, 32, 8


class Seq2Seq(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.BartConfig(
            vocab_size=VOCAB, d_model=WIDTH, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=FFN,
            decoder_ffn_dim=FFN, max_position_embeddings=2 * SEQ, use_cache=False,
        )  # fmt: skip
        config._attn_implementation = "eager"
        self.model = transformers.BartForConditionalGeneration(config)

    def forward(
        self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids).logits
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1)), logits


def make(batch: int = 8) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    ids = torch.randint(3, VOCAB, (batch, SEQ), generator=generator)
    labels = torch.randint(3, VOCAB, (batch, SEQ), generator=generator)
    decoder_ids = torch.cat([torch.full((batch, 1), 2), labels[:, :-1]], 1)  # 2: decoder_start_token_id
    return Seq2Seq(), {"input_ids": ids, "decoder_input_ids": decoder_ids, "labels": labels}
