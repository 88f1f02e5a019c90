"""The importer's equivalence check: the reference interpreter on the imported graph against the
module itself, on the same inputs and weights (dropout off on both sides)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects import pcg
from unityc.frontend import import_loaded
from unityc.frontend.importer import ImportFailure
from unityc.frontend.models import LoadedModel, ModelSpec, load_model
from unityc.interpreter import assemble, run_graph


@dataclass(frozen=True)
class OutputCheck:
    index: int
    shape: tuple[int, ...]
    relative_error: float


@contextmanager
def dropout_off() -> Iterator[None]:
    """Makes every dropout the identity, as the interpreter treats it (see pcg.dropout), also
    the one inside scaled_dot_product_attention."""
    dropout, sdpa = F.dropout, F.scaled_dot_product_attention

    def identity(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return x

    def sdpa_without_dropout(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: Any, **kwargs: Any
    ) -> Any:
        if len(args) >= 2:
            args = (args[0], 0.0, *args[2:])
        else:
            kwargs["dropout_p"] = 0.0
        return sdpa(q, k, v, *args, **kwargs)

    F.dropout, F.scaled_dot_product_attention = identity, sdpa_without_dropout  # type: ignore[assignment]
    try:
        yield
    finally:
        F.dropout, F.scaled_dot_product_attention = dropout, sdpa  # type: ignore[assignment]


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
        raise ImportFailure(f"the graph has {len(actual)} outputs, the module returns {len(expected)}")
    checks = []
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a.shape != e.shape:
            raise ImportFailure(
                f"output {i}: shape {list(a.shape)} differs from the module's {list(e.shape)}"
            )
        checks.append(OutputCheck(i, tuple(e.shape), relative_error(a, e)))
    return module, checks
