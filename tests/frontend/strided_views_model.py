"""Views of strided tensors, for the importer's --check (issue 42): a reshape after a transpose
and after a permute, an interleave (GPT-J's rotary: stack, then flatten), a view of a transposed
buffer, and Tensor.unfold windows (overlapping and not)."""

from __future__ import annotations

import torch
from torch import nn


class StridedViews(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 24)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 24).view(2, 12))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fc(x)  # [b, s, 24]
        b, s, _ = h.shape
        heads = h.view(b, s, 2, 12).transpose(1, 2)  # [b, 2, s, 12], not contiguous
        merged = heads.reshape(b, 2 * s, 12) * self.scale.t().reshape(1, 1, 24)[..., :12]
        x1, x2 = merged[..., ::2], merged[..., 1::2]
        rotated = torch.stack((-x2, x1), dim=-1).flatten(-2)  # interleaved halves
        mixed = (merged + rotated).permute(0, 2, 1).reshape(b, -1)  # [b, 12 * 2s]
        windows = h.unfold(2, 4, 4).reshape(b, -1)  # non-overlapping windows
        overlapping = h.unfold(-1, 3, 2).flatten(1)  # windows of 3 every 2: elements read twice
        out = torch.cat([mixed, windows, overlapping], dim=1)
        return nn.functional.mse_loss(out, y), out


def make(batch: int = 2) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    return StridedViews(), {
        "x": torch.randn(batch, 3, 8, generator=generator),
        "y": torch.randn(batch, 72 + 72 + 99, generator=generator),
    }
