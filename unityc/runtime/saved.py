"""What autograd keeps for backward, counted as the program runs (`--saved-bytes FILE`).

`SavedBytes` is a pair of `torch.autograd.graph.saved_tensors_hooks` that count every tensor a
forward saves: by unique storage (a storage reached by several saved views counts once, over
the byte range those views reach, so a micro-batch's chunk of an input counts its own rows),
per dtype, with the parameters and every view of one excluded (the weights are persistent; their
bf16 autocast copies are new tensors and count). It composes with another pair of hooks
(`inner`, ZeRO-3's, which packs a gathered weight as a reference to its shard): the inner pack
runs first and what it returns is what autograd keeps, so a tensor it turned into a reference
counts nothing. torch applies only the innermost pair of hooks: a `torch.utils.checkpoint`
region's forward saves nothing here (it keeps its inputs, which count, and recomputes the rest in
backward).

Two figures per rank and step: `forward_bytes`, the most one forward (one micro-batch of one
stage function) leaves saved (with `forward_by_dtype`, and `forward_by_producer`: its bytes by
the op that made each storage's first saved tensor, its element type and shape, e.g.
"NativeLayerNormBackward0 float32 [2, 64, 64]", "leaf" for an input or a mask drawn without
gradient: which tensors a forward keeps), and `peak_bytes`, the most held at once, saved by forwards whose
backward has not yet released them (a pipeline's micro-batches in flight): a saved tensor is
released when autograd drops what the pack returned (after its node's backward). The record is
the last step's (`begin_step` starts one afresh): the first step of a pipelined program also
runs torch's shape inference (`PipelineStage`'s metadata forward, with autograd on), whose saved
tensors torch frees only later.

The same counter measures one region in benchmarks and kernel tests: `with SavedBytes.of(inputs,
skip) as saved:` counts that region as one forward (`bytes`, and `sizes` per storage), the given
tensors' storages excluded and the tensors `skip` names not counted (autocast's copies of them).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

Pack = Callable[[torch.Tensor], Any]
Unpack = Callable[[Any], torch.Tensor]
Hooks = tuple[Pack, Unpack]

Key = tuple[int, str]
"""A storage of saved tensors and the dtype they read it as."""


def span(t: torch.Tensor) -> tuple[int, int]:
    """The byte range [start, end) of its storage that tensor `t` reaches."""
    size = t.element_size()
    if t.numel() == 0:
        return 0, 0
    last = sum((int(n) - 1) * int(s) for n, s in zip(t.shape, t.stride(), strict=True))
    start = int(t.storage_offset()) * size
    return start, start + (last + 1) * size


@dataclass
class _Storage:
    start: int
    end: int
    holders: int = 0

    @property
    def nbytes(self) -> int:
        return self.end - self.start


class _Held:
    """What autograd keeps in place of a saved tensor: the inner pack's result, and the count
    of its storage, given back when autograd drops it."""

    __slots__ = ("counter", "epoch", "key", "packed")

    def __init__(self, counter: SavedBytes, key: Key | None, packed: Any):
        self.counter, self.key, self.packed = counter, key, packed
        self.epoch = counter.epoch

    def __del__(self) -> None:
        if self.key is not None and self.epoch == self.counter.epoch:
            self.counter.release(self.key)


@dataclass
class SavedBytes:
    """Counts what forwards save for backward on this rank (see the module docstring)."""

    excluded: set[int] = field(default_factory=set)
    """Storage addresses of the parameters (their views share them)."""
    live: dict[Key, _Storage] = field(default_factory=dict)
    live_bytes: int = 0
    peak_bytes: int = 0
    forward_bytes: int = 0
    forward_by_dtype: dict[str, int] = field(default_factory=dict)
    forwards: int = 0
    epoch: int = 0
    """The step counted (what an earlier step's saved tensors give back is ignored)."""
    skip: Callable[[torch.Tensor], bool] | None = None
    """Saved tensors not counted (besides the excluded storages' views)."""
    forward_by_producer: dict[str, int] = field(default_factory=dict)
    last: dict[Key, tuple[int, int]] = field(default_factory=dict)
    """The byte range of each storage the last forward saved."""
    made_by: dict[Key, str] = field(default_factory=dict)
    """The producer of each storage the current forward saved (`forward_by_producer`)."""
    _current: dict[Key, tuple[int, int]] | None = None
    _region: contextlib.AbstractContextManager | None = None

    @classmethod
    def of(
        cls, params: Iterable[torch.Tensor | None], skip: Callable[[torch.Tensor], bool] | None = None
    ) -> SavedBytes:
        return cls(excluded={p.untyped_storage().data_ptr() for p in params if p is not None}, skip=skip)

    @property
    def bytes(self) -> int:
        """What the last forward saved (the region's, used as a context manager)."""
        return sum(self.sizes.values())

    @property
    def sizes(self) -> dict[Key, int]:
        return {key: end - start for key, (start, end) in self.last.items()}

    def __enter__(self) -> SavedBytes:
        self._region = self.forward()
        self._region.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        region, self._region = self._region, None
        assert region is not None
        region.__exit__(*exc)

    def begin_step(self) -> None:
        """Counts afresh from here (a new step)."""
        self.epoch += 1
        self.live.clear()
        self.live_bytes = self.peak_bytes = self.forward_bytes = self.forwards = 0
        self.forward_by_dtype, self.forward_by_producer = {}, {}

    def hooks(self, inner: Hooks | None = None) -> Hooks:
        inner_pack, inner_unpack = inner or (None, None)

        def pack(t: torch.Tensor) -> _Held:
            packed = t if inner_pack is None else inner_pack(t)
            key = self.count(packed) if isinstance(packed, torch.Tensor) else None
            return _Held(self, key, packed)

        def unpack(held: _Held) -> torch.Tensor:
            return held.packed if inner_unpack is None else inner_unpack(held.packed)

        return pack, unpack

    @contextlib.contextmanager
    def forward(self, inner: Hooks | None = None) -> Iterator[None]:
        """One forward (one micro-batch's, of one stage function) under the counting hooks."""
        self._current, self.made_by = {}, {}
        try:
            with torch.autograd.graph.saved_tensors_hooks(*self.hooks(inner)):
                yield
        finally:
            current, self._current = self._current, None
            self.last = current
            by_dtype: dict[str, int] = {}
            by_producer: dict[str, int] = {}
            for key, (start, end) in current.items():
                by_dtype[key[1]] = by_dtype.get(key[1], 0) + end - start
                made = self.made_by[key]
                by_producer[made] = by_producer.get(made, 0) + end - start
            total = sum(by_dtype.values())
            self.forwards += 1
            if total > self.forward_bytes:
                self.forward_bytes, self.forward_by_dtype = total, by_dtype
                self.forward_by_producer = by_producer

    def count(self, t: torch.Tensor) -> Key | None:
        if t.layout != torch.strided or t.numel() == 0 or t.device.type == "meta":
            return None
        ptr = t.untyped_storage().data_ptr()
        if ptr in self.excluded or (self.skip is not None and self.skip(t)):
            return None
        key = (ptr, str(t.dtype).removeprefix("torch."))
        start, end = span(t)
        held = self.live.get(key)
        if held is None:
            held = self.live[key] = _Storage(start, end)
            self.live_bytes += end - start
        else:
            before = held.nbytes
            held.start, held.end = min(held.start, start), max(held.end, end)
            self.live_bytes += held.nbytes - before
        held.holders += 1
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        if self._current is not None:
            if key not in self.made_by:
                made = "leaf" if t.grad_fn is None else type(t.grad_fn).__name__
                self.made_by[key] = f"{made} {key[1]} {list(t.shape)}"
            was = self._current.get(key)
            self._current[key] = (start, end) if was is None else (min(was[0], start), max(was[1], end))
        return key

    def release(self, key: Key) -> None:
        held = self.live.get(key)
        if held is None:
            return
        held.holders -= 1
        if held.holders == 0:
            self.live_bytes -= held.nbytes
            del self.live[key]

    def record(self) -> dict[str, Any]:
        return {
            "forward_bytes": self.forward_bytes,
            "peak_bytes": self.peak_bytes,
            "forward_by_dtype": dict(sorted(self.forward_by_dtype.items())),
            "forward_by_producer": dict(sorted(self.forward_by_producer.items(), key=lambda kv: -kv[1])),
            "forwards": self.forwards,
        }


def counting(counter: SavedBytes | None, inner: Hooks | None) -> contextlib.AbstractContextManager:
    """The hooks a forward runs under: the counter's around `inner` (ZeRO-3's), `inner` alone
    without a counter, or none."""
    if counter is not None:
        return counter.forward(inner)
    if inner is not None:
        return torch.autograd.graph.saved_tensors_hooks(*inner)
    return contextlib.nullcontext()


def write(counter: SavedBytes, path: str, rank: int, world: int) -> None:
    """Collective: every rank's record gathered; rank 0 writes {"ranks": [record, ...]}."""
    records: list[Any] = [None] * world
    dist.all_gather_object(records, counter.record())
    if rank != 0:
        return
    with open(path, "w") as f:
        json.dump({"ranks": records}, f, indent=2)
