"""Element-wise `pcg` ops: unary functions (linear ones accept partial sums), comparisons,
dropout, casts, broadcasting binary arithmetic, and gated activations."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import i1
from xdsl.ir import Attribute
from xdsl.irdl import (
    operand_def,
    result_def,
)

from unityc.dialects.forms import Form, FormBuilder
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg_types import (
    PcgOp,
    TensorType,
    check_probability,
    float_dtype,
    form_builder,
    op_error,
    result_type,
    same_dims,
)
from unityc.dialects.syntax import Kind, op_definition


class UnaryOp(PcgOp, fam.Elementwise):
    """f(x) element by element. Linear ops also accept partial sums."""

    input = operand_def(TensorType)
    output = result_def(TensorType)
    LINEAR: ClassVar[bool] = False
    FLOATING: ClassVar[bool] = True

    @classmethod
    def out_dtype(cls, x: TensorType, attrs: dict[str, Any]) -> Attribute:
        return float_dtype(cls, x) if cls.FLOATING else x.element_type

    @classmethod
    def check_props(cls, attrs: dict[str, Any]) -> None:
        """Op-specific checks of the properties (dropout's probability)."""

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        cls.check_props(attrs)
        b = form_builder(cls, ["input"], operands)
        shard = same_dims(b, 0, x.rank)
        sums = [b.operand_sum("s", 0)] if cls.LINEAR else []
        form = b.build([(shard, sums)])
        return form, [result_type(form, 0, x.shape, cls.out_dtype(x, attrs))]


def _unary(
    name: str, doc: str, linear: bool = False, props: tuple = (), families: tuple[type[fam.Trait], ...] = ()
) -> type[UnaryOp]:
    cls = type(
        "".join(p[:1].upper() + p[1:] for p in name.split("_")) + "Op",  # log1p: Log1pOp
        (UnaryOp, *families),
        {"name": f"pcg.{name}", "__doc__": doc, "LINEAR": linear, "PROPS": props, "__module__": __name__},
    )
    return op_definition(cls)  # type: ignore[return-value]


ReluOp = _unary("relu", "max(x, 0).", families=(fam.SavesResult, fam.ZeroPreserving))
GeluOp = _unary(
    "gelu",
    "GELU, exact (erf) form unless `tanh` is set.",
    props=(("tanh", Kind.FLAG, True),),
    families=(fam.ZeroPreserving,),
)
SigmoidOp = _unary("sigmoid", "1 / (1 + exp(-x)).", families=(fam.SavesResult, fam.Finite))
TanhOp = _unary("tanh", "tanh(x).", families=(fam.SavesResult, fam.ZeroPreserving))
ExpOp = _unary("exp", "exp(x).", families=(fam.SavesResult,))
SqrtOp = _unary("sqrt", "sqrt(x).", families=(fam.SavesResult,))
Log1pOp = _unary("log1p", "log(1 + x), accurate for small x (torch.log1p).")
LogOp = _unary("log", "the natural logarithm (torch.log): -inf at 0, nan below.")
AbsOp = _unary("abs", "|x| (torch.abs): the gradient is sign(x), 0 at 0.", families=(fam.ZeroPreserving,))
IdentityOp = _unary("identity", "x.", linear=True, families=(fam.SavesNothing, fam.ZeroPreserving))
StopGradientOp = _unary(
    "stop_gradient",
    "x, through which no gradient flows back (torch's `detach`, and what a `torch.no_grad()` block"
    " computes).",
    linear=True,
    families=(fam.NotDifferentiable, fam.SavesNothing, fam.ZeroPreserving),
)
NegOp = _unary("neg", "-x.", linear=True, families=(fam.SavesNothing, fam.ZeroPreserving))
ScalarMulOp = _unary(
    "scalar_mul",
    "x * scale.",
    linear=True,
    props=(("scale", Kind.FLOAT, False),),
    families=(fam.SavesNothing, fam.ZeroPreserving),
)
ScalarAddOp = _unary(
    "scalar_add",
    "x + value (not linear: partial sums must be reduced first).",
    props=(("value", Kind.FLOAT, False),),
    families=(fam.SavesNothing, fam.Finite),
)
PowOp = _unary("pow", "x ** exponent.", props=(("exponent", Kind.FLOAT, False),))


@op_definition
class ClampOp(UnaryOp, fam.Finite):
    """min(max(x, low), high), either bound optional: hardtanh, ReLU6 (`low` 0, `high` 6),
    torch.clamp. The gradient passes where low <= x <= high, as torch's."""

    name = "pcg.clamp"
    PROPS = (("low", Kind.FLOAT, True), ("high", Kind.FLOAT, True))

    @classmethod
    def check_props(cls, attrs: dict[str, Any]) -> None:
        low, high = attrs.get("low"), attrs.get("high")
        if low is None and high is None:
            raise op_error(cls, "needs a low or a high bound")
        if any(v is not None and math.isnan(v) for v in (low, high)):
            raise op_error(cls, "bounds may not be nan")
        if low is not None and high is not None and low > high:
            raise op_error(cls, f"low bound {low} is above high bound {high}")


COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
"""The comparisons of `pcg.compare`, named as torch's (`aten.ne.Scalar`, ...)."""


@op_definition
class CompareOp(UnaryOp, fam.NotDifferentiable, fam.SavesNothing):
    """x `kind` value element by element (kind: eq, ne, lt, le, gt, ge): a boolean mask, e.g.
    RoBERTa's `input_ids != pad`. Any element type; no gradient flows through it."""

    name = "pcg.compare"
    PROPS = (("kind", Kind.STR, False), ("value", Kind.FLOAT, False))
    FLOATING = False

    @classmethod
    def check_props(cls, attrs: dict[str, Any]) -> None:
        if attrs["kind"] not in COMPARISONS:
            raise op_error(cls, f"kind must be one of {', '.join(COMPARISONS)}, got '{attrs['kind']}'")

    @classmethod
    def out_dtype(cls, x: TensorType, attrs: dict[str, Any]) -> Attribute:
        return i1


@op_definition
class DropoutOp(UnaryOp, fam.SavesNothing):
    """Dropout with probability p. The reference interpreter and --check runs treat it as the
    identity, so that parallel plans can be compared exactly."""

    name = "pcg.dropout"
    PROPS = (("p", Kind.FLOAT, False),)

    @classmethod
    def check_props(cls, attrs: dict[str, Any]) -> None:
        check_probability(cls, "p", attrs["p"])


@op_definition
class CastOp(UnaryOp, fam.SavesNothing, fam.ZeroPreserving):
    """Converts the element type."""

    name = "pcg.cast"
    PROPS = (("dtype", Kind.TYPE, False),)
    FLOATING = False
    AUTOCAST = "declared"

    @classmethod
    def out_dtype(cls, x: TensorType, attrs: dict[str, Any]) -> Attribute:
        return attrs["dtype"]


class BinaryOp(PcgOp, fam.Elementwise):
    """lhs ∘ rhs element by element, with numpy broadcasting (a broadcast dim is unsharded)."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    output = result_def(TensorType)

    @classmethod
    def sum_factors(cls, b: FormBuilder) -> list[str]:
        return [b.shared_sum("s", [0, 1])]

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        lhs, rhs = operands
        if lhs.element_type != rhs.element_type:
            raise op_error(cls, f"operand element types differ: {lhs.element_type} vs {rhs.element_type}")
        shape = broadcast_shape(cls, lhs.shape, rhs.shape)
        b = form_builder(cls, ["lhs", "rhs"], operands)
        shard: list[list[str]] = []
        for i, size in enumerate(shape):
            uses = []
            for o, t in enumerate(operands):
                d = i - (len(shape) - t.rank)
                if d < 0:
                    continue
                if t.shape[d] == size:
                    uses.append((o, d))
                else:
                    b.forbid(o, d, "it is broadcast")
            shard.append([b.shared_dim(f"d{i}", uses)])
        form = b.build([(shard, cls.sum_factors(b))])
        return form, [result_type(form, 0, shape, cls.out_dtype(lhs, attrs))]

    @classmethod
    def out_dtype(cls, lhs: TensorType, attrs: dict[str, Any]) -> Attribute:
        return lhs.element_type


def broadcast_shape(cls: type[PcgOp], a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x != y and 1 not in (x, y):
            raise op_error(cls, f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(x, y))
    return tuple(reversed(out))


@op_definition
class AddOp(BinaryOp, fam.SavesNothing):
    """lhs + rhs; partial sums add up when both operands have the same sum degree."""

    name = "pcg.add"


@op_definition
class SubOp(BinaryOp, fam.SavesNothing):
    """lhs - rhs; partial sums as for add."""

    name = "pcg.sub"


@op_definition
class MulOp(BinaryOp):
    """lhs * rhs; bilinear, so each operand's partial sums become result partial sums."""

    name = "pcg.mul"

    @classmethod
    def sum_factors(cls, b: FormBuilder) -> list[str]:
        return [b.operand_sum("sl", 0), b.operand_sum("sr", 1)]


@op_definition
class DivOp(BinaryOp):
    """lhs / rhs; linear in lhs only."""

    name = "pcg.div"

    @classmethod
    def sum_factors(cls, b: FormBuilder) -> list[str]:
        return [b.operand_sum("s", 0)]


@op_definition
class CompareTensorsOp(BinaryOp, fam.NotDifferentiable, fam.SavesNothing):
    """lhs `kind` rhs element by element (kind: eq, ne, lt, le, gt, ge), an i1 result, with
    broadcasting as for the other binary ops. The importer records masks this way instead of
    by value: a causal mask is `le` of the key positions [1, S] against the query positions
    [S, 1], a few small constants in the IR however large the batch and sequence. Not
    differentiable, and not linear: partial sums must be reduced first."""

    name = "pcg.compare_tensors"
    PROPS = (("kind", Kind.STR, False),)

    @classmethod
    def sum_factors(cls, b: FormBuilder) -> list[str]:
        return []

    @classmethod
    def out_dtype(cls, lhs: TensorType, attrs: dict[str, Any]) -> Attribute:
        if attrs["kind"] not in COMPARISONS:
            raise op_error(cls, f"kind must be one of {', '.join(COMPARISONS)}, got '{attrs['kind']}'")
        return i1


GATED_ACTIVATIONS = ("silu", "gelu", "gelu_tanh")
"""The activations of `pcg.gated_activation`: SwiGLU's SiLU, GeGLU's exact and tanh GELU."""


@op_definition
class GatedActivationOp(PcgOp, fam.Elementwise):
    """act(gate) * up element by element, `act` one of `GATED_ACTIVATIONS`: the gated MLP of
    Llama, Qwen2, Mistral (SwiGLU) and Gemma (GeGLU) as one op. The backward keeps only `gate`
    and `up` and recomputes act(gate) (the program's kernel, `runtime.kernels.gated_activation`).
    Both operands have one shape and element type; every dim shards alike; not linear in
    `gate`, so partial sums must be reduced first."""

    name = "pcg.gated_activation"
    gate = operand_def(TensorType)
    up = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("act", Kind.STR, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        gate, up = operands
        if attrs["act"] not in GATED_ACTIVATIONS:
            raise op_error(cls, f"act must be one of {', '.join(GATED_ACTIVATIONS)}, got '{attrs['act']}'")
        if gate.shape != up.shape:
            raise op_error(cls, f"gate shape {list(gate.shape)} differs from up shape {list(up.shape)}")
        if gate.element_type != up.element_type:
            raise op_error(cls, f"operand element types differ: {gate.element_type} vs {up.element_type}")
        dtype = float_dtype(cls, gate)
        b = form_builder(cls, ["gate", "up"], operands)
        shard = [[b.shared_dim(f"d{i}", [(0, i), (1, i)])] for i in range(gate.rank)]
        form = b.build([(shard, [])])
        return form, [result_type(form, 0, gate.shape, dtype)]
