"""A character-level GPT-2 trained on the text of Python's standard library (a corpus every
machine with Python has). Used by README's training example and by `make test`.

    unityc-import examples/charlm/charlm.py:make -o charlm.mlir
    unityc-opt charlm.mlir --unity-search --machine cpu:2 -o plan.mlir
    unityc-opt plan.mlir -t torch -o train.py
    torchrun --standalone --nproc_per_node 2 train.py --data examples/charlm/charlm.py:batches \\
        --optimizer adamw --optimizer-args 'weight_decay=0.1' --lr 3e-3 --clip-grad-norm 1.0 \\
        --lr-schedule cosine --lr-warmup-steps 5 --steps 60 --log-every 10 --save ckpt

`make` returns the model (a `transformers.GPT2LMHeadModel` whose forward returns the training
loss first, so its state_dict keys are Hugging Face's) and an example batch. `batches` yields
batches of `batch` windows of `seq + 1` characters (ASCII; other bytes become '?'), at offsets
drawn from a generator seeded by the step: deterministic, and resumable at any step (`start`).
Given `pieces` (the runtime passes them), it reads only the rows this rank holds.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import GPT2Config, GPT2LMHeadModel

VOCAB = 128
FILES = 40
"""The corpus: the first FILES modules (sorted by name) directly in the stdlib directory."""


def config(seq: int = 64, hidden: int = 64, layers: int = 2, heads: int = 4) -> GPT2Config:
    c = GPT2Config(
        vocab_size=VOCAB, n_positions=seq, n_embd=hidden, n_layer=layers, n_head=heads, n_inner=4 * hidden
    )
    c.bos_token_id = c.eos_token_id = 0
    c.use_cache = False
    c.tie_word_embeddings = False
    c.resid_pdrop = c.embd_pdrop = c.attn_pdrop = 0.0
    c._attn_implementation = "eager"
    return c


class CharGPT2(GPT2LMHeadModel):
    """GPT-2 whose forward returns (loss, logits): next-character cross-entropy."""

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        logits = super().forward(input_ids=input_ids).logits
        scores, targets = logits[:, :-1], labels[:, 1:]
        loss = torch.nn.functional.cross_entropy(scores.reshape(-1, VOCAB), targets.reshape(-1))
        return loss, logits


def corpus() -> torch.Tensor:
    """The corpus as a vector of character codes (deterministic for a Python version)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.glob("*.py") if p.is_file())[:FILES]
    text = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)
    codes = torch.tensor(list(text.encode("ascii", errors="replace")), dtype=torch.int64)
    return codes.clamp(max=VOCAB - 1)


def window_batch(
    codes: torch.Tensor, step: int, batch: int, seq: int, rows: range | None = None
) -> dict[str, torch.Tensor]:
    """Batch `step`: rows of `seq` characters at seeded offsets (only `rows` of them, if given)."""
    generator = torch.Generator().manual_seed(step)
    offsets = torch.randint(0, codes.numel() - seq - 1, (batch,), generator=generator)
    picked = offsets[rows.start : rows.stop] if rows is not None else offsets
    ids = torch.stack([codes[o : o + seq] for o in picked.tolist()]) if len(picked) else torch.zeros(0, seq)
    return {"input_ids": ids.long(), "labels": ids.long()}


def make(
    batch: int = 16, seq: int = 64, hidden: int = 64, layers: int = 2, heads: int = 4
) -> tuple[Any, Any]:
    model = CharGPT2(config(seq, hidden, layers, heads))
    model.train()
    return model, window_batch(corpus(), 0, batch, seq)


def batches(
    pieces: Any = None, start: int = 0, batch: int = 16, seq: int = 64
) -> Iterator[dict[str, torch.Tensor]]:
    """Batch `start`, `start + 1`, ...; with `pieces`, only this rank's rows (whole sequences:
    a plan that also splits the sequence dim gets columns cut from them here)."""
    codes = corpus()
    step = start
    while True:
        if pieces is None:
            yield window_batch(codes, step, batch, seq)
        else:
            yield {key: _cut(codes, step, batch, seq, pieces, key) for key in ("input_ids", "labels")}
        step += 1


def _cut(codes: torch.Tensor, step: int, batch: int, seq: int, pieces: Any, key: str) -> torch.Tensor | None:
    where = pieces.slices(key)
    if where is None:
        return None
    rows = pieces.rows(key)
    return window_batch(codes, step, batch, seq, rows)[key][:, where[1]]
