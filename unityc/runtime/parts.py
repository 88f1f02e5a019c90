"""Weight keys: a state_dict key, or a box of one (a *part*).

A packed parameter such as GPT-2's `c_attn.weight` [E, 3E] (query, key and value side by side)
is read by the graph as three weights, each a contiguous box of the stored tensor, so that each
can be sharded on its own (by heads):

    model.transformer.h.0.attn.c_attn.weight[:, 0:768]     columns 0:768 of the stored [768, 2304]
    model.transformer.h.0.attn.c_attn.bias[1536:2304]      the value bias

The box lists every dim, `:` for a whole one and `start:stop` for a range, a range ending at
the stored dim's end optionally followed by `+n`: n rows of zeros after it (*padding*):

    model.transformer.wte.weight[0:50257+7, :]     GPT-2's 50,257-row table padded to 50,264

A padded part is the stored box then zeros: a vocabulary that no tensor degree divides, padded
as Megatron-LM pads it (`search/vocabulary.py`); the zeros are the plan's alone (held, trained
to zero, never written where the plan meets the model). A part is a
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

_RANGE = r"(?::|\d+:\d+(?:\+\d+)?)"
_BOX = re.compile(rf"\[({_RANGE}(?:, {_RANGE})*)\]\Z")

Range = tuple[int, int] | None
"""A box's extent in one dim: (start, stop), or None for the whole dim."""


@dataclass(frozen=True)
class WeightKey:
    """A weight's key in a plan: the state_dict key `stored` and, for a part, its box."""

    stored: str
    box: tuple[Range, ...] = ()
    """Per dim of the stored tensor; empty: the whole tensor."""
    pad: tuple[int, ...] = ()
    """Per dim of the box, the zeros after it (empty: none); a padded range ends at the stored
    dim's end (checked where the stored tensor is known: `take`)."""

    def __post_init__(self) -> None:
        if not self.stored:
            raise ValueError("a weight key needs a state_dict key")
        if self.box and all(r is None for r in self.box):
            raise ValueError(f"the box of '{self.stored}' takes no range: write the key alone")
        for r in self.box:
            if r is not None and not 0 <= r[0] < r[1]:
                raise ValueError(f"'{self.stored}': {r[0]}:{r[1]} is no range of a dim")
        if self.pad and (len(self.pad) != len(self.box) or min(self.pad) < 0 or not any(self.pad)):
            raise ValueError(f"'{self.stored}': padding {list(self.pad)} does not match its box")
        if any(n and r is None for r, n in zip(self.box, self.pad, strict=False)):
            raise ValueError(f"'{self.stored}': only a range (start:stop) can be padded")

    @classmethod
    def parse(cls, text: str) -> WeightKey:
        """`name[:, 0:8]` -> a part; any other text is a whole state_dict key."""
        found = _BOX.search(text)
        if found is None or found.start() == 0:
            return cls(text)
        box: list[Range] = []
        pad: list[int] = []
        for entry in found.group(1).split(", "):
            entry, _, zeros = entry.partition("+")
            pad.append(int(zeros or 0))
            if entry == ":":
                box.append(None)
            else:
                start, stop = entry.split(":")
                box.append((int(start), int(stop)))
        return cls(text[: found.start()], tuple(box), tuple(pad) if any(pad) else ())

    def __str__(self) -> str:
        if not self.box:
            return self.stored
        pad = self.pad or (0,) * len(self.box)
        ranges = (
            ":" if r is None else f"{r[0]}:{r[1]}" + (f"+{n}" if n else "")
            for r, n in zip(self.box, pad, strict=True)
        )
        return f"{self.stored}[{', '.join(ranges)}]"

    @classmethod
    def padded(cls, key: str, shape: Sequence[int], dim: int, zeros: int) -> WeightKey:
        """The whole weight `key` of `shape` with `zeros` zero entries after it along `dim`."""
        whole = cls.parse(key)
        if whole.is_part:
            raise ValueError(f"'{key}' is a part of a stored tensor: only a whole weight is padded")
        box: list[Range] = [None] * len(shape)
        box[dim] = (0, shape[dim])
        pad = [0] * len(shape)
        pad[dim] = zeros
        return cls(whole.stored, tuple(box), tuple(pad))

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
            if r is not None and r[1] - r[0] + self.zeros(d) != size:
                zeros = f" and {self.zeros(d)} zeros" if self.zeros(d) else ""
                return f"its box takes {r[0]}:{r[1]}{zeros} of dim {d}, the weight's dim {d} is {size}"
        return None

    def zeros(self, dim: int) -> int:
        """The padding after the box along `dim`."""
        return self.pad[dim] if self.pad else 0

    def offsets(self) -> tuple[int, ...]:
        """Where the part starts in the stored tensor (zeros for a whole weight)."""
        return tuple(0 if r is None else r[0] for r in self.box)

    def slices(self, shape: Sequence[int]) -> tuple[slice, ...]:
        """The part (without its padding) as an index of the stored tensor of shape `shape`."""
        if not self.box:
            return tuple(slice(0, n) for n in shape)
        fits = len(self.box) == len(shape) and all(
            r is None or r[1] <= n for r, n in zip(self.box, shape, strict=True)
        )
        ends = all(
            not self.zeros(d) or (r is not None and r[1] == n)
            for d, (r, n) in enumerate(zip(self.box, shape, strict=True))
        )
        if not fits or not ends:
            raise ValueError(f"'{self}' is no part of a tensor of shape {list(shape)}")
        return tuple(slice(0, n) if r is None else slice(*r) for r, n in zip(self.box, shape, strict=True))

    def take(self, tensor: Any) -> Any:
        """The part of the stored tensor (a view of it; the tensor itself for a whole weight; a
        new tensor, the box then zeros, for a padded part)."""
        if not self.box:
            return tensor
        return self.padding(tensor[self.slices(tuple(tensor.shape))])

    def padding(self, value: Any) -> Any:
        """`value` (the stored box) with this part's zeros after it: the inverse of `real`."""
        if not self.pad:
            return value
        import torch.nn.functional as F  # (the verifier imports this module without torch)

        return F.pad(value, [w for d in reversed(range(value.dim())) for w in (0, self.zeros(d))])

    def real_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """The shape of this part (`shape`) without its padding."""
        return tuple(n - self.zeros(d) for d, n in enumerate(shape))

    def unpadded(self) -> WeightKey:
        """The key without its padding: the stored box (a padded range from 0 is the whole dim,
        since a padded range ends at the stored end)."""
        if not self.pad:
            return self
        box = tuple(
            None if n and r is not None and r[0] == 0 else r for r, n in zip(self.box, self.pad, strict=True)
        )
        return WeightKey(self.stored, box if any(r is not None for r in box) else ())

    def real(self, value: Any) -> Any:
        """`value` (shaped like this part) without its padding: the box of the stored tensor."""
        if not self.pad:
            return value
        return value[tuple(slice(0, n) for n in self.real_shape(value.shape))]

    def put(self, tensor: Any, value: Any) -> None:
        """Writes `value` (shaped like this part) into its box of the stored `tensor`, its padding
        dropped."""
        tensor[self.slices(tuple(tensor.shape))] = self.real(value)

    def sub(self, dim: int, start: int, stop: int, shape: Sequence[int]) -> WeightKey:
        """The box start:stop along `dim` of this weight (of shape `shape`), as a key of the
        stored tensor: a part of a part is a part."""
        if self.pad:
            raise ValueError(f"'{self}': a part of a padded weight is not a part of the stored tensor")
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
