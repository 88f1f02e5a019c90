"""The printed report's baseline table (`search.report.shown_rows`): each baseline once, the few
fastest distinct 3-D candidates; the JSON keeps every row."""

from __future__ import annotations

from dataclasses import dataclass

from unityc.search.report import THREE_D_SHOWN, BaselineRow, shown_rows


@dataclass(frozen=True)
class Priced:
    iteration_s: float
    fits: bool = True
    peak_memory: int = 0


def row(name: str, seconds: float, fits: bool = True, note: str = "") -> BaselineRow:
    return BaselineRow(name, note, Priced(seconds, fits))  # type: ignore[arg-type]


def test_each_baseline_once_and_the_fastest_distinct_three_d_rows() -> None:
    rows = [
        row("data-parallel", 1.0, fits=False),
        row("data-parallel", 2.0, note="accumulation 2"),  # the fastest that fits is the one shown
        row("megatron", 3.0),
        BaselineRow("zero", "", None, "does not tile"),
        *(row(f"3-d {k}", 5.0, note=f"ZeRO-{k % 2}") for k in range(1, 19)),  # 18 alike: one shown
        row("3-d 19", 4.0, note="tensor 2"),
        row("3-d 20", 6.0, note="pipeline 2"),
        row("3-d 21", 7.0, note="data 2 x tensor 2"),
    ]
    shown, left_out = shown_rows(rows)
    names = [(b.name, b.note) for b in shown]
    assert names == [
        ("data-parallel", "accumulation 2"),
        ("megatron", ""),
        ("zero", ""),
        ("3-d 19", "tensor 2"),
        ("3-d 1", "ZeRO-1"),
        ("3-d 20", "pipeline 2"),
    ]
    assert THREE_D_SHOWN == 3 and left_out == len(rows) - len(shown) == 19
