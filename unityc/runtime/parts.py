"""Weight keys: a state_dict key, or a box of one (a *part*).

A packed parameter such as GPT-2's `c_attn.weight` [E, 3E] (query, key and value side by side)
is read by the graph as three weights, each a contiguous box of the stored tensor, so that each
can be sharded on its own (by heads):

    model.transformer.h.0.attn.c_attn.weight[:, 0:768]     columns 0:768 of the stored [768, 2304]
    model.transformer.h.0.attn.c_attn.bias[1536:2304]      the value bias

The box lists every dim, `:` for a whole one and `start:stop` for a range. A part is a
parameter of its own wherever the plan holds weights (its pieces, gradients, optimizer state);
where the plan meets the model (its reference weights, `--check`, checkpoints in the model's
state_dict keys) the part is that box of the stored tensor: the gradient of the packed parameter
is its parts' gradients placed side by side. Torch-free: the compiler's verifier uses it too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_BOX = re.compile(r"\[((?::|\d+:\d+)(?:, (?::|\d+:\d+))*)\]\Z")

Range = tuple[int, int] | None
"""A box's extent in one dim: (start, stop), or None for the whole dim."""


@dataclass(frozen=True)
class WeightKey:
    """A weight's key in a plan: the state_dict key `stored` and, for a part, its box."""

    stored: str
    box: tuple[Range, ...] = ()
    """Per dim of the stored tensor; empty: the whole tensor."""

    def __post_init__(self) -> None:
        if not self.stored:
            raise ValueError("a weight key needs a state_dict key")
        if self.box and all(r is None for r in self.box):
            raise ValueError(f"the box of '{self.stored}' takes no range: write the key alone")
        for r in self.box:
            if r is not None and not 0 <= r[0] < r[1]:
                raise ValueError(f"'{self.stored}': {r[0]}:{r[1]} is no range of a dim")

    @classmethod
    def parse(cls, text: str) -> WeightKey:
        """`name[:, 0:8]` -> a part; any other text is a whole state_dict key."""
        found = _BOX.search(text)
        if found is None or found.start() == 0:
            return cls(text)
        box: list[Range] = []
        for entry in found.group(1).split(", "):
            if entry == ":":
                box.append(None)
            else:
                start, stop = entry.split(":")
                box.append((int(start), int(stop)))
        return cls(text[: found.start()], tuple(box))

    def __str__(self) -> str:
        if not self.box:
            return self.stored
        return f"{self.stored}[{', '.join(':' if r is None else f'{r[0]}:{r[1]}' for r in self.box)}]"

    @property
    def is_part(self) -> bool:
        return bool(self.box)

    def check_shape(self, shape: Sequence[int]) -> str | None:
        """Why a part of this box cannot have `shape` (None: it can)."""
        if not self.box:
            return None
        if len(self.box) != len(shape):
            return f"its box has {len(self.box)} dims, the weight has rank {len(shape)}"
        for d, (r, size) in enumerate(zip(self.box, shape, strict=True)):
            if r is not None and r[1] - r[0] != size:
                return f"its box takes {r[0]}:{r[1]} of dim {d}, the weight's dim {d} is {size}"
        return None

    def offsets(self) -> tuple[int, ...]:
        """Where the part starts in the stored tensor (zeros for a whole weight)."""
        return tuple(0 if r is None else r[0] for r in self.box)

    def slices(self, shape: Sequence[int]) -> tuple[slice, ...]:
        """The part as an index of the stored tensor of shape `shape`."""
        if not self.box:
            return tuple(slice(0, n) for n in shape)
        fits = len(self.box) == len(shape) and all(
            r is None or r[1] <= n for r, n in zip(self.box, shape, strict=True)
        )
        if not fits:
            raise ValueError(f"'{self}' is no part of a tensor of shape {list(shape)}")
        return tuple(slice(0, n) if r is None else slice(*r) for r, n in zip(self.box, shape, strict=True))

    def take(self, tensor: Any) -> Any:
        """The part of the stored tensor (a view of it; the tensor itself for a whole weight)."""
        return tensor[self.slices(tuple(tensor.shape))] if self.box else tensor

    def sub(self, dim: int, start: int, stop: int, shape: Sequence[int]) -> WeightKey:
        """The box start:stop along `dim` of this weight (of shape `shape`), as a key of the
        stored tensor: a part of a part is a part."""
        box: list[Range] = list(self.box) if self.box else [None] * len(shape)
        base = 0 if box[dim] is None else box[dim][0]  # type: ignore[index]
        if stop - start == shape[dim] and box[dim] is None:
            return self
        box[dim] = (base + start, base + stop)
        return WeightKey(self.stored, tuple(box))

    def overlaps(self, other: WeightKey) -> bool:
        """Whether the two keys share an element of one stored tensor."""
        if self.stored != other.stored:
            return False
        if not self.box or not other.box:
            return True
        return all(
            a is None or b is None or (a[0] < b[1] and b[0] < a[1])
            for a, b in zip(self.box, other.box, strict=False)
        )


def stored_key(key: str) -> str:
    """The state_dict key a plan's weight key reads."""
    return WeightKey.parse(key).stored
