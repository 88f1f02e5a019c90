"""The `pcg` dialect: tensor operators of a Parallel Computation Graph.

Graph container: a `func.func` with no arguments. Inputs are `pcg.input` ops (named, so that
data feeds and machine views attach to an op), parameters are `pcg.weight` ops named by their
state_dict key, and `func.return` lists the graph's outputs, the loss first.

Each op infers its result types from its operands' types and properties (`build_inferred`)
and verifies that its results match; see `forms.py` for how tasks read operand pieces.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, f32, i1, i64
from xdsl.dialects.builtin import TensorType as BuiltinTensorType
from xdsl.ir import Attribute, Dialect
from xdsl.irdl import (
    AttrSizedOperandSegments,
    operand_def,
    opt_operand_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from unityc.dialects.canonicalization import canonicalization
from unityc.dialects.forms import Form, FormBuilder, FormError
from unityc.dialects.pcg_types import (
    FLOAT_TYPES,
    PcgOp,
    TensorType,
    float_dtype,
    form_builder,
    normalize_dim,
    op_error,
    own_form,
    result_type,
    same_dims,
)
from unityc.dialects.spatial import window_halo
from unityc.dialects.syntax import Kind, op_definition, to_attr
from unityc.dialects.view import MachineViewAttr
from unityc.runtime.parts import WeightKey

INT_TYPES = (i64,)

# ------------------------------------------------------------------------------------------
# Sources: inputs, weights, constants
# ------------------------------------------------------------------------------------------


class SourceOp(PcgOp):
    """An op with no operands: its tasks are exactly the pieces of its result (sum 1)."""

    result = result_def(TensorType)
    AUTOCAST: ClassVar[str] = "declared"

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        raise FormError(f"{cls.name} has no operands to infer from")

    def parallel_form(self) -> Form:
        t = self.result.type
        assert isinstance(t, TensorType)
        return own_form(t)

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, TensorType)
        if t.sum_degree != 1:
            raise VerifyException(f"{self.name} cannot hold partial sums (sum degree must be 1)")
        self.verify_source(t)
        self.verify_extra()

    def verify_source(self, t: TensorType) -> None:
        """Op-specific checks of the result type."""

    @classmethod
    def named(cls, key: str, t: TensorType) -> SourceOp:
        """An input or weight called `key`, of type `t`."""
        return cls.build(result_types=[t], properties={"key": to_attr(Kind.STR, key)})


@op_definition
class InputOp(SourceOp):
    """A graph input (data or labels). Integer inputs are indices or class labels."""

    name = "pcg.input"
    PROPS = (("key", Kind.STR, False),)


@op_definition
class WeightOp(SourceOp):
    """A trainable parameter named by its state_dict key; values never live in the IR. The key
    may name a part of a stored tensor, `key[:, 0:768]` (a box: `:` or `start:stop` per dim,
    `unityc.runtime.parts`), a parameter of its own in the graph (e.g. the query columns of
    GPT-2's packed QKV weight)."""

    name = "pcg.weight"
    PROPS = (("key", Kind.STR, False),)

    def verify_source(self, t: TensorType) -> None:
        key = self.attrs()["key"]
        if t.element_type not in FLOAT_TYPES:
            raise VerifyException(f"weight '{key}' must be floating point")
        try:
            problem = WeightKey.parse(key).check_shape(t.shape)
        except ValueError as e:
            raise VerifyException(f"weight '{key}': {e}") from None
        if problem is not None:
            raise VerifyException(f"weight '{key}' of shape {list(t.shape)}: {problem}")


@op_definition
class ConstantOp(SourceOp):
    """A tensor folded at import (masks, position ids, rotary tables), as a dense literal; a
    large one prints packed (`value zlib<"..."> : tensor<...>`, see `Kind.DENSE`)."""

    name = "pcg.constant"
    PROPS = (("value", Kind.DENSE, False),)

    def verify_source(self, t: TensorType) -> None:
        value = self.properties["value"]
        if not isinstance(value, DenseIntOrFPElementsAttr):
            raise VerifyException("pcg.constant value must be a dense literal")
        vtype = value.type
        assert isinstance(vtype, BuiltinTensorType)
        if tuple(vtype.get_shape()) != t.shape or vtype.element_type != t.element_type:
            raise VerifyException(f"pcg.constant literal of type {vtype} does not match {t}")


# ------------------------------------------------------------------------------------------
# Element-wise operators
# ------------------------------------------------------------------------------------------


class UnaryOp(PcgOp):
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


def _unary(name: str, doc: str, linear: bool = False, props: tuple = ()) -> type[UnaryOp]:
    cls = type(
        "".join(p.title() for p in name.split("_")) + "Op",
        (UnaryOp,),
        {"name": f"pcg.{name}", "__doc__": doc, "LINEAR": linear, "PROPS": props, "__module__": __name__},
    )
    return op_definition(cls)  # type: ignore[return-value]


ReluOp = _unary("relu", "max(x, 0).")
GeluOp = _unary("gelu", "GELU, exact (erf) form unless `tanh` is set.", props=(("tanh", Kind.FLAG, True),))
SigmoidOp = _unary("sigmoid", "1 / (1 + exp(-x)).")
TanhOp = _unary("tanh", "tanh(x).")
ExpOp = _unary("exp", "exp(x).")
SqrtOp = _unary("sqrt", "sqrt(x).")
IdentityOp = _unary("identity", "x.", linear=True)
NegOp = _unary("neg", "-x.", linear=True)
ScalarMulOp = _unary("scalar_mul", "x * scale.", linear=True, props=(("scale", Kind.FLOAT, False),))
ScalarAddOp = _unary(
    "scalar_add",
    "x + value (not linear: partial sums must be reduced first).",
    props=(("value", Kind.FLOAT, False),),
)
PowOp = _unary("pow", "x ** exponent.", props=(("exponent", Kind.FLOAT, False),))


@op_definition
class ClampOp(UnaryOp):
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
class CompareOp(UnaryOp):
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
class DropoutOp(UnaryOp):
    """Dropout with probability p. The reference interpreter and --check runs treat it as the
    identity, so that parallel plans can be compared exactly."""

    name = "pcg.dropout"
    PROPS = (("p", Kind.FLOAT, False),)

    @classmethod
    def check_props(cls, attrs: dict[str, Any]) -> None:
        check_probability(cls, "p", attrs["p"])


def check_probability(cls: type[PcgOp], name: str, p: float | None) -> None:
    if p is not None and not 0.0 <= p < 1.0:
        raise op_error(cls, f"{name} must be a probability in [0, 1), got {p}")


def check_eps(cls: type[PcgOp], eps: float) -> None:
    if not eps >= 0.0:  # also refuses nan
        raise op_error(cls, f"eps must be a non-negative number, got {eps}")


@op_definition
class CastOp(UnaryOp):
    """Converts the element type."""

    name = "pcg.cast"
    PROPS = (("dtype", Kind.TYPE, False),)
    FLOATING = False
    AUTOCAST = "declared"

    @classmethod
    def out_dtype(cls, x: TensorType, attrs: dict[str, Any]) -> Attribute:
        return attrs["dtype"]


class BinaryOp(PcgOp):
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
class AddOp(BinaryOp):
    """lhs + rhs; partial sums add up when both operands have the same sum degree."""

    name = "pcg.add"


@op_definition
class SubOp(BinaryOp):
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
class CompareTensorsOp(BinaryOp):
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


# ------------------------------------------------------------------------------------------
# Contractions
# ------------------------------------------------------------------------------------------


@op_definition
class LinearOp(PcgOp):
    """x @ weight^T + bias, with weight [out, in] as in torch.nn.Linear.

    Sharding x's last dim and weight's dim 1 alike is reduction parallelism: the result holds
    partial sums. The bias is then added by the tasks of partial-sum index 0 only.
    """

    name = "pcg.linear"
    AUTOCAST = "bf16"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    output = result_def(TensorType)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, w, bias = operands
        if w.rank != 2 or x.rank < 1 or x.shape[-1] != w.shape[1]:
            raise op_error(cls, f"input {list(x.shape)} does not match weight {list(w.shape)} ([out, in])")
        if bias is not None and bias.shape != (w.shape[0],):
            raise op_error(cls, f"bias shape {list(bias.shape)} should be [{w.shape[0]}]")
        b = form_builder(cls, ["input", "weight", "bias"], operands)
        shard = same_dims(b, 0, x.rank, skip=[x.rank - 1])[:-1]
        shard.append([b.shared_dim("out", [(1, 0), (2, 0)])])
        sums = [b.shared_dim("in", [(0, x.rank - 1), (1, 1)]), b.operand_sum("sx", 0), b.operand_sum("sw", 1)]
        form = b.build([(shard, sums)])
        return form, [result_type(form, 0, (*x.shape[:-1], w.shape[0]), float_dtype(cls, x))]


class _MatmulBase(PcgOp):
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    output = result_def(TensorType)
    MIN_RANK: ClassVar[int] = 2
    MAX_RANK: ClassVar[int] = 2
    AUTOCAST: ClassVar[str] = "bf16"

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        a, c = operands
        r = a.rank
        if not cls.MIN_RANK <= r <= cls.MAX_RANK or c.rank != r:
            raise op_error(cls, f"operands of rank {a.rank} and {c.rank} are not supported")
        if a.shape[:-2] != c.shape[:-2] or a.shape[-1] != c.shape[-2]:
            raise op_error(cls, f"shapes {list(a.shape)} and {list(c.shape)} do not multiply")
        b = form_builder(cls, ["lhs", "rhs"], operands)
        shard = [[b.shared_dim(f"b{i}", [(0, i), (1, i)])] for i in range(r - 2)]
        shard += [[b.shared_dim("m", [(0, r - 2)])], [b.shared_dim("n", [(1, r - 1)])]]
        sums = [b.shared_dim("k", [(0, r - 1), (1, r - 2)]), b.operand_sum("sl", 0), b.operand_sum("sr", 1)]
        form = b.build([(shard, sums)])
        return form, [result_type(form, 0, (*a.shape[:-1], c.shape[-1]), float_dtype(cls, a))]


@op_definition
class MatmulOp(_MatmulBase):
    """lhs [m, k] @ rhs [k, n]; a sharded k gives partial sums."""

    name = "pcg.matmul"


@op_definition
class BatchMatmulOp(_MatmulBase):
    """lhs [..., m, k] @ rhs [..., k, n] with equal batch dims (sharded alike)."""

    name = "pcg.batch_matmul"
    traits = traits_def(Pure(), canonicalization("pcg", "UnflattenBatchMatmul"))
    MIN_RANK = 3
    MAX_RANK = 8


def _pair(values: Sequence[int] | None, default: int, what: str, cls: type[PcgOp]) -> tuple[int, int]:
    if values is None:
        return default, default
    if len(values) != 2:
        raise op_error(cls, f"{what} needs 2 values, got {list(values)}")
    return values[0], values[1]


def window_out(cls: type[PcgOp], size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    window = f"window {kernel} (stride {stride}, padding {pad}{f', dilation {dilation}' * (dilation != 1)})"
    if kernel < 1 or stride < 1 or dilation < 1 or pad < 0:
        raise op_error(cls, f"{window}: kernel, stride and dilation must be positive, padding not negative")
    out = (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1
    if out < 1:
        raise op_error(cls, f"{window} does not fit size {size}")
    return out


def spatial_dims(
    cls: type[PcgOp], b: FormBuilder, x: Any, windows: Sequence[tuple[int, int, int, int]]
) -> list[list[str]]:
    """The result's height and width factors of a window op (kernel, stride, padding, dilation
    per dim): a sharded dim gets a factor ("h", "w") if its halo lines up, else a located error."""
    space: list[list[str]] = []
    for d, name, (kernel, stride, pad, dilation) in zip((2, 3), ("h", "w"), windows, strict=True):
        k = x.shard[d]
        if k == 1:
            space.append([])
            continue
        halo = window_halo(x.shape[d], k, kernel, stride, pad, dilation)
        if isinstance(halo, str):
            raise op_error(cls, f"input dimension {d} has shard degree {k}, but {halo}")
        space.append([b.shared_dim(name, [(0, d)])])
    return space


@op_definition
class Conv2dOp(PcgOp):
    """2-D convolution, NCHW, weight [O, C/groups, kh, kw].

    Parallel forms: batch; output channels (weight dim 0); input channels with groups == 1
    (partial sums); channel groups when groups > 1 (the shard degree divides groups); height
    and width (spatial partitioning: each shard reads a halo of its neighbours' rows,
    `unityc.dialects.spatial`).
    """

    name = "pcg.conv2d"
    AUTOCAST = "bf16"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (
        ("stride", Kind.INTS, True),
        ("padding", Kind.INTS, True),
        ("dilation", Kind.INTS, True),
        ("groups", Kind.INT, True),
    )

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, w, bias = operands
        groups = attrs["groups"] or 1
        if x.rank != 4 or w.rank != 4:
            raise op_error(cls, "input and weight must be rank 4 (NCHW, OIHW)")
        n, c, h, wd = x.shape
        o = w.shape[0]
        if c != w.shape[1] * groups or o % groups:
            raise op_error(
                cls, f"{c} input channels do not match weight {list(w.shape)} with {groups} groups"
            )
        if bias is not None and bias.shape != (o,):
            raise op_error(cls, f"bias shape {list(bias.shape)} should be [{o}]")
        sh, sw = _pair(attrs["stride"], 1, "stride", cls)
        ph, pw = _pair(attrs["padding"], 0, "padding", cls)
        dh, dw = _pair(attrs["dilation"], 1, "dilation", cls)
        out_shape = (
            n,
            o,
            window_out(cls, h, w.shape[2], sh, ph, dh),
            window_out(cls, wd, w.shape[3], sw, pw, dw),
        )
        b = form_builder(cls, ["input", "weight", "bias"], operands)
        space = spatial_dims(cls, b, x, ((w.shape[2], sh, ph, dh), (w.shape[3], sw, pw, dw)))
        batch = b.shared_dim("n", [(0, 0)])
        sums: list[str] = []
        if groups == 1:
            channels = b.shared_dim("o", [(1, 0), (2, 0)])
            sums.append(b.shared_dim("c", [(0, 1), (1, 1)]))
        else:
            channels = b.shared_dim("g", [(0, 1), (1, 0), (2, 0)])
            if groups % b.degrees["g"]:
                raise op_error(cls, f"channel shard degree {b.degrees['g']} does not divide {groups} groups")
        sums += [b.operand_sum("sx", 0), b.operand_sum("sw", 1)]
        form = b.build([([[batch], [channels], *space], sums)])
        return form, [result_type(form, 0, out_shape, float_dtype(cls, x))]


@op_definition
class Pool2dOp(PcgOp):
    """Max or average pooling, NCHW; batch, channels, height and width (with a halo) shard;
    average pooling is linear."""

    name = "pcg.pool2d"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (
        ("kind", Kind.STR, False),
        ("kernel", Kind.INTS, False),
        ("stride", Kind.INTS, True),
        ("padding", Kind.INTS, True),
    )

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        if attrs["kind"] not in ("max", "avg"):
            raise op_error(cls, f"kind must be max or avg, got '{attrs['kind']}'")
        if x.rank != 4:
            raise op_error(cls, "input must be rank 4 (NCHW)")
        kh, kw = _pair(attrs["kernel"], 1, "kernel", cls)
        sh, sw = _pair(attrs["stride"], 0, "stride", cls)
        ph, pw = _pair(attrs["padding"], 0, "padding", cls)
        sh, sw = sh or kh, sw or kw
        if 2 * ph > kh or 2 * pw > kw:
            raise op_error(cls, f"padding {[ph, pw]} is more than half the kernel {[kh, kw]}")
        out_shape = (
            *x.shape[:2],
            window_out(cls, x.shape[2], kh, sh, ph),
            window_out(cls, x.shape[3], kw, sw, pw),
        )
        b = form_builder(cls, ["input"], operands)
        space = spatial_dims(cls, b, x, ((kh, sh, ph, 1), (kw, sw, pw, 1)))
        sums = [b.operand_sum("s", 0)] if attrs["kind"] == "avg" else []  # zero-padded average: linear
        form = b.build([([*same_dims(b, 0, 2), *space], sums)])
        return form, [result_type(form, 0, out_shape, float_dtype(cls, x))]


# ------------------------------------------------------------------------------------------
# Normalization and softmax
# ------------------------------------------------------------------------------------------


@op_definition
class BatchNormOp(PcgOp):
    """Training-mode batch norm over (N, C, ...) with batch statistics; channels shard.

    The batch and spatial dims may not be sharded: the statistics span them.
    """

    name = "pcg.batch_norm"
    AUTOCAST = "input"
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    output = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    PROPS = (("eps", Kind.FLOAT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, w, bias = operands
        if x.rank < 2:
            raise op_error(cls, "input must have a channel dimension")
        check_eps(cls, attrs["eps"])
        if (values := x.shape[0] * math.prod(x.shape[2:])) < 2:
            raise op_error(cls, f"training statistics need more than 1 value per channel, got {values}")
        for name, t in (("weight", w), ("bias", bias)):
            if t is not None and t.shape != (x.shape[1],):
                raise op_error(cls, f"{name} shape {list(t.shape)} should be [{x.shape[1]}]")
        b = form_builder(cls, ["input", "weight", "bias"], operands)
        for d in [0, *range(2, x.rank)]:
            b.forbid(0, d, "batch statistics are computed over it")
        channels = b.shared_dim("c", [(0, 1), (1, 0), (2, 0)])
        form = b.build([([[], [channels]] + [[] for _ in range(x.rank - 2)], [])])
        return form, [result_type(form, 0, x.shape, float_dtype(cls, x))]


@op_definition
class LayerNormOp(PcgOp):
    """Layer norm over the last `dims` dimensions, with optional elementwise weight and bias."""

    name = "pcg.layer_norm"
    AUTOCAST = "input"
    input = operand_def(TensorType)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    output = result_def(TensorType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    PROPS = (("dims", Kind.INT, False), ("eps", Kind.FLOAT, False))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, w, bias = operands
        n = attrs["dims"]
        check_eps(cls, attrs["eps"])
        if not 1 <= n <= x.rank:
            raise op_error(cls, f"cannot normalize {n} dims of a rank-{x.rank} tensor")
        for name, t in (("weight", w), ("bias", bias)):
            if t is not None and t.shape != x.shape[-n:]:
                raise op_error(cls, f"{name} shape {list(t.shape)} should be {list(x.shape[-n:])}")
        b = form_builder(cls, ["input", "weight", "bias"], operands)
        normalized = range(x.rank - n, x.rank)
        for d in normalized:
            b.forbid(0, d, "it is normalized over")
        shard = same_dims(b, 0, x.rank, skip=normalized)
        form = b.build([(shard, [])])
        return form, [result_type(form, 0, x.shape, float_dtype(cls, x))]


@op_definition
class SoftmaxOp(PcgOp):
    """Softmax along `dim`, which may not be sharded."""

    name = "pcg.softmax"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, dim, "softmax normalizes along it")
        form = b.build([(same_dims(b, 0, x.rank, skip=[dim]), [])])
        return form, [result_type(form, 0, x.shape, float_dtype(cls, x))]


@op_definition
class CumsumOp(PcgOp):
    """Running sum along `dim` (torch.cumsum), any element type. `dim` may not be sharded;
    linear, so partial sums pass through."""

    name = "pcg.cumsum"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        if x.element_type == i1:
            raise op_error(cls, "sums numbers, not booleans: cast the mask first")
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, dim, "each element sums every element before it")
        form = b.build([(same_dims(b, 0, x.rank, skip=[dim]), [b.operand_sum("s", 0)])])
        return form, [result_type(form, 0, x.shape, x.element_type)]


# ------------------------------------------------------------------------------------------
# Shape operators
# ------------------------------------------------------------------------------------------


@op_definition
class ConcatOp(PcgOp):
    """Concatenation along `dim` (unsharded); other dims and partial sums must agree."""

    name = "pcg.concat"
    inputs = var_operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        if not operands:
            raise op_error(cls, "needs at least one operand")
        first = operands[0]
        dim = normalize_dim(cls, attrs["dim"], first.rank)
        for t in operands:
            if t.rank != first.rank or any(t.shape[d] != first.shape[d] for d in range(t.rank) if d != dim):
                raise op_error(
                    cls, f"shapes {list(first.shape)} and {list(t.shape)} do not concatenate on {dim}"
                )
            if t.element_type != first.element_type:
                raise op_error(cls, "operand element types differ")
        names = [f"inputs#{i}" for i in range(len(operands))]
        b = form_builder(cls, names, operands)
        for o in range(len(operands)):
            b.forbid(o, dim, "concatenated shards would not be shards of the result")
        shard = [
            [b.shared_dim(f"d{d}", [(o, d) for o in range(len(operands))])] if d != dim else []
            for d in range(first.rank)
        ]
        form = b.build([(shard, [b.shared_sum("s", range(len(operands)))])])
        shape = list(first.shape)
        shape[dim] = sum(t.shape[dim] for t in operands)
        return form, [result_type(form, 0, shape, first.element_type)]


@op_definition
class SplitOp(PcgOp):
    """Splits along `dim` (unsharded) into pieces of the given sizes."""

    name = "pcg.split"
    input = operand_def(TensorType)
    outputs = var_result_def(TensorType)
    PROPS = (("dim", Kind.INT, False), ("sizes", Kind.INTS, False))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        sizes = attrs["sizes"]
        if sum(sizes) != x.shape[dim] or min(sizes, default=0) < 1:
            raise op_error(cls, f"sizes {list(sizes)} do not split dimension {dim} of size {x.shape[dim]}")
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, dim, "split pieces would not be shards of the results")
        shard = same_dims(b, 0, x.rank, skip=[dim])
        sums = [b.operand_sum("s", 0)]
        form = b.build([(shard, sums)] * len(sizes))
        types = []
        for i, size in enumerate(sizes):
            shape = list(x.shape)
            shape[dim] = size
            types.append(result_type(form, i, shape, x.element_type))
        return form, types


@op_definition
class ReshapeOp(PcgOp):
    """Row-major reshape. A sharded input dim must lead its group of merged/split dims, and
    its shard degree passes to the leading result dim of that group."""

    name = "pcg.reshape"
    traits = traits_def(Pure(), canonicalization("pcg", "FoldReshape"))
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("shape", Kind.INTS, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        shape = tuple(attrs["shape"])
        if math.prod(shape) != math.prod(x.shape) or min(shape, default=1) < 1:
            raise op_error(cls, f"cannot reshape {list(x.shape)} to {list(shape)}")
        b = form_builder(cls, ["input"], operands)
        result_shard: list[list[str]] = [[] for _ in shape]
        for in_dims, out_dims in reshape_groups(x.shape, shape):
            for d in in_dims[1:]:
                b.forbid(0, d, "it does not lead its group of reshaped dims")
            if not out_dims:
                continue
            lead_in, lead_out = in_dims[0], out_dims[0]
            factor = b.shared_dim(f"d{lead_in}", [(0, lead_in)])
            if shape[lead_out] % b.degrees[factor]:
                raise op_error(
                    cls,
                    f"shard degree {b.degrees[factor]} of dimension {lead_in} does not divide "
                    f"result dimension {lead_out} of size {shape[lead_out]}",
                )
            result_shard[lead_out] = [factor]
        form = b.build([(result_shard, [b.operand_sum("s", 0)])])
        return form, [result_type(form, 0, shape, x.element_type)]


def reshape_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Pair up minimal runs of source and result dims with equal products (size-1 dims alone)."""
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        if i < len(src) and src[i] == 1 and (j >= len(dst) or dst[j] != 1):
            groups.append(([i], []))
            i += 1
            continue
        if j < len(dst) and dst[j] == 1 and (i >= len(src) or src[i] != 1):
            j += 1
            continue
        a, c = [i], [j]
        pa, pc = src[i], dst[j]
        i, j = i + 1, j + 1
        while pa != pc:
            if pa < pc:
                a.append(i)
                pa *= src[i]
                i += 1
            else:
                c.append(j)
                pc *= dst[j]
                j += 1
        groups.append((a, c))
    return groups


@op_definition
class TransposeOp(PcgOp):
    """Permutes dimensions: result dim i is input dim perm[i]; shards move with their dims."""

    name = "pcg.transpose"
    traits = traits_def(Pure(), canonicalization("pcg", "FoldTranspose"))
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("perm", Kind.INTS, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        perm = list(attrs["perm"])
        if sorted(perm) != list(range(x.rank)):
            raise op_error(cls, f"perm {perm} is not a permutation of {x.rank} dims")
        b = form_builder(cls, ["input"], operands)
        shard = [[b.shared_dim(f"d{p}", [(0, p)])] for p in perm]
        form = b.build([(shard, [b.operand_sum("s", 0)])])
        return form, [result_type(form, 0, [x.shape[p] for p in perm], x.element_type)]


@op_definition
class GatherOp(PcgOp):
    """index_select along `dim` with fixed `indices` (folded at import, e.g. DLRM's interaction
    pairs); `dim` is unsharded, other dims shard and partial sums pass through (it is linear)."""

    name = "pcg.gather"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("dim", Kind.INT, False), ("indices", Kind.INTS, False))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        dim = normalize_dim(cls, attrs["dim"], x.rank)
        indices = list(attrs["indices"])
        if not indices or min(indices) < 0 or max(indices) >= x.shape[dim]:
            raise op_error(cls, f"indices must be non-empty and within [0, {x.shape[dim]})")
        b = form_builder(cls, ["input"], operands)
        b.forbid(0, dim, "gathered rows would not be shards of the result")
        form = b.build([(same_dims(b, 0, x.rank, skip=[dim]), [b.operand_sum("s", 0)])])
        shape = list(x.shape)
        shape[dim] = len(indices)
        return form, [result_type(form, 0, shape, x.element_type)]


@op_definition
class ReduceOp(PcgOp):
    """Sum or mean over `dims`. A sharded reduced dim gives partial sums."""

    name = "pcg.reduce"
    input = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("kind", Kind.STR, False), ("dims", Kind.INTS, False), ("keepdim", Kind.FLAG, True))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        (x,) = operands
        if attrs["kind"] not in ("sum", "mean"):
            raise op_error(cls, f"kind must be sum or mean, got '{attrs['kind']}'")
        dims = sorted({normalize_dim(cls, d, x.rank) for d in attrs["dims"]})
        b = form_builder(cls, ["input"], operands)
        shard: list[list[str]] = []
        reduced: list[str] = []
        for d in range(x.rank):
            factor = b.shared_dim(f"d{d}", [(0, d)])
            if d in dims:
                reduced.append(factor)
            if d not in dims or attrs["keepdim"]:
                shard.append([] if d in dims else [factor])
        form = b.build([(shard, [b.operand_sum("s", 0), *reduced])])
        shape = [1 if d in dims else s for d, s in enumerate(x.shape) if attrs["keepdim"] or d not in dims]
        return form, [result_type(form, 0, shape, float_dtype(cls, x))]


# ------------------------------------------------------------------------------------------
# Embeddings, attention, losses
# ------------------------------------------------------------------------------------------


def _check_indices(cls: type[PcgOp], t: TensorType, what: str) -> None:
    if t.element_type not in INT_TYPES:
        raise op_error(cls, f"{what} must be i64, got {t.element_type}")


@op_definition
class EmbeddingOp(PcgOp):
    """weight[indices]: result shape indices.shape + [D]. Sharding the vocabulary (weight dim 0)
    is exact: each task looks up only the ids in its range, giving partial sums.

    `padding_idx` (optional, a row of the vocabulary) is torch's: the forward still reads that
    row, but the lookup adds nothing to its gradient. A vocabulary-sharded task applies it to
    its local rows when the row falls in its shard."""

    name = "pcg.embedding"
    indices = operand_def(TensorType)
    weight = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("padding_idx", Kind.INT, True),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        ids, w = operands
        _check_indices(cls, ids, "indices")
        if w.rank != 2:
            raise op_error(cls, "weight must be [vocabulary, dim]")
        pad = attrs.get("padding_idx")
        if pad is not None and not 0 <= pad < w.shape[0]:
            raise op_error(cls, f"padding_idx {pad} is not a row of the {w.shape[0]}-row vocabulary")
        b = form_builder(cls, ["indices", "weight"], operands)
        shard = [*same_dims(b, 0, ids.rank), [b.shared_dim("e", [(1, 1)])]]
        form = b.build([(shard, [b.shared_dim("v", [(1, 0)]), b.operand_sum("sw", 1)])])
        return form, [result_type(form, 0, (*ids.shape, w.shape[1]), float_dtype(cls, w))]


@op_definition
class EmbeddingBagOp(PcgOp):
    """Sum or mean of weight rows over fixed-size bags: indices [B, L] -> [B, D]. Sharding the
    bag (L) or the vocabulary gives partial sums."""

    name = "pcg.embedding_bag"
    indices = operand_def(TensorType)
    weight = operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (("mode", Kind.STR, False),)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        ids, w = operands
        _check_indices(cls, ids, "indices")
        if attrs["mode"] not in ("sum", "mean"):
            raise op_error(cls, f"mode must be sum or mean, got '{attrs['mode']}'")
        if ids.rank != 2 or w.rank != 2:
            raise op_error(cls, "indices must be [bags, bag size] and weight [vocabulary, dim]")
        b = form_builder(cls, ["indices", "weight"], operands)
        shard = [[b.shared_dim("b", [(0, 0)])], [b.shared_dim("e", [(1, 1)])]]
        sums = [b.shared_dim("l", [(0, 1)]), b.shared_dim("v", [(1, 0)]), b.operand_sum("sw", 1)]
        form = b.build([(shard, sums)])
        return form, [result_type(form, 0, (ids.shape[0], w.shape[1]), float_dtype(cls, w))]


@op_definition
class AttentionOp(PcgOp):
    """Multi-head attention as one op: softmax((q Wq^T)(k Wk^T)^T / sqrt(d) + mask)(v Wv^T) Wo^T.

    Shapes: q [B, Sq, E], key/value [B, Sk, E], wq and wo [E, E] (torch Linear layout), wk and
    wv [G·d, E] with d = E / heads, optional biases [E] (bq, bo) and [G·d] (bk, bv), optional
    additive mask [B|1, 1, Sq|1, Sk]. `kv_heads` G (default: `heads`) is grouped-query
    attention: query head i reads key/value head i // (heads / G) (Llama's repeat_kv).
    Optional `cos`, `sin` [B|1, 1, S, d] (self-attention, Sq = Sk = S) rotate q and k after
    their projections (rotary embeddings, Llama's rotate_half: x·cos + [-x2, x1]·sin).
    `scale` (default 1/sqrt(d)) multiplies the scores (Gemma-2: query_pre_attn_scalar^-1/2);
    `softcap` c caps them before the mask, c · tanh(scores / c) (Gemma-2's soft-capping).
    Optional `q_norm`, `k_norm` [d] (Qwen3) RMS-normalize each query and key head after its
    projection, before rotary: x · rsqrt(mean(x², -1) + `norm_eps`) · weight.
    Parallel forms: batch, query sequence (not with rotary embeddings), and heads (projection
    rows and wo columns sharded alike by a divisor of `kv_heads`, so that each task keeps
    whole KV groups), which gives partial sums; the output bias is added by partial-sum index 0.
    `dropout` (training only) applies to the attention probabilities, as in BERT.
    """

    name = "pcg.attention"
    AUTOCAST = "bf16"
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    wq = operand_def(TensorType)
    wk = operand_def(TensorType)
    wv = operand_def(TensorType)
    wo = operand_def(TensorType)
    bq = opt_operand_def(TensorType)
    bk = opt_operand_def(TensorType)
    bv = opt_operand_def(TensorType)
    bo = opt_operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    cos = opt_operand_def(TensorType)
    sin = opt_operand_def(TensorType)
    q_norm = opt_operand_def(TensorType)
    k_norm = opt_operand_def(TensorType)
    output = result_def(TensorType)
    PROPS = (
        ("heads", Kind.INT, False),
        ("kv_heads", Kind.INT, True),
        ("dropout", Kind.FLOAT, True),
        ("norm_eps", Kind.FLOAT, True),
        ("scale", Kind.FLOAT, True),
        ("softcap", Kind.FLOAT, True),
    )
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    NAMES = (
        "query", "key", "value", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "mask", "cos", "sin",
        "q_norm", "k_norm",
    )  # fmt: skip

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        operands = [*operands, *[None] * (len(cls.NAMES) - len(operands))]  # cos, sin may be left out
        q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, mask, cos, sin, q_norm, k_norm = operands
        heads = attrs["heads"]
        groups = attrs.get("kv_heads") or heads
        check_probability(cls, "dropout", attrs.get("dropout"))
        if q.rank != 3 or k.shape != v.shape or k.rank != 3 or k.shape[0] != q.shape[0]:
            raise op_error(cls, "query must be [B, Sq, E] and key, value [B, Sk, E]")
        batch, sq, e = q.shape
        sk = k.shape[1]
        if k.shape[2] != e or heads < 1 or e % heads:
            raise op_error(cls, f"embedding {e} must match key/value and divide into {heads} heads")
        if groups < 1 or heads % groups:
            raise op_error(cls, f"kv_heads {groups} must divide the {heads} heads")
        width = e // heads
        kv = groups * width
        for name, t, shape in (
            ("wq", wq, (e, e)),
            ("wk", wk, (kv, e)),
            ("wv", wv, (kv, e)),
            ("wo", wo, (e, e)),
            ("bq", bq, (e,)),
            ("bk", bk, (kv,)),
            ("bv", bv, (kv,)),
            ("bo", bo, (e,)),
        ):
            if t is not None and t.shape != shape:
                raise op_error(cls, f"{name} shape {list(t.shape)} should be {list(shape)}")
        if mask is not None and (
            mask.rank != 4
            or mask.shape[0] not in (1, batch)
            or mask.shape[1] != 1
            or mask.shape[2] not in (1, sq)
            or mask.shape[3] != sk
        ):
            raise op_error(cls, f"mask shape {list(mask.shape)} should be [{batch}|1, 1, {sq}|1, {sk}]")
        rotary = [t for t in (cos, sin) if t is not None]
        if rotary and (len(rotary) != 2 or sq != sk):
            raise op_error(cls, "rotary embeddings need both cos and sin, and self-attention (Sq = Sk)")
        for t in rotary:
            if t.rank != 4 or t.shape[0] not in (1, batch) or t.shape[1:] != (1, sq, width):
                raise op_error(cls, f"cos/sin shape {list(t.shape)} should be [{batch}|1, 1, {sq}, {width}]")
        for name in ("scale", "softcap"):
            value = attrs.get(name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise op_error(cls, f"{name} must be a positive number, got {value}")
        norms = [t for t in (q_norm, k_norm) if t is not None]
        if norms and (len(norms) != 2 or attrs.get("norm_eps") is None):
            raise op_error(cls, "q/k normalization needs both q_norm and k_norm, and norm_eps")
        if norms:
            check_eps(cls, attrs["norm_eps"])
        for t in norms:
            if t.shape != (width,):
                raise op_error(cls, f"q_norm/k_norm shape {list(t.shape)} should be [{width}]")
        b = form_builder(cls, list(cls.NAMES), operands)
        for o in (14, 15):
            b.forbid(o, 0, "each head is normalized with the whole weight")
        batch_uses = [(0, 0), (1, 0), (2, 0)] + [
            (o, 0) for o, t in ((11, mask), (12, cos), (13, sin)) if t is not None and t.shape[0] == batch
        ]
        seq_uses = [(0, 1)] + ([(11, 2)] if mask is not None and mask.shape[2] == sq else [])
        for o, d in ((1, 1), (2, 1), (11, 3)):
            b.forbid(o, d, "every query attends over the whole key sequence")
        for o in (12, 13):
            for d in (2, 3):
                b.forbid(o, d, "rotary embeddings are read whole")
        for o, d in ((0, 1), (11, 2)) if rotary else ():
            b.forbid(o, d, "rotary embeddings rotate q and k at the same positions")
        seq = [] if rotary else [b.shared_dim("s", seq_uses)]
        shard = [[b.shared_dim("b", batch_uses)], seq, []]
        h = b.shared_dim("h", [(3, 0), (4, 0), (5, 0), (6, 1), (7, 0), (8, 0), (9, 0)])
        if groups % b.degrees[h]:
            what = "heads" if groups == heads else "KV heads"
            raise op_error(cls, f"head shard degree {b.degrees[h]} does not divide {groups} {what}")
        b.forbid(6, 0, "the output projection's rows are the embedding, not heads")
        form = b.build([(shard, [h])])
        return form, [result_type(form, 0, q.shape, float_dtype(cls, q))]


class _LossOp(PcgOp):
    """A scalar loss. Sharded rows give partial sums (each task divides by the global count)."""

    output = result_def(TensorType)
    PROPS: ClassVar[tuple] = (("reduction", Kind.STR, False),)
    AUTOCAST: ClassVar[str] = "f32"

    @classmethod
    def check_reduction(cls, attrs: dict[str, Any]) -> None:
        if attrs["reduction"] not in ("mean", "sum"):
            raise op_error(cls, f"reduction must be mean or sum, got '{attrs['reduction']}'")


@op_definition
class CrossEntropyOp(_LossOp):
    """Cross-entropy of logits [N, C] against class indices [N].

    `ignore_index` (optional, torch's): a target equal to it adds nothing, and a mean divides
    by the count of the kept targets of the whole batch. Rows may shard either way: with a sum
    each task's rows add up; under a mean every task divides by that global count (-t torch
    all-reduces it across the row shards; a pipelined plan refuses it, since each micro-batch
    would count its own). Without `ignore_index` every target must be a class.

    Sharding the classes is Megatron-LM's vocabulary-parallel cross-entropy: the tasks holding
    one block of rows compute each row's log-sum-exp together (the row maximum and the sum of
    exponentials reduced across their class shards, no logits gathered), and class shard v's
    partial sum is the sum over its rows of lse / V - the target's logit where shard v holds
    the target (V class shards), so the partial sums add up to the loss."""

    name = "pcg.cross_entropy"
    logits = operand_def(TensorType)
    target = operand_def(TensorType)
    PROPS: ClassVar[tuple] = (*_LossOp.PROPS, ("ignore_index", Kind.INT, True))

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        logits, target = operands
        cls.check_reduction(attrs)
        _check_indices(cls, target, "target")
        if logits.rank != 2 or target.shape != logits.shape[:1]:
            raise op_error(
                cls, f"logits {list(logits.shape)} and target {list(target.shape)} should be [N, C], [N]"
            )
        b = form_builder(cls, ["logits", "target"], operands)
        rows = b.shared_dim("n", [(0, 0), (1, 0)])
        classes = b.shared_dim("v", [(0, 1)])
        form = b.build([([], [rows, classes])])
        return form, [result_type(form, 0, (), float_dtype(cls, logits))]


@op_definition
class MseLossOp(_LossOp):
    """Mean (or summed) squared error of two tensors of one shape; every dim may shard."""

    name = "pcg.mse_loss"
    input = operand_def(TensorType)
    target = operand_def(TensorType)

    @classmethod
    def infer(cls, operands: list[Any], attrs: dict[str, Any]) -> tuple[Form, list[Attribute]]:
        x, target = operands
        cls.check_reduction(attrs)
        if x.shape != target.shape or x.element_type != target.element_type:
            raise op_error(cls, f"input {x} and target {target} must have one shape and type")
        b = form_builder(cls, ["input", "target"], operands)
        sums = [b.shared_dim(f"d{i}", [(0, i), (1, i)]) for i in range(x.rank)]
        form = b.build([([], sums)])
        return form, [result_type(form, 0, (), float_dtype(cls, x))]


ALL_OPS: list[type[PcgOp]] = [
    InputOp,
    WeightOp,
    ConstantOp,
    ReluOp,
    GeluOp,
    SigmoidOp,
    TanhOp,
    ExpOp,
    SqrtOp,
    IdentityOp,
    NegOp,
    ScalarMulOp,
    ScalarAddOp,
    PowOp,
    ClampOp,
    CompareOp,
    DropoutOp,
    CastOp,
    AddOp,
    SubOp,
    MulOp,
    DivOp,
    CompareTensorsOp,
    LinearOp,
    MatmulOp,
    BatchMatmulOp,
    Conv2dOp,
    Pool2dOp,
    BatchNormOp,
    LayerNormOp,
    SoftmaxOp,
    CumsumOp,
    ConcatOp,
    SplitOp,
    ReshapeOp,
    TransposeOp,
    ReduceOp,
    GatherOp,
    EmbeddingOp,
    EmbeddingBagOp,
    AttentionOp,
    CrossEntropyOp,
    MseLossOp,
]

PCG = Dialect("pcg", ALL_OPS, [TensorType, MachineViewAttr])

__all__ = ["PCG", "TensorType", "f32", "i64"]
