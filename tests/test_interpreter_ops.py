"""Every pcg op, unparallelized: the reference interpreter's result equals torch's.

Each op is run through a whole graph (pcg.input sources fed explicit values), in float64
(tolerance 1e-10) and in float32 (relative error at most 1e-5 against a float64 reference
computed on the float32-rounded inputs).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import MLP_FEEDS, Graph, assert_close, randint, randn, run_assembled, run_op
from xdsl.dialects.builtin import f32, f64, i64

from unityc.dialects import pcg
from unityc.dialects.source import make_context, parse_source
from unityc.interpreter import assemble, run_graph
from unityc.runtime.kernels import attention as rt_attention

FLOATS = (torch.float64, torch.float32)


def rounded(v, dtype: torch.dtype):
    """The value the interpreter computes on (float inputs rounded to dtype), in float64."""
    if v is None:
        return None
    if isinstance(v, list | tuple):
        return [rounded(u, dtype) for u in v]
    return v.to(dtype).double() if v.dtype.is_floating_point else v


def check(cls, operands, ref, **attrs) -> None:
    """The op's interpreted result(s) equal ref(*operands) in float64 and float32."""
    for dtype in FLOATS:
        got = run_op(cls, operands, attrs, dtype)
        want = ref(*[rounded(v, dtype) for v in operands])
        want = list(want) if isinstance(want, list | tuple) else [want]
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            if g.dtype.is_floating_point:
                assert g.dtype == dtype, f"computed in {g.dtype}, expected {dtype}"
            assert_close(g, w, dtype)


# ------------------------------------------------------------------------------------------
# Sources
# ------------------------------------------------------------------------------------------


def test_input_and_weight_return_their_feeds():
    g = Graph()
    x = g.input("x", [3, 4])
    ids = g.input("ids", [5], i64)
    w = g.weight("layer.weight", [2, 4])
    module = g.module([x, ids, w])
    xv, idv, wv = randn(3, 4), randint(7, 5), randn(2, 4, seed=1)
    for dtype in FLOATS:
        got = run_assembled(module, {"x": xv, "ids": idv, "layer.weight": wv}, dtype)
        assert got[0].dtype == dtype and got[2].dtype == dtype
        assert torch.equal(got[0], xv.to(dtype))
        assert got[1].dtype == torch.int64 and torch.equal(got[1], idv)
        assert torch.equal(got[2], wv.to(dtype))


def test_unfed_sources_are_seeded_by_name():
    def graph(order):
        g = Graph()
        vals = {}
        for name in order:
            vals[name] = g.weight(name, [4, 6]) if name.startswith("w") else g.input(name, [6], i64)
        table = g.weight("table", [9, 2])
        emb = g.op(pcg.EmbeddingOp, [vals["ids"], table])
        return g.module([vals["w"], vals["ids"], emb])

    a = run_assembled(graph(["w", "ids"]), seed=3)
    b = run_assembled(graph(["ids", "w"]), seed=3)  # same names, other order: same values
    c = run_assembled(graph(["w", "ids"]), seed=4)
    for u, v in zip(a, b, strict=True):
        assert torch.equal(u, v)
    assert not torch.equal(a[0], c[0])
    # integer inputs respect the bound of their users (here the vocabulary of 9 rows)
    assert a[1].min() >= 0 and a[1].max() < 9
    # the random weight is scaled by 1/sqrt(fan_in)
    assert a[0].abs().max() <= 1 / math.sqrt(6)


@pytest.mark.parametrize("elt, dtype", [(f32, torch.float64), (f64, torch.float64), (i64, torch.int64)])
def test_constant(elt, dtype):
    value = torch.arange(12).reshape(3, 4)
    value = value.double() / 4 - 1 if dtype.is_floating_point else value - 5
    g = Graph()
    c = g.constant(value, elt)
    module = g.module([c])
    (got,) = run_assembled(module, dtype=torch.float64)
    assert got.dtype == dtype
    assert torch.equal(got, value.to(dtype))


def test_constant_in_float32():
    value = torch.tensor([[0.1, -2.5], [3.25, 1e-3]], dtype=torch.float64)
    g = Graph()
    module = g.module([g.constant(value)])
    (got,) = run_assembled(module, dtype=torch.float32)
    assert got.dtype == torch.float32 and torch.equal(got, value.float())


def test_parsed_example_graph_matches_torch_mlp():
    """examples/mlp.mlir (parsed text) against the same MLP written with torch.nn modules."""
    import pathlib

    text = (pathlib.Path(__file__).parent.parent / "examples" / "mlp.mlir").read_text()
    module = parse_source(make_context(), text, "mlp.mlir")
    feeds = MLP_FEEDS
    outputs, _ = run_graph(module, feeds=feeds, float_dtype=torch.float64)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).double()
    with torch.no_grad():
        model[0].weight.copy_(feeds["fc1.weight"])
        model[0].bias.copy_(feeds["fc1.bias"])
        model[2].weight.copy_(feeds["fc2.weight"])
        model[2].bias.copy_(feeds["fc2.bias"])
        want = F.cross_entropy(model(feeds["x"]), feeds["label"])
    assert_close(assemble(outputs[0]), want)


# ------------------------------------------------------------------------------------------
# Element-wise
# ------------------------------------------------------------------------------------------

UNARY = [
    (pcg.ReluOp, {}, torch.relu),
    (pcg.GeluOp, {}, lambda x: torch.nn.GELU()(x)),
    (pcg.GeluOp, {"tanh": True}, lambda x: torch.nn.GELU(approximate="tanh")(x)),
    (pcg.SigmoidOp, {}, torch.sigmoid),
    (pcg.TanhOp, {}, torch.tanh),
    (pcg.ExpOp, {}, torch.exp),
    (pcg.IdentityOp, {}, lambda x: x),
    (pcg.StopGradientOp, {}, lambda x: x),
    (pcg.NegOp, {}, lambda x: -x),
    (pcg.ScalarMulOp, {"scale": -0.375}, lambda x: x * -0.375),
    (pcg.ScalarAddOp, {"value": 1.5}, lambda x: x + 1.5),
    (pcg.PowOp, {"exponent": 3.0}, lambda x: x**3),
    (pcg.PowOp, {"exponent": 2.0}, torch.square),
    (pcg.DropoutOp, {"p": 0.5}, lambda x: x),
    (pcg.ClampOp, {"low": 0.0, "high": 0.5}, lambda x: F.hardtanh(x, 0.0, 0.5)),
    (pcg.ClampOp, {"low": -0.25}, lambda x: x.clamp(min=-0.25)),
    (pcg.ClampOp, {"high": 0.25}, lambda x: x.clamp(max=0.25)),
]


@pytest.mark.parametrize("cls, attrs, ref", UNARY, ids=lambda v: getattr(v, "name", None))
def test_unary(cls, attrs, ref):
    check(cls, [randn(2, 3, 4)], ref, **attrs)


def test_gelu_forms_differ():
    x = randn(50)
    exact = run_op(pcg.GeluOp, [x], {})[0]
    approx = run_op(pcg.GeluOp, [x], {"tanh": True})[0]
    assert not torch.allclose(exact, approx, rtol=0, atol=1e-9)
    assert_close(exact, 0.5 * x * (1 + torch.erf(x / math.sqrt(2))))
    assert_close(approx, 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))))


def test_sqrt_and_fractional_pow():
    x = randn(3, 5).abs() + 0.1
    check(pcg.SqrtOp, [x], torch.sqrt)
    check(pcg.Log1pOp, [x * 1e-6], torch.log1p)  # small x: log1p, not log(1 + x)
    check(pcg.LogOp, [x], torch.log)
    check(pcg.AbsOp, [x - 0.6], torch.abs)
    check(pcg.PowOp, [x], lambda v: v**0.5, exponent=0.5)
    check(pcg.PowOp, [x], lambda v: 1 / v, exponent=-1.0)


def test_dropout_is_identity_even_with_large_p():
    x = randn(4, 4)
    (got,) = run_op(pcg.DropoutOp, [x], {"p": 0.9})
    assert torch.equal(got, x)


@pytest.mark.parametrize("kind", pcg.COMPARISONS)
def test_compare_gives_a_boolean_mask(kind):
    """x ∘ value on floats and on integer ids; the mask is bool whatever the float dtype."""
    x = torch.tensor([[-1.0, 0.5, 2.0], [0.5, 3.0, 0.0]])
    ids = torch.tensor([1, 4, 1, 7])
    for dtype in FLOATS:
        (got,) = run_op(pcg.CompareOp, [x], {"kind": kind, "value": 0.5}, dtype)
        assert got.dtype == torch.bool and torch.equal(got, getattr(torch, kind)(x, 0.5))
        (got,) = run_op(pcg.CompareOp, [ids], {"kind": kind, "value": 1.0}, dtype)
        assert torch.equal(got, getattr(torch, kind)(ids, 1))


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumsum(dim):
    check(pcg.CumsumOp, [randn(3, 5)], lambda x: torch.cumsum(x, dim), dim=dim)
    ids = randint(3, 2, 6)
    (got,) = run_op(pcg.CumsumOp, [ids], {"dim": dim})
    assert got.dtype == torch.int64 and torch.equal(got, torch.cumsum(ids, dim))


def test_clamp_refuses_missing_or_crossed_bounds():
    with pytest.raises(Exception, match="needs a low or a high bound"):
        run_op(pcg.ClampOp, [randn(3)], {})
    with pytest.raises(Exception, match="is above high bound"):
        run_op(pcg.ClampOp, [randn(3)], {"low": 1.0, "high": 0.0})


def test_cast():
    x = randn(3, 4) * 5
    (got,) = run_op(pcg.CastOp, [x], {"dtype": i64})
    assert got.dtype == torch.int64 and torch.equal(got, x.to(torch.int64))
    ids = randint(100, 6) - 50
    for dtype in FLOATS:
        (got,) = run_op(pcg.CastOp, [ids], {"dtype": f32}, dtype)
        assert got.dtype == dtype and torch.equal(got, ids.to(dtype))
    # without a float override, f32 -> f64 really widens
    g = Graph()
    xv = g.input("x", [2, 2])
    module = g.module([g.op(pcg.CastOp, [xv], dtype=f64)])
    (got,) = run_assembled(module, {"x": torch.tensor([[0.1, 0.2], [0.3, 0.4]])}, dtype=None)
    assert got.dtype == torch.float64 and torch.equal(got, torch.tensor([[0.1, 0.2], [0.3, 0.4]]).double())


BROADCASTS = [
    ([2, 3, 4], [2, 3, 4]),
    ([2, 3, 4], [4]),
    ([2, 1, 4], [3, 1]),
    ([1], [2, 3]),
    ([3, 1], [1, 4]),
    ([4], [2, 3, 4]),
]
BINARY = [(pcg.AddOp, torch.add), (pcg.SubOp, torch.sub), (pcg.MulOp, torch.mul), (pcg.DivOp, torch.div)]


@pytest.mark.parametrize("cls, ref", BINARY, ids=lambda v: getattr(v, "name", None))
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_binary_broadcasting(cls, ref, shapes):
    a = randn(*shapes[0])
    b = randn(*shapes[1], seed=1)
    if cls is pcg.DivOp:
        b = b.sign() * (b.abs() + 0.5)
    check(cls, [a, b], ref)


@pytest.mark.parametrize("kind", pcg.COMPARISONS)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_compare_broadcasting(kind, shapes):
    a = randn(*shapes[0]).round()
    b = randn(*shapes[1], seed=1).round()  # rounded: equal elements occur
    check(pcg.CompareTensorsOp, [a, b], getattr(torch, kind), kind=kind)


def test_compare_of_positions_is_a_causal_mask():
    keys, queries = torch.arange(5)[None, :], torch.arange(5)[:, None]
    (got,) = run_op(pcg.CompareTensorsOp, [keys, queries], {"kind": "le"})
    assert got.dtype == torch.bool and torch.equal(got, torch.ones(5, 5, dtype=torch.bool).tril())


# ------------------------------------------------------------------------------------------
# Contractions, convolution, pooling
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("xshape", [[5, 6], [2, 3, 6], [6]])
def test_linear(with_bias, xshape):
    layer = torch.nn.Linear(6, 4, bias=with_bias).double()
    with torch.no_grad():
        layer.weight.copy_(randn(4, 6, seed=1))
        if with_bias:
            layer.bias.copy_(randn(4, seed=2))
    bias = layer.bias.detach() if with_bias else None

    def ref(x, w, b):
        layer32 = torch.nn.Linear(6, 4, bias=b is not None).double()
        with torch.no_grad():
            layer32.weight.copy_(w)
            if b is not None:
                layer32.bias.copy_(b)
            return layer32(x)

    check(pcg.LinearOp, [randn(*xshape), layer.weight.detach(), bias], ref)


def test_matmul():
    check(pcg.MatmulOp, [randn(3, 5), randn(5, 4, seed=1)], torch.matmul)


@pytest.mark.parametrize("batch", [[2], [2, 3]])
def test_batch_matmul(batch):
    check(pcg.BatchMatmulOp, [randn(*batch, 3, 5), randn(*batch, 5, 4, seed=1)], torch.matmul)


CONVS = [
    ({}, 4, 6, 1, (3, 3)),
    ({"stride": [2, 1], "padding": [1, 0]}, 4, 6, 1, (3, 3)),
    ({"dilation": [2, 1], "padding": [2, 1]}, 4, 6, 1, (3, 2)),
    ({"groups": 2}, 4, 6, 2, (3, 3)),
    ({"groups": 4, "stride": [2, 2], "padding": [1, 1], "dilation": [1, 2]}, 4, 8, 4, (3, 3)),
]


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("attrs, cin, cout, groups, k", CONVS, ids=str)
def test_conv2d(attrs, cin, cout, groups, k, with_bias):
    x = randn(2, cin, 7, 8)
    conv = torch.nn.Conv2d(
        cin,
        cout,
        k,
        stride=attrs.get("stride", 1),
        padding=attrs.get("padding", 0),
        dilation=attrs.get("dilation", 1),
        groups=groups,
        bias=with_bias,
    ).double()
    w = randn(*conv.weight.shape, seed=1)
    b = randn(cout, seed=2) if with_bias else None

    def ref(x, w, b):
        with torch.no_grad():
            conv.weight.copy_(w)
            if b is not None:
                conv.bias.copy_(b)
            return conv(x)

    check(pcg.Conv2dOp, [x, w, b], ref, **attrs)


POOLS = [
    ({"kernel": [2, 2]}, {"kernel_size": 2}),
    (
        {"kernel": [3, 2], "stride": [2, 1], "padding": [1, 0]},
        {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
    ),
    ({"kernel": [2, 3], "stride": [1, 2]}, {"kernel_size": (2, 3), "stride": (1, 2)}),
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("attrs, torch_args", POOLS, ids=str)
def test_pool2d(kind, attrs, torch_args):
    module = torch.nn.MaxPool2d(**torch_args) if kind == "max" else torch.nn.AvgPool2d(**torch_args)
    check(pcg.Pool2dOp, [randn(2, 3, 7, 6)], module, kind=kind, **attrs)


# ------------------------------------------------------------------------------------------
# Normalization, softmax
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("shape", [[4, 3, 5, 2], [6, 3], [4, 3, 5]])
def test_batch_norm_uses_batch_statistics(shape, affine):
    x = randn(*shape) * 2 + 1
    c = shape[1]
    w, b = (randn(c, seed=1), randn(c, seed=2)) if affine else (None, None)

    def ref(x, w, b):
        dims = [0, *range(2, x.dim())]
        view = [1, c] + [1] * (x.dim() - 2)
        mean = x.mean(dims, keepdim=True)
        var = ((x - mean) ** 2).mean(dims, keepdim=True)  # biased, as in training mode
        y = (x - mean) / torch.sqrt(var + 1e-5)
        if w is not None:
            y = y * w.reshape(view) + b.reshape(view)
        return y

    check(pcg.BatchNormOp, [x, w, b], ref, eps=1e-5)
    # and torch's own module in training mode agrees
    bn = (
        torch.nn.BatchNorm1d(c, affine=affine, eps=1e-5).double()
        if len(shape) < 4
        else torch.nn.BatchNorm2d(c, affine=affine, eps=1e-5).double()
    )
    if affine:
        with torch.no_grad():
            bn.weight.copy_(w)
            bn.bias.copy_(b)
    bn.train()
    assert_close(run_op(pcg.BatchNormOp, [x, w, b], {"eps": 1e-5})[0], bn(x).detach())


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(dims, affine):
    x = randn(2, 3, 4) * 3
    shape = [3, 4][-dims:]
    w, b = (randn(*shape, seed=1), randn(*shape, seed=2)) if affine else (None, None)

    def ref(x, w, b):
        axes = list(range(-dims, 0))
        mean = x.mean(axes, keepdim=True)
        var = ((x - mean) ** 2).mean(axes, keepdim=True)
        y = (x - mean) / torch.sqrt(var + 1e-6)
        return y * w + b if w is not None else y

    check(pcg.LayerNormOp, [x, w, b], ref, dims=dims, eps=1e-6)


def test_layer_norm_weight_only():
    x = randn(3, 5)
    w = randn(5, seed=1)
    check(
        pcg.LayerNormOp, [x, w, None], lambda x, w, b: F.layer_norm(x, (5,), w, None, 1e-5), dims=1, eps=1e-5
    )
    b = randn(5, seed=2)
    check(
        pcg.LayerNormOp, [x, None, b], lambda x, w, b: F.layer_norm(x, (5,), None, b, 1e-5), dims=1, eps=1e-5
    )


@pytest.mark.parametrize("dims", [1, 2])
@pytest.mark.parametrize("variant", [{}, {"offset": 1.0}, {"weight_after_cast": True}, None])
def test_rms_norm(dims, variant):
    x = randn(2, 3, 4) * 3
    shape = [3, 4][-dims:]
    w = randn(*shape, seed=1) if variant is not None else None
    shift = (variant or {}).get("offset", 0.0)

    def ref(x, w):
        axes = list(range(-dims, 0))
        y = x / torch.sqrt((x * x).mean(axes, keepdim=True) + 1e-6)
        return y * (w + shift) if w is not None else y

    check(pcg.RmsNormOp, [x, w], ref, dims=dims, eps=1e-6, **(variant or {}))


@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_tanh"])
def test_gated_activation(act):
    gate, up = randn(3, 5) * 2, randn(3, 5, seed=1)
    fn = {
        "silu": lambda g: g / (1 + torch.exp(-g)),
        "gelu": F.gelu,
        "gelu_tanh": lambda g: F.gelu(g, approximate="tanh"),
    }
    check(pcg.GatedActivationOp, [gate, up], lambda g, u: fn[act](g) * u, act=act)


@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_softmax(dim):
    def ref(x):
        e = torch.exp(x - x.amax(dim, keepdim=True))
        return e / e.sum(dim, keepdim=True)

    check(pcg.SoftmaxOp, [randn(2, 3, 4) * 3], ref, dim=dim)


# ------------------------------------------------------------------------------------------
# Shape operators
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim, indices", [(0, [2, 0, 2]), (1, [1]), (-1, [3, 2, 1, 0])])
def test_gather(dim, indices):
    x = randn(3, 2, 4)
    check(
        pcg.GatherOp,
        [x],
        lambda x: torch.index_select(x, dim % 3, torch.tensor(indices)),
        dim=dim,
        indices=indices,
    )


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_concat(dim):
    shapes = {
        0: ([1, 3, 2], [2, 3, 2], [3, 3, 2]),
        1: ([2, 1, 2], [2, 4, 2], [2, 2, 2]),
        -1: ([2, 3, 1], [2, 3, 3], [2, 3, 2]),
    }[dim]
    xs = [randn(*s, seed=i) for i, s in enumerate(shapes)]
    check(pcg.ConcatOp, [xs], lambda xs: torch.cat(xs, dim), dim=dim)


def test_concat_single_operand_and_integers():
    ids = [randint(9, 2, 3), randint(9, 2, 2, seed=1)]
    (got,) = run_op(pcg.ConcatOp, [ids], {"dim": 1})
    assert torch.equal(got, torch.cat(ids, 1))
    check(pcg.ConcatOp, [[randn(2, 2)]], lambda xs: xs[0], dim=0)


@pytest.mark.parametrize("dim, sizes", [(0, [1, 3]), (1, [2, 1, 2]), (-1, [3, 3]), (2, [6])])
def test_split(dim, sizes):
    x = randn(4, 5, 6)
    check(pcg.SplitOp, [x], lambda x: list(torch.split(x, sizes, dim)), dim=dim, sizes=sizes)


@pytest.mark.parametrize(
    "src, dst",
    [
        ([2, 3, 4], [6, 4]),
        ([6, 4], [2, 3, 4]),
        ([2, 3, 4], [4, 6]),
        ([2, 3, 4], [24]),
        ([24], [1, 2, 12, 1]),
        ([2, 1, 3], [3, 2]),
    ],
)
def test_reshape(src, dst):
    check(pcg.ReshapeOp, [randn(*src)], lambda x: x.reshape(dst), shape=dst)


@pytest.mark.parametrize("perm", [[1, 0, 2], [2, 0, 1], [0, 1, 2], [2, 1, 0]])
def test_transpose(perm):
    check(pcg.TransposeOp, [randn(2, 3, 4)], lambda x: x.permute(*perm), perm=perm)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dims", [[0], [1, 2], [-1], [0, 2], [0, 1, 2], []])
@pytest.mark.parametrize("kind", ["sum", "mean"])
def test_reduce(kind, dims, keepdim):
    def ref(x):
        if not dims:
            return x
        return x.sum(dims, keepdim=keepdim) if kind == "sum" else x.mean(dims, keepdim=keepdim)

    attrs = {"kind": kind, "dims": dims}
    if keepdim:
        attrs["keepdim"] = True
    check(pcg.ReduceOp, [randn(2, 3, 4)], ref, **attrs)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("kind", ["max", "min", "argmax", "argmin"])
def test_reduce_selects_over_one_dim(kind, dim, keepdim):
    def ref(x):
        values, indices = (x.max if kind.endswith("max") else x.min)(dim=dim, keepdim=keepdim)
        return indices if kind.startswith("arg") else values

    attrs = {"kind": kind, "dims": [dim], **({"keepdim": True} if keepdim else {})}
    check(pcg.ReduceOp, [randn(2, 3, 4)], ref, **attrs)


@pytest.mark.parametrize("kind", ["amax", "amin"])
def test_reduce_amax_amin_over_dims(kind):
    check(pcg.ReduceOp, [randn(2, 3, 4)], lambda x: getattr(x, kind)(dim=[0, 2]), kind=kind, dims=[0, 2])


# ------------------------------------------------------------------------------------------
# Embeddings, attention, losses
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ids_shape", [[5], [2, 3], [2, 2, 2]])
def test_embedding(ids_shape):
    ids = randint(10, *ids_shape)
    ids.view(-1)[0] = 9  # the last row too
    check(pcg.EmbeddingOp, [ids, randn(10, 4, seed=1)], lambda i, w: torch.nn.functional.embedding(i, w))


@pytest.mark.parametrize(
    ("pad", "ids_shard", "table_shard", "copies"),
    [
        (3, None, None, 1),  # unparallelized
        (3, [2, 1], None, 2),  # batch parallel: the table in copies
        (3, None, [2, 1], 2),  # vocabulary parallel, the pad row in the first shard
        (8, None, [2, 1], 2),  # ... in the second shard (local row 3)
        (9, None, [1, 2], 2),  # embedding-dim parallel
    ],
)
def test_embedding_padding_row_gets_no_gradient(pad, ids_shard, table_shard, copies):
    """padding_idx changes only the backward: the pad row's gradient is zero, in every form."""
    ids = randint(10, 4, 6)
    ids[1::2, -2:] = pad
    table = randn(10, 4, seed=1).requires_grad_()
    cotangent = randn(4, 6, 4, seed=2)
    g = Graph()
    ids_copy = copies if table_shard else 1
    i = g.input("ids", [4, 6], i64, shard=ids_shard, copy=ids_copy)
    w = g.weight("table", [10, 4], shard=table_shard, copy=copies if table_shard is None else 1)
    out = g.op(pcg.EmbeddingOp, [i, w], padding_idx=pad)
    assert out.owner.attrs()["padding_idx"] == pad
    got = run_assembled(g.module([out]), {"ids": ids, "table": table})[0]
    (got * cotangent).sum().backward()
    want = F.embedding(ids, table.detach(), padding_idx=pad)
    assert torch.equal(got.detach(), want)
    expected_grad = torch.zeros(10, 4, dtype=torch.float64)
    expected_grad.index_add_(0, ids.flatten(), cotangent.reshape(-1, 4))
    expected_grad[pad] = 0
    assert table.grad is not None and table.grad[pad].abs().max() == 0
    assert_close(table.grad, expected_grad)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag(mode):
    ids = randint(7, 3, 4)
    ids[0, :2] = 6
    check(
        pcg.EmbeddingBagOp,
        [ids, randn(7, 5, seed=1)],
        lambda i, w: F.embedding_bag(i, w, mode=mode),
        mode=mode,
    )


def mha_reference(q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, mask, heads):
    """Multi-head attention written out by hand, projections in nn.Linear layout [out, in]."""
    batch, sq, e = q.shape
    sk = k.shape[1]
    d = e // heads

    def proj(x, w, b, s):
        y = x @ w.T
        if b is not None:
            y = y + b
        return y.reshape(batch, s, heads, d).permute(0, 2, 1, 3)  # [B, H, S, d]

    qh, kh, vh = proj(q, wq, bq, sq), proj(k, wk, bk, sk), proj(v, wv, bv, sk)
    scores = torch.einsum("bhqd,bhkd->bhqk", qh, kh) / math.sqrt(d)
    if mask is not None:
        scores = scores + mask
    p = torch.exp(scores - scores.amax(-1, keepdim=True))
    p = p / p.sum(-1, keepdim=True)
    ctx = torch.einsum("bhqk,bhkd->bhqd", p, vh).permute(0, 2, 1, 3).reshape(batch, sq, e)
    out = ctx @ wo.T
    return out + bo if bo is not None else out


def attention_operands(batch=2, sq=3, sk=5, e=8, biases=True, mask_shape=None, self_attention=False, seed=0):
    q = randn(batch, sq, e, seed=seed)
    k = q if self_attention else randn(batch, sk, e, seed=seed + 1)
    v = q if self_attention else randn(batch, sk, e, seed=seed + 2)
    ws = [randn(e, e, seed=seed + 3 + i) / math.sqrt(e) for i in range(4)]
    bs = [randn(e, seed=seed + 7 + i) if biases else None for i in range(4)]
    mask = None
    if mask_shape is not None:
        mask = torch.where(randn(*mask_shape, seed=seed + 11) > 0.8, -1e4, 0.0).double()
        mask = mask + randn(*mask_shape, seed=seed + 12) * 0.1
    return [q, k, v, *ws, *bs, mask]


ATTENTION_CASES = [
    dict(biases=False),
    dict(biases=True),
    dict(biases=True, mask_shape=[2, 1, 3, 5]),
    dict(biases=False, mask_shape=[1, 1, 1, 5]),
    dict(biases=True, mask_shape=[2, 1, 1, 5]),
    dict(biases=True, mask_shape=[1, 1, 3, 5]),
    dict(biases=True, sq=4, sk=4, self_attention=True, mask_shape=[1, 1, 4, 4]),
]


@pytest.mark.parametrize("heads", [1, 2, 4])
@pytest.mark.parametrize("case", ATTENTION_CASES, ids=str)
def test_attention(case, heads):
    operands = attention_operands(**case)
    check(pcg.AttentionOp, operands, lambda *ops: mha_reference(*ops, heads=heads), heads=heads)


def _causal(mask, sq, sk):
    """mask (or zeros) with the dtype's lowest value where a key follows its query."""
    allowed = torch.ones(sq, sk, dtype=torch.bool).tril()
    base = torch.zeros(1, 1, sq, sk, dtype=torch.float64) if mask is None else mask
    return base.masked_fill(~allowed, torch.finfo(torch.float64).min)


@pytest.mark.parametrize("mask_shape", [None, [2, 1, 1, 4]], ids=["causal", "causal-padding"])
def test_attention_causal(mask_shape):
    """`causal` masks every key after its query, after the additive mask: as adding the causal
    mask HF builds (the fused SDPA kernel runs: is_causal, or one mask it builds)."""
    operands = attention_operands(sq=4, sk=4, self_attention=True, mask_shape=mask_shape)
    assert pcg.AttentionOp.kernel({"heads": 2, "causal": True}) == "sdpa"

    def ref(*ops):
        return mha_reference(*ops[:11], _causal(ops[11], 4, 4), heads=2)

    check(pcg.AttentionOp, operands, ref, heads=2, causal=True)


@pytest.mark.parametrize("kernel", ["sdpa", "math"])
def test_attention_causal_query_shards(kernel):
    """A task holding queries [start, start + n) of a causal attention (the query-sequence
    form) passes causal=start: the shards' outputs are the whole one's rows."""
    q, k, v, *rest = attention_operands(sq=6, sk=6, self_attention=True, mask_shape=[2, 1, 1, 6])
    weights, mask = rest[:8], rest[8]
    whole = rt_attention(q, k, v, *weights, mask, 2, causal=0, kernel=kernel)
    parts = [rt_attention(q[:, s : s + 3], k, v, *weights, mask, 2, causal=s, kernel=kernel) for s in (0, 3)]
    assert_close(torch.cat(parts, dim=1), whole)
    want = mha_reference(q, k, v, *weights, _causal(mask, 6, 6), heads=2)
    assert_close(whole, want)


def test_attention_matches_torch_multi_head_attention():
    operands = attention_operands(biases=True, mask_shape=[2, 1, 3, 5])
    q, k, v, wq, wk, wv, wo, bq, bk, bv, bo, mask = operands
    heads = 2
    (got,) = run_op(pcg.AttentionOp, operands, {"heads": heads})
    # torch wants [S, B, E] and a [B*heads, Sq, Sk] additive mask
    want, _ = F.multi_head_attention_forward(
        q.transpose(0, 1),
        k.transpose(0, 1),
        v.transpose(0, 1),
        8,
        heads,
        None,
        torch.cat([bq, bk, bv]),
        None,
        None,
        False,
        0.0,
        wo,
        bo,
        training=False,
        need_weights=False,
        attn_mask=mask.expand(2, heads, 3, 5).reshape(2 * heads, 3, 5),
        use_separate_proj_weight=True,
        q_proj_weight=wq,
        k_proj_weight=wk,
        v_proj_weight=wv,
    )
    assert_close(got, want.transpose(0, 1))


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy(reduction):
    logits = randn(6, 5) * 2
    target = randint(5, 6, seed=1)
    check(
        pcg.CrossEntropyOp,
        [logits, target],
        lambda x, t: F.cross_entropy(x, t, reduction=reduction),
        reduction=reduction,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_cross_entropy_ignore_index(reduction, ignore_index):
    logits = randn(6, 5) * 2
    target = randint(5, 6, seed=1)
    target[4:] = ignore_index
    check(
        pcg.CrossEntropyOp,
        [logits, target],
        lambda x, t: F.cross_entropy(x, t, reduction=reduction, ignore_index=ignore_index),
        reduction=reduction,
        ignore_index=ignore_index,
    )


def test_cross_entropy_without_ignore_index_refuses_outside_targets():
    """Without ignore_index every target is counted: -100 is an error, never a dropped row."""
    target = randint(5, 6, seed=1)
    target[0] = -100
    with pytest.raises(ValueError, match="outside the 5 classes"):
        check(pcg.CrossEntropyOp, [randn(6, 5), target], lambda x, t: x.sum(), reduction="mean")


@pytest.mark.parametrize("shape", [[6], [3, 4], [2, 3, 2]])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_mse_loss(reduction, shape):
    check(
        pcg.MseLossOp,
        [randn(*shape), randn(*shape, seed=1)],
        lambda x, t: F.mse_loss(x, t, reduction=reduction),
        reduction=reduction,
    )


# ------------------------------------------------------------------------------------------
# Mixture of experts
# ------------------------------------------------------------------------------------------


def test_topk_indices():
    x = randn(3, 5, 8)
    check(pcg.TopkOp, [x], lambda x: torch.topk(x, 3, dim=-1).indices, k=3)


def test_topk_group_limited_as_deepseek_v3_routes():
    """2 of 4 groups (each scored by its best two) are candidates; the top 3 among them."""
    x = randn(6, 16)

    def ref(x):
        groups = x.view(6, 4, 4).topk(2, dim=-1).values.sum(-1)
        mask = torch.zeros_like(groups).scatter(1, groups.topk(2, dim=-1).indices, 1)
        masked = x.masked_fill(~mask.bool().repeat_interleave(4, dim=1), float("-inf"))
        return masked.topk(3, dim=-1).indices

    check(pcg.TopkOp, [x], ref, k=3, groups=4, group_k=2, group_top=2)


def test_take_gathers_at_runtime_indices():
    x, index = randn(4, 6), torch.randint(0, 6, (4, 2))
    check(pcg.TakeOp, [x, index], lambda x, i: torch.gather(x, 1, i), dim=1)


def _hf_experts(x, index, weights, gate_up, down):
    """Hugging Face's experts loop (MixtralExperts.forward, eager)."""
    out = torch.zeros_like(x)
    for e in range(gate_up.shape[0]):
        token, slot = torch.where(index == e)
        gate, up = F.linear(x[token], gate_up[e]).chunk(2, dim=-1)
        out.index_add_(0, token, F.linear(F.silu(gate) * up, down[e]) * weights[token, slot, None])
    return out


def test_experts_match_the_hugging_face_loop_and_the_runtime_kernel():
    """The interpreter's dense definition equals HF's loop (forward) and the program's
    sort-based kernel (forward and every gradient); one expert chosen by no token."""
    from unityc.runtime.kernels import experts

    x, gate_up, down = randn(7, 6), randn(4, 10, 6), randn(4, 6, 5)
    index = torch.stack([torch.randperm(3)[:2] for _ in range(7)])  # expert 3 unused
    weights = torch.rand(7, 2, dtype=torch.float64)
    check(pcg.ExpertsOp, [x, index, weights, gate_up, down], _hf_experts, activation="silu")
    leaves = [t.clone().requires_grad_() for t in (x, weights, gate_up, down)]
    dense = run_op(pcg.ExpertsOp, [x, index, weights, gate_up, down], {"activation": "silu"})[0]
    sparse = experts(leaves[0], index, *leaves[1:])
    assert_close(sparse, dense)
    sparse.square().sum().backward()
    reference = [t.clone().requires_grad_() for t in (x, weights, gate_up, down)]
    _hf_experts(reference[0], index, *reference[1:]).square().sum().backward()
    for got, want in zip(leaves, reference, strict=True):
        assert_close(got.grad, want.grad)
    assert not leaves[2].grad[3].any()


def test_every_pcg_op_is_covered():
    """Keeps this file honest: a new pcg op must get a test here."""
    tested = {
        pcg.InputOp,
        pcg.WeightOp,
        pcg.ConstantOp,
        pcg.SqrtOp,
        pcg.Log1pOp,
        pcg.LogOp,
        pcg.AbsOp,
        pcg.StopGradientOp,
        pcg.CastOp,
        pcg.CompareTensorsOp,
        pcg.LinearOp,
        pcg.MatmulOp,
        pcg.BatchMatmulOp,
        pcg.Conv2dOp,
        pcg.Pool2dOp,
        pcg.BatchNormOp,
        pcg.LayerNormOp,
        pcg.RmsNormOp,
        pcg.GatedActivationOp,
        pcg.SoftmaxOp,
        pcg.CompareOp,
        pcg.CumsumOp,
        pcg.ConcatOp,
        pcg.SplitOp,
        pcg.ReshapeOp,
        pcg.TransposeOp,
        pcg.ReduceOp,
        pcg.GatherOp,
        pcg.EmbeddingOp,
        pcg.EmbeddingBagOp,
        pcg.AttentionOp,
        pcg.CrossEntropyOp,
        pcg.MseLossOp,
        pcg.TopkOp,
        pcg.TakeOp,
        pcg.ExpertsOp,
    }
    tested |= {cls for cls, _, _ in UNARY} | {cls for cls, _ in BINARY}
    assert set(pcg.ALL_OPS) == tested
