"""Spatial partitioning of sliding windows (convolution, pooling): the halo a shard needs.

A window op (kernel K, stride s, padding p, dilation d) over a dim of size H cut into k equal
shards of P = H / k rows: output row o reads input rows o·s - p … o·s - p + d·(K - 1). When
H = s · H_out, output shard i (rows i·Q … i·Q + Q - 1, Q = H_out / k) reads input rows
i·P - p … (i+1)·P - 1 + (d·(K - 1) + 1 - s - p): its own P rows, `above` = p rows of the shard
before it (padding on the first shard) and `below` = d·(K - 1) + 1 - s - p rows of the shard
after it (padding on the last; negative: the last -below rows of its own shard are unused).
Every shard then runs the window on its extended rows with no padding on that dim, and the
pieces reassemble exactly to the unsplit result. Only neighbours exchange rows, so a halo may
not exceed a shard.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Halo:
    """Rows a shard reads from the shard before it (`above`) and after it (`below`, negative:
    rows of its own it drops)."""

    above: int
    below: int

    def __post_init__(self) -> None:
        if self.above < 0:
            raise ValueError(f"a halo reads {self.above} rows above: padding is never negative")

    @property
    def exchanged(self) -> int:
        """Rows a shard receives from its neighbours (the halo exchange's volume per shard)."""
        return self.above + max(self.below, 0)


def window_halo(size: int, degree: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> Halo | str:
    """The halo of a window over a dim of `size` cut into `degree` shards, or why it cannot be
    split there (a reason for the verifier's message)."""
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    if out * stride != size:
        return (
            f"the window's output ({out}) times its stride ({stride}) is not the input size {size}, "
            "so shards of the input and of the output do not line up"
        )
    if out % degree:
        return f"shard degree {degree} does not divide the window's output size {out}"
    halo = Halo(pad, dilation * (kernel - 1) + 1 - stride - pad)
    piece = size // degree
    if max(halo.above, halo.below) > piece:
        rows = f"{halo.above} above, {halo.below} below"
        return f"the window's halo ({rows}) is larger than a shard of {piece} rows"
    return halo
