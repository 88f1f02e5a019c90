"""Measured efficiencies of GPU device kinds, replacing the presets' assumed ones.

`benchmarks/gpu_truth.py` times the cost model's ops on a real GPU and fits, per device kind,
the fraction of peak FLOP/s its matmul-like kernels reach, the fraction of peak bandwidth its
other kernels reach, and the fixed cost of one op (launch plus framework overhead). With
`--write-preset` it writes them into `CALIBRATIONS` below (between the markers), each with its
source: device, date, torch and CUDA versions, and the command. A kind without an entry keeps
the assumed figures of `presets.py` (`GPU_COMPUTE_EFFICIENCY` and the like).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from unityc.machine.spec import DeviceKind


@dataclass(frozen=True)
class Calibration:
    """Fitted figures for one device kind, and where they come from."""

    compute_efficiency: float
    memory_efficiency: float
    kernel_latency: float
    """Seconds."""
    source: str

    def __post_init__(self) -> None:
        for name in ("compute_efficiency", "memory_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"calibration {name} must lie in (0, 1], got {value}")
        if not 0 <= self.kernel_latency < 1:
            raise ValueError(f"calibration kernel_latency must lie in [0, 1) s, got {self.kernel_latency}")
        if not self.source:
            raise ValueError("a calibration needs its source")


BEGIN = "    # gpu_truth: begin (written by benchmarks/gpu_truth.py --write-preset)"
END = "    # gpu_truth: end"

CALIBRATIONS: dict[str, Calibration] = {
    # gpu_truth: begin (written by benchmarks/gpu_truth.py --write-preset)
    # gpu_truth: end
}
"""By `DeviceKind.name`. Empty until a GPU run writes it: no figure here was guessed."""


def calibrated(kind: DeviceKind) -> DeviceKind:
    """`kind` with its measured efficiencies and kernel latency, where a run recorded them."""
    found = CALIBRATIONS.get(kind.name)
    if found is None:
        return kind
    return dataclasses.replace(
        kind,
        compute_efficiency=found.compute_efficiency,
        memory_efficiency=found.memory_efficiency,
        kernel_latency=found.kernel_latency,
    )


def with_calibration(text: str, kind: str, calibration: Calibration) -> str:
    """The source of this module (`text`) with `calibration` recorded for `kind` (replacing an
    earlier entry for it); ValueError if the markers are missing."""
    lines = text.split("\n")
    if BEGIN not in lines or END not in lines:
        raise ValueError("the calibration table's markers are missing")
    start, stop = lines.index(BEGIN), lines.index(END)
    entry = (
        f"    {kind!r}: Calibration(\n"
        f"        compute_efficiency={calibration.compute_efficiency!r},\n"
        f"        memory_efficiency={calibration.memory_efficiency!r},\n"
        f"        kernel_latency={calibration.kernel_latency!r},\n"
        f"        source={calibration.source!r},\n"
        f"    ),"
    )
    kept: list[str] = []
    body = lines[start + 1 : stop]
    i = 0
    while i < len(body):  # drop the earlier entry of this kind (an entry ends at its "    ),")
        if body[i] == f"    {kind!r}: Calibration(":
            while body[i] != "    ),":
                i += 1
        else:
            kept.append(body[i])
        i += 1
    return "\n".join([*lines[: start + 1], *kept, entry, *lines[stop:]])
