"""Contractions and windows of the `pcg` dialect: linear, matmul, batch matmul, 2-D
convolution and pooling."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.ir import Attribute
from xdsl.irdl import (
    operand_def,
    opt_operand_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure

from unityc.dialects.canonicalization import canonicalization
from unityc.dialects.forms import Form, FormBuilder
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg_types import (
    PcgOp,
    TensorType,
    float_dtype,
    form_builder,
    op_error,
    result_type,
    same_dims,
)
from unityc.dialects.spatial import window_halo
from unityc.dialects.syntax import Kind, op_definition


@op_definition
class LinearOp(PcgOp, fam.Contraction, fam.MatmulRate):
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


class _MatmulBase(PcgOp, fam.Contraction, fam.MatmulRate):
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
class Conv2dOp(PcgOp, fam.Contraction, fam.MatmulRate, fam.Windowed):
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
class Pool2dOp(PcgOp, fam.Pooling, fam.Windowed):
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
