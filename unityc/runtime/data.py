"""Training data: `--data module:function` (or `path/to/file.py:function`), or the Python API
`unityc.runtime.main(PLAN, forward, data=function)`. Without it the program trains on the
model's seeded example inputs, the same batch every step (synthetic: for measurement and
`--check`).

The function returns an iterable of batches in the model's forward signature: a dict by argument
name, or a tuple in `forward`'s argument order. `--data-args 'k=v, ...'` are passed to it as
keyword arguments (Python literals). When the iterable ends, the function is called again (a new
epoch).

**Each rank loads only its pieces.** If the function has a parameter named `pieces`, it is called
with `pieces=Pieces(...)`, which says for every input the slice of the batch this rank holds
(`pieces.slices("input_ids")`, e.g. rows 4:8 of a batch split over two ranks; None for an input
this rank does not read), and it returns only those slices: a batch-sharded input is never
materialized in full on any rank. A function without `pieces` returns whole batches and every rank
cuts its piece (simple, but every rank then builds the whole batch). Either way each piece's shape
is checked against the plan, and so is its dtype (no silent conversion: float token ids are
refused) and, for an input that indexes an embedding, its range (`Plan.bounds`): an error names
the input, the batch and the bad value. An exception raised by the data function, at its call or
at any batch, is reported as the data function's.

On resume from step N the function gets `start=N` if it has a `start` parameter (it should then
begin with batch N); otherwise the first N batches are drawn and dropped.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from unityc.runtime.factory import ModelError, load_function
from unityc.runtime.plan import Layout


class DataError(ValueError):
    """The data function cannot be found, called, or returns batches the plan cannot use."""


@dataclass(frozen=True)
class Pieces:
    """What one rank needs of every batch: per input, the slice of each dim it holds."""

    rank: int
    world: int
    shapes: Mapping[str, tuple[int, ...]]
    """Every input's whole shape (the batch the plan was made for)."""
    held: Mapping[str, tuple[slice, ...] | None]

    def slices(self, key: str) -> tuple[slice, ...] | None:
        """This rank's slice of input `key` (None: it holds no piece of it)."""
        if key not in self.shapes:
            raise KeyError(f"the plan has no input '{key}' (its inputs: {', '.join(self.shapes)})")
        return self.held.get(key)

    def rows(self, key: str) -> range | None:
        """The batch rows (dim 0) of input `key` this rank holds."""
        s = self.slices(key)
        if s is None:
            return None
        return range(*s[0].indices(self.shapes[key][0])) if s else range(1)


def pieces_of(layouts: Mapping[str, Layout], rank: int, world: int) -> Pieces:
    held = {
        key: layout.slices(layout.pieces[rank]) if rank in layout.pieces else None
        for key, layout in layouts.items()
    }
    return Pieces(rank, world, {k: layout.shape for k, layout in layouts.items()}, held)


def load_data_function(spec: str) -> Callable[..., Any]:
    """`module:function` (an importable module) or `path/to/file.py:function`."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise DataError(f"--data {spec}: expected module:function or path/to/file.py:function")
    if where.endswith(".py"):
        try:
            return load_function(Path(where), name)
        except ModelError as e:
            raise DataError(f"--data {spec}: {e}") from None
    try:
        module = importlib.import_module(where)
    except Exception as e:
        raise DataError(f"--data {spec}: cannot import {where}: {type(e).__name__}: {e}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise DataError(f"--data {spec}: {where} has no function '{name}'")
    return function


def _takes(function: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False


class Batches:
    """This rank's pieces of the batches of a data function, step after step."""

    def __init__(
        self,
        function: Callable[..., Any],
        kwargs: Mapping[str, Any],
        layouts: Mapping[str, Layout],
        arg_names: list[str],
        rank: int,
        world: int,
        start: int = 0,
        bounds: Mapping[str, int] | None = None,
    ):
        self.function, self.kwargs, self.layouts, self.arg_names = function, dict(kwargs), layouts, arg_names
        self.bounds = dict(bounds or {})
        self.rank = rank
        self.pieces = pieces_of(layouts, rank, world)
        self.sliced = _takes(function, "pieces")
        self.step = start
        self.iterator = self._open(start)
        if not _takes(function, "start"):
            for _ in range(start):
                self._next_raw()

    def _open(self, start: int) -> Iterator[Any]:
        kwargs = dict(self.kwargs)
        if self.sliced:
            kwargs["pieces"] = self.pieces
        if _takes(self.function, "start"):
            kwargs["start"] = start
        try:
            return iter(self.function(**kwargs))
        except Exception as e:
            raise DataError(f"the data function failed: {type(e).__name__}: {e}") from None

    def _next_raw(self) -> Any:
        try:
            return next(self.iterator)
        except StopIteration:
            self.iterator = self._open(self.step)  # a new epoch
        except Exception as e:
            batch = self.step + 1
            raise DataError(f"the data function failed at batch {batch}: {type(e).__name__}: {e}") from None
        try:
            return next(self.iterator)
        except StopIteration:
            raise DataError("the data function returned no batches") from None
        except Exception as e:
            raise DataError(f"the data function failed: {type(e).__name__}: {e}") from None

    def next(self) -> dict[str, torch.Tensor]:
        """This rank's pieces of the next batch, by input key (plain, on the CPU)."""
        batch = self._next_raw()
        self.step += 1
        if isinstance(batch, tuple | list):
            batch = dict(zip(self.arg_names, batch, strict=False))
        if not isinstance(batch, Mapping):
            raise DataError(f"a batch must be a dict by argument name or a tuple, got {type(batch).__name__}")
        out: dict[str, torch.Tensor] = {}
        for key, layout in self.layouts.items():
            where = self.pieces.held[key]
            if where is None:
                continue
            if key not in batch:
                raise DataError(f"batch {self.step} has no input '{key}' (it has: {', '.join(batch)})")
            value = torch.as_tensor(batch[key])
            if not self.sliced:
                value = self._whole(key, value, layout)
                piece = layout.piece_of(self.rank, value)
                assert piece is not None
                value = piece
            elif tuple(value.shape) != layout.piece_shape:
                raise DataError(
                    f"batch {self.step}: input '{key}' on rank {self.rank} has shape {list(value.shape)}, "
                    f"its piece {_show(where)} has {list(layout.piece_shape)}"
                )
            out[key] = self._checked(key, value, layout).to(layout.torch_dtype)
        return out

    def _checked(self, key: str, value: torch.Tensor, layout: Layout) -> torch.Tensor:
        """`value` if its kind of dtype is the plan's (widths may differ) and, for an index
        input, its values lie in the embedding's rows."""
        want = layout.torch_dtype
        if value.is_floating_point() != want.is_floating_point or (value.dtype == torch.bool) != (
            want == torch.bool
        ):
            raise DataError(
                f"batch {self.step}: input '{key}' holds {str(value.dtype).removeprefix('torch.')} "
                f"values, the plan takes {layout.dtype} (convert them in the data function)"
            )
        bound = self.bounds.get(key)
        if bound is None or not value.numel():
            return value
        low, high = int(value.min()), int(value.max())
        if low >= 0 and high < bound:
            return value
        raise DataError(
            f"batch {self.step}: input '{key}' holds the index {low if low < 0 else high}, outside "
            f"[0, {bound}) (the embedding it indexes has {bound} rows)"
        )

    def _whole(self, key: str, value: torch.Tensor, layout: Layout) -> torch.Tensor:
        if tuple(value.shape) != layout.shape:
            raise DataError(
                f"batch {self.step}: input '{key}' has shape {list(value.shape)}, the plan was made "
                f"for {list(layout.shape)} (every batch must have the plan's shape)"
            )
        return value


def _show(where: tuple[slice, ...]) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in where) + "]"
