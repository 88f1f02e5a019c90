"""A small Llama (RMSNorm, rotary embeddings, SwiGLU MLP, one KV head per query head) from a
`transformers` config with random weights, for `unityc-import tests/search/Inputs/llama_like.py:make`
(`hf:LlamaConfig` cannot set the KV heads or the head dim yet)."""

from __future__ import annotations

import torch
import transformers

from unityc.models.huggingface import _LossFirst


def make(
    hidden: int = 32,
    heads: int = 4,
    layers: int = 2,
    ffn: int = 64,
    vocab: int = 128,
    seq: int = 16,
    batch: int = 2,
) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    config = transformers.LlamaConfig(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=hidden // heads,
        num_hidden_layers=layers,
        intermediate_size=ffn,
        vocab_size=vocab,
        max_position_embeddings=seq,
        use_cache=False,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "eager"
    generator = torch.Generator().manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    ids = torch.randint(0, vocab, (batch, seq), generator=generator)
    labels = torch.randint(0, vocab, (batch, seq), generator=generator)
    return _LossFirst(model), {"input_ids": ids, "labels": labels}
