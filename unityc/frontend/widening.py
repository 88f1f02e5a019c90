"""A model's own float32 casts that bf16-mixed needs, kept through the export.

The importer exports the model in fp32, where an explicit cast to float32 (`logits.float()`,
`softmax(x, dtype=torch.float)`, `h.to(torch.float32)`) is a no-op that the decompositions drop.
Under bf16-mixed the plan runs its forward under `torch.autocast`, where such a cast is not a
no-op when its input is a value autocast computes in bf16 (a linear's output): it is the model
saying "this part in fp32". Mixture-of-experts routers say it (Mixtral's `router_logits.float()`
before the softmax, Qwen2-MoE's `softmax(..., dtype=torch.float)`): without the cast the plan
routes on bf16 probabilities, 8 bits of mantissa, where near-equal experts tie or swap places
and the gate weights lose precision, while the model (and `--check`'s autocast reference)
routes in fp32.

`keep_widenings` makes each cast to float32 of a float32 value in the exported graph (before the
decompositions drop it) `unityc::widen`, an op the decompositions keep; the importer lowers it
(`aten._widen`) to a `pcg.cast` to f32, and `drop_idle_widenings` then removes each such cast
that changes nothing under autocast: its input is not a value autocast computes below f32 (the
ops' own `AUTOCAST` rules, as the codegen and the cost model type a bf16-mixed plan: an RMS
norm's upcast of the fp32 residual stream), or its readers compute at a fixed precision anyway
(a loss reading `logits.float()`, a linear). What is left is the identity in fp32 and, under
autocast, the model's own widening; a model without one imports as before.

One imprecision: a no-op `.float()` returns its input itself, so the trace attributes every later
read of that tensor to the cast, and a kept widening then also widens those reads (the plan
computes them in fp32 where the model, under autocast, reads its bf16 original): more precise,
never less. `softmax(x, dtype=...)` has no such alias: only the softmax reads the widening.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from unityc.dialects import pcg
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.precision import autocast_dtype

aten = torch.ops.aten

LOWER = ("bf16", "f16")
"""Element types autocast computes in below float32."""

CASTS = frozenset({aten.to.dtype, aten.to.dtype_layout, aten._to_copy.default, aten.type_as.default})
"""Ops that cast their first operand (the target type as an argument or as another tensor's)."""

DTYPE_ARGUMENT = frozenset({aten.softmax.int, aten.log_softmax.int})
"""Ops that cast their first operand first when given a dtype (`softmax(x, dim, dtype)`)."""


@torch.library.custom_op("unityc::widen", mutates_args=())
def widen(x: torch.Tensor) -> torch.Tensor:
    """x as float32 (a copy: a custom op's result may not alias its input)."""
    return x.to(torch.float32, copy=True)


@widen.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x, dtype=torch.float32)


def keep_widenings(program: torch.export.ExportedProgram) -> int:
    """Rewrites the casts to float32 of float32 values of `program` (before its decompositions)
    into `unityc::widen`, in place (see the module docstring); how many."""
    graph = program.graph_module.graph
    count = 0
    for node in list(graph.nodes):
        source = _casts_float32(node)
        if source is None:
            continue
        with graph.inserting_before(node):
            wide = graph.call_function(torch.ops.unityc.widen.default, (source,))
        wide.meta.update(node.meta)
        wide.meta["val"] = source.meta["val"].to(torch.float32)
        if node.target in DTYPE_ARGUMENT:
            node.replace_input_with(source, wide)
        else:
            node.replace_all_uses_with(wide)
            graph.erase_node(node)
        count += 1
    if count:
        graph.lint()
        program.graph_module.recompile()
    return count


def _casts_float32(node: fx.Node) -> fx.Node | None:
    """The float32 input that `node` (of the fp32 trace) casts to float32, else None."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
        return None
    if node.target not in CASTS and not (node.target in DTYPE_ARGUMENT and _dtype_argument(node)):
        return None
    source, out = node.args[0], node.meta.get("val")
    value = source.meta.get("val")
    if not (isinstance(value, torch.Tensor) and isinstance(out, torch.Tensor)):
        return None
    return source if value.dtype == out.dtype == torch.float32 else None


def _dtype_argument(node: fx.Node) -> Any:
    return node.kwargs.get("dtype", node.args[2] if len(node.args) > 2 else None)


def drop_idle_widenings(module: ModuleOp) -> int:
    """Removes from an imported `module` each `pcg.cast` to f32 of an f32 value (the lowering of
    `unityc::widen`; no other lowering makes one) that changes nothing under autocast either:
    its input is not bf16 there, or every reader computes at a fixed precision whatever it reads
    (`AUTOCAST` "bf16", a linear; "f32", a loss). How many."""
    casts = [op for op in module.walk() if isinstance(op, pcg.CastOp) and _same_type(op)]
    if not casts:
        return 0
    known: dict[SSAValue, str] = {}
    idle = [
        op
        for op in casts
        if not _bf16_under_autocast(op.input, known)
        or all(getattr(use.operation, "AUTOCAST", "") in FIXED for use in op.results[0].uses)
    ]
    for op in idle:
        op.results[0].replace_all_uses_with(op.input)
        op.detach()
        op.erase()
    return len(idle)


FIXED = ("bf16", "f32")
"""Autocast rules whose result does not depend on the precision of what the op reads."""


def _same_type(op: Operation) -> bool:
    return op.results[0].type == op.operands[0].type


def _bf16_under_autocast(value: SSAValue, known: dict[SSAValue, str]) -> bool:
    """Whether a bf16-mixed program holds `value` in bf16 (its producers' `AUTOCAST` rules,
    `precision.autocast_dtype`, from the graph's sources on); `known`: the types found so far
    (filled here, shared across calls)."""
    stack = [value]
    while stack:
        v = stack[-1]
        if v in known:
            stack.pop()
            continue
        owner = v.owner
        operands = list(owner.operands) if isinstance(owner, Operation) else []
        pending = [o for o in operands if o not in known]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        rule = getattr(owner, "AUTOCAST", "declared")
        declared = str(v.type.element_type) if isinstance(v.type, TensorType) else ""
        known[v] = autocast_dtype(rule, [known[o] for o in operands], declared)
    return known[value] in LOWER
