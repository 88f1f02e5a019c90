"""`runtime/saved.py`, the counter behind `--saved-bytes`, on small autograd graphs: unique
storages over the bytes saved views reach, parameters excluded, another pair of hooks (ZeRO-3's)
run inside it with only what it keeps as a tensor counted, released after backward."""

from __future__ import annotations

from typing import Any

import torch

from unityc.runtime.saved import SavedBytes


def test_counts_unique_storages_and_excludes_parameters() -> None:
    w = torch.nn.Parameter(torch.randn(8, 4))
    x = torch.randn(16, 8, requires_grad=True)
    counter = SavedBytes.of([w])
    with counter.forward():
        h = x @ w  # saves x (16 x 8 fp32) and w (a parameter: excluded)
        y = h.relu()  # saves its result (16 x 4)
        z = (y * y).sum()  # saves y twice: one storage
    assert counter.forward_bytes == 16 * 8 * 4 + 16 * 4 * 4
    assert counter.forward_by_dtype == {"float32": 16 * 8 * 4 + 16 * 4 * 4}
    assert counter.peak_bytes == counter.forward_bytes
    z.backward()
    assert counter.live_bytes == 0  # autograd dropped what it saved


def test_a_view_counts_the_bytes_it_reaches() -> None:
    x = torch.randn(4, 8, requires_grad=True)
    whole = x * 1.0
    counter = SavedBytes()
    with counter.forward():
        part = whole[:2]  # rows 0-1 of `whole`'s storage
        (part * part).sum()
    assert counter.forward_bytes == 2 * 8 * 4


def test_inner_hooks_run_and_their_references_count_nothing() -> None:
    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(4, 8, requires_grad=True)
    packed: list[Any] = []

    def pack(t: torch.Tensor) -> Any:
        if t is w:
            packed.append("w")
            return ("ref", t.detach())  # what ZeRO-3 keeps: a reference, not the tensor
        return t

    def unpack(p: Any) -> torch.Tensor:
        return p[1] if isinstance(p, tuple) else p

    counter = SavedBytes()
    with counter.forward((pack, unpack)):
        loss = (x @ w).sum()
    assert packed == ["w"]
    assert counter.forward_bytes == 4 * 8 * 4  # x only
    loss.backward()
    assert x.grad is not None and w.grad is not None
    torch.testing.assert_close(w.grad, x.detach().sum(0, keepdim=True).T.expand(8, 8))


def test_in_flight_forwards_add_up_and_a_new_step_starts_afresh() -> None:
    x = torch.randn(4, 8, requires_grad=True)
    counter = SavedBytes()
    losses = []
    for _ in range(2):  # two micro-batches in flight before either backward
        with counter.forward():
            losses.append((x * 2.0).exp().sum())
    assert counter.forward_bytes == 4 * 8 * 4 and counter.forwards == 2
    assert counter.peak_bytes == 2 * 4 * 8 * 4
    counter.begin_step()
    for loss in losses:
        loss.backward()  # the earlier step's releases are ignored
    assert counter.live_bytes == 0 and counter.peak_bytes == 0 and counter.forwards == 0


def test_a_region_counts_as_one_forward_with_skipped_tensors_left_out() -> None:
    """The benchmarks' and kernel tests' form: `with SavedBytes.of(inputs, skip) as saved`."""
    x = torch.randn(4, 8, requires_grad=True)
    with SavedBytes.of([x], skip=lambda t: t.dtype == torch.bfloat16) as saved:
        h = (x * 2.0).exp()  # saves its result (4 x 8 fp32); x * 2.0 saves nothing
        (h.to(torch.bfloat16) * h.to(torch.bfloat16)).sum()  # the bf16 copies: skipped
        (x * x).sum()  # x: excluded
    assert saved.bytes == saved.forward_bytes == 4 * 8 * 4
    assert list(saved.sizes.values()) == [4 * 8 * 4]
