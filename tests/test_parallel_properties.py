"""Properties of parallel values and ops, checked with hypothesis on random shapes and degrees.

- data movement: partition/combine, replicate/reduce, the fused collectives as compositions,
  pipeline/batch, scatter/assemble;
- algebra: elementwise ops commute with partition, reduction-parallel matmul;
- the verifier: degree combinations that are not exact are rejected, and whatever it accepts
  (sampled from an exhaustive enumeration of small degree spaces) is exact.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch
from helpers import (
    Graph,
    assert_close,
    build_with_types,
    dummy_values,
    make_pieces,
    run,
    run_assembled,
    run_op,
    run_tasks_on,
    ttype,
)
from hypothesis import given
from hypothesis import strategies as st
from xdsl.dialects.builtin import f32, i64
from xdsl.utils.exceptions import VerifyException

from unityc.dialects import parallel, pcg
from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.interpreter import CopiesDiffer, Pieces, assemble, scatter
from unityc.interpreter.functions import run_parallel

# ------------------------------------------------------------------------------------------
# Strategies
# ------------------------------------------------------------------------------------------


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def shapes(draw, min_rank=1, max_rank=3):
    rank = draw(st.integers(min_rank, max_rank))
    return [draw(st.sampled_from([1, 2, 3, 4, 6])) for _ in range(rank)]


@st.composite
def parallel_types(draw, shape=None, max_sum=3, max_copy=3):
    """A random parallel type: shard degrees dividing each dim, sum and copy degrees."""
    shape = shape if shape is not None else draw(shapes())
    shard = [draw(st.sampled_from(divisors(s))) for s in shape]
    return ttype(shape, f32, shard, draw(st.integers(1, max_sum)), draw(st.integers(1, max_copy)))


def value_of(t: TensorType, seed: int) -> torch.Tensor:
    return torch.randn(t.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def pieces_of(t: TensorType, seed: int) -> tuple[torch.Tensor, Pieces]:
    x = value_of(t, seed)
    return x, make_pieces(x, t, torch.Generator().manual_seed(seed + 1))


def apply(cls, value: Pieces, **attrs) -> Pieces:
    """Runs one parallel op (built on a value of value.type) on pieces."""
    (operand,) = dummy_values([value.type])
    op = cls.build_inferred([operand], **attrs)
    op.verify_()
    out = run_parallel(op, value)
    assert out.type == op.output.type
    return out


def same_pieces(a: Pieces, b: Pieces) -> None:
    assert a.type == b.type
    assert a.array.shape == b.array.shape
    for coord in itertools.product(*(range(k) for k in a.array.shape)):
        assert torch.equal(a[coord], b[coord]), coord


# ------------------------------------------------------------------------------------------
# Data movement
# ------------------------------------------------------------------------------------------


@given(t=parallel_types(), data=st.data(), seed=st.integers(0, 1000))
def test_assemble_inverts_scatter_and_make_pieces(t, data, seed):
    x = value_of(t, seed)
    assert torch.equal(assemble(scatter(x, t)), x)
    pieces = scatter(x, t)
    for coord in itertools.product(*(range(k) for k in t.task_degrees())):
        piece = pieces[coord]
        assert tuple(piece.shape) == t.piece_shape
        if coord[-2] != 0:
            assert not piece.any()  # scatter: partial sums other than 0 are zeros
    _, random_parts = pieces_of(t, seed)
    assert_close(assemble(random_parts), x)


@given(data=st.data(), seed=st.integers(0, 1000))
def test_partition_then_combine_is_identity(data, seed):
    t = data.draw(parallel_types())
    dims = [d for d in range(t.rank) if t.piece_shape[d] > 1]
    if not dims:
        dims = [0]
        t = ttype([t.shape[0] * 2, *t.shape[1:]], f32, t.shard, t.sum_degree, t.copy_degree)
    dim = data.draw(st.sampled_from(dims))
    n = data.draw(st.sampled_from([d for d in divisors(t.piece_shape[dim]) if d > 1]))
    x, pieces = pieces_of(t, seed)
    parted = apply(parallel.PartitionOp, pieces, dim=dim, degree=n)
    assert parted.type.shard[dim] == t.shard[dim] * n
    assert_close(assemble(parted), x)
    back = apply(parallel.CombineOp, parted, dim=dim, degree=n)
    same_pieces(back, pieces)
    # the index convention: piece i becomes pieces i*n .. i*n+n-1
    for coord in itertools.product(*(range(k) for k in t.task_degrees())):
        for j, chunk in enumerate(torch.chunk(pieces[coord], n, dim)):
            moved = list(coord)
            moved[dim] = coord[dim] * n + j
            assert torch.equal(parted[tuple(moved)], chunk)


@given(data=st.data(), seed=st.integers(0, 1000))
def test_partition_then_combine_in_a_graph(data, seed):
    shape = data.draw(shapes())
    dim = data.draw(st.integers(0, len(shape) - 1))
    shape[dim] *= data.draw(st.sampled_from([2, 3, 4]))
    n = data.draw(st.sampled_from([d for d in divisors(shape[dim]) if d > 1]))
    g = Graph()
    x = g.input("x", shape)
    p = g.partition(x, dim, n)
    module = g.module([p, g.combine(p, dim, n)])
    xv = value_of(ttype(shape), seed)
    parted, back = run(module, {"x": xv})
    assert torch.equal(assemble(parted), xv)
    assert torch.equal(assemble(back), xv)
    same_pieces(back, scatter(xv, ttype(shape)))


def copies_as_partial_sums(p: Pieces) -> Pieces:
    """The same pieces, read as if the copy axis were (inner) partial sums."""
    t = p.type
    arr = p.array  # (*shard, sum, copy)
    new = arr.reshape(*arr.shape[:-2], t.sum_degree * t.copy_degree, 1)
    return Pieces(ttype(t.shape, t.element_type, t.shard, t.sum_degree * t.copy_degree, 1), new)


@given(t=parallel_types(max_copy=1), n=st.integers(2, 4), seed=st.integers(0, 1000))
def test_replicate_then_reduce_gives_n_times(t, n, seed):
    """replicate n makes n equal copies: summed as partial sums (reduce n) they give n·x."""
    x, pieces = pieces_of(t, seed)
    rep = apply(parallel.ReplicateOp, pieces, degree=n)
    assert rep.type.copy_degree == n
    assert_close(assemble(rep), x)  # copies agree
    as_sums = copies_as_partial_sums(rep)
    reduced = apply(parallel.ReduceOp, as_sums, degree=n)
    assert reduced.type.sum_degree == t.sum_degree
    assert_close(assemble(reduced), n * x)


@given(t=parallel_types(), data=st.data(), seed=st.integers(0, 1000))
def test_reduce_sums_groups_of_adjacent_partials(t, data, seed):
    t = ttype(t.shape, f32, t.shard, t.sum_degree * data.draw(st.sampled_from([2, 3])), t.copy_degree)
    n = data.draw(st.sampled_from([d for d in divisors(t.sum_degree) if d > 1]))
    x, pieces = pieces_of(t, seed)
    reduced = apply(parallel.ReduceOp, pieces, degree=n)
    assert reduced.type.sum_degree == t.sum_degree // n
    assert_close(assemble(reduced), x)
    for coord in itertools.product(*(range(k) for k in reduced.type.task_degrees())):
        group = [pieces[(*coord[:-2], coord[-2] * n + j, coord[-1])] for j in range(n)]
        assert_close(reduced[coord], sum(group))


@given(t=parallel_types(), seed=st.integers(0, 1000))
def test_sum_concat_holds_both_operands_partials(t, seed):
    """sum_concat(a, b): a's partial sums, then b's, in place; its logical value is a + b, and
    reducing it gives the type add(a, b) has."""
    from unityc.interpreter.functions import sum_concat

    a, pa = pieces_of(t, seed)
    b, pb = pieces_of(t, seed + 7)
    lhs, rhs = dummy_values([t, t])
    op = parallel.SumConcatOp.build_inferred([lhs, rhs])
    op.verify_()
    out = sum_concat(op.output.type, pa, pb)
    assert out.type.sum_degree == 2 * t.sum_degree
    assert_close(assemble(out), a + b)
    for coord in itertools.product(*(range(k) for k in t.task_degrees())):
        assert torch.equal(out[coord], pa[coord])
        assert torch.equal(out[(*coord[:-2], coord[-2] + t.sum_degree, coord[-1])], pb[coord])
    reduced = apply(parallel.ReduceOp, out, degree=2)
    assert reduced.type == t
    assert_close(assemble(reduced), a + b)


@st.composite
def collective_cases(draw):
    """(fused op, its attrs, the two-op composition, a type it applies to)."""
    kind = draw(st.sampled_from(["all_reduce", "reduce_scatter", "all_gather", "all_to_all"]))
    n = draw(st.sampled_from([2, 3]))
    shape = draw(shapes())
    if kind in ("all_reduce", "reduce_scatter"):
        t = draw(parallel_types(shape=shape))
        t = ttype(t.shape, f32, t.shard, t.sum_degree * n, t.copy_degree)
        if kind == "all_reduce":
            return (
                parallel.AllReduceOp,
                {"degree": n},
                [(parallel.ReduceOp, {"degree": n}), (parallel.ReplicateOp, {"degree": n})],
                t,
            )
        dim = draw(st.integers(0, len(shape) - 1))
        shape[dim] *= n
        t = draw(parallel_types(shape=shape))
        t = ttype(t.shape, f32, t.shard, t.sum_degree * n, t.copy_degree)
        if t.piece_shape[dim] % n:
            shard = list(t.shard)
            shard[dim] = 1
            t = ttype(t.shape, f32, shard, t.sum_degree, t.copy_degree)
        attrs = {"dim": dim, "degree": n}
        return (
            parallel.ReduceScatterOp,
            attrs,
            [(parallel.ReduceOp, {"degree": n}), (parallel.PartitionOp, attrs)],
            t,
        )
    if kind == "all_gather":
        dim = draw(st.integers(0, len(shape) - 1))
        shape[dim] *= n
        t = draw(parallel_types(shape=shape))
        shard = list(t.shard)
        shard[dim] = n * draw(st.sampled_from(divisors(shape[dim] // n)))
        t = ttype(t.shape, f32, shard, t.sum_degree, t.copy_degree)
        attrs = {"dim": dim, "degree": n}
        return (
            parallel.AllGatherOp,
            attrs,
            [(parallel.CombineOp, attrs), (parallel.ReplicateOp, {"degree": n})],
            t,
        )
    shape = draw(shapes(min_rank=2))
    src, dst = draw(st.permutations(range(len(shape))))[:2]
    shape[src] *= n
    shape[dst] *= n
    t = draw(parallel_types(shape=shape))
    shard = list(t.shard)
    shard[src] = n * draw(st.sampled_from(divisors(shape[src] // n)))
    shard[dst] = draw(st.sampled_from(divisors(shape[dst] // n)))
    t = ttype(t.shape, f32, shard, t.sum_degree, t.copy_degree)
    return (
        parallel.AllToAllOp,
        {"src": src, "dst": dst, "degree": n},
        [(parallel.CombineOp, {"dim": src, "degree": n}), (parallel.PartitionOp, {"dim": dst, "degree": n})],
        t,
    )


@given(case=collective_cases(), seed=st.integers(0, 1000))
def test_fused_collectives_are_their_compositions(case, seed):
    fused, attrs, steps, t = case
    x, pieces = pieces_of(t, seed)
    got = apply(fused, pieces, **attrs)
    want = pieces
    for cls, a in steps:
        want = apply(cls, want, **a)
    same_pieces(got, want)  # same type and bit-identical pieces
    assert_close(assemble(got), x)


@given(data=st.data(), seed=st.integers(0, 1000))
def test_pipeline_then_batch_is_identity(data, seed):
    shape = data.draw(shapes(min_rank=2))
    dim = data.draw(st.integers(0, len(shape) - 1))
    n = data.draw(st.sampled_from([2, 3]))
    k = data.draw(st.sampled_from([1, 2]))
    shape[dim] *= n * k
    g = Graph()
    shard = [1] * len(shape)
    shard[dim] = k
    x = g.input("x", shape, shard=shard, copy=data.draw(st.sampled_from([1, 2])))
    mb = g.op(parallel.PipelineOp, [x], dim=dim, degree=n)
    assert mb.type.shape[dim] == shape[dim] // n
    y = g.op(pcg.TanhOp, [mb])  # runs once per micro-batch
    back = g.op(parallel.BatchOp, [mb], dim=dim, degree=n)
    ty = g.op(parallel.BatchOp, [y], dim=dim, degree=n)
    module = g.module([back, ty])
    xv = value_of(ttype(shape), seed)
    b, tb = run(module, {"x": xv})
    assert b.type == x.type
    same_pieces(b, scatter(xv, x.type))
    assert_close(assemble(tb), torch.tanh(xv))


def test_pipelined_linear_over_the_batch_matches():
    g = Graph()
    x, w, b = g.input("x", [8, 6]), g.weight("w", [4, 6]), g.weight("b", [4])
    mb = g.op(parallel.PipelineOp, [x], dim=0, degree=4)
    h = g.op(pcg.LinearOp, [mb, w, b])
    out = g.op(parallel.BatchOp, [g.op(pcg.ReluOp, [h])], dim=0, degree=4)
    module = g.module([out])
    xv, wv, bv = (value_of(ttype(s), i) for i, s in enumerate([[8, 6], [4, 6], [4]]))
    (got,) = run_assembled(module, {"x": xv, "w": wv, "b": bv})
    assert_close(got, torch.relu(xv @ wv.T + bv))


# ------------------------------------------------------------------------------------------
# Algebra
# ------------------------------------------------------------------------------------------

ELEMENTWISE = [
    (pcg.ReluOp, {}, torch.relu),
    (pcg.TanhOp, {}, torch.tanh),
    (pcg.ExpOp, {}, torch.exp),
    (pcg.SigmoidOp, {}, torch.sigmoid),
    (pcg.GeluOp, {}, torch.nn.functional.gelu),
    (pcg.ScalarAddOp, {"value": 0.5}, lambda v: v + 0.5),
    (pcg.PowOp, {"exponent": 2.0}, torch.square),
    (pcg.NegOp, {}, torch.neg),
]


@given(op=st.sampled_from(ELEMENTWISE), data=st.data(), seed=st.integers(0, 1000))
def test_elementwise_commutes_with_partition(op, data, seed):
    cls, attrs, ref = op
    shape = data.draw(shapes())
    dim = data.draw(st.integers(0, len(shape) - 1))
    n = data.draw(st.sampled_from([2, 3]))
    shape[dim] *= n
    g = Graph()
    x = g.input("x", shape)
    after = g.partition(g.op(cls, [x], **attrs), dim, n)  # f, then partition
    before = g.op(cls, [g.partition(x, dim, n)], **attrs)  # partition, then f
    assert after.type == before.type
    module = g.module([after, before])
    xv = value_of(ttype(shape), seed)
    a, b = run(module, {"x": xv})
    for coord in itertools.product(*(range(k) for k in a.type.task_degrees())):
        assert_close(a[coord], b[coord])
    assert_close(assemble(b), ref(xv))


@given(
    cls=st.sampled_from([pcg.AddOp, pcg.SubOp, pcg.MulOp, pcg.DivOp]),
    data=st.data(),
    seed=st.integers(0, 1000),
)
def test_binary_commutes_with_partition(cls, data, seed):
    shape = data.draw(shapes())
    dim = data.draw(st.integers(0, len(shape) - 1))
    n = data.draw(st.sampled_from([2, 3]))
    shape[dim] *= n
    g = Graph()
    a, b = g.input("a", shape), g.input("b", shape)
    after = g.partition(g.op(cls, [a, b]), dim, n)
    before = g.op(cls, [g.partition(a, dim, n), g.partition(b, dim, n)])
    module = g.module([after, before])
    av, bv = value_of(ttype(shape), seed), value_of(ttype(shape), seed + 1).abs() + 0.5
    p, q = run(module, {"a": av, "b": bv})
    same_pieces(p, q)


@given(
    m=st.integers(1, 5),
    n=st.integers(1, 5),
    k=st.sampled_from([1, 2, 3, 4]),
    d=st.sampled_from([2, 3, 4]),
    seed=st.integers(0, 1000),
)
def test_reduction_parallel_matmul(m, n, k, d, seed):
    k *= d
    g = Graph()
    a, b = g.input("a", [m, k]), g.input("b", [k, n])
    partial = g.op(pcg.MatmulOp, [g.partition(a, 1, d), g.partition(b, 0, d)])
    assert (partial.type.shard, partial.type.sum_degree) == ((1, 1), d)
    module = g.module([g.reduce(partial, d)])
    av, bv = value_of(ttype([m, k]), seed), value_of(ttype([k, n]), seed + 1)
    for dtype in (torch.float64, torch.float32):
        (got,) = run_assembled(module, {"a": av, "b": bv}, dtype)
        assert_close(got, av.to(dtype).double() @ bv.to(dtype).double(), dtype)
    # partial sum j is the product of the j-th blocks
    (pieces,) = run(module_of_partial(m, n, k, d), {"a": av, "b": bv})
    size = k // d
    for j in range(d):
        assert_close(pieces[(0, 0, j, 0)], av[:, j * size : (j + 1) * size] @ bv[j * size : (j + 1) * size])


def module_of_partial(m, n, k, d):
    g = Graph()
    a, b = g.input("a", [m, k]), g.input("b", [k, n])
    return g.module([g.op(pcg.MatmulOp, [g.partition(a, 1, d), g.partition(b, 0, d)])])


# ------------------------------------------------------------------------------------------
# The verifier rejects what is not exact
# ------------------------------------------------------------------------------------------


def rejects(cls, types, attrs, *, plausible=None) -> str:
    """build_inferred raises FormError, and an op given explicit result types fails to verify."""
    values = dummy_values(types)
    with pytest.raises(FormError) as info:
        cls.build_inferred(values, **attrs)
    if plausible is not None:
        op = build_with_types(cls, values, attrs, plausible)
        with pytest.raises(VerifyException):
            op.verify_()
    return str(info.value)


def T(shape, shard=None, sum=1, copy=1, elt=f32):
    return ttype(shape, elt, shard, sum, copy)


@given(shape=shapes(), data=st.data())
def test_softmax_rejects_its_dim_sharded(shape, data):
    dim = data.draw(st.integers(0, len(shape) - 1))
    shape[dim] *= 2
    shard = [data.draw(st.sampled_from(divisors(s))) for s in shape]
    shard[dim] = data.draw(st.sampled_from([d for d in divisors(shape[dim]) if d > 1]))
    t = T(shape, shard)
    msg = rejects(pcg.SoftmaxOp, [t], {"dim": dim - len(shape) * data.draw(st.integers(0, 1))}, plausible=[t])
    assert f"dimension {dim}" in msg and "softmax normalizes along it" in msg


@given(
    cls=st.sampled_from(
        [
            pcg.ReluOp,
            pcg.ExpOp,
            pcg.SigmoidOp,
            pcg.TanhOp,
            pcg.GeluOp,
            pcg.SqrtOp,
            pcg.PowOp,
            pcg.ScalarAddOp,
            pcg.DropoutOp,
            pcg.SoftmaxOp,
        ]
    ),
    t=parallel_types(max_sum=1),
    s=st.integers(2, 4),
)
def test_nonlinear_ops_reject_partial_sums(cls, t, s):
    attrs = {
        pcg.PowOp: {"exponent": 2.0},
        pcg.ScalarAddOp: {"value": 1.0},
        pcg.DropoutOp: {"p": 0.5},
        pcg.SoftmaxOp: {"dim": 0},
    }.get(cls, {})
    shard = list(t.shard)
    if cls is pcg.SoftmaxOp:
        shard[0] = 1
    t = T(t.shape, shard, s, t.copy_degree)
    msg = rejects(cls, [t], attrs, plausible=[t])
    assert "not linear" in msg


REJECTED = [
    ("layer_norm normalized dim", pcg.LayerNormOp, [T([4, 6], [1, 2]), None, None], {"dims": 1, "eps": 1e-5}),
    ("layer_norm 2 dims", pcg.LayerNormOp, [T([4, 6, 2], [1, 2, 1]), None, None], {"dims": 2, "eps": 1e-5}),
    ("batch_norm batch", pcg.BatchNormOp, [T([4, 2, 3, 3], [2, 1, 1, 1]), None, None], {"eps": 1e-5}),
    ("batch_norm spatial", pcg.BatchNormOp, [T([4, 2, 4, 3], [1, 1, 2, 1]), None, None], {"eps": 1e-5}),
    ("batch_norm sums", pcg.BatchNormOp, [T([4, 2, 3], sum=2), None, None], {"eps": 1e-5}),
    ("conv2d spatial", pcg.Conv2dOp, [T([2, 2, 4, 4], [1, 1, 2, 1]), T([3, 2, 3, 3], copy=2), None], {}),
    (
        "conv2d groups in-channel",
        pcg.Conv2dOp,
        [T([2, 4, 4, 4], [1, 2, 1, 1]), T([4, 2, 3, 3], [1, 2, 1, 1]), None],
        {"groups": 2},
    ),
    (
        "conv2d degree not dividing groups",
        pcg.Conv2dOp,
        [T([2, 8, 4, 4], [1, 4, 1, 1]), T([8, 4, 3, 3], [4, 1, 1, 1]), None],
        {"groups": 2},
    ),
    ("pool2d spatial", pcg.Pool2dOp, [T([2, 2, 6, 6], [1, 1, 1, 2])], {"kind": "avg", "kernel": [4, 4]}),
    ("max pool sums", pcg.Pool2dOp, [T([2, 2, 4, 4], sum=2)], {"kind": "max", "kernel": [2, 2]}),
    ("matmul k mismatch", pcg.MatmulOp, [T([4, 4], [1, 2]), T([4, 4], [4, 1])], {}),
    ("matmul k one side", pcg.MatmulOp, [T([4, 4], [1, 2]), T([4, 4], copy=2)], {}),
    ("linear weight in only", pcg.LinearOp, [T([4, 4], copy=2), T([4, 4], [1, 2]), None], {}),
    ("linear bias sums", pcg.LinearOp, [T([4, 4]), T([4, 4]), T([4], sum=2)], {}),
    ("linear bias sharded, weight not", pcg.LinearOp, [T([4, 4]), T([4, 4]), T([4], [2])], {}),
    ("add unequal sums", pcg.AddOp, [T([4], sum=2), T([4], sum=1, copy=2)], {}),
    ("add broadcast dim sharded", pcg.AddOp, [T([4, 1]), T([4, 4], [1, 2])], {}),
    ("add shards differ", pcg.AddOp, [T([4, 4], [2, 1]), T([4, 4], [1, 2])], {}),
    ("div denominator sums", pcg.DivOp, [T([4]), T([4], sum=2)], {}),
    ("copy degree mismatch", pcg.AddOp, [T([4, 4], [2, 1]), T([4, 4], [2, 1], copy=2)], {}),
    ("copy not a multiple", pcg.MatmulOp, [T([4, 4], [2, 1]), T([4, 4], copy=3)], {}),
    ("concat dim sharded", pcg.ConcatOp, [[T([4, 2], [2, 1]), T([4, 2], [2, 1])]], {"dim": 0}),
    ("concat sums differ", pcg.ConcatOp, [[T([4, 2], sum=2), T([4, 2])]], {"dim": 0}),
    ("split dim sharded", pcg.SplitOp, [T([4, 2], [2, 1])], {"dim": 0, "sizes": [2, 2]}),
    ("reshape non-leading dim", pcg.ReshapeOp, [T([4, 6], [1, 2])], {"shape": [24]}),
    ("reshape degree not dividing result", pcg.ReshapeOp, [T([4, 6], [4, 1])], {"shape": [2, 12]}),
    (
        "cross_entropy classes, target not copied",
        pcg.CrossEntropyOp,
        [T([4, 6], [1, 2]), T([4], elt=i64)],
        {"reduction": "mean"},
    ),
    (
        "cross_entropy logits sums",
        pcg.CrossEntropyOp,
        [T([4, 6], sum=2), T([4], elt=i64, copy=2)],
        {"reduction": "mean"},
    ),
    (
        "cross_entropy rows differ",
        pcg.CrossEntropyOp,
        [T([4, 6], [2, 1]), T([4], elt=i64)],
        {"reduction": "mean"},
    ),
    ("mse sums", pcg.MseLossOp, [T([4], sum=2), T([4], copy=2)], {"reduction": "mean"}),
    ("embedding ids sums", pcg.EmbeddingOp, [T([4], elt=i64, sum=2), T([6, 2], copy=2)], {}),
    (
        "embedding_bag ids sums",
        pcg.EmbeddingBagOp,
        [T([4, 2], elt=i64, sum=2), T([6, 2], copy=2)],
        {"mode": "sum"},
    ),
    ("reduce non-float", pcg.ReduceOp, [T([4, 6], elt=i64)], {"kind": "sum", "dims": [1]}),
    ("transpose bad perm", pcg.TransposeOp, [T([4, 6], [2, 1])], {"perm": [0, 0]}),
]


def _attention_types(**changes):
    e = 8
    base = dict(
        q=T([2, 4, e]),
        k=T([2, 6, e]),
        v=T([2, 6, e]),
        wq=T([e, e]),
        wk=T([e, e]),
        wv=T([e, e]),
        wo=T([e, e]),
        bq=None,
        bk=None,
        bv=None,
        bo=None,
        mask=None,
    )
    base.update(changes)
    return list(base.values())


REJECTED += [
    ("attention key sequence", pcg.AttentionOp, _attention_types(k=T([2, 6, 8], [1, 2, 1])), {"heads": 2}),
    ("attention wo rows", pcg.AttentionOp, _attention_types(wo=T([8, 8], [2, 1])), {"heads": 2}),
    (
        "attention heads mismatch",
        pcg.AttentionOp,
        _attention_types(
            wq=T([8, 8], [2, 1]), wk=T([8, 8], [2, 1]), wv=T([8, 8], [2, 1]), wo=T([8, 8], [1, 4])
        ),
        {"heads": 4},
    ),
    (
        "attention head degree not dividing heads",
        pcg.AttentionOp,
        _attention_types(
            q=T([2, 4, 8], copy=4),
            k=T([2, 6, 8], copy=4),
            v=T([2, 6, 8], copy=4),
            wq=T([8, 8], [4, 1]),
            wk=T([8, 8], [4, 1]),
            wv=T([8, 8], [4, 1]),
            wo=T([8, 8], [1, 4]),
        ),
        {"heads": 2},
    ),
    ("attention embedding dim", pcg.AttentionOp, _attention_types(q=T([2, 4, 8], [1, 1, 2])), {"heads": 2}),
    (
        "attention mask key dim",
        pcg.AttentionOp,
        _attention_types(mask=T([1, 1, 1, 6], [1, 1, 1, 2])),
        {"heads": 2},
    ),
    ("attention query sums", pcg.AttentionOp, _attention_types(q=T([2, 4, 8], sum=2)), {"heads": 2}),
]


@pytest.mark.parametrize("name, cls, types, attrs", REJECTED, ids=[r[0] for r in REJECTED])
def test_verifier_rejects(name, cls, types, attrs):
    rejects(cls, types, attrs)


def test_verifier_rejects_wrong_result_types():
    """An op whose stated result type is not the inferred one (e.g. a sum dropped) fails."""
    x, w = dummy_values([T([4, 4], [1, 2]), T([4, 4], [1, 2])])
    good = pcg.LinearOp.build_inferred([x, w, None])
    assert good.output.type == T([4, 4], sum=2)
    for wrong in (T([4, 4]), T([4, 4], [1, 2]), T([4, 4], sum=2, copy=2)):
        op = build_with_types(pcg.LinearOp, [x, w, None], {}, [wrong])
        with pytest.raises(VerifyException, match="result 0 has type"):
            op.verify_()


# ------------------------------------------------------------------------------------------
# Whatever the verifier accepts is exact
# ------------------------------------------------------------------------------------------


def candidates(shape, elt=f32, dims=None, sums=(1, 2), copies=(1, 2, 4)) -> list[TensorType]:
    """Degree choices for one operand: shard 1 or 2 on each dim in `dims` (all by default)."""
    dims = range(len(shape)) if dims is None else dims
    per_dim = [[1, 2] if d in dims and shape[d] % 2 == 0 else [1] for d in range(len(shape))]
    return [
        ttype(shape, elt, list(sh), s, c) for sh in itertools.product(*per_dim) for s in sums for c in copies
    ]


def accepted_combos(cls, spaces, attrs) -> list[tuple]:
    out = []
    for combo in itertools.product(*spaces):
        try:
            flat = [t for x in combo for t in (x if isinstance(x, list) else [x])]  # variadic operands
            cls.infer(flat, {n: attrs.get(n) for n, _, _ in cls.PROPS})
        except FormError:
            continue
        out.append(combo)
    return out


def _x(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _ids(vocab, *shape):
    ids = torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(7))
    ids.view(-1)[0] = vocab - 1
    return ids


# name -> (op, operand values, per-operand candidate spaces, attrs)
CASES = {
    "relu": (pcg.ReluOp, lambda: [_x(4, 2)], lambda: [candidates([4, 2])], {}),
    "exp": (pcg.ExpOp, lambda: [_x(2, 4)], lambda: [candidates([2, 4])], {}),
    "scalar_mul": (pcg.ScalarMulOp, lambda: [_x(4, 2)], lambda: [candidates([4, 2])], {"scale": 3.0}),
    "add broadcast": (
        pcg.AddOp,
        lambda: [_x(4, 2), _x(2, seed=1)],
        lambda: [candidates([4, 2]), candidates([2])],
        {},
    ),
    "mul": (
        pcg.MulOp,
        lambda: [_x(2, 4), _x(2, 4, seed=1)],
        lambda: [candidates([2, 4], copies=(1, 2, 4, 8)), candidates([2, 4], copies=(1, 2, 4, 8))],
        {},
    ),
    "div": (
        pcg.DivOp,
        lambda: [_x(4, 2), _x(4, 2, seed=1).abs() + 1],
        lambda: [candidates([4, 2]), candidates([4, 2])],
        {},
    ),
    "linear bias": (
        pcg.LinearOp,
        lambda: [_x(2, 4), _x(4, 4, seed=1), _x(4, seed=2)],
        lambda: [candidates([2, 4]), candidates([4, 4]), candidates([4], copies=(1, 2, 4, 8))],
        {},
    ),
    "matmul": (
        pcg.MatmulOp,
        lambda: [_x(2, 4), _x(4, 2, seed=1)],
        lambda: [candidates([2, 4]), candidates([4, 2])],
        {},
    ),
    "batch_matmul": (
        pcg.BatchMatmulOp,
        lambda: [_x(2, 2, 4), _x(2, 4, 2, seed=1)],
        lambda: [candidates([2, 2, 4], sums=(1,)), candidates([2, 4, 2], sums=(1,))],
        {},
    ),
    "conv2d": (
        pcg.Conv2dOp,
        lambda: [_x(2, 2, 4, 4), _x(4, 2, 3, 3, seed=1), _x(4, seed=2)],
        lambda: [
            candidates([2, 2, 4, 4]),  # height and width too: a 3x3 window's halo
            candidates([4, 2, 3, 3], dims=[0, 1]),
            candidates([4]),
        ],
        {"padding": [1, 1]},
    ),
    "conv2d groups": (
        pcg.Conv2dOp,
        lambda: [_x(2, 4, 3, 3), _x(4, 1, 3, 3, seed=1), None],
        lambda: [candidates([2, 4, 3, 3], dims=[0, 1]), candidates([4, 1, 3, 3], dims=[0, 1]), [None]],
        {"groups": 4},
    ),
    "avg pool": (
        pcg.Pool2dOp,
        lambda: [_x(2, 2, 4, 4)],
        lambda: [candidates([2, 2, 4, 4])],
        {"kind": "avg", "kernel": [2, 2]},
    ),
    "max pool": (
        pcg.Pool2dOp,
        lambda: [_x(2, 2, 4, 4)],
        lambda: [candidates([2, 2, 4, 4])],
        {"kind": "max", "kernel": [3, 3], "stride": [1, 1], "padding": [1, 1]},
    ),
    "batch_norm": (
        pcg.BatchNormOp,
        lambda: [_x(4, 2, 2), _x(2, seed=1), _x(2, seed=2)],
        lambda: [candidates([4, 2, 2]), candidates([2]), candidates([2])],
        {"eps": 1e-5},
    ),
    "layer_norm": (
        pcg.LayerNormOp,
        lambda: [_x(2, 2, 4), _x(4, seed=1), None],
        lambda: [candidates([2, 2, 4], copies=(1, 2, 4, 8)), candidates([4], copies=(1, 2, 4, 8)), [None]],
        {"dims": 1, "eps": 1e-5},
    ),
    "softmax": (pcg.SoftmaxOp, lambda: [_x(2, 4, 2)], lambda: [candidates([2, 4, 2])], {"dim": 1}),
    "concat": (
        pcg.ConcatOp,
        lambda: [[_x(2, 2), _x(2, 4, seed=1)]],
        lambda: [list(map(list, itertools.product(candidates([2, 2]), candidates([2, 4]))))],
        {"dim": 1},
    ),
    "split": (pcg.SplitOp, lambda: [_x(4, 2)], lambda: [candidates([4, 2])], {"dim": 0, "sizes": [1, 3]}),
    "reshape": (pcg.ReshapeOp, lambda: [_x(4, 2, 2)], lambda: [candidates([4, 2, 2])], {"shape": [2, 8]}),
    "transpose": (
        pcg.TransposeOp,
        lambda: [_x(2, 4, 2)],
        lambda: [candidates([2, 4, 2])],
        {"perm": [2, 0, 1]},
    ),
    "reduce mean": (
        pcg.ReduceOp,
        lambda: [_x(2, 4, 2)],
        lambda: [candidates([2, 4, 2])],
        {"kind": "mean", "dims": [0, 2]},
    ),
    "reduce sum keepdim": (
        pcg.ReduceOp,
        lambda: [_x(4, 2)],
        lambda: [candidates([4, 2])],
        {"kind": "sum", "dims": [1], "keepdim": True},
    ),
    "embedding": (
        pcg.EmbeddingOp,
        lambda: [_ids(6, 2, 2), _x(6, 2, seed=1)],
        lambda: [candidates([2, 2], i64, copies=(1, 2, 4, 8)), candidates([6, 2], copies=(1, 2, 4, 8))],
        {},
    ),
    "embedding_bag": (
        pcg.EmbeddingBagOp,
        lambda: [_ids(6, 2, 4), _x(6, 2, seed=1)],
        lambda: [candidates([2, 4], i64, copies=(1, 2, 4, 8)), candidates([6, 2], copies=(1, 2, 4, 8))],
        {"mode": "mean"},
    ),
    "cross_entropy": (
        pcg.CrossEntropyOp,
        lambda: [_x(4, 3), _ids(3, 4)],
        lambda: [candidates([4, 3]), candidates([4], i64)],
        {"reduction": "mean"},
    ),
    "cross_entropy_ignore_index": (  # a class ignored: the mean counts the kept targets
        pcg.CrossEntropyOp,
        lambda: [_x(4, 3), _ids(3, 4)],
        lambda: [candidates([4, 3]), candidates([4], i64)],
        {"reduction": "mean", "ignore_index": 1},
    ),
    "mse_loss": (
        pcg.MseLossOp,
        lambda: [_x(2, 4), _x(2, 4, seed=1)],
        lambda: [candidates([2, 4]), candidates([2, 4])],
        {"reduction": "sum"},
    ),
}


@functools.cache
def accepted(name: str) -> list[tuple]:
    cls, _, spaces, attrs = CASES[name]
    return accepted_combos(cls, spaces(), attrs)


@functools.cache
def reference(name: str) -> list[torch.Tensor]:
    cls, values, _, attrs = CASES[name]
    return run_op(cls, values(), attrs)


def _is_trivial(combo) -> bool:
    flat = [t for x in combo for t in (x if isinstance(x, list) else [x]) if t is not None]
    return all(t.num_pieces == 1 for t in flat)


@pytest.mark.parametrize("name", list(CASES))
def test_accepted_space_is_not_trivial(name):
    """The enumeration finds parallel forms beyond the unparallelized one (and rejects some)."""
    combos = accepted(name)
    _, _, spaces, _ = CASES[name]
    total = math.prod(len(s) for s in spaces())
    assert any(_is_trivial(c) for c in combos)
    assert sum(not _is_trivial(c) for c in combos) >= 2
    if name in EVERYTHING_EXACT:  # linear in its one operand, every dim may shard
        assert len(combos) == total
    else:
        assert len(combos) < total


EVERYTHING_EXACT = {"scalar_mul", "transpose", "reduce mean", "reduce sum keepdim", "avg pool"}
"""(avg pool: a 2x2/2 window is linear and splits over height and width with no halo.)"""


@pytest.mark.parametrize("name", list(CASES))
@given(data=st.data())
def test_whatever_the_verifier_accepts_is_exact(name, data):
    cls, values, _, attrs = CASES[name]
    combo = data.draw(st.sampled_from(accepted(name)), label="operand types")
    dtype = data.draw(st.sampled_from([torch.float64, torch.float32]), label="dtype")
    _, got = run_tasks_on(cls, list(combo), values(), attrs, dtype, seed=data.draw(st.integers(0, 100)))
    for g, r in zip(got, reference(name), strict=True):
        assert_close(g, r, dtype)


@pytest.mark.parametrize("name", list(CASES))
def test_every_accepted_combo_is_exact(name):
    """The enumerated spaces are small: check every accepted combination, not just a sample."""
    cls, values, _, attrs = CASES[name]
    for i, combo in enumerate(accepted(name)):
        _, got = run_tasks_on(cls, list(combo), values(), attrs, torch.float64, seed=i)
        for g, r in zip(got, reference(name), strict=True):
            assert_close(g, r)


@st.composite
def attention_combos(draw):
    """Attention operand types from b, s, h factors, then one random perturbation of one operand."""
    e = 4  # 2 heads
    b, s, h = (draw(st.sampled_from([1, 2])) for _ in range(3))
    biases = draw(st.booleans())
    mask_shape = draw(st.sampled_from([None, (2, 1, 2, 2), (1, 1, 1, 2), (2, 1, 1, 2)]))
    q = T([2, 2, e], [b, s, 1], copy=h)
    kv = T([2, 2, e], [b, 1, 1], copy=s * h)
    w = T([e, e], [h, 1], copy=b * s)
    wo = T([e, e], [1, h], copy=b * s)
    bias = T([e], [h], copy=b * s) if biases else None
    bo = T([e], copy=b * s * h) if biases else None
    mask = None
    if mask_shape is not None:
        mb = b if mask_shape[0] > 1 else 1
        ms = s if mask_shape[2] > 1 else 1
        mask = T(list(mask_shape), [mb, 1, ms, 1], copy=(b // mb) * (s // ms) * h)
    types = [q, kv, kv, w, w, w, wo, bias, bias, bias, bo, mask, None, None, None, None]
    if draw(st.booleans()):  # perturb one operand: the verifier must accept only if still exact
        i = draw(st.sampled_from([i for i, t in enumerate(types) if t is not None]))
        t = types[i]
        how = draw(st.sampled_from(["shard", "sum", "copy"]))
        shard, sm, cp = list(t.shard), t.sum_degree, t.copy_degree
        if how == "shard":
            d = draw(st.integers(0, t.rank - 1))
            shard[d] = 2 if t.shape[d] % 2 == 0 and shard[d] == 1 else 1
        elif how == "sum":
            sm = 2
        else:
            cp = cp * 2
        types[i] = T(list(t.shape), shard, sm, cp)
    return types, mask_shape, biases


@given(case=attention_combos(), seed=st.integers(0, 100))
def test_attention_whatever_the_verifier_accepts_is_exact(case, seed):
    types, mask_shape, biases = case
    values = [_x(2, 2, 4, seed=seed), _x(2, 2, 4, seed=seed + 1), _x(2, 2, 4, seed=seed + 2)]
    values += [_x(4, 4, seed=seed + 3 + i) for i in range(4)]
    values += [_x(4, seed=seed + 7 + i) if biases else None for i in range(4)]
    values += [None if mask_shape is None else _x(*mask_shape, seed=seed + 11), None, None, None, None]
    try:
        pcg.AttentionOp.infer(types, {"heads": 2})
    except FormError:
        return
    _, (got,) = run_tasks_on(pcg.AttentionOp, types, values, {"heads": 2}, seed=seed)
    (want,) = run_op(pcg.AttentionOp, values, {"heads": 2})
    assert_close(got, want)


# ------------------------------------------------------------------------------------------
# Copies must agree
# ------------------------------------------------------------------------------------------


def test_copies_differ_is_raised():
    t = T([4, 2], [2, 1], copy=3)
    x = _x(4, 2)
    pieces = scatter(x, t)
    assert torch.equal(assemble(pieces), x)
    pieces.array[(1, 0, 0, 2)] = pieces.array[(1, 0, 0, 2)] + 1e-12
    with pytest.raises(CopiesDiffer, match=r"copy 2 of piece \[1, 0, 0\] differs from copy 0"):
        assemble(pieces, "x")


def test_copies_differ_propagates_through_tasks():
    """A disagreeing copy of an operand gives disagreeing copies of the result."""
    from unityc.interpreter.functions import run_tasks

    (operand,) = dummy_values([T([4, 2], copy=2)])
    op = pcg.ReluOp.build_inferred([operand])
    pieces = scatter(_x(4, 2), operand.type)
    pieces.array[(0, 0, 0, 1)] = pieces.array[(0, 0, 0, 1)].clone()
    pieces.array[(0, 0, 0, 1)][0, 0] = 5.0
    (out,) = run_tasks(op, [pieces], torch.float64)
    with pytest.raises(CopiesDiffer):
        assemble(out)


def test_identical_copies_with_nan_do_not_differ():
    """Copies are compared value by value: equal NaNs are equal copies (sqrt of a negative)."""
    g = Graph()
    x = g.input("x", [4], copy=2)
    module = g.module([g.op(pcg.SqrtOp, [x])])
    (got,) = run_assembled(module, {"x": torch.tensor([1.0, -1.0, 4.0, 9.0])})
    assert torch.equal(got.isnan(), torch.tensor([False, True, False, False]))
    pieces = scatter(torch.tensor([1.0, float("nan")]), T([2], copy=2))
    pieces.array[(0, 0, 1)] = torch.tensor([1.0, 2.0])
    with pytest.raises(CopiesDiffer):
        assemble(pieces)
    pieces.array[(0, 0, 1)] = torch.tensor([float("nan"), float("nan")])
    with pytest.raises(CopiesDiffer):
        assemble(pieces)


def test_object_array_layout():
    t = T([4, 6], [2, 3], sum=2, copy=2)
    assert scatter(_x(4, 6), t).array.shape == (2, 3, 2, 2)
    assert isinstance(scatter(_x(4, 6), t).array, np.ndarray)
