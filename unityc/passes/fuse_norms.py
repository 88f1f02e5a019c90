"""fuse-norms: recognize RMS norm, gated MLP activations and the tanh GELU written as
element-wise ops and make each one op (`pcg.rms_norm`, `pcg.gated_activation`, `pcg.gelu`), so
the program runs one kernel that keeps only what its backward needs, and the cost and memory
models price that kernel.

RMS norm (HF Llama, Qwen2, Mistral, T5, Gemma; the decomposition of `F.rms_norm`):

    h = x or cast(x, f32)                                   (x: float)
    n = mul(h', pow(scalar_add(reduce_mean(pow(h, 2), last k dims, keepdim), eps), -0.5))
    y = mul(w, n)                       (w [normalized shape]; mul(n, w) too)
      | mul(w, cast(n, x's type))       HF Llama's `weight * h.to(input_dtype)`: `weight_after_cast`
      | cast(mul(w, n), x's type)       Gemma's `(n * (1 + w)).type_as(x)`
      | n | cast(n, x's type)           no weight

with h' = x or h, and w = scalar_add(v, c) read as weight v with `offset` c (Gemma's `1 + w`),
v = cast(v', f32) as v' when x has v''s element type.

Gated activation: mul(act(g), u) or mul(u, act(g)) with u of g's shape and element type, act
SiLU (`mul(g, sigmoid(g))`, how SiLU is imported) or GELU (exact or tanh).

The tanh GELU (GPT-2's, GPT-J's and BLOOM's `gelu_new`, `0.5 * x * (1 + tanh(sqrt(2 / pi) *
(x + 0.044715 * x^3)))`, which HF writes element by element):

    mul(scalar_mul(x, 0.5), scalar_add(tanh(scalar_mul(add(x, scalar_mul(pow(x, 3), 0.044715)),
        sqrt(2 / pi))), 1))                              (either operand order of mul and add)

is `pcg.gelu` with `tanh`, `F.gelu(x, approximate="tanh")`: one kernel keeping x for its backward
where the chain keeps four tensors of x's size (pow's x, tanh's result and the mul's two
operands; at GPT-3's MLP 4 x 4 bytes an element of the 4h-wide activation in fp32).

Every op the fused op replaces may only be used by other replaced ops (the leading cast of x
excepted: it stays while something else reads it), so nothing observes what disappears. The
frontend runs this pass after `fuse-attention`, which takes Qwen3's per-head norms into the
attention op first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern
from xdsl.transforms.dead_code_elimination import region_dce

from unityc.dialects import pcg
from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import FLOAT_TYPES, TensorType
from unityc.dialects.plan import carry_plan


def _owner(value: SSAValue | None, cls: type[Operation]) -> Any:
    return value.owner if value is not None and isinstance(value.owner, cls) else None


def _type(value: SSAValue) -> TensorType:
    assert isinstance(value.type, TensorType)
    return value.type


def _pow(value: SSAValue, exponent: float) -> Any:
    p = _owner(value, pcg.PowOp)
    return p if p is not None and p.attrs()["exponent"] == exponent else None


def _uncast(value: SSAValue) -> SSAValue:
    """x for cast(x, f32) of a float x, else the value itself."""
    cast = _owner(value, pcg.CastOp)
    if cast is None or _type(value).element_type != f32 or _type(cast.input).element_type not in FLOAT_TYPES:
        return value
    return cast.input


@dataclass
class _Core:
    """n = h' · rsqrt(mean(h², dims) + eps) over x (h, h' = x or cast(x, f32))."""

    x: SSAValue
    dims: int
    eps: float
    ops: list[Operation]


def _core(value: SSAValue) -> _Core | None:
    mul = _owner(value, pcg.MulOp)
    if mul is None:
        return None
    for h, scale in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
        rsqrt = _pow(scale, -0.5)
        eps = _owner(rsqrt.input, pcg.ScalarAddOp) if rsqrt is not None else None
        mean = _owner(eps.input, pcg.ReduceOp) if eps is not None else None
        square = _pow(mean.input, 2.0) if mean is not None else None
        if rsqrt is None or eps is None or mean is None or square is None:
            continue
        if _uncast(square.input) != _uncast(h) or _type(h).shape != _type(value).shape:
            continue
        x, rank = _uncast(h), len(_type(value).shape)
        a = mean.attrs()
        dims = sorted(d % rank for d in a["dims"])
        if a["kind"] != "mean" or not a["keepdim"] or not dims or dims != list(range(rank - len(dims), rank)):
            continue
        return _Core(x, len(dims), eps.attrs()["value"], [mul, rsqrt, eps, mean, square])
    return None


def _cast_to(value: SSAValue, target: SSAValue) -> Any:
    """The cast making `value` of `target`'s element type (a narrower one than f32), or None."""
    cast = _owner(value, pcg.CastOp)
    dtype = _type(target).element_type
    return cast if cast is not None and dtype != f32 and _type(value).element_type == dtype else None


def _weighted(value: SSAValue) -> tuple[_Core, SSAValue, float | None, bool, list[Operation]] | None:
    """(core, weight, offset, weight_after_cast, ops) of mul(w, n) or mul(w, cast(n))."""
    mul = _owner(value, pcg.MulOp)
    if mul is None:
        return None
    for w, normed in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
        after_cast = _owner(normed, pcg.CastOp)
        core = _core(after_cast.input if after_cast is not None else normed)
        if core is None or (after_cast is not None and _cast_to(normed, core.x) is None):
            continue
        if _type(w).shape != _type(core.x).shape[-core.dims :] or _type(normed).shape != _type(value).shape:
            continue
        ops = [mul, *([after_cast] if after_cast is not None else []), *core.ops]
        shifted = _owner(w, pcg.ScalarAddOp)
        if shifted is not None and all(use.operation is mul for use in shifted.output.uses):
            return core, shifted.input, shifted.attrs()["value"], after_cast is not None, [*ops, shifted]
        return core, w, None, after_cast is not None, ops
    return None


def _rms_norm(root: Operation) -> tuple[_Core, SSAValue | None, float | None, bool, list[Operation]] | None:
    """The RMS norm whose result `root` makes: (core, weight, offset, weight_after_cast, ops)."""
    if isinstance(root, pcg.CastOp):
        inner = _weighted(root.input)
        if inner is not None and not inner[3] and _cast_to(root.output, inner[0].x) is not None:
            return inner[0], inner[1], inner[2], False, [root, *inner[4]]
        core = _core(root.input)
        if core is not None and _cast_to(root.output, core.x) is not None:
            return core, None, None, False, [root, *core.ops]
        return None
    if not isinstance(root, pcg.MulOp):
        return None
    weighted = _weighted(root.results[0])
    if weighted is not None:
        return weighted
    core = _core(root.results[0])
    return (core, None, None, False, core.ops) if core is not None else None


def _activation(value: SSAValue) -> tuple[SSAValue, str, list[Operation]] | None:
    """(g, act, ops) of silu(g) = mul(g, sigmoid(g)) or gelu(g)."""
    gelu = _owner(value, pcg.GeluOp)
    if gelu is not None:
        return gelu.input, "gelu_tanh" if gelu.attrs().get("tanh") else "gelu", [gelu]
    mul = _owner(value, pcg.MulOp)
    if mul is None:
        return None
    for g, s in ((mul.lhs, mul.rhs), (mul.rhs, mul.lhs)):
        sigmoid = _owner(s, pcg.SigmoidOp)
        if sigmoid is not None and sigmoid.input == g:
            return g, "silu", [mul, sigmoid]
    return None


_GELU_SCALE = math.sqrt(2.0 / math.pi)


def _scaled(value: SSAValue, scale: float) -> Any:
    """The `scalar_mul` by `scale` (to fp32 precision) making `value`, or None."""
    op = _owner(value, pcg.ScalarMulOp)
    return op if op is not None and math.isclose(op.attrs()["scale"], scale, rel_tol=1e-6) else None


def _gelu_tanh(root: Operation) -> tuple[SSAValue, list[Operation]] | None:
    """(x, ops) of the tanh GELU (module docstring) whose last op is `root`, or None."""
    if not isinstance(root, pcg.MulOp):
        return None
    for half, plus in ((root.lhs, root.rhs), (root.rhs, root.lhs)):
        halved, one = _scaled(half, 0.5), _owner(plus, pcg.ScalarAddOp)
        if halved is None or one is None or one.attrs()["value"] != 1.0:
            continue
        x = halved.input
        tanh = _owner(one.input, pcg.TanhOp)
        inner = _scaled(tanh.input, _GELU_SCALE) if tanh is not None else None
        added = _owner(inner.input, pcg.AddOp) if inner is not None else None
        if added is None:
            continue
        for first, cubic in ((added.lhs, added.rhs), (added.rhs, added.lhs)):
            term = _scaled(cubic, 0.044715)
            cube = _pow(term.input, 3.0) if term is not None else None
            if first == x and cube is not None and cube.input == x and _type(root.results[0]) == _type(x):
                return x, [root, halved, one, tanh, inner, added, term, cube]
    return None


def _fuse_gelu(root: Operation) -> Operation | None:
    found = _gelu_tanh(root)
    if found is None or not _closed(found[1], root):
        return None
    fused = pcg.GeluOp.build_inferred([found[0]], tanh=True)
    return fused if fused.results[0].type == root.results[0].type else None


def _closed(ops: list[Operation], root: Operation) -> bool:
    """Whether every result of the replaced ops is used only by replaced ops (root excepted)."""
    inside = set(ops)
    return all(
        use.operation in inside for op in inside if op is not root for r in op.results for use in r.uses
    )


def _fuse_norm(root: Operation) -> Operation | None:
    found = _rms_norm(root)
    if found is None or not _closed(found[4], root):
        return None
    core, weight, offset, after_cast, _ = found
    if weight is not None and _type(weight).element_type != _type(core.x).element_type:
        weight = _uncast(weight)  # Gemma's `w.float()` of a bf16 weight
    attrs: dict[str, Any] = {"dims": core.dims, "eps": core.eps}
    if offset is not None and offset != 0.0:
        attrs["offset"] = offset
    if after_cast:
        attrs["weight_after_cast"] = True
    try:
        fused = pcg.RmsNormOp.build_inferred([core.x, weight], **attrs)
    except FormError:
        return None  # e.g. a weight of another element type
    return fused if fused.results[0].type == root.results[0].type else None


def _fuse_gated(root: Operation) -> Operation | None:
    if not isinstance(root, pcg.MulOp):
        return None
    for a, up in ((root.lhs, root.rhs), (root.rhs, root.lhs)):
        found = _activation(a)
        if found is None or _type(a) != _type(up) or _type(found[0]) != _type(a):
            continue
        if not _closed([root, *found[2]], root):
            continue
        fused = pcg.GatedActivationOp.build_inferred([found[0], up], act=found[1])
        if fused.results[0].type == root.results[0].type:
            return fused
    return None


class FuseNorms(RewritePattern):
    """Each RMS norm, gated activation and tanh GELU made one op, matched from its last op (the
    walk goes backwards, so a norm's weight multiplication is seen before the normalization
    inside it, and a gated activation's product before a GELU inside it)."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if not isinstance(op, pcg.MulOp | pcg.CastOp):
            return
        fused = _fuse_norm(op) or _fuse_gated(op) or _fuse_gelu(op)
        if fused is None:
            return
        hints = {pcg.RmsNormOp: "rms_norm", pcg.GeluOp: "gelu"}
        fused.results[0].name_hint = hints.get(type(fused), "gated")
        carry_plan(op, fused)
        rewriter.replace(op, fused)


@dataclass(frozen=True)
class FuseNormsPass(ModulePass):
    """Fuses RMS norms, gated activations and tanh GELUs into `pcg.rms_norm`,
    `pcg.gated_activation` and `pcg.gelu`."""

    name = "fuse-norms"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseNorms(), walk_reverse=True, apply_recursively=False).rewrite_module(op)
        region_dce(op.body)
