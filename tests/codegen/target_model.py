"""A tiny GPT-2 (Hugging Face, from a config) whose inputs are named `(ids, target)`, as many
hf-style training factories name them: `target` is also a keyword of torch's pipeline schedules
(`schedule.step(target=...)`), so a pipelined program that passed its inputs as keywords crashed
on every rank with a TypeError."""

from __future__ import annotations

import torch
import transformers
from torch import nn

VOCAB, WIDTH, HEADS, LAYERS, SEQ = 64, 16, 2, 2, 8


class TargetLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = transformers.GPT2Config(
            vocab_size=VOCAB, n_embd=WIDTH, n_head=HEADS, n_layer=LAYERS, n_positions=SEQ, use_cache=False
        )
        config._attn_implementation = "eager"
        self.model = transformers.GPT2LMHeadModel(config)

    def forward(self, ids: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(input_ids=ids).logits
        loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), target[:, 1:].reshape(-1))
        return loss, logits


def make(batch: int = 4) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (batch, SEQ), generator=generator)
    target = torch.randint(0, VOCAB, (batch, SEQ), generator=generator)
    return TargetLM(), {"ids": ids, "target": target}
