"""Measured op times: the cache `tools/profile_ops.py` writes and `cost="profile"` reads.

The file is JSON:

    {"version": 1,
     "entries": {"cpu|pcg.linear|16x32xf32,32x32xf32,-|16x32xf32": {"fwd_s": 1.2e-05, "bwd_s": 3.1e-05}, ...}}

keyed by `device name | op | operand pieces | result pieces | attributes` (`op_key`), where the
device name is a machine spec's device kind name (`cpu`, `V100-SXM2-16GB`, ...); the profiler
records the local device under a name given on its command line. Times are per task (one piece
of each operand), forward and forward+backward minus forward, medians over repetitions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from unityc.cost.compute import OpCost, Piece, backward_work, forward_work

VERSION = 1


def piece_text(p: Piece | None) -> str:
    return "-" if p is None else "x".join([*(str(s) for s in p.shape), p.dtype])


def _attr_text(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "[" + ",".join(_attr_text(v) for v in value) + "]"
    return str(value)


def op_key(
    kind: str, attrs: Mapping[str, Any], operands: Sequence[Piece | None], results: Sequence[Piece]
) -> str:
    """The cache key of one task of an op (without the device name)."""
    shown = ",".join(
        f"{k}={_attr_text(v)}"
        for k, v in sorted(attrs.items())
        if v is not None and v is not False and k != "key"
    )
    ins = ",".join(piece_text(p) for p in operands)
    outs = ",".join(piece_text(p) for p in results)
    return f"{kind}|{ins}|{outs}|{shown}"


@dataclass
class ProfileCache:
    """Measured (forward, backward) seconds by `device|op_key`; counts hits and misses."""

    entries: dict[str, tuple[float, float]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    @staticmethod
    def load(path: str) -> ProfileCache:
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            raise ValueError(
                f"{path}: no such profile cache (write one with python tools/profile_ops.py)"
            ) from None
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a profile cache: {e}") from None
        if (
            not isinstance(data, dict)
            or data.get("version") != VERSION
            or not isinstance(data.get("entries"), dict)
        ):
            raise ValueError(f"{path}: not a version-{VERSION} profile cache")
        entries = {k: (float(v["fwd_s"]), float(v["bwd_s"])) for k, v in data["entries"].items()}
        return ProfileCache(entries)

    def save(self, path: str) -> None:
        data = {
            "version": VERSION,
            "entries": {k: {"fwd_s": f, "bwd_s": b} for k, (f, b) in sorted(self.entries.items())},
        }
        with open(path, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")

    def lookup(self, device: str, key: str) -> tuple[float, float] | None:
        found = self.entries.get(f"{device}|{key}")
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
        return found


def profiled_cost(
    measured: tuple[float, float],
    kind: str,
    attrs: Mapping[str, Any],
    operands: Sequence[Piece | None],
    results: Sequence[Piece],
    needs_grad: Sequence[bool] | None,
) -> OpCost:
    """An OpCost with measured times and formula work (the work still feeds the roofline bound)."""
    fwd = forward_work(kind, attrs, operands, results)
    bwd = backward_work(kind, attrs, operands, results, needs_grad)
    return OpCost(measured[0], measured[1] if bwd.flops or bwd.bytes else 0.0, fwd, bwd)
