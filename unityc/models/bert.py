"""BERT-Large with a masked-language-modelling head, in plain torch.

The encoder is HuggingFace's `BertModel` (post-LayerNorm, Devlin et al. 2019): word + position
(+ token type 0) embeddings, LayerNorm (eps 1e-12) and dropout, then `layers` blocks of multi-head
self-attention and a GELU feed-forward network, each followed by dropout, a residual add and
LayerNorm. The head is `BertForMaskedLM`'s: dense, GELU, LayerNorm, and a decoder to the vocabulary
whose weight is tied to the word embeddings (so the paper config has HF's 335,174,458 parameters).
The loss is cross-entropy over every token, as in language modelling on WikiText-2 (the paper's
task). There is no attention mask and no pooler (the MLM head does not use it).

Self-attention is written in one fixed eager pattern (three projections, view/permute to heads,
scaled `matmul`, softmax, dropout, `matmul`, permute back, output projection) so that the importer
can recognise it as a single multi-head-attention op; keep that shape when editing.

Configuration keys: `vocab_size`, `hidden`, `layers`, `heads`, `ffn` (feed-forward width),
`seq_len` (input length), `max_positions` (position table size, at least `seq_len`),
`type_vocab_size` (0 drops the token-type embedding), `dropout`, `layer_norm_eps`,
`tie_word_embeddings` (1: the decoder shares the word-embedding weight, 0: its own weight).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from unityc.models import Config, ZooModel


def _index_device() -> torch.device | None:
    """Where constant index buffers live: the CPU for a meta-device build, else the default device.

    On a meta build (how the importer builds paper configs) a meta buffer would carry no values;
    keeping the indices on the CPU lets `torch.export` record them as real constants to fold.
    """
    return torch.device("cpu") if torch.get_default_device().type == "meta" else None


class SelfAttention(nn.Module):
    """Multi-head self-attention without a mask, in the pattern the importer matches."""

    def __init__(self, hidden: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.output = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, S, E = x.shape
        H, D = self.heads, self.head_dim
        q = self.query(x)
        k = self.key(x)
        v = self.value(x)
        q = q.view(B, S, H, D).permute(0, 2, 1, 3)
        k = k.view(B, S, H, D).permute(0, 2, 1, 3)
        v = v.view(B, S, H, D).permute(0, 2, 1, 3)
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(D))
        probs = torch.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(B, S, E)
        return self.output(ctx)


class EncoderLayer(nn.Module):
    """Post-LN transformer block: attention, add & norm, GELU feed-forward, add & norm."""

    def __init__(self, hidden: int, heads: int, ffn: int, dropout: float, eps: float) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads, dropout)
        self.attention_dropout = nn.Dropout(dropout)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, ffn)
        self.activation = nn.GELU()
        self.ffn_output = nn.Linear(ffn, hidden)
        self.ffn_dropout = nn.Dropout(dropout)
        self.ffn_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention_dropout(self.attention(x)))
        h = self.ffn_output(self.activation(self.intermediate(x)))
        return self.ffn_norm(x + self.ffn_dropout(h))


class BertMLM(nn.Module):
    """Embeddings, encoder stack and MLM head; returns (token cross-entropy, logits [B, S, V])."""

    position_ids: torch.Tensor  # buffers
    token_type_ids: torch.Tensor

    def __init__(
        self,
        vocab_size: int,
        hidden: int,
        layers: int,
        heads: int,
        ffn: int,
        max_positions: int,
        type_vocab_size: int,
        dropout: float,
        eps: float,
        tie_word_embeddings: bool,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        # Non-persistent index buffers, sliced to the input length in forward: the importer folds
        # them into constants (HF keeps `position_ids` and `token_type_ids` buffers the same way).
        self.register_buffer(
            "position_ids", torch.arange(max_positions, device=_index_device()), persistent=False
        )
        self.token_type_embeddings: nn.Embedding | None = None
        if type_vocab_size > 0:
            # Inputs carry no segment ids, so every token is segment 0, as HF does without them.
            self.token_type_embeddings = nn.Embedding(type_vocab_size, hidden)
            self.register_buffer(
                "token_type_ids",
                torch.zeros(max_positions, dtype=torch.long, device=_index_device()),
                persistent=False,
            )
        self.embedding_norm = nn.LayerNorm(hidden, eps=eps)
        self.embedding_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, dropout, eps) for _ in range(layers))
        self.head_dense = nn.Linear(hidden, hidden)
        self.head_activation = nn.GELU()
        self.head_norm = nn.LayerNorm(hidden, eps=eps)
        self.decoder = nn.Linear(hidden, vocab_size)
        if tie_word_embeddings:
            # As BertForMaskedLM. `torch.export` lifts the tied weight as two parameter placeholders
            # (`word_embeddings.weight`, `decoder.weight`) whose state_dict entries are one tensor.
            self.decoder.weight = self.word_embeddings.weight

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, S = input_ids.shape
        x = self.word_embeddings(input_ids) + self.position_embeddings(self.position_ids[:S])
        if self.token_type_embeddings is not None:
            x = x + self.token_type_embeddings(self.token_type_ids[:S])
        x = self.embedding_dropout(self.embedding_norm(x))
        for layer in self.layers:
            x = layer(x)
        h = self.head_norm(self.head_activation(self.head_dense(x)))
        logits = self.decoder(h)
        loss = F.cross_entropy(logits.reshape(B * S, self.vocab_size), labels.reshape(B * S))
        return loss, logits


def build(config: Config) -> nn.Module:
    """BERT with an MLM head for `config`, in training mode (dropout active)."""
    hidden, heads = int(config["hidden"]), int(config["heads"])
    if hidden % heads != 0:
        raise ValueError(f"bert: hidden {hidden} is not a multiple of heads {heads}")
    if int(config["seq_len"]) > int(config["max_positions"]):
        raise ValueError("bert: `seq_len` exceeds `max_positions`")
    return BertMLM(
        vocab_size=int(config["vocab_size"]),
        hidden=hidden,
        layers=int(config["layers"]),
        heads=heads,
        ffn=int(config["ffn"]),
        max_positions=int(config["max_positions"]),
        type_vocab_size=int(config["type_vocab_size"]),
        dropout=float(config["dropout"]),
        eps=float(config["layer_norm_eps"]),
        tie_word_embeddings=bool(int(config["tie_word_embeddings"])),
    )


def inputs(config: Config, batch: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Random token ids and target ids, both `[batch, seq_len]` int64 below `vocab_size`."""
    shape = (batch, int(config["seq_len"]))
    vocab = int(config["vocab_size"])
    return {
        "input_ids": torch.randint(0, vocab, shape, generator=generator),
        "labels": torch.randint(0, vocab, shape, generator=generator),
    }


MODEL = ZooModel(
    name="bert",
    summary="BERT-Large encoder (24 x 1024, 16 heads, post-LN) with a tied MLM head, token cross-entropy",
    build=build,
    inputs=inputs,
    configs={
        "small": {
            "vocab_size": 128,
            "hidden": 32,
            "layers": 2,
            "heads": 4,
            "ffn": 64,
            "seq_len": 16,
            "max_positions": 32,
            "type_vocab_size": 2,
            "dropout": 0.1,
            "layer_norm_eps": 1e-12,
            "tie_word_embeddings": 1,
        },
        "paper": {
            "vocab_size": 30522,
            "hidden": 1024,
            "layers": 24,
            "heads": 16,
            "ffn": 4096,
            "seq_len": 512,
            "max_positions": 512,
            "type_vocab_size": 2,
            "dropout": 0.1,
            "layer_norm_eps": 1e-12,
            "tie_word_embeddings": 1,
        },
    },
    batch={"small": 2, "paper": 4},
    source="HuggingFace bert-large-uncased (BertForMaskedLM); FlexFlow examples/cpp/Transformer sizes",
)
