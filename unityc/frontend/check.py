"""The importer's equivalence check: the reference interpreter on the imported graph against the
module itself, on the same inputs and weights (dropout off on both sides).

Two comparisons:

1. forward, in the model's own precision: every output (the loss first), each element within
   `OUTPUT_TOLERANCE` plus what fp32 itself errs there: the module is also run in float64 and
   the tolerance follows the fp32 module's own error against it, element by element, as the
   generated programs' `--check` does (`runtime.check.allowed_errors`: a stock
   EfficientNet-B0's logits differ by 1.3e-4 between two fp32 op orders, while a wrong graph is
   off by far more than either order's rounding);
2. forward and backward in float64 (the module converted, the interpreter run with float64
   floats; its kernels are torch, so autograd runs through them): the loss and the gradient of
   every weight, by state_dict key (a packed weight the graph reads as parts: their gradients
   side by side). A wrong backward (a dropped `padding_idx`, a lost gradient
   path) fails here even when every forward output agrees. Gradients are measured against at
   least `NOISE_FLOOR` of the largest gradient, as the generated programs' `--check` does (a
   gradient that is zero in exact arithmetic is float noise on both sides).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map
from xdsl.dialects.builtin import ModuleOp

from unityc.dialects import pcg
from unityc.frontend import import_loaded
from unityc.frontend.importer import ImportFailure
from unityc.interpreter import assemble, run_graph
from unityc.models.spec import LoadedModel, ModelSpec, load_model
from unityc.runtime.check import NOISE_FLOOR, allowed_errors, dropout_off, largest, relative_error
from unityc.runtime.parts import WeightKey, stored_key

OUTPUT_TOLERANCE = 1e-5
"""Forward outputs in the model's precision (fp32: different but equivalent op orders)."""
FLOAT64_TOLERANCE = 1e-6
"""The loss and gradients, both sides in float64. Not 1e-9: constants folded at import (a rotary
table computed from a buffer, a mask) hold float32 values, the float64 module computes them
in float64; that alone differs by ~1e-8. A wrong backward differs by far more (the dropped
padding_idx: 1.7)."""


@dataclass(frozen=True)
class Check:
    """One compared tensor: `what` names it ("output 1", "loss", "gradient of 'fc.weight'")."""

    what: str
    shape: tuple[int, ...]
    relative_error: float
    tolerance: float
    """The largest error allowed (element by element where `within` is set)."""
    within: bool | None = None
    """Whether every element is within its own allowed error (None: one tolerance for all)."""

    @property
    def ok(self) -> bool:
        if self.within is not None:
            return self.within
        return self.relative_error <= self.tolerance  # False for NaN


def _outputs(value: object) -> list[torch.Tensor]:
    outs = list(value) if isinstance(value, tuple | list) else [value]
    return [o for o in outs if isinstance(o, torch.Tensor)]


def reference_outputs(loaded: LoadedModel) -> list[torch.Tensor]:
    with dropout_off(), torch.no_grad():
        return _outputs(loaded.module(**loaded.inputs))


def _feeds(module: ModuleOp, weights: Mapping[str, torch.Tensor], inputs: Mapping[str, torch.Tensor]):
    feeds: dict[str, torch.Tensor] = {}
    for op in module.walk():
        if isinstance(op, pcg.WeightOp):  # a part is a view of its stored tensor (one gradient)
            key = WeightKey.parse(op.attrs()["key"])
            stored = weights[key.stored]
            feeds[str(key)] = key.take(stored)
        elif isinstance(op, pcg.InputOp):
            feeds[op.attrs()["key"]] = inputs[op.attrs()["key"]]
    return feeds


def interpreter_outputs(
    module: ModuleOp,
    weights: Mapping[str, torch.Tensor],
    inputs: Mapping[str, torch.Tensor],
    float_dtype: torch.dtype | None = None,
) -> list[torch.Tensor]:
    outputs, _ = run_graph(module, feeds=_feeds(module, weights, inputs), float_dtype=float_dtype)
    return [assemble(o, f"output {i}") for i, o in enumerate(outputs)]


Float64Run = tuple[torch.nn.Module, dict[str, torch.Tensor], list[torch.Tensor]]
"""The module converted to float64, its float64 inputs, and its outputs on them (with autograd)."""


def float64_run(loaded: LoadedModel) -> Float64Run:
    """The module run in float64 (dropout off), once: its outputs are what the fp32 outputs err
    against, and its loss is the gradient check's reference."""
    reference = copy.deepcopy(loaded.module).double()
    inputs = _float64(loaded.inputs)
    with dropout_off(), _Float64Throughout():
        return reference, inputs, _outputs(reference(**inputs))


class _Float64Throughout(torch.overrides.TorchFunctionMode):
    """The float64 run stays float64 where the module names float32 itself: an op given a
    float64 tensor and `torch.float32` (CPM-Ant's and Llama's RMS norms `x.to(torch.float32)`,
    `softmax(..., dtype=torch.float32)`, `x.float()`) gets float64 instead. `.double()` converts
    only parameters and buffers; without this the reference rounds to float32 mid-model, and
    an exact graph's float64 gradients differ from it by 1e-5 (CPM-Ant). A float32 made from
    integers or a factory (a rotary table's `arange(..., dtype=torch.float32)`) stays float32,
    as the graph's folded constants hold it. A factory of the default dtype given a number only
    float64 holds (XGLM's `torch.full((), torch.finfo(weights.dtype).min)`, the float64 module's
    mask floor) makes it float64, where float32 would refuse it as an overflow."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        leaves = tree_leaves((args, kwargs))
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        if any(t.dtype == torch.float64 for t in tensors):
            if func is torch.Tensor.float:
                func = torch.Tensor.double
            else:
                args, kwargs = tree_map(_as_float64, (args, kwargs))
        elif not tensors and kwargs.get("dtype") is None and any(_beyond_float32(x) for x in leaves):
            kwargs = {**kwargs, "dtype": torch.float64}
        return func(*args, **kwargs)


FLOAT32_MAX = torch.finfo(torch.float32).max


def _beyond_float32(x: Any) -> bool:
    """A finite Python float that float32 cannot hold (it would overflow)."""
    return isinstance(x, float) and FLOAT32_MAX < abs(x) < float("inf")


def _as_float64(x: Any) -> Any:
    return torch.float64 if x is torch.float32 else x


def _compare_outputs(
    actual: list[torch.Tensor], expected: list[torch.Tensor], exact: list[torch.Tensor] | None = None
) -> list[Check]:
    if len(actual) != len(expected):
        raise ImportFailure(f"the graph has {len(actual)} outputs, the module returns {len(expected)}")
    checks = []
    for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
        if a.shape != e.shape:
            raise ImportFailure(
                f"output {i}: shape {list(a.shape)} differs from the module's {list(e.shape)}"
            )
        x = exact[i] if exact is not None and exact[i].shape == e.shape else None
        checks.append(_output_check(f"output {i}", a, e, x))
    return checks


def _output_check(
    what: str, actual: torch.Tensor, expected: torch.Tensor, exact: torch.Tensor | None
) -> Check:
    """`actual` against the module's `expected`, each element within OUTPUT_TOLERANCE plus fp32's
    own error there (`exact`: float64); one tolerance where no float64 output is at hand."""
    error = relative_error(actual, expected)
    floating = expected.is_floating_point() and actual.is_floating_point()
    allowed = allowed_errors(OUTPUT_TOLERANCE, expected, exact) if floating else OUTPUT_TOLERANCE
    if isinstance(allowed, float) or expected.numel() == 0:
        return Check(what, tuple(expected.shape), error, OUTPUT_TOLERANCE)
    scale = max(expected.double().abs().max().item(), 1e-30)
    excess = ((actual.double() - expected.double()).abs() / scale - allowed).nan_to_num(nan=float("inf"))
    within = bool((excess <= 0).all())
    return Check(what, tuple(expected.shape), error, float(allowed.max()), within)


def _float64(inputs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}


def gradient_checks(module: ModuleOp, loaded: LoadedModel, run: Float64Run | None = None) -> list[Check]:
    """The loss and every weight's gradient, module (autograd) against interpreter (autograd
    through its torch kernels), both in float64 (`run`: the module's float64 run, made here if
    not given). Empty when nothing in the graph is trained."""
    trained = _trained(module, loaded.module)  # the float64 copy has the same names and flags
    if not trained:
        return []
    reference, inputs, outputs = run or float64_run(loaded)
    params = dict(reference.named_parameters(remove_duplicate=False))
    expected_loss = outputs[0]
    expected_loss.backward()
    state = {k: v.detach() for k, v in reference.state_dict(keep_vars=True).items()}
    weights = {**state, **{k: params[k].detach().clone().requires_grad_() for k in trained}}
    actual_loss = interpreter_outputs(module, weights, inputs, torch.float64)[0]
    actual_loss.backward()

    expected = {k: params[k].grad for k in trained}
    actual = {k: weights[k].grad for k in trained}
    floor = NOISE_FLOOR * largest(list(expected.values()))
    loss_error = relative_error(actual_loss.detach(), expected_loss.detach())
    checks = [Check("loss", (), loss_error, FLOAT64_TOLERANCE)]
    for k in trained:
        want, got = expected[k], actual[k]
        e = torch.zeros_like(params[k]) if want is None else want
        a = torch.zeros_like(params[k]) if got is None else got
        checks.append(
            Check(f"gradient of '{k}'", tuple(e.shape), relative_error(a, e, floor), FLOAT64_TOLERANCE)
        )
    read = {id(params[k]) for k in trained}
    for name, p in reference.named_parameters():
        if id(p) not in read and p.grad is not None and p.grad.abs().max().item() > floor:
            checks.append(Check(f"gradient of '{name}' (no weight of the graph)", tuple(p.shape), 1.0, 0.0))
    return checks


def _trained(module: ModuleOp, model: torch.nn.Module) -> list[str]:
    """The state_dict keys of the graph's weights that `model` trains."""
    params = dict(model.named_parameters(remove_duplicate=False))
    keys = sorted({stored_key(op.attrs()["key"]) for op in module.walk() if isinstance(op, pcg.WeightOp)})
    return [k for k in keys if k in params and params[k].requires_grad]


def check_import(spec: ModelSpec) -> tuple[ModuleOp, list[Check]]:
    """Imports `spec` (built with real weights) and compares every output with the module's,
    then the loss and every weight's gradient (see the module docstring)."""
    loaded = load_model(spec, weights=True)
    module = import_loaded(loaded)
    expected = reference_outputs(loaded)
    state = loaded.module.state_dict(keep_vars=False)
    actual = interpreter_outputs(module, state, loaded.inputs)
    try:
        run: Float64Run | None = float64_run(loaded)
    except RuntimeError:
        # Some modules do not run in float64 (`where(mask, 0.0, finfo(x.dtype).min)` overflows
        # its float32 scalar): their outputs keep the fixed tolerance; one that trains a weight
        # of the graph still needs the float64 gradient check, which then fails with the cause.
        if _trained(module, loaded.module):
            raise
        run = None
    exact = None if run is None else [o.detach() for o in run[2]]
    checks = _compare_outputs(actual, expected, exact)
    return module, [*checks, *gradient_checks(module, loaded, run)]
