"""Context-parallel attention in the runtime (`unityc/runtime/ring_attention.py`): exact against
single-process attention on 2 and 4 gloo ranks (ring and all-to-all, zig-zag and contiguous
chunks, causal, sliding-window, padding and additive masks, grouped-query heads, rotary at each
row's global position, fp32 fused kernels and the float64 math path), and the zig-zag balance."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unityc.runtime.ring_attention import Chunking, Masking, ring_attention

WORKER = Path(__file__).with_name("ring_attention_worker.py")


@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_attention_is_exact(world: int, tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(WORKER), str(world), str(tmp_path)], capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.endswith(")")]
    assert len(lines) == 68 and all(": ok (" in line for line in lines), run.stdout


def work(chunking: Chunking, masking: Masking, seq: int) -> float:
    """The visible key area this rank's queries attend (a diagonal block counts half)."""
    c = chunking.chunk_length(seq)
    weight = {"none": 0.0, "full": 1.0, "causal": 0.5, "mask": 0.5}
    total = 0.0
    for a in chunking.chunks():
        for b in range(chunking.pieces):
            total += weight[masking.kind(range(a * c, (a + 1) * c), range(b * c, (b + 1) * c))]
    return total


@pytest.mark.parametrize("degree", [2, 4, 8])
def test_zigzag_balances_causal_work(degree: int) -> None:
    causal = Masking(causal=True)
    zigzag = {work(Chunking(degree, r), causal, 64 * degree) for r in range(degree)}
    contiguous = [work(Chunking(degree, r, zigzag=False), causal, 64 * degree) for r in range(degree)]
    assert len(zigzag) == 1
    assert contiguous == sorted(contiguous) and contiguous[-1] > contiguous[0]


def test_chunking_round_trip_and_positions() -> None:
    x = torch.arange(24).view(1, 24)
    for zigzag in (True, False):
        shards = [Chunking(3, r, zigzag).shard(x, 1) for r in range(3)]
        assert torch.equal(Chunking(3, 0, zigzag).unshard(shards, 1), x)
        for r, shard in enumerate(shards):
            assert torch.equal(shard[0], Chunking(3, r, zigzag).positions(24))
    assert Chunking(2, 0).chunks() == (0, 3) and Chunking(2, 1).chunks() == (1, 2)


def test_masking_kinds() -> None:
    causal, window = Masking(causal=True), Masking(causal=True, window=4)
    assert causal.kind(range(0, 4), range(4, 8)) == "none"
    assert causal.kind(range(4, 8), range(0, 4)) == "full"
    assert causal.kind(range(4, 8), range(4, 8)) == "causal"
    assert window.kind(range(8, 12), range(0, 4)) == "none"
    assert window.kind(range(4, 8), range(0, 4)) == "mask"
    assert Masking().kind(range(0, 4), range(8, 12)) == "full"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Chunking(2, 2), "not in a context group"),
        (lambda: Chunking(0, 0), "at least 1"),
        (lambda: Masking(window=0), "at least 1"),
        (lambda: Chunking(4, 0).shard(torch.zeros(1, 12), 1), "does not split into 8"),
        (
            lambda: ring_attention(
                torch.zeros(1, 3, 4, 2), *[torch.zeros(1, 2, 4, 2)] * 2, None, Chunking(1, 0)
            ),
            "do not divide",
        ),
        (lambda: ring_attention(*[torch.zeros(1, 2, 4)] * 3, None, Chunking(1, 0)), "must be"),
    ],
)
def test_bad_arguments_are_named(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]
