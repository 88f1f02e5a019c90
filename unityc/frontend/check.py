"""The importer's equivalence check: the reference interpreter on the imported graph against the
module itself, on the same inputs and weights (dropout off on both sides)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects import pcg
from unityc.frontend import import_loaded
from unityc.frontend.models import LoadedModel, ModelSpec, load_model
from unityc.interpreter import assemble, run_graph


@dataclass(frozen=True)
class OutputCheck:
    index: int
    shape: tuple[int, ...]
    relative_error: float


@contextmanager
def dropout_off() -> Iterator[None]:
    """Makes every dropout the identity, as the interpreter treats it (see pcg.dropout)."""
    original = F.dropout

    def identity(
        x: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> torch.Tensor:
        return x

    F.dropout = identity  # type: ignore[assignment]
    try:
        yield
    finally:
        F.dropout = original  # type: ignore[assignment]


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    scale = expected.abs().max().item() if expected.numel() else 0.0
    diff = (actual.double() - expected.double()).abs().max().item() if expected.numel() else 0.0
    return diff / max(scale, 1e-30)


def reference_outputs(loaded: LoadedModel) -> list[torch.Tensor]:
    with dropout_off(), torch.no_grad():
        out = loaded.module(**loaded.inputs)
    outs = list(out) if isinstance(out, tuple | list) else [out]
    return [o for o in outs if isinstance(o, torch.Tensor)]


def interpreter_outputs(module: ModuleOp, loaded: LoadedModel) -> list[torch.Tensor]:
    state = loaded.module.state_dict(keep_vars=False)
    feeds: dict[str, torch.Tensor] = {}
    for op in module.walk():
        if isinstance(op, pcg.WeightOp):
            feeds[op.attrs()["key"]] = state[op.attrs()["key"]]
        elif isinstance(op, pcg.InputOp):
            feeds[op.attrs()["key"]] = loaded.inputs[op.attrs()["key"]]
    outputs, _ = run_graph(module, feeds=feeds)
    return [assemble(o, f"output {i}") for i, o in enumerate(outputs)]


def check_import(spec: ModelSpec) -> tuple[ModuleOp, list[OutputCheck]]:
    """Imports `spec` (built with real weights) and compares every output with the module's."""
    loaded = load_model(spec, weights=True)
    module = import_loaded(loaded)
    expected = reference_outputs(loaded)
    actual = interpreter_outputs(module, loaded)
    if len(actual) != len(expected):
        raise AssertionError(f"the graph has {len(actual)} outputs, the module returns {len(expected)}")
    checks = []
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a.shape != e.shape:
            raise AssertionError(f"output {i}: shape {list(a.shape)} != module's {list(e.shape)}")
        checks.append(OutputCheck(i, tuple(e.shape), relative_error(a, e)))
    return module, checks
