"""Every parallel form an op claims: the assembled result equals the unparallelized one.

Two ways of feeding a parallel form:
- task level: the op's tasks run on hand-made pieces whose partial sums are random parts
  (not a value and zeros), so an op that wrongly treats partial sums as values is caught;
- graph level: sources typed with degrees (the interpreter scatters the logical value), or
  unsharded sources moved with parallel.partition / replicate / reduce / combine.
"""

from __future__ import annotations

import math
import pathlib

import pytest
import torch
from helpers import (
    MLP_FEEDS,
    Graph,
    assert_close,
    gather,
    randint,
    randn,
    run_assembled,
    run_op,
    run_tasks_on,
    ttype,
)
from xdsl.dialects.builtin import f32, f64, i64

from unityc.dialects import pcg
from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.source import make_context, parse_source
from unityc.interpreter import run_graph
from unityc.interpreter.pieces import assemble

FLOATS = (torch.float64, torch.float32)


def D(*shard: int, sum: int = 1, copy: int = 1) -> tuple:
    """Degrees of one operand: shard per dim (all 1 if omitted), sum, copy."""
    return (list(shard) if shard else None, sum, copy)


def typed(value: torch.Tensor, spec: tuple | None) -> TensorType:
    shard, s, c = spec if spec is not None else (None, 1, 1)
    elt = f32 if value.dtype.is_floating_point else i64
    return ttype(list(value.shape), elt, shard, s, c)


def check_form(cls, operands, specs, attrs, expect=None, graph_level=True):
    """Runs `cls` with operands of degrees `specs` and compares with the unparallelized run.

    expect: per result (shard, sum, copy) of the inferred result type."""
    reference = run_op(cls, operands, attrs, torch.float64)
    types = []
    for v, spec in zip(operands, specs, strict=True):
        if v is None:
            types.append(None)
        elif isinstance(v, list):
            types.append([typed(u, s) for u, s in zip(v, spec, strict=True)])
        else:
            types.append(typed(v, spec))
    for dtype in FLOATS:
        op, got = run_tasks_on(cls, types, operands, attrs, dtype)
        for g, r in zip(got, reference, strict=True):
            assert_close(g, r, dtype)
    if expect is not None:
        results = [(list(r.type.shard), r.type.sum_degree, r.type.copy_degree) for r in op.results]
        expect = expect if isinstance(expect, list) else [expect]
        want = [
            (list(s) if s is not None else [1] * r.type.rank, su, c)
            for (s, su, c), r in zip(expect, op.results, strict=True)
        ]
        assert results == want
    flat = [t for x in types for t in (x if isinstance(x, list) else [x]) if t is not None]
    if graph_level and all(t.sum_degree == 1 for t in flat):  # sources cannot hold partial sums

        def source_degrees(t):
            return [source_degrees(u) for u in t] if isinstance(t, list) else (list(t.shard), t.copy_degree)

        degrees = [None if t is None else source_degrees(t) for t in types]
        got = run_op(cls, operands, attrs, torch.float64, degrees=degrees)
        for g, r in zip(got, reference, strict=True):
            assert_close(g, r)


# ------------------------------------------------------------------------------------------
# Element-wise
# ------------------------------------------------------------------------------------------

UNARY = [
    (pcg.ReluOp, {}),
    (pcg.GeluOp, {}),
    (pcg.GeluOp, {"tanh": True}),
    (pcg.SigmoidOp, {}),
    (pcg.TanhOp, {}),
    (pcg.ExpOp, {}),
    (pcg.IdentityOp, {}),
    (pcg.NegOp, {}),
    (pcg.ScalarMulOp, {"scale": 2.5}),
    (pcg.ScalarAddOp, {"value": -1.0}),
    (pcg.PowOp, {"exponent": 3.0}),
    (pcg.DropoutOp, {"p": 0.1}),
    (pcg.SqrtOp, {}),
    (pcg.Log1pOp, {}),
    (pcg.LogOp, {}),
    (pcg.AbsOp, {}),
    (pcg.ClampOp, {"low": -0.5, "high": 0.5}),
    (pcg.CompareOp, {"kind": "lt", "value": 0.25}),
]
LINEAR_UNARY = [
    (pcg.IdentityOp, {}),
    (pcg.StopGradientOp, {}),
    (pcg.NegOp, {}),
    (pcg.ScalarMulOp, {"scale": -0.5}),
]


@pytest.mark.parametrize("cls, attrs", UNARY, ids=lambda v: getattr(v, "name", ""))
@pytest.mark.parametrize(
    "spec, expect",
    [
        (D(2, 3), ([2, 3], 1, 1)),
        (D(4, 1), ([4, 1], 1, 1)),
        (D(1, 2, copy=2), ([1, 2], 1, 2)),
    ],
)
def test_unary_sharded(cls, attrs, spec, expect):
    x = randn(4, 6).abs() + 0.1 if cls in (pcg.SqrtOp, pcg.Log1pOp, pcg.LogOp) else randn(4, 6)
    check_form(cls, [x], [spec], attrs, expect)


@pytest.mark.parametrize("cls, attrs", LINEAR_UNARY, ids=lambda v: getattr(v, "name", ""))
def test_linear_unary_keeps_partial_sums(cls, attrs):
    check_form(cls, [randn(4, 6)], [D(2, 1, sum=3)], attrs, ([2, 1], 3, 1))


def test_cast_sharded():
    check_form(pcg.CastOp, [randint(9, 4, 6)], [D(2, 3, copy=2)], {"dtype": f32}, ([2, 3], 1, 2))


BINARY = [pcg.AddOp, pcg.SubOp, pcg.MulOp, pcg.DivOp]


def _rhs(cls, *shape, seed=1):
    b = randn(*shape, seed=seed)
    return b.sign() * (b.abs() + 0.5) if cls is pcg.DivOp else b


@pytest.mark.parametrize("cls", BINARY, ids=lambda c: c.name)
@pytest.mark.parametrize(
    "lshape, rshape, lspec, rspec, expect",
    [
        ([4, 6], [4, 6], D(2, 3), D(2, 3), ([2, 3], 1, 1)),
        ([4, 6], [6], D(2, 3), D(3, copy=2), ([2, 3], 1, 1)),  # broadcast rhs: copy per lhs row shard
        ([4, 1], [1, 6], D(2, 1, copy=3), D(1, 3, copy=2), ([2, 3], 1, 1)),  # both broadcast
        ([2, 4, 6], [4, 1], D(2, 2, 1, copy=3), D(2, 1, copy=6), ([2, 2, 1], 1, 3)),
    ],
)
def test_binary_sharded_with_broadcasting(cls, lshape, rshape, lspec, rspec, expect):
    check_form(cls, [randn(*lshape), _rhs(cls, *rshape)], [lspec, rspec], {}, expect)


@pytest.mark.parametrize("cls", [pcg.AddOp, pcg.SubOp], ids=lambda c: c.name)
def test_add_sub_with_equal_sum_degrees(cls):
    check_form(cls, [randn(4, 6), randn(4, 6, seed=1)], [D(2, 1, sum=2), D(2, 1, sum=2)], {}, ([2, 1], 2, 1))
    # a broadcast operand with partial sums too
    check_form(cls, [randn(4, 6), randn(6, seed=1)], [D(1, 3, sum=2), D(3, sum=2)], {}, ([1, 3], 2, 1))


def test_mul_with_both_operands_sums():
    a, b = randn(4, 6), randn(4, 6, seed=1)
    check_form(pcg.MulOp, [a, b], [D(2, 1, sum=2, copy=3), D(2, 1, sum=3, copy=2)], {}, ([2, 1], 6, 1))
    # only one operand has partial sums: the other is copied once per partial sum
    check_form(pcg.MulOp, [a, b], [D(sum=2), D(copy=2)], {}, (None, 2, 1))
    check_form(pcg.MulOp, [a, b], [D(copy=2), D(sum=2)], {}, (None, 2, 1))


def test_div_linear_in_numerator_only():
    check_form(
        pcg.DivOp, [randn(4, 6), _rhs(pcg.DivOp, 4, 6)], [D(2, 1, sum=2), D(2, 1, copy=2)], {}, ([2, 1], 2, 1)
    )


# ------------------------------------------------------------------------------------------
# Linear, matmul
# ------------------------------------------------------------------------------------------

LINEAR_FORMS = [
    ("batch", D(2, 1), D(copy=2), D(copy=2), ([2, 1], 1, 1)),
    ("batch3d", D(2, 2, 1), D(copy=4), D(copy=4), ([2, 2, 1], 1, 1)),
    ("column", D(copy=2), D(2, 1), D(2), ([1, 2], 1, 1)),
    ("reduction", D(1, 2), D(1, 2), D(copy=2), (None, 2, 1)),
    ("batch x column x reduction", D(2, 2, copy=2), D(2, 2, copy=2), D(2, copy=4), ([2, 2], 2, 1)),
    ("input partial sums", D(sum=2), D(copy=2), D(copy=2), (None, 2, 1)),
    ("weight partial sums", D(copy=2), D(sum=2), D(copy=2), (None, 2, 1)),
    ("replicated result", D(copy=3), D(copy=3), D(copy=3), (None, 1, 3)),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize(
    "name, xs, ws, bs, expect", LINEAR_FORMS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_linear_forms(name, xs, ws, bs, expect, with_bias):
    x = randn(4, 2, 6) if name == "batch3d" else randn(4, 6)
    if name == "batch3d":
        expect = ([2, 2, 1], 1, 1)
    b = randn(4, seed=2) if with_bias else None
    check_form(pcg.LinearOp, [x, randn(4, 6, seed=1), b], [xs, ws, bs if with_bias else None], {}, expect)


def test_linear_reduction_parallel_adds_bias_once():
    x, w, b = randn(3, 8), randn(5, 8, seed=1), torch.full((5,), 100.0, dtype=torch.float64)
    _, (got,) = run_tasks_on(
        pcg.LinearOp, [typed(x, D(1, 4)), typed(w, D(1, 4)), typed(b, D(copy=4))], [x, w, b], {}
    )
    assert_close(got, x @ w.T + b)


MATMUL_FORMS = [
    (D(2, 1), D(copy=2), ([2, 1], 1, 1)),
    (D(copy=2), D(1, 2), ([1, 2], 1, 1)),
    (D(1, 2), D(2, 1), (None, 2, 1)),
    (D(1, 4), D(4, 1), (None, 4, 1)),
    (D(2, 2, copy=2), D(2, 2, copy=2), ([2, 2], 2, 1)),
    (D(sum=2), D(copy=2), (None, 2, 1)),
    (D(sum=2, copy=3), D(sum=3, copy=2), (None, 6, 1)),
]


@pytest.mark.parametrize("aspec, bspec, expect", MATMUL_FORMS, ids=str)
def test_matmul_forms(aspec, bspec, expect):
    check_form(pcg.MatmulOp, [randn(4, 8), randn(8, 6, seed=1)], [aspec, bspec], {}, expect)


@pytest.mark.parametrize(
    "aspec, bspec, expect",
    [
        (D(2, 1, 1, 1), D(2, 1, 1, 1), ([2, 1, 1, 1], 1, 1)),
        (D(2, 3, 1, 1), D(2, 3, 1, 1), ([2, 3, 1, 1], 1, 1)),
        (D(1, 1, 2, 2), D(1, 1, 2, 1, copy=2), ([1, 1, 2, 1], 2, 1)),
        (D(2, 1, 1, 1, copy=2), D(2, 1, 1, 2), ([2, 1, 1, 2], 1, 1)),
    ],
)
def test_batch_matmul_forms(aspec, bspec, expect):
    check_form(pcg.BatchMatmulOp, [randn(2, 3, 4, 6), randn(2, 3, 6, 4, seed=1)], [aspec, bspec], {}, expect)


# ------------------------------------------------------------------------------------------
# Convolution, pooling
# ------------------------------------------------------------------------------------------

CONV_FORMS = [
    ("batch", D(2, 1, 1, 1), D(copy=2), D(copy=2), ([2, 1, 1, 1], 1, 1)),
    ("output channels", D(copy=2), D(2, 1, 1, 1), D(2), ([1, 2, 1, 1], 1, 1)),
    ("input channels", D(1, 2, 1, 1), D(1, 2, 1, 1), D(copy=2), (None, 2, 1)),
    ("input channels 4", D(1, 4, 1, 1), D(1, 4, 1, 1), D(copy=4), (None, 4, 1)),
    ("batch x out x in", D(2, 2, 1, 1, copy=2), D(2, 2, 1, 1, copy=2), D(2, copy=4), ([2, 2, 1, 1], 2, 1)),
    ("input partial sums", D(sum=2), D(copy=2), D(copy=2), (None, 2, 1)),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize(
    "name, xs, ws, bs, expect", CONV_FORMS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_conv2d_forms(name, xs, ws, bs, expect, with_bias):
    attrs = {"stride": [2, 1], "padding": [1, 1], "dilation": [1, 2]}
    x, w = randn(2, 4, 6, 6), randn(6, 4, 3, 3, seed=1)
    b = randn(6, seed=2) if with_bias else None
    check_form(pcg.Conv2dOp, [x, w, b], [xs, ws, bs if with_bias else None], attrs, expect)


@pytest.mark.parametrize("degree", [2, 4])
@pytest.mark.parametrize("with_bias", [False, True])
def test_conv2d_grouped_channel_sharding(degree, with_bias):
    x, w = randn(2, 8, 5, 5), randn(8, 2, 3, 3, seed=1)  # 4 groups of 2 input, 2 output channels
    b = randn(8, seed=2) if with_bias else None
    specs = [D(1, degree, 1, 1), D(degree, 1, 1, 1), D(degree) if with_bias else None]
    check_form(pcg.Conv2dOp, [x, w, b], specs, {"groups": 4, "padding": [1, 1]}, ([1, degree, 1, 1], 1, 1))
    # with the batch sharded too
    specs = [D(2, degree, 1, 1), D(degree, 1, 1, 1, copy=2), D(degree, copy=2) if with_bias else None]
    check_form(pcg.Conv2dOp, [x, w, b], specs, {"groups": 4}, ([2, degree, 1, 1], 1, 1))


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_forms(kind):
    attrs = {"kind": kind, "kernel": [3, 2], "stride": [2, 1], "padding": [1, 0]}
    x = randn(4, 6, 7, 6)
    check_form(pcg.Pool2dOp, [x], [D(2, 3, 1, 1)], attrs, ([2, 3, 1, 1], 1, 1))
    check_form(pcg.Pool2dOp, [x], [D(1, 2, 1, 1, copy=2)], attrs, ([1, 2, 1, 1], 1, 2))
    if kind == "avg":  # zero-padded average pooling is linear
        check_form(pcg.Pool2dOp, [x], [D(2, 1, 1, 1, sum=2)], attrs, ([2, 1, 1, 1], 2, 1))


# Spatial partitioning: (attrs, x shape, weight shape, x degrees) of windows whose halo lines
# up: "same" 3x3, strided 3x3, dilated, a kernel wider than its padding (halo below only), a
# 1x1 stride-2 (a negative halo: rows dropped), and height x width with corners.
SPATIAL_CONVS = [
    ("same 3x3 on H", {"padding": [1, 1]}, (2, 3, 8, 6), (4, 3, 3, 3), D(1, 1, 4, 1)),
    ("stride 2 on W", {"stride": [2, 2], "padding": [1, 1]}, (2, 3, 6, 8), (4, 3, 3, 3), D(1, 1, 1, 2)),
    ("dilated 5x5", {"padding": [4, 2], "dilation": [2, 1]}, (1, 2, 8, 8), (3, 2, 5, 5), D(1, 1, 2, 2)),
    ("4x4 stride 2 pad 1", {"stride": [2, 2], "padding": [1, 1]}, (1, 2, 8, 8), (3, 2, 4, 4), D(1, 1, 2, 2)),
    ("1x1 stride 2", {"stride": [2, 2]}, (2, 2, 8, 4), (3, 2, 1, 1), D(1, 1, 4, 1)),
    ("batch x H x W", {"padding": [1, 1]}, (2, 3, 4, 4), (4, 3, 3, 3), D(2, 1, 2, 2)),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize(
    "name, attrs, xshape, wshape, xs", SPATIAL_CONVS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_conv2d_spatial_forms(name, attrs, xshape, wshape, xs, with_bias):
    x, w = randn(*xshape), randn(*wshape, seed=1)
    b = randn(wshape[0], seed=2) if with_bias else None
    tasks = math.prod(xs[0])
    expect = ([xs[0][0], 1, *xs[0][2:]], 1, 1)
    check_form(
        pcg.Conv2dOp, [x, w, b], [xs, D(copy=tasks), D(copy=tasks) if with_bias else None], attrs, expect
    )


def test_conv2d_spatial_with_channels():
    """Height x output channels x input channels (partial sums): the forms compose."""
    x, w, b = randn(2, 4, 8, 4), randn(6, 4, 3, 3, seed=1), randn(6, seed=2)
    specs = [D(1, 2, 2, 1, copy=2), D(2, 2, 1, 1, copy=2), D(2, copy=4)]
    check_form(pcg.Conv2dOp, [x, w, b], specs, {"padding": [1, 1]}, ([1, 2, 2, 1], 2, 1))


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool2d_spatial_forms(kind):
    x = randn(2, 3, 8, 8)
    same = {"kind": kind, "kernel": [3, 3], "stride": [1, 1], "padding": [1, 1]}
    check_form(pcg.Pool2dOp, [x], [D(1, 1, 2, 2)], same, ([1, 1, 2, 2], 1, 1))
    halve = {"kind": kind, "kernel": [2, 2]}
    check_form(pcg.Pool2dOp, [x], [D(2, 1, 4, 1)], halve, ([2, 1, 4, 1], 1, 1))
    overlap = {"kind": kind, "kernel": [3, 3], "stride": [2, 2], "padding": [1, 1]}
    check_form(pcg.Pool2dOp, [x], [D(1, 3, 2, 2)], overlap, ([1, 3, 2, 2], 1, 1))


@pytest.mark.parametrize(
    "cls, attrs, wshape, xs, message",
    [
        (pcg.Conv2dOp, {}, (4, 3, 3, 3), D(1, 1, 2, 1), "times its stride"),
        (pcg.Conv2dOp, {"padding": [4, 4]}, (4, 3, 9, 9), D(1, 1, 4, 1), "larger than a shard"),
        (
            pcg.Pool2dOp,
            {"kind": "max", "kernel": [3, 3], "stride": [3, 3]},
            None,
            D(1, 1, 1, 4),
            "times its stride",
        ),
    ],
)
def test_spatial_forms_refused(cls, attrs, wshape, xs, message):
    x = randn(2, 3, 8, 8)
    operands = [x] if wshape is None else [x, randn(*wshape, seed=1), None]
    specs = [xs] if wshape is None else [xs, D(copy=math.prod(xs[0])), None]
    types = [None if v is None else typed(v, s) for v, s in zip(operands, specs, strict=True)]
    with pytest.raises(FormError, match=message):
        run_tasks_on(cls, types, operands, attrs, torch.float64)


# ------------------------------------------------------------------------------------------
# Normalization, softmax
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("affine", [False, True])
def test_batch_norm_channel_sharded(affine):
    x = randn(4, 6, 3, 3) * 2 + 1
    w, b = (randn(6, seed=1), randn(6, seed=2)) if affine else (None, None)
    specs = [D(1, 3, 1, 1), D(3) if affine else None, D(3) if affine else None]
    check_form(pcg.BatchNormOp, [x, w, b], specs, {"eps": 1e-5}, ([1, 3, 1, 1], 1, 1))
    specs = [D(1, 2, 1, 1, copy=2), D(2, copy=2) if affine else None, D(2, copy=2) if affine else None]
    check_form(pcg.BatchNormOp, [x, w, b], specs, {"eps": 1e-5}, ([1, 2, 1, 1], 1, 2))


@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm_sharded_outside_normalized_dims(affine):
    x = randn(4, 3, 6)
    w, b = (randn(6, seed=1), randn(6, seed=2)) if affine else (None, None)
    specs = [D(2, 3, 1), D(copy=6) if affine else None, D(copy=6) if affine else None]
    check_form(pcg.LayerNormOp, [x, w, b], specs, {"dims": 1, "eps": 1e-5}, ([2, 3, 1], 1, 1))
    w2, b2 = (randn(3, 6, seed=1), randn(3, 6, seed=2)) if affine else (None, None)
    specs = [D(4, 1, 1), D(copy=4) if affine else None, D(copy=4) if affine else None]
    check_form(pcg.LayerNormOp, [x, w2, b2], specs, {"dims": 2, "eps": 1e-5}, ([4, 1, 1], 1, 1))


@pytest.mark.parametrize(
    "dim, spec, expect",
    [
        (-1, D(2, 3, 1), ([2, 3, 1], 1, 1)),
        (0, D(1, 3, 2), ([1, 3, 2], 1, 1)),
        (1, D(2, 1, 4, copy=2), ([2, 1, 4], 1, 2)),
    ],
)
def test_softmax_sharded_off_its_dim(dim, spec, expect):
    check_form(pcg.SoftmaxOp, [randn(2, 3, 4) * 3], [spec], {"dim": dim}, expect)


@pytest.mark.parametrize(
    "dim, spec, expect",
    [
        (1, D(2, 1, 4), ([2, 1, 4], 1, 1)),
        (-1, D(1, 3, 1, copy=2), ([1, 3, 1], 1, 2)),
        (0, D(1, 3, 2, sum=2), ([1, 3, 2], 2, 1)),  # linear: partial sums stay partial
    ],
)
def test_cumsum_sharded_off_its_dim(dim, spec, expect):
    check_form(pcg.CumsumOp, [randn(2, 3, 4)], [spec], {"dim": dim}, expect)


def test_cumsum_may_not_shard_its_dim():
    with pytest.raises(FormError, match="sums every element before it"):
        check_form(pcg.CumsumOp, [randn(2, 4)], [D(1, 2)], {"dim": 1})


# ------------------------------------------------------------------------------------------
# Shape operators
# ------------------------------------------------------------------------------------------


def test_gather_sharded_off_its_dim():
    x = randn(4, 6, 2)
    attrs = {"dim": 1, "indices": [5, 0, 3]}
    check_form(pcg.GatherOp, [x], [D(2, 1, 2)], attrs, ([2, 1, 2], 1, 1))
    check_form(pcg.GatherOp, [x], [D(1, 1, 2, sum=2)], attrs, ([1, 1, 2], 2, 1))
    check_form(pcg.GatherOp, [x], [D(2, 1, 1, copy=2)], attrs, ([2, 1, 1], 1, 2))


def test_moe_ops_split_tokens():
    """Data parallelism of a router and its experts: tokens shard, the expert weights copy."""
    scores, index = randn(4, 8), torch.stack([torch.randperm(4)[:2] for _ in range(4)])
    check_form(pcg.TopkOp, [scores], [D(2, 1)], {"k": 2}, ([2, 1], 1, 1))
    check_form(pcg.TopkOp, [scores], [D(2, 1)], {"k": 2, "groups": 2, "group_k": 1}, ([2, 1], 1, 1))
    check_form(pcg.TakeOp, [scores, index], [D(2, 1), D(2, 1)], {"dim": 1}, ([2, 1], 1, 1))
    check_form(pcg.TakeOp, [scores, index], [D(1, 1, sum=2), D(1, 1, copy=2)], {"dim": 1}, ([1, 1], 2, 1))
    operands = [randn(4, 6), index, torch.rand(4, 2, dtype=torch.float64), randn(4, 10, 6), randn(4, 6, 5)]
    specs = [D(2, 1), D(2, 1), D(2, 1), D(1, 1, 1, copy=2), D(1, 1, 1, copy=2)]
    check_form(pcg.ExpertsOp, operands, specs, {"activation": "silu"}, ([2, 1], 1, 1))


@pytest.mark.parametrize(
    ("tokens", "experts", "copies"),
    [(2, 2, 1), (4, 4, 1), (4, 2, 2)],  # EP 2, EP 4, EP 2 x expert-data 2
)
def test_experts_split_over_an_expert_parallel_group(tokens, experts, copies):
    """Expert parallelism: the experts split over "e", the tokens over "t" x "e"; each task's
    tokens still meet all E experts (its group's slices), so the split op computes the whole."""
    n = 8
    index = torch.stack([torch.randperm(4)[:2] for _ in range(n)])
    operands = [randn(n, 6), index, torch.rand(n, 2, dtype=torch.float64), randn(4, 10, 6), randn(4, 6, 5)]
    weights = D(experts, 1, 1, copy=copies)
    specs = [D(tokens, 1), D(tokens, 1), D(tokens, 1), weights, weights]
    check_form(pcg.ExpertsOp, operands, specs, {"activation": "silu"}, ([tokens, 1], 1, 1))


def test_experts_refuse_split_experts_and_a_split_top_k():
    g = Graph()
    x, w = g.input("x", [4, 6]), g.input("w", [4, 2])
    index = g.input("i", [4, 2], i64)
    gate_up = g.partition(g.input("gu", [4, 10, 6]), 0, 2)
    down = g.input("d", [4, 6, 5])
    with pytest.raises(FormError, match="'down' dimension 0 has shard degree 1, but operand 'gate_up'"):
        g.op(pcg.ExpertsOp, [x, index, w, gate_up, down], activation="silu")
    down = g.partition(down, 0, 2)
    with pytest.raises(FormError, match="'gate_up' dimension 0 has shard degree 2, which does not divide"):
        g.op(pcg.ExpertsOp, [x, index, w, gate_up, down], activation="silu")
    with pytest.raises(FormError, match="routes its whole tokens over every expert"):
        rows = g.partition(g.input("g2", [4, 10, 6]), 1, 2)
        g.op(pcg.ExpertsOp, [x, index, w, rows, g.input("d2", [4, 6, 5])], activation="silu")
    with pytest.raises(FormError, match="a top-k needs the whole dimension"):
        g.op(pcg.TopkOp, [g.partition(w, 1, 2)], k=1)


def test_concat_on_unsharded_dim():
    xs = [randn(4, 2, 6), randn(4, 3, 6, seed=1), randn(4, 1, 6, seed=2)]
    check_form(pcg.ConcatOp, [xs], [[D(2, 1, 3)] * 3], {"dim": 1}, ([2, 1, 3], 1, 1))
    check_form(pcg.ConcatOp, [xs], [[D(1, 1, 2, sum=2)] * 3], {"dim": -2}, ([1, 1, 2], 2, 1))
    check_form(pcg.ConcatOp, [xs], [[D(2, 1, 1, copy=2)] * 3], {"dim": 1}, ([2, 1, 1], 1, 2))


@pytest.mark.parametrize(
    "spec, expect",
    [
        (D(2, 1, 3), ([2, 1, 3], 1, 1)),
        (D(1, 1, 2, sum=2), ([1, 1, 2], 2, 1)),
        (D(4, 1, 1, copy=2), ([4, 1, 1], 1, 2)),
    ],
)
def test_split_on_unsharded_dim(spec, expect):
    check_form(pcg.SplitOp, [randn(4, 5, 6)], [spec], {"dim": 1, "sizes": [2, 1, 2]}, [expect] * 3)


@pytest.mark.parametrize(
    "src, dst, spec, expect",
    [
        ([4, 3, 2], [12, 2], D(2, 1, 1), ([2, 1], 1, 1)),  # merge: the lead dim keeps its shards
        ([8, 3], [2, 4, 3], D(2, 1), ([2, 1, 1], 1, 1)),  # split: the lead result dim takes them
        ([4, 6], [4, 2, 3], D(2, 2), ([2, 2, 1], 1, 1)),  # sharded dim of a later group
        ([6, 4], [4, 6], D(2, 1), ([2, 1], 1, 1)),  # one group, both sides lead by degree 2
        ([2, 6, 4], [2, 24], D(2, 3, 1), ([2, 3], 1, 1)),
        ([4, 1, 6], [4, 6], D(4, 1, 2), ([4, 2], 1, 1)),
        ([4, 6], [4, 1, 6, 1], D(2, 3, sum=2), ([2, 1, 3, 1], 2, 1)),
        ([4, 6], [24], D(2, 1, copy=3), ([2], 1, 3)),
    ],
)
def test_reshape_with_sharded_leading_dim(src, dst, spec, expect):
    check_form(pcg.ReshapeOp, [randn(*src)], [spec], {"shape": dst}, expect)


@pytest.mark.parametrize(
    "perm, spec, expect",
    [
        ([2, 0, 1], D(2, 1, 3), ([3, 2, 1], 1, 1)),
        ([1, 0, 2], D(2, 4, 1, sum=2), ([4, 2, 1], 2, 1)),
        ([0, 2, 1], D(1, 2, 6, copy=2), ([1, 6, 2], 1, 2)),
    ],
)
def test_transpose_moves_shards(perm, spec, expect):
    check_form(pcg.TransposeOp, [randn(2, 4, 6)], [spec], {"perm": perm}, expect)


@pytest.mark.parametrize("kind", ["sum", "mean"])
@pytest.mark.parametrize(
    "dims, keepdim, spec, expect",
    [
        ([1], False, D(2, 3), ([2], 3, 1)),
        ([1], True, D(2, 3), ([2, 1], 3, 1)),
        ([0, 1], False, D(2, 3), ([], 6, 1)),
        ([0], True, D(4, 1, sum=2), ([1, 1], 8, 1)),
        ([-1], False, D(1, 2, copy=2), ([1], 2, 2)),
        ([0], False, D(1, 3), ([3], 1, 1)),  # the sharded dim is kept
    ],
)
def test_reduce_over_sharded_dims(kind, dims, keepdim, spec, expect):
    attrs = {"kind": kind, "dims": dims, "keepdim": keepdim or None}
    check_form(pcg.ReduceOp, [randn(4, 6)], [spec], attrs, expect)


@pytest.mark.parametrize("kind", ["max", "min", "argmax", "argmin", "amax"])
@pytest.mark.parametrize(
    "dims, keepdim, spec, expect",
    [
        ([1], False, D(2, 1), ([2], 1, 1)),  # the kept dim shards, the reduced one is whole
        ([1], True, D(2, 1, copy=2), ([2, 1], 1, 2)),
        ([0], False, D(1, 3), ([3], 1, 1)),  # a dim after the reduced one moves down
    ],
)
def test_reduce_selects_shard_kept_dims(kind, dims, keepdim, spec, expect):
    attrs = {"kind": kind, "dims": dims, "keepdim": keepdim or None}
    check_form(pcg.ReduceOp, [randn(4, 6)], [spec], attrs, expect)


@pytest.mark.parametrize("kind", ["max", "argmin", "amax"])
def test_reduce_selects_reject_a_sharded_reduced_dim(kind):
    g = Graph()
    x = g.partition(g.input("x", [4, 6]), 1, 2)
    with pytest.raises(FormError, match=f"a {kind} needs the whole reduced dim"):
        g.op(pcg.ReduceOp, [x], kind=kind, dims=[1])


# ------------------------------------------------------------------------------------------
# Embeddings, attention, losses
# ------------------------------------------------------------------------------------------


def _ids(vocab: int, *shape: int) -> torch.Tensor:
    ids = randint(vocab, *shape)
    flat = ids.view(-1)
    flat[0], flat[-1] = 0, vocab - 1  # both ends of the vocabulary
    return ids


EMBEDDING_FORMS = [
    ("vocabulary", D(copy=2), D(2, 1), (None, 2, 1)),
    ("vocabulary 5", D(copy=5), D(5, 1), (None, 5, 1)),
    ("embedding dim", D(copy=2), D(1, 2), ([1, 1, 2], 1, 1)),
    ("indices", D(2, 3), D(copy=6), ([2, 3, 1], 1, 1)),
    ("all", D(2, 1, copy=4), D(2, 2, copy=2), ([2, 1, 2], 2, 1)),
    ("weight partial sums", D(copy=2), D(sum=2), (None, 2, 1)),
]


@pytest.mark.parametrize(
    "name, ispec, wspec, expect", EMBEDDING_FORMS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_embedding_forms(name, ispec, wspec, expect):
    check_form(pcg.EmbeddingOp, [_ids(10, 4, 3), randn(10, 6, seed=1)], [ispec, wspec], {}, expect)


EMBEDDING_BAG_FORMS = [
    ("bags", D(2, 1), D(copy=2), ([2, 1], 1, 1)),
    ("bag size", D(1, 3), D(copy=3), (None, 3, 1)),
    ("vocabulary", D(copy=2), D(2, 1), (None, 2, 1)),
    ("embedding dim", D(copy=2), D(1, 2), ([1, 2], 1, 1)),
    ("bags x bag size x vocabulary", D(2, 2, copy=2), D(2, 1, copy=4), ([2, 1], 4, 1)),
]


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize(
    "name, ispec, wspec, expect", EMBEDDING_BAG_FORMS, ids=lambda v: v if isinstance(v, str) else ""
)
def test_embedding_bag_forms(name, ispec, wspec, expect, mode):
    check_form(
        pcg.EmbeddingBagOp, [_ids(10, 4, 6), randn(10, 4, seed=1)], [ispec, wspec], {"mode": mode}, expect
    )


def _attention(mask_shape=(2, 1, 4, 6), biases=True):
    e = 8
    q, k, v = randn(2, 4, e), randn(2, 6, e, seed=1), randn(2, 6, e, seed=2)
    ws = [randn(e, e, seed=3 + i) / math.sqrt(e) for i in range(4)]
    bs = [randn(e, seed=7 + i) if biases else None for i in range(4)]
    mask = None if mask_shape is None else randn(*mask_shape, seed=11)
    return [q, k, v, *ws, *bs, mask, None, None, None, None]


def _attention_specs(b=1, s=1, h=1, mask_shape=(2, 1, 4, 6), biases=True):
    """Operand degrees for batch b, query sequence s and heads h (copies: one per task reading)."""
    q = D(b, s, 1, copy=h)
    kv = D(b, 1, 1, copy=s * h)
    wqkv = D(h, 1, copy=b * s)
    wo = D(1, h, copy=b * s)
    bqkv = D(h, copy=b * s) if biases else None
    bo = D(copy=b * s * h) if biases else None
    mask = None
    if mask_shape is not None:
        mb = b if mask_shape[0] > 1 else 1
        ms = s if mask_shape[2] > 1 else 1
        mh = h if mask_shape[1] > 1 else 1  # a per-head mask (T5's position bias) splits with the heads
        mask = D(mb, mh, ms, 1, copy=(b // mb) * (s // ms) * (h // mh))
    return [q, kv, kv, wqkv, wqkv, wqkv, wo, bqkv, bqkv, bqkv, bo, mask, None, None, None, None]


@pytest.mark.parametrize(
    "mask_shape",
    [(2, 1, 4, 6), (1, 1, 1, 6), (2, 1, 1, 6), (1, 1, 4, 6), (1, 4, 4, 6), (2, 4, 4, 6), None],
    ids=str,
)
@pytest.mark.parametrize(
    "b, s, h", [(1, 1, 2), (1, 1, 4), (2, 1, 1), (1, 2, 1), (1, 4, 1), (2, 2, 2)], ids=str
)
def test_attention_forms(b, s, h, mask_shape):
    operands = _attention(mask_shape)
    specs = _attention_specs(b, s, h, mask_shape)
    check_form(pcg.AttentionOp, operands, specs, {"heads": 4}, ([b, s, 1], h, 1))


@pytest.mark.parametrize("mask_shape", [(2, 1, 1, 6), None], ids=str)
@pytest.mark.parametrize("b, s, h", [(1, 2, 1), (1, 4, 1), (2, 2, 2)], ids=str)
def test_causal_attention_forms(b, s, h, mask_shape):
    """A causal attention's query shards: each task masks from its first query's position."""
    operands = _attention(mask_shape)
    specs = _attention_specs(b, s, h, mask_shape)
    check_form(pcg.AttentionOp, operands, specs, {"heads": 4, "causal": True}, ([b, s, 1], h, 1))


@pytest.mark.parametrize(("b", "h"), [(1, 1), (2, 1), (1, 2), (2, 2)], ids=str)
def test_grouped_query_rotary_attention_forms(b, h):
    """4 query heads reading 2 KV heads, rotary cos/sin: a head split of degree 2 keeps whole
    KV groups (wk, wv rows split like wq's); cos and sin are read whole by every task."""
    e, kv = 8, 4
    q = randn(2, 6, e)
    ws = [randn(e, e, seed=3), randn(kv, e, seed=4), randn(kv, e, seed=5), randn(e, e, seed=6)]
    bs = [randn(e, seed=7), randn(kv, seed=8), randn(kv, seed=9), randn(e, seed=10)]
    cos, sin = randn(1, 1, 6, 2, seed=12), randn(1, 1, 6, 2, seed=13)
    mask = randn(1, 1, 6, 6, seed=11)
    wqkv, bqkv = D(h, 1, copy=b), D(h, copy=b)
    specs = [D(b, 1, 1, copy=h)] * 3 + [wqkv] * 3 + [D(1, h, copy=b), bqkv, bqkv, bqkv, D(copy=b * h)]
    specs += [D(1, 1, 1, 1, copy=b * h)] * 3 + [None, None]
    operands = [q, q, q, *ws, *bs, mask, cos, sin, None, None]
    check_form(pcg.AttentionOp, operands, specs, {"heads": 4, "kv_heads": 2}, ([b, 1, 1], h, 1))


@pytest.mark.parametrize(("b", "h"), [(1, 1), (2, 1), (1, 2), (2, 2)], ids=str)
def test_qk_norm_rotary_attention_forms(b, h):
    """Qwen3: each query and key head RMS-normalized by q_norm / k_norm [d] before the
    rotary; a head split keeps the norm weights whole on every task."""
    e = 8
    q = randn(2, 6, e)
    ws = [randn(e, e, seed=3 + i) for i in range(4)]
    cos, sin = randn(1, 1, 6, 2, seed=12), randn(1, 1, 6, 2, seed=13)
    norms = [randn(2, seed=14) + 1.0, randn(2, seed=15) + 1.0]
    specs = [D(b, 1, 1, copy=h)] * 3 + [D(h, 1, copy=b)] * 3 + [D(1, h, copy=b), None, None, None, None, None]
    specs += [D(1, 1, 1, 1, copy=b * h)] * 2 + [D(1, copy=b * h)] * 2
    operands = [q, q, q, *ws, None, None, None, None, None, cos, sin, *norms]
    check_form(pcg.AttentionOp, operands, specs, {"heads": 4, "norm_eps": 1e-6}, ([b, 1, 1], h, 1))


def test_qk_norm_weights_may_not_be_split():
    e = 8
    q, w = TensorType([2, 6, e], f64), TensorType([e, e], f64)
    norm = TensorType([2], f64, [2])
    with pytest.raises(FormError, match="normalized with the whole weight"):
        pcg.AttentionOp.infer([q, q, q, w, w, w, w, *[None] * 7, norm, norm], {"heads": 4, "norm_eps": 1e-6})


def test_grouped_query_head_split_must_keep_whole_groups():
    e = 8
    q = TensorType([2, 6, e], f64)
    wq = TensorType([e, e], f64, [4, 1])
    wkv = TensorType([4, e], f64, [4, 1])
    wo = TensorType([e, e], f64, [1, 4])
    with pytest.raises(FormError, match="does not divide 2 KV heads"):
        pcg.AttentionOp.infer([q, q, q, wq, wkv, wkv, wo, *[None] * 7], {"heads": 4, "kv_heads": 2})


def test_attention_head_parallel_without_biases_and_output_bias_added_once():
    operands = _attention(None, biases=False)
    check_form(
        pcg.AttentionOp, operands, _attention_specs(1, 1, 2, None, biases=False), {"heads": 2}, (None, 2, 1)
    )
    # a large output bias shows up once, not once per head shard
    operands = _attention(None, biases=True)
    operands[10] = torch.full((8,), 1000.0, dtype=torch.float64)
    check_form(pcg.AttentionOp, operands, _attention_specs(1, 1, 4, None), {"heads": 4}, (None, 4, 1))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("degree", [2, 4, 8])
def test_cross_entropy_sharded_rows(reduction, degree):
    logits, target = randn(8, 5) * 2, randint(5, 8, seed=1)
    check_form(
        pcg.CrossEntropyOp,
        [logits, target],
        [D(degree, 1), D(degree)],
        {"reduction": reduction},
        ([], degree, 1),
    )
    check_form(
        pcg.CrossEntropyOp,
        [logits, target],
        [D(degree, 1, copy=2), D(degree, copy=2)],
        {"reduction": reduction},
        ([], degree, 2),
    )


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore_index", [None, -100, 2])
@pytest.mark.parametrize(("rows", "classes"), [(1, 2), (1, 4), (2, 2), (2, 1)])
def test_cross_entropy_vocabulary_parallel(reduction, ignore_index, rows, classes):
    """Megatron-LM's vocabulary-parallel cross-entropy: class shards' partial sums (log-sum-exp
    over the shards, the target's logit where held) add up to the loss; with ignore_index the
    mean divides by the kept targets of the whole batch, also when rows are sharded."""
    logits, target = randn(8, 8) * 3, randint(8, 8, seed=1)
    target[:3] = -100 if ignore_index == -100 else target[:3]
    attrs = {"reduction": reduction} | ({} if ignore_index is None else {"ignore_index": ignore_index})
    check_form(
        pcg.CrossEntropyOp,
        [logits, target],
        [D(rows, classes), D(rows, copy=classes)],
        attrs,
        ([], rows * classes, 1),
    )


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize(
    "xs, ts, expect",
    [
        (D(2, 3), D(2, 3), ([], 6, 1)),
        (D(4, 1), D(4, 1), ([], 4, 1)),
        (D(1, 2, copy=3), D(1, 2, copy=3), ([], 2, 3)),
    ],
)
def test_mse_loss_sharded(reduction, xs, ts, expect):
    check_form(pcg.MseLossOp, [randn(4, 6), randn(4, 6, seed=1)], [xs, ts], {"reduction": reduction}, expect)


# ------------------------------------------------------------------------------------------
# Whole graphs built with parallel ops from unsharded sources
# ------------------------------------------------------------------------------------------


def _mlp(plan: str):
    g = Graph()
    x, label = g.input("x", [16, 32]), g.input("label", [16], i64)
    w1, b1 = g.weight("fc1.weight", [64, 32]), g.weight("fc1.bias", [64])
    w2, b2 = g.weight("fc2.weight", [10, 64]), g.weight("fc2.bias", [10])
    if plan == "tensor":  # Megatron: fc1 column-parallel, fc2 row-parallel
        x, w1, b1 = g.replicate(x, 2), g.partition(w1, 0, 2), g.partition(b1, 0, 2)
        w2, b2 = g.partition(w2, 1, 2), g.replicate(b2, 2)
    elif plan == "data":
        x, label = g.partition(x, 0, 4), g.partition(label, 0, 4)
        w1, b1, w2, b2 = (g.replicate(v, 4) for v in (w1, b1, w2, b2))
    h = g.op(pcg.LinearOp, [x, w1, b1])
    a = g.op(pcg.ReluOp, [h])
    logits = g.op(pcg.LinearOp, [a, w2, b2])
    if plan == "tensor":
        assert logits.type.sum_degree == 2
        logits = g.reduce(logits, 2)
    loss = g.op(pcg.CrossEntropyOp, [logits, label], reduction="mean")
    if plan == "data":
        assert logits.type.shard == (4, 1) and loss.type.sum_degree == 4
        logits = g.combine(logits, 0, 4)
        loss = g.reduce(loss, 4)
    return g.module([loss, logits])


@pytest.mark.parametrize("plan", ["tensor", "data"])
def test_mlp_plans_match_unparallelized(plan):
    for dtype in FLOATS:
        want = run_assembled(_mlp("none"), MLP_FEEDS, dtype)
        got = run_assembled(_mlp(plan), MLP_FEEDS, dtype)
        for g_, w in zip(got, want, strict=True):
            assert_close(g_, w, dtype)


def test_bundled_tensor_parallel_example_matches_unparallelized():
    root = pathlib.Path(__file__).parent.parent / "examples"
    ctx = make_context()
    plain = parse_source(ctx, (root / "mlp.mlir").read_text(), "mlp.mlir")
    plan = parse_source(ctx, (root / "mlp_tensor_parallel.mlir").read_text(), "mlp_tensor_parallel.mlir")
    for seed in (0, 1):
        a, _ = run_graph(plain, seed, float_dtype=torch.float64)
        b, _ = run_graph(plan, seed, float_dtype=torch.float64)
        assert_close(assemble(b[0]), assemble(a[0]))


def _partial_matmul(g: Graph, key: str, degree: int):
    """[4, 6] @ [6, 5] with the contraction dim partitioned on both sides: sum `degree`."""
    a, b = g.input(key + "a", [4, 6]), g.input(key + "b", [6, 5])
    return g.op(pcg.MatmulOp, [g.partition(a, 1, degree), g.partition(b, 0, degree)])


@pytest.mark.parametrize("cls, ref", [(pcg.AddOp, torch.add), (pcg.SubOp, torch.sub)])
def test_graph_add_of_partial_sums(cls, ref):
    g = Graph()
    p, q = _partial_matmul(g, "p", 2), _partial_matmul(g, "q", 2)
    s = g.op(cls, [p, q])
    assert s.type.sum_degree == 2
    module = g.module([g.reduce(s, 2)])
    feeds = {
        k: randn(*shape, seed=i)
        for i, (k, shape) in enumerate([("pa", [4, 6]), ("pb", [6, 5]), ("qa", [4, 6]), ("qb", [6, 5])])
    }
    (got,) = run_assembled(module, feeds)
    assert_close(got, ref(feeds["pa"] @ feeds["pb"], feeds["qa"] @ feeds["qb"]))


def test_graph_mul_of_partial_sums():
    g = Graph()
    p, q = _partial_matmul(g, "p", 2), _partial_matmul(g, "q", 3)
    # each partial sum of p meets every partial sum of q: one copy per partial sum of the other
    m = g.op(pcg.MulOp, [g.replicate(p, 3), g.replicate(q, 2)])
    assert m.type.sum_degree == 6
    module = g.module([g.reduce(m, 6), m])
    feeds = {
        k: randn(*shape, seed=i)
        for i, (k, shape) in enumerate([("pa", [4, 6]), ("pb", [6, 5]), ("qa", [4, 6]), ("qb", [6, 5])])
    }
    got, unreduced = run_assembled(module, feeds)
    want = (feeds["pa"] @ feeds["pb"]) * (feeds["qa"] @ feeds["qb"])
    assert_close(got, want)
    assert_close(unreduced, want)


@pytest.mark.parametrize("kind", ["sum", "mean"])
def test_graph_reduce_over_partitioned_dim(kind):
    g = Graph()
    x = g.partition(g.partition(g.input("x", [4, 6, 2]), 1, 3), 0, 2)
    r = g.op(pcg.ReduceOp, [x], kind=kind, dims=[1])
    assert (r.type.shard, r.type.sum_degree) == ((2, 1), 3)
    module = g.module([gather(g, r)])
    xv = randn(4, 6, 2)
    (got,) = run_assembled(module, {"x": xv})
    assert_close(got, xv.sum(1) if kind == "sum" else xv.mean(1))


def test_graph_embedding_vocab_parallel_then_reduce():
    g = Graph()
    ids = g.replicate(g.input("ids", [3, 4], i64), 2)
    table = g.partition(g.weight("table", [8, 5]), 0, 2)
    e = g.op(pcg.EmbeddingOp, [ids, table])
    module = g.module([g.reduce(e, 2)])
    idv, tv = _ids(8, 3, 4), randn(8, 5)
    (got,) = run_assembled(module, {"ids": idv, "table": tv})
    assert_close(got, tv[idv])


def test_graph_attention_head_parallel():
    operands = _attention((2, 1, 4, 6))[:12]
    names = ["q", "k", "v", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo", "mask"]
    g = Graph()
    vals = {
        n: (g.input(n, list(t.shape)) if n in ("q", "k", "v", "mask") else g.weight(n, list(t.shape)))
        for n, t in zip(names, operands, strict=True)
    }
    vals["cos"] = vals["sin"] = None
    names += ["cos", "sin"]
    par = dict(vals)
    for n in ("q", "k", "v", "mask", "bo"):
        par[n] = g.replicate(vals[n], 2)
    for n in ("wq", "wk", "wv", "bq", "bk", "bv"):
        par[n] = g.partition(vals[n], 0, 2)
    par["wo"] = g.partition(vals["wo"], 1, 2)
    out = g.op(pcg.AttentionOp, [par[n] for n in names], heads=4)
    ref = g.op(pcg.AttentionOp, [vals[n] for n in names], heads=4)
    module = g.module([g.reduce(out, 2), ref])
    got, want = run_assembled(module, dict(zip(names, operands, strict=False)))
    assert_close(got, want)


@pytest.mark.parametrize("exchange", ["ring", "all-to-all"])
@pytest.mark.parametrize(("b", "c", "h"), [(1, 2, 1), (1, 3, 1), (2, 2, 1), (1, 2, 2)], ids=str)
def test_context_parallel_attention_forms(b, c, h, exchange):
    """Context parallelism: q, k, v, cos/sin and the mask's rows sharded alike on the sequence
    (grouped-query heads, rotary at each row's own positions, a padding+causal mask whose key
    columns stay whole); with heads too, partial sums over the head shards."""
    if exchange == "all-to-all" and 4 // h % c:
        pytest.skip("all-to-all needs the context degree to divide a task's heads")
    e, kv, s = 8, 4, 6
    q = randn(2, s, e)
    ws = [randn(e, e, seed=3), randn(kv, e, seed=4), randn(kv, e, seed=5), randn(e, e, seed=6)]
    angle = torch.arange(s, dtype=torch.float64)[:, None] / 3.0
    cos, sin = torch.cat([angle.cos()] * 2, -1)[None, None], torch.cat([angle.sin()] * 2, -1)[None, None]
    mask = torch.zeros(2, 1, s, s).masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), -1e9)
    mask[1, ..., s - 2 :] = -1e9  # the second sequence's last two tokens are padding
    seq = D(b, c, 1, copy=h)
    specs = [seq] * 3 + [D(h, 1, copy=b * c)] * 3 + [D(1, h, copy=b * c), None, None, None, None]
    specs += [D(b, 1, c, 1, copy=h)] + [D(1, 1, c, 1, copy=b * h)] * 2 + [None, None]
    operands = [q, q, q, *ws, None, None, None, None, mask, cos, sin, None, None]
    attrs = {"heads": 4, "kv_heads": 2, "context": exchange}
    check_form(pcg.AttentionOp, operands, specs, attrs, ([b, c, 1], h, 1))


def test_context_parallel_attention_refusals():
    e = 8
    q = TensorType([2, 6, e], f64, [1, 2, 1])
    w = TensorType([e, e], f64, copy=2)
    heads = [q, q, q, w, w, w, w]
    with pytest.raises(FormError, match='"spiral" is not one of "ring", "all-to-all"'):
        pcg.AttentionOp.infer(heads, {"heads": 4, "context": "spiral"})
    with pytest.raises(FormError, match="all-to-all context degree 2 does not divide a task's 1 heads"):
        pcg.AttentionOp.infer(heads, {"heads": 1, "context": "all-to-all"})
    short = TensorType([2, 4, e], f64, [1, 2, 1])
    with pytest.raises(FormError, match="self-attention"):
        pcg.AttentionOp.infer([short, q, q, w, w, w, w], {"heads": 4, "context": "ring"})
    with pytest.raises(FormError, match="every query attends over the whole key sequence"):
        pcg.AttentionOp.infer(heads, {"heads": 4})  # no exchange named: keys are read whole
