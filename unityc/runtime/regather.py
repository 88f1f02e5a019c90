"""Sequence-parallel inputs kept as their shard for backward, gathered again there (issue 38
item 4), as Megatron-LM's `LinearWithGradAccumulationAndAsyncCommunication` does.

Under tensor x sequence parallelism a column-parallel linear (or attention's q, k, v
projections) reads the all-gathered sequence: its backward needs that input for the weight's
gradient, and autograd would keep the whole gathered tensor (or, under bf16-mixed, autocast's
bf16 copy of it, one per reading op) from forward to backward, t times the shard each rank
holds. `Regathers` keeps the shard instead:

* `Context.parallel(..., regather=True)` registers an all-gather's output with the piece it
  gathered (`record`);
* the generated program runs each op reading such an output under `Context.regathering()`, a
  pair of `saved_tensors_hooks` that packs a saved tensor which is the gathered output (or a view
  of it), or autocast's bf16 cast of it (a `ToCopyBackward0` of the gather's output: what a bf16
  matmul reading the fp32 tensor keeps), as a reference to the shard (its bf16 copy for a cast,
  made once and shared by every reading op: cast then gather equals gather then cast, bit for
  bit), and unpacks it by running the all-gather again (no gradient) — once for consecutive
  unpacks of one gather (q, k and v, or the MLP's gate and up: `last`, held until the next
  gather's unpack or the next forward, the one transient gathered tensor Megatron also holds);
* every other saved tensor goes to the hooks outside (`--saved-bytes`' counter, ZeRO-3's
  packing, or none): the counter sees the shard a reference keeps, once per storage.

Inside a `torch.utils.checkpoint` region the program does not use these hooks: the region
re-runs its all-gather itself (`codegen.emit.Writer.region`). The memory model counts the same
(`cost.backward.regathered`, `steps.StepBuilder.autocast_copies`), and the cost model one
all-gather again in each backward (`steps.StepBuilder.sequence_regathers`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from unityc.runtime.comm import Communicator
from unityc.runtime.plan import Collective

VIEWS = ("ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0", "AsStridedBackward0")
"""Autograd nodes of views a matmul takes of its input before saving it (a 3-D input flattened)."""


@dataclass
class _Gathered:
    """One registered all-gather: its output (weakly: the forward's local keeps it alive while
    its readers run), the output's autograd node, the piece gathered and its bf16 copy."""

    serial: int
    full: weakref.ref[torch.Tensor]
    node: Any
    shard: torch.Tensor
    collective: Collective
    half: torch.Tensor | None = None

    def shard_as(self, dtype: torch.dtype) -> torch.Tensor:
        if dtype == self.shard.dtype:
            return self.shard
        if self.half is None or self.half.dtype != dtype:
            with torch.no_grad():
                self.half = self.shard.detach().to(dtype)
        return self.half


@dataclass(frozen=True)
class _Reference:
    """What autograd keeps in place of a gathered tensor: the outer hooks' packing of the shard
    (or its bf16 copy) and how to make the saved tensor again from it."""

    key: int
    packed: Any
    collective: Collective
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int


class Regathers:
    """This rank's registered all-gathers and the hooks that keep their shards (module docstring)."""

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm
        self.by_output: dict[int, _Gathered] = {}
        self.by_node: dict[int, _Gathered] = {}
        self.last: tuple[int, torch.dtype, torch.Tensor] | None = None
        self.serial = 0

    def clear(self) -> None:
        """A new forward (a step's, or a micro-batch's): the last regathered tensor is dropped."""
        self.last = None
        self._prune()

    def record(self, full: torch.Tensor, shard: torch.Tensor, c: Collective) -> None:
        self._prune()
        self.serial += 1
        entry = _Gathered(self.serial, weakref.ref(full), full.grad_fn, shard.detach(), c)
        self.by_output[full.untyped_storage().data_ptr()] = entry
        if full.grad_fn is not None:
            self.by_node[id(full.grad_fn)] = entry

    def _prune(self) -> None:
        for table in (self.by_output, self.by_node):
            for key in [k for k, e in table.items() if e.full() is None]:
                del table[key]

    def find(self, t: torch.Tensor) -> _Gathered | None:
        """The registered gather whose output `t` is (or views), or whose output `t` is the cast
        of (through views); None otherwise."""
        entry = self.by_output.get(t.untyped_storage().data_ptr())
        if entry is not None and entry.full() is not None:
            return entry
        node = t.grad_fn
        while node is not None and type(node).__name__ in VIEWS:
            node = node.next_functions[0][0]
        if node is None or type(node).__name__ != "ToCopyBackward0":
            return None
        source, _ = node.next_functions[0]
        entry = self.by_node.get(id(source))
        full = None if entry is None else entry.full()
        if full is None or full.grad_fn is not source:
            return None
        if t.untyped_storage().nbytes() != full.numel() * t.element_size():
            return None
        return entry

    @contextlib.contextmanager
    def hooks(self) -> Iterator[None]:
        """The pack/unpack pair an op reading a registered gather runs under, around the hooks
        already installed (`torch.autograd.graph.saved_tensors_hooks` applies only the innermost
        pair: these call the outer pair themselves)."""
        outer = torch._C._autograd._top_saved_tensors_default_hooks(False)
        outer_pack, outer_unpack = outer if outer is not None else (None, None)

        def pack(t: torch.Tensor) -> Any:
            entry = self.find(t) if isinstance(t, torch.Tensor) and t.layout == torch.strided else None
            if entry is None:
                return t if outer_pack is None else outer_pack(t)
            shard = entry.shard_as(t.dtype)
            c = entry.collective
            c = Collective(c.kind, c.ins, c.outs, c.shape, str(t.dtype).removeprefix("torch."), c.dim, c.dst)
            packed = shard if outer_pack is None else outer_pack(shard)
            return _Reference(
                entry.serial, packed, c, tuple(t.shape), tuple(t.stride()), int(t.storage_offset())
            )

        def unpack(packed: Any) -> torch.Tensor:
            if not isinstance(packed, _Reference):
                return packed if outer_unpack is None else outer_unpack(packed)
            shard = packed.packed if outer_unpack is None else outer_unpack(packed.packed)
            full = self._gathered(packed.key, shard, packed.collective)
            return full.as_strided(packed.shape, packed.stride, packed.offset)

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            yield

    def _gathered(self, key: int, shard: torch.Tensor, c: Collective) -> torch.Tensor:
        if self.last is not None and self.last[0] == key and self.last[1] == shard.dtype:
            return self.last[2]
        self.last = None  # the previous gather's tensor goes before this one is made
        with torch.no_grad():
            full = self.comm.run(c, shard)
        assert full is not None, "a regathered shard on a rank outside its all-gather"
        self.last = (key, shard.dtype, full)
        return full
