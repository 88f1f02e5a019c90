"""Expert parallelism's cost (`unityc/cost/experts.py`) against figures computed by hand from
the DGX A100 preset (NVSwitch 300 GB/s and 2 us per direction, 200 GB/s and 6 us per node)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from unityc.cost.experts import ExpertLoad, expert_devices, expert_exchange, expert_memory
from unityc.machine.presets import dgx_a100

MIB = 2**20
LOAD = ExpertLoad(tokens=4096, hidden=4096, top_k=2, experts=8)  # bf16: S = 8192 rows x 8 KiB = 64 MiB


def test_within_a_node() -> None:
    x = expert_exchange(LOAD, expert_devices(8), dgx_a100(1))
    move = 7 / 8 * 64 * MIB / 300e9 + 7 * 2e-6  # 209.73 us
    counts = 7 / 8 * 64 / 300e9 + 7 * 2e-6  # 8 int64 counts: the latency
    assert [c.seconds for c in x.forward] == pytest.approx([counts, move, move], rel=1e-12)
    assert x.fwd_s == pytest.approx(433.47e-6, rel=1e-4) and x.bwd_s == pytest.approx(419.47e-6, rel=1e-4)
    assert x.forward[1].devices == tuple(range(8))
    # the router's skew: the slowest rank receives twice the mean, its bytes term doubles
    skewed = expert_exchange(ExpertLoad(4096, 4096, 2, 8, skew=2.0), expert_devices(8), dgx_a100(1))
    assert skewed.forward[1].seconds == pytest.approx(2 * 195.73e-6 + 14e-6, rel=1e-4)


def test_across_nodes_shares_the_node_link() -> None:
    x = expert_exchange(ExpertLoad(4096, 4096, 2, 16), expert_devices(16), dgx_a100(2))
    # 8 members per node each send half their 64 MiB off the node over its 200 GB/s: 1.342 ms,
    # beyond one buffer's 15/16 x 64 MiB / 200 GB/s (314.6 us); latency 15 x 6 us
    assert x.forward[1].seconds == pytest.approx(8 * 32 * MIB / 200e9 + 15 * 6e-6, rel=1e-12)
    assert x.forward[1].seconds == pytest.approx(1.4322e-3, rel=1e-4)
    # expert 2 x tensor 8 puts one member per node: only the slowest link's bytes term
    spread = expert_devices(2, tensor=8)
    assert spread == (0, 8)
    one = expert_exchange(ExpertLoad(4096, 4096, 2, 8), spread, dgx_a100(2)).forward[1].seconds
    assert one == pytest.approx(1 / 2 * 64 * MIB / 200e9 + 6e-6, rel=1e-12)


def test_one_device_exchanges_nothing() -> None:
    x = expert_exchange(LOAD, expert_devices(1), dgx_a100(1))
    assert (x.forward, x.backward, x.fwd_s) == ((), (), 0)


def test_memory() -> None:
    m = expert_memory(LOAD, 8, ffn=14336)  # Mixtral's experts: SwiGLU, ffn 14336
    assert (m.dispatched, m.combined, m.transient) == (64 * MIB, 64 * MIB, 64 * MIB)
    assert m.activations == 8192 * 4 * 14336 * 2 == 896 * MIB and m.saved == 1024 * MIB
    skewed = expert_memory(ExpertLoad(4096, 4096, 2, 8, skew=1.5), 8, ffn=14336, gated=False)
    assert (skewed.dispatched, skewed.activations) == (96 * MIB, 12288 * 2 * 14336 * 2)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ExpertLoad(0, 4, 1, 2), "tokens must be a positive integer"),
        (lambda: ExpertLoad(4, 4, 3, 2), "top-3 of 2 experts"),
        (lambda: ExpertLoad(4, 4, 1, 2, skew=0.5), ">= 1"),
        (lambda: LOAD.received(3), "8 experts do not split over 3"),
        (lambda: ExpertLoad(4, 4, 1, 8, skew=4.0).received(2), "exceeds the EP degree 2"),
    ],
)
def test_bad_loads_are_named(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_the_compiler_side_imports_no_torch() -> None:
    # the layout and the cost model read the group layout from a torch-free runtime module
    code = "import sys, unityc.cost.experts, unityc.search.layout; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
