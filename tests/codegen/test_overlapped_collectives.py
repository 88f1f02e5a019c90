"""Sequence-parallel matmuls overlap their backward collectives as Megatron-LM's
`LinearWithGradAccumulationAndAsyncCommunication` does (`runtime.regather.Overlapped`): the
all-gather of the kept shard is launched before the input-gradient matmul and waited after it;
for a gather's only reader, the reduce-scatter of the input gradient is launched before the
weight-gradient matmul and waited after it, and the gather's own backward then moves nothing.
The gradients are bit for bit autograd's on the kept gathered tensor.

A fake two-rank communicator (rank 0; the other rank's piece and contribution made from this
rank's) logs when each collective starts and is waited for; a dispatch mode logs the matmuls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from unityc.runtime.context import Context
from unityc.runtime.plan import Collective, torch_dtype

LOG: list[str] = []


class FakeComm:
    """Rank 0 of two: the other rank's shard is this one's negated and reversed (so cast, then
    gathered, equals gathered, then cast), its contribution to a reduce-scatter this rank's own
    chunk halved."""

    rank, world, device, float_dtype = 0, 2, torch.device("cpu"), None

    def dtype(self, name: str) -> torch.dtype:
        return torch_dtype(name)

    def _result(self, c: Collective, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dtype(c.dtype))
        if c.kind == "all_gather":
            return torch.cat([x, -x.flip(-1)], c.dim)
        assert c.kind == "reduce_scatter", c.kind
        mine = x.chunk(2, c.dim)[0]
        return mine + mine / 2

    def run(self, c: Collective, x: torch.Tensor | None) -> torch.Tensor | None:
        assert x is not None
        LOG.append(f"run {c.kind}")
        return self._result(c, x)

    def start(self, c: Collective, x: torch.Tensor) -> Callable[[], torch.Tensor]:
        LOG.append(f"start {c.kind}")
        out = self._result(c, x)

        def wait() -> torch.Tensor:
            LOG.append(f"wait {c.kind}")
            return out

        return wait


class Matmuls(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm):
            LOG.append("mm")
        return func(*args, **kwargs or {})


GATHER = Collective("all_gather", (0, 1), (0, 1), (2, 3, 8), dim=1)


def run(
    overlap: bool, readers: int, reader: Callable[..., torch.Tensor], autocast: bool = False
) -> tuple[list[torch.Tensor], list[str]]:
    """Gradients of (shard, weight, bias) through gather -> `reader`, and the backward's log."""
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, requires_grad=True)
    w = torch.randn(*((8, 5) if reader in (conv1d, transposed) else (5, 8)), requires_grad=True)
    b = torch.randn(5, requires_grad=True)
    ctx = Context(FakeComm())  # type: ignore[arg-type]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        full = ctx.parallel(x * 1, (GATHER,), grad=True, regather=overlap, readers=readers)
        assert full is not None
        if overlap:
            with ctx.regathering():
                y = reader(full, w, b)
        else:
            y = reader(full, w, b)
    loss = (y.float() * torch.linspace(-1, 1, y.numel()).view(y.shape)).sum() + ctx.token
    LOG.clear()
    with Matmuls():
        loss.backward()
    assert x.grad is not None and w.grad is not None and b.grad is not None
    return [x.grad, w.grad, b.grad], list(LOG)


def linear(full: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.linear(full, w, b)


def conv1d(full: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """GPT-2's Conv1D as the program runs it: a matmul of the flattened input by the weight
    (in x out), then the bias."""
    return full.reshape(-1, 8) @ w + b


def transposed(full: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A linear by a permuted weight (GPT-2's Conv1D weight as the plan transposes it)."""
    return F.linear(full, w.permute((1, 0)), b)


def projections(full: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Attention's q, k and v projections of one gathered input (three readers, three weights)."""
    return F.linear(full, w, b) * F.linear(full, 2 * w, -b) + F.linear(full, w.flip(0), b.flip(0))


READERS = {
    "linear": (linear, 1),
    "transposed": (transposed, 1),
    "conv1d": (conv1d, 1),
    "projections": (projections, 3),
}


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-mixed"])
@pytest.mark.parametrize("name", list(READERS))
def test_gradients_are_autograds_bit_for_bit(name: str, autocast: bool) -> None:
    reader, readers = READERS[name]
    kept, _ = run(False, readers, reader, autocast)
    overlapped, log = run(True, readers, reader, autocast)
    for a, b in zip(kept, overlapped, strict=True):
        assert torch.equal(a, b), (a - b).abs().max()
    assert "start all_gather" in log and "run all_gather" not in log


def test_the_collectives_run_beside_the_matmuls() -> None:
    """The only reader: gather launched, input gradient, gather waited; reduce-scatter
    launched, weight gradient, reduce-scatter waited; the gather's backward moves nothing."""
    _, log = run(True, 1, linear)
    assert log == [
        "start all_gather",
        "mm",
        "wait all_gather",
        "start reduce_scatter",
        "mm",
        "wait reduce_scatter",
    ]
    _, kept = run(False, 1, linear)
    assert kept == ["mm", "mm", "run reduce_scatter"]


def test_several_readers_share_one_gather_and_reduce_their_sum() -> None:
    """q, k and v: one all-gather, beside the first input gradient; the reduce-scatter of the
    summed gradient stays the gather's own (after every reader)."""
    _, log = run(True, 3, projections)
    assert log.count("start all_gather") == 1 and log.count("wait all_gather") == 1
    assert log.index("start all_gather") < log.index("mm") < log.index("wait all_gather")
    assert log[-1] == "run reduce_scatter" and "start reduce_scatter" not in log
