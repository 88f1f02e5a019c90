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

A linear or matmul reading such an output as its left operand (a column-parallel linear,
attention's q, k, v projections) runs as `Overlapped` (a torch-function mode of the same
context): its backward overlaps the all-gather with the input-gradient matmul and, for the
gather's only reader, the gather's reduce-scatter with the weight-gradient matmul, as
Megatron-LM does (`cost.overlap` prices it so).

Inside a `torch.utils.checkpoint` region the program does not use these hooks: the region
re-runs its all-gather itself (`codegen.emit.Writer.region`). The memory model counts the same
(`cost.backward.regathered`, `steps.StepBuilder.autocast_copies`), and the cost model one
all-gather again in each backward (`steps.StepBuilder.sequence_regathers`).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

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
    readers: int = 0
    """How many operands of the program read the output (1: its gradient is one matmul's)."""
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

    def record(self, full: torch.Tensor, shard: torch.Tensor, c: Collective, readers: int = 0) -> None:
        self._prune()
        self.serial += 1
        entry = _Gathered(self.serial, weakref.ref(full), full.grad_fn, shard.detach(), c, readers)
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

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack), _Overlapping(self):
            yield

    def start(self, key: int, shard: torch.Tensor, c: Collective) -> Callable[[], torch.Tensor]:
        """`_gathered` launched without waiting (`Communicator.start`): the wait gives the
        gathered tensor and keeps it as `last`."""
        if self.last is not None and self.last[0] == key and self.last[1] == shard.dtype:
            full = self.last[2]
            return lambda: full
        self.last = None
        wait = self.comm.start(c, shard)

        def gathered() -> torch.Tensor:
            full = wait()
            self.last = (key, shard.dtype, full)
            return full

        return gathered

    def _gathered(self, key: int, shard: torch.Tensor, c: Collective) -> torch.Tensor:
        if self.last is not None and self.last[0] == key and self.last[1] == shard.dtype:
            return self.last[2]
        self.last = None  # the previous gather's tensor goes before this one is made
        with torch.no_grad():
            full = self.comm.run(c, shard)
        assert full is not None, "a regathered shard on a rank outside its all-gather"
        self.last = (key, shard.dtype, full)
        return full


def _compute_dtype(*tensors: torch.Tensor | None) -> torch.dtype:
    """The element type autocast runs a matmul of these in (theirs outside autocast)."""
    x = tensors[0]
    assert x is not None
    device = x.device.type
    if torch.is_autocast_enabled(device) and x.is_floating_point():
        return torch.get_autocast_dtype(device)
    return x.dtype


class _Overlapping(TorchFunctionMode):
    """Under `Regathers.hooks`: a linear or matmul whose input is a registered gather (or a
    view of one) and whose right operand is a matrix runs as `Overlapped`."""

    def __init__(self, regathers: Regathers) -> None:
        super().__init__()
        self.regathers = regathers

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in MATMULS and not kwargs and torch.is_grad_enabled():
            x, w, b = (*args, None)[:3]
            entry = None
            if isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and x.dim() >= 2 and w.dim() == 2:
                entry = self.regathers.find(x) if x.layout == torch.strided else None
            full = None if entry is None else entry.full()
            if full is not None and x.untyped_storage().data_ptr() == full.untyped_storage().data_ptr():
                return Overlapped.apply(x, w, b, func is F.linear, self.regathers, entry)
        return func(*args, **kwargs)


MATMULS = (F.linear, torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__)
"""What a linear or matmul kernel calls (`x @ w` reaches a mode as `Tensor.matmul`)."""


class Overlapped(torch.autograd.Function):
    """y = x W^T (+ b) (`linear`) or x W, x a sequence-parallel gather's output, as Megatron-LM's
    `LinearWithGradAccumulationAndAsyncCommunication` runs it: forward keeps the shard (its
    bf16 copy under autocast, shared with every reader) and the weight; backward launches the
    all-gather of the shard, computes grad x = grad y W (the input's gradient, which needs no
    x) meanwhile, waits, and, when this op is the gather's only reader and reads it whole,
    launches the gather's dual reduce-scatter of grad x and computes grad W = grad y^T x
    meanwhile, then waits and hands the reduced shard to the gather's `Exchange` (its backward
    then moves nothing). The same matmuls as autograd's `AddmmBackward0` / `MmBackward0` on
    the same operands (autocast's casts made here, its `ToCopyBackward0` casts back), so the
    same bits. The cost model prices these overlaps (`cost.overlap`)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        x: torch.Tensor,
        w: torch.Tensor,
        b: torch.Tensor | None,
        linear: bool,
        regathers: Regathers,
        entry: _Gathered,
    ) -> torch.Tensor:
        dtype = _compute_dtype(x, w)
        xc, wc = x.to(dtype), w.to(dtype)
        bc = None if b is None else b.to(dtype)
        with torch.autocast(x.device.type, enabled=False):
            y = F.linear(xc, wc, bc) if linear else torch.matmul(xc, wc)
        full = entry.full()
        assert full is not None
        shard = entry.shard_as(dtype)
        ctx.collective = _as(entry.collective, dtype)
        ctx.view = (tuple(x.shape), tuple(x.stride()), int(x.storage_offset()))
        ctx.whole = entry.readers == 1 and x is full
        ctx.linear, ctx.regathers, ctx.key, ctx.node = linear, regathers, entry.serial, entry.node
        ctx.dtypes = (x.dtype, w.dtype, None if b is None else b.dtype)
        ctx.save_for_backward(shard, wc)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        shard, wc = ctx.saved_tensors
        regathers: Regathers = ctx.regathers
        gathered = regathers.start(ctx.key, shard, ctx.collective)
        x_dtype, w_dtype, b_dtype = ctx.dtypes
        g = grad.reshape(-1, grad.shape[-1])
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = grad_w = grad_b = None
        if need_x:  # while the all-gather runs
            grad_x = (g.mm(wc) if ctx.linear else g.mm(wc.t())).view(*ctx.view[0][:-1], -1).to(x_dtype)
        full = gathered()
        x = full.as_strided(*ctx.view).reshape(-1, ctx.view[0][-1])
        reduced = None
        if grad_x is not None and ctx.whole and ctx.node is not None:
            reduced = regathers.comm.start(_as(ctx.collective.dual(), x_dtype), grad_x)
        if need_w:  # while the reduce-scatter runs
            grad_w = _weight_grad(g, x, wc, ctx.linear).to(w_dtype)
        if need_b:
            grad_b = g.sum(0).to(b_dtype)
        if reduced is not None:
            ctx.node.reduced = reduced()
        return grad_x, grad_w, grad_b, None, None, None


def _as(c: Collective, dtype: torch.dtype) -> Collective:
    """Collective `c` moving `dtype` elements."""
    return Collective(c.kind, c.ins, c.outs, c.shape, str(dtype).removeprefix("torch."), c.dim, c.dst)


def _weight_grad(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor, linear: bool) -> torch.Tensor:
    """The weight's gradient as autograd's `mm_mat2_backward` makes it for the matmul's right
    operand (`w.t()` for a linear): (g^T x)^T where that operand is column-major, else x^T g."""
    rhs = w.t() if linear else w
    column_major = rhs.stride(0) == 1 and rhs.stride(1) == rhs.size(0)
    grad = g.t().mm(x).t() if column_major else x.t().mm(g)
    return grad.t() if linear else grad
