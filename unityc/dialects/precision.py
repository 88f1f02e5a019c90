"""Training precision: the graph-function attribute `unityc.precision`.

```mlir
func.func @main() -> !pcg.tensor<f32> attributes {unityc.precision = "bf16-mixed"} {
```

* absent or `"fp32"`: every op computes in the element types the graph states;
* `"bf16-mixed"`: mixed precision as `torch.autocast(dtype=torch.bfloat16)` runs it. The graph
  keeps its fp32 types (weights, optimizer state and gradient reductions stay fp32: the
  *master weights*); contractions (`autocast_bf16_ops`) compute in bf16 and write bf16 results,
  the losses (and, on GPUs, softmax, layer norm, exp, pow and sums) compute in fp32, and every
  other op computes in the widest float type it reads. `autocast_dtypes` says which element type
  each value then has; the cost model prices those, the generated program runs under autocast.

The importer records it (`unityc-import --precision bf16-mixed`); every pass keeps the graph
function's attributes; `check_precision` is part of verification.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import func
from xdsl.dialects.builtin import StringAttr

from unityc.dialects.diagnostics import located

PRECISION = "unityc.precision"
FP32 = "fp32"
BF16_MIXED = "bf16-mixed"
PRECISIONS = (FP32, BF16_MIXED)


def precision_problem(value: str) -> str | None:
    """Why `value` is not a precision, or None."""
    if value in PRECISIONS:
        return None
    return f"unknown precision '{value}' (known: {', '.join(PRECISIONS)})"


def precision_of(fn: func.FuncOp) -> str:
    """The graph function's precision (`fp32` when it names none); a located error when the
    attribute is malformed."""
    attr = fn.attributes.get(PRECISION)
    if attr is None:
        return FP32
    if not isinstance(attr, StringAttr):
        raise located(fn, f"'{PRECISION}' must be a string (one of {', '.join(PRECISIONS)}), got {attr}")
    problem = precision_problem(attr.data)
    if problem is not None:
        raise located(fn, f"'{PRECISION}': {problem}")
    return attr.data


check_precision = precision_of
"""Verification: the attribute, if present, names a known precision."""


def precision_attrs(precision: str) -> dict[str, StringAttr]:
    """The graph function's attributes that record `precision` (none for fp32, the default)."""
    if (problem := precision_problem(precision)) is not None:
        raise ValueError(problem)
    return {} if precision == FP32 else {PRECISION: StringAttr(precision)}


FLOAT_WIDTH = {"bf16": 2, "f16": 2, "f32": 4, "f64": 8}
"""Float element types by width: torch promotes to the widest one an op reads."""


def autocast_dtype(rule: str, operands: Sequence[str | None], declared: str) -> str:
    """The element type (`bf16`, `f32`, ...) an op of autocast `rule` (an op class's
    `AUTOCAST`) writes under bf16-mixed, given the element types it reads under it (None: an
    absent operand) and its declared result type. Integer and boolean results stay declared."""
    if declared not in FLOAT_WIDTH or rule == "declared":
        return declared
    if rule == "bf16":
        return "bf16"
    if rule == "f32":
        return "f32"
    floats = [d for d in operands if d in FLOAT_WIDTH]
    if rule == "input":
        first = operands[0] if operands else None
        return first if first in FLOAT_WIDTH else declared  # type: ignore[return-value]
    if rule == "promote":
        return max(floats, key=FLOAT_WIDTH.__getitem__) if floats else declared
    raise ValueError(f"unknown autocast rule '{rule}'")
