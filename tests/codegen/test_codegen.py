"""Codegen and runtime without torchrun: the static collective and layout values, the task
kernels against their unparallelized meaning, dropout masks, and the emitted programs' shape."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F
from helpers import Graph
from strategies import STRATEGIES, build
from xdsl.dialects.builtin import StringAttr

from unityc.codegen import CodegenError, emit_program
from unityc.codegen.kernels import literal
from unityc.dialects import pcg
from unityc.dialects.pcg_types import PcgOp
from unityc.dialects.view import MachineViewAttr
from unityc.models.spec import ModelSpec
from unityc.runtime import Collective, Layout, kernels
from unityc.runtime.comm import Communicator
from unityc.runtime.context import Context

# --- static values ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("collective", "out_shape", "dual"),
    [
        (Collective("scatter", (0,), (0, 1), (4, 6), dim=1), (4, 3), ("gather", (0, 1), (0,), (4, 3))),
        (Collective("gather", (2, 3), (0,), (2, 6)), (4, 6), ("scatter", (0,), (2, 3), (4, 6))),
        (Collective("broadcast", (3,), (0, 1), (4, 4)), (4, 4), ("reduce", (0, 1), (3,), (4, 4))),
        (Collective("all_reduce", (0, 1), (1, 0), (4,)), (4,), ("all_reduce", (1, 0), (0, 1), (4,))),
        (
            Collective("reduce_scatter", (0, 1), (0, 1), (4, 6)),
            (2, 6),
            ("all_gather", (0, 1), (0, 1), (2, 6)),
        ),
        (
            Collective("all_to_all", (0, 1), (0, 1), (2, 8), dim=0, dst=1),
            (4, 4),
            ("all_to_all", (0, 1), (0, 1), (4, 4)),
        ),
        (Collective("p2p", (0, 1), (1, 2), (2, 16)), (2, 16), ("p2p", (1, 2), (0, 1), (2, 16))),
    ],
)
def test_collective_shapes_and_duals(collective: Collective, out_shape: tuple, dual: tuple) -> None:
    assert collective.out_shape == out_shape
    d = collective.dual()
    assert (d.kind, d.ins, d.outs, d.shape) == dual
    assert d.dual() == collective  # the dual of the dual is the collective itself
    assert collective.ranks == tuple(sorted(set(collective.ins) | set(collective.outs)))


def test_all_to_all_dual_swaps_its_dims() -> None:
    c = Collective("all_to_all", (0, 1), (0, 1), (2, 8), dim=0, dst=1)
    assert (c.dual().dim, c.dual().dst) == (1, 0)


def test_unknown_collective_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown collective 'shuffle'"):
        Collective("shuffle", (0,), (1,), (2,))


def test_layout_pieces_and_copy_groups() -> None:
    layout = Layout(
        (4, 6),
        "float32",
        shard=(2, 1),
        sum=2,
        copy=2,
        pieces={
            0: (0, 0, 0, 0),
            1: (0, 0, 0, 1),
            2: (1, 0, 1, 0),
            3: (1, 0, 1, 1),
        },
    )
    value = torch.arange(24.0).reshape(4, 6)
    assert torch.equal(layout.piece_of(0, value), value[0:2])
    assert torch.equal(layout.piece_of(2, value), torch.zeros(2, 6))  # partial sum 1 holds zeros
    assert layout.piece_of(5, value) is None
    assert layout.copy_groups() == [(0, 1), (2, 3)]
    assert layout.offsets((1, 0, 1, 0)) == (2, 0)


# --- kernels --------------------------------------------------------------------------------


def test_vocabulary_shards_add_up_to_the_lookup() -> None:
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(12, 5, generator=g)
    ids = torch.randint(0, 12, (3, 4), generator=g)
    parts = [kernels.vocab_lookup(ids, weight[i * 4 : (i + 1) * 4], i * 4) for i in range(3)]
    assert torch.allclose(sum(parts), F.embedding(ids, weight))
    bags = [kernels.embedding_bag(ids, weight[i * 4 : (i + 1) * 4], i * 4, "mean", 4) for i in range(3)]
    assert torch.allclose(sum(bags), F.embedding(ids, weight).mean(dim=1))


@pytest.mark.parametrize("pad", [2, 7])
def test_vocabulary_shards_skip_the_padding_row_in_the_backward(pad: int) -> None:
    """The pad row (global index; in the first or the second shard) gets no gradient from any
    shard, the others the gradient of the whole lookup."""
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(8, 3, generator=g, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 8, (4, 5), generator=g)
    ids[:, -1] = pad
    cotangent = torch.randn(4, 5, 3, generator=g, dtype=torch.float64)
    halves = [weight[i * 4 : (i + 1) * 4] for i in range(2)]
    out = sum(kernels.vocab_lookup(ids, h, i * 4, pad) for i, h in enumerate(halves))
    (grad,) = torch.autograd.grad((out * cotangent).sum(), weight)
    whole = F.embedding(ids, weight, padding_idx=pad)
    (expected,) = torch.autograd.grad((whole * cotangent).sum(), weight)
    assert torch.equal(out, whole)
    assert grad[pad].abs().max() == 0
    assert torch.allclose(grad, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "value", [float("-inf"), float("inf"), float("nan"), -0.0, 1e-300, 3.4028234663852886e38, 2, True]
)
def test_literals_round_trip(value: float) -> None:
    """Every constant element is written as Python that evaluates to it (repr of inf is no literal)."""
    for text in (literal(value), literal((value,)), literal((value, 1.5))):
        back = eval(text)
        back = back if isinstance(back, tuple) else (back,)
        assert type(back[0]) is type(value)
        assert (math.isnan(back[0]) and math.isnan(value)) or back[0] == value
        assert math.copysign(1, back[0]) == math.copysign(1, value)


def test_program_with_non_finite_constants_runs_them() -> None:
    """A plan whose constant holds -inf, inf and nan (an SDPA causal mask) compiles, and its
    constant table evaluates to those values (`-inf` used to be written as a bare name)."""
    g = Graph()
    x = g.input("x", [4])
    c = g.constant(torch.tensor([float("-inf"), float("inf"), float("nan"), 1.5]))
    loss = g.op(pcg.ReduceOp, [g.op(pcg.AddOp, [x, c])], kind="sum", dims=[0])
    attrs = {"unityc.machine": StringAttr("cpu:1"), "unityc.model": ModelSpec("mlp").to_attr()}
    module = g.module([loss], attrs)
    for op in module.walk():
        if isinstance(op, PcgOp):
            op.attributes["view"] = MachineViewAttr(0)
    text = emit_program(module)
    compile(text, "plan.py", "exec")
    (table,) = re.findall(r"Constant\((\(.*?\)), Layout", text)
    assert table == '(float("-inf"), float("inf"), float("nan"), 1.5)'
    values = torch.tensor(eval(table))
    assert values[0] == -math.inf and values[1] == math.inf and values[2].isnan() and values[3] == 1.5


def test_attention_head_shards_add_up_to_the_whole() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 8, generator=g, dtype=torch.float64)
    wq, wk, wv, wo = (torch.randn(8, 8, generator=g, dtype=torch.float64) for _ in range(4))
    bq, bk, bv, bo = (torch.randn(8, generator=g, dtype=torch.float64) for _ in range(4))
    whole = kernels.attention(x, x, x, wq, wk, wv, wo, bq, bk, bv, bo, None, heads=4)
    rows, cols = slice(0, 4), slice(4, 8)
    first = kernels.attention(
        x, x, x, wq[rows], wk[rows], wv[rows], wo[:, rows], bq[rows], bk[rows], bv[rows], bo, None, heads=2
    )
    second = kernels.attention(
        x, x, x, wq[cols], wk[cols], wv[cols], wo[:, cols], bq[cols], bk[cols], bv[cols], None, None, heads=2
    )
    assert torch.allclose(first + second, whole)
    mha = torch.nn.MultiheadAttention(8, 4, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([wq, wk, wv]))
        mha.in_proj_bias.copy_(torch.cat([bq, bk, bv]))
        mha.out_proj.weight.copy_(wo)
        mha.out_proj.bias.copy_(bo)
    assert torch.allclose(mha(x, x, x, need_weights=False)[0], whole)


def test_losses_divide_by_the_logical_count() -> None:
    logits, target = torch.randn(6, 3), torch.tensor([0, 2, 1, 1, 0, 2])
    halves = kernels.cross_entropy(logits[:3], target[:3], 6) + kernels.cross_entropy(
        logits[3:], target[3:], 6
    )
    assert torch.allclose(halves, F.cross_entropy(logits, target))
    x, y = torch.randn(4, 2), torch.randn(4, 2)
    assert torch.allclose(
        kernels.mse_loss(x[:2], y[:2], 8) + kernels.mse_loss(x[2:], y[2:], 8), F.mse_loss(x, y)
    )


# --- dropout ----------------------------------------------------------------------------------


def _context(check: bool = False) -> Context:
    return Context(Communicator(0, 1, (), torch.device("cpu")), check=check, seed=3)


def test_dropout_masks_follow_the_logical_index() -> None:
    ctx = _context()
    whole = ctx.dropout(torch.ones(8, 6), 0.25, "drop", (0, 0), (8, 6))
    piece = ctx.dropout(torch.ones(4, 3), 0.25, "drop", (4, 3), (8, 6))
    assert torch.equal(piece, whole[4:8, 3:6])  # a copy on another rank drops the same elements
    big = ctx.dropout(torch.ones(200, 200), 0.25, "big", (0, 0), (200, 200))
    kept = (big != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.01 and torch.allclose(big[big != 0], torch.tensor(1 / 0.75))
    ctx.begin_step(1)
    assert not torch.equal(ctx.dropout(torch.ones(8, 6), 0.25, "drop", (0, 0), (8, 6)), whole)


def test_dropout_masks_of_pieces_and_their_statistics() -> None:
    """Pieces of a 4-d tensor (attention probabilities), cut along any dimensions and a
    dimension of size 1, drop what the whole tensor drops; the whole keeps 1 - p of its elements
    with no correlation between neighbours along any dimension."""
    ctx = _context()
    shape = (4, 3, 40, 40)
    whole = ctx._keep_mask(shape, 0.1, "probs", (0, 0, 0, 0), shape)
    assert whole.shape == shape and whole.dtype == torch.bool
    piece = ctx._keep_mask((2, 1, 20, 40), 0.1, "probs", (2, 1, 20, 0), shape)
    assert torch.equal(piece, whole[2:4, 1:2, 20:40, :])
    assert abs(whole.float().mean().item() - 0.9) < 0.01
    f = whole.float()
    for d in range(4):
        a, b = f.narrow(d, 0, shape[d] - 1).flatten(), f.narrow(d, 1, shape[d] - 1).flatten()
        assert abs(torch.corrcoef(torch.stack([a, b]))[0, 1].item()) < 0.05
    one = ctx._keep_mask((1, 1, 1, 40), 0.1, "probs", (3, 2, 39, 0), shape)
    assert torch.equal(one, whole[3:, 2:, 39:, :])


def test_dropout_is_the_identity_under_check() -> None:
    x = torch.randn(3, 4)
    assert _context(check=True).dropout(x, 0.5, "drop", (0, 0), (3, 4)) is x


# --- emitted programs -----------------------------------------------------------------------

MOVES = re.compile(r"Data movement per step: (\d+) collective\(s\) .*?, (\d+) implicit transfer\(s\)")


@pytest.mark.parametrize("name", [*STRATEGIES, "collectives-4"])
def test_programs_compile_and_move_what_the_plan_says(name: str) -> None:
    module = build(name)  # checked by the interpreter against the unparallelized graph
    text = emit_program(module, source=f"{name}.mlir")
    compile(text, f"{name}.py", "exec")
    assert emit_program(module, source=f"{name}.mlir") == text  # deterministic
    match = MOVES.search(text)
    assert match is not None
    collectives, transfers = int(match.group(1)), int(match.group(2))
    parallel_ops = sum(
        1 for op in module.walk() if op.name.startswith("parallel.") and op.name != "parallel.sum_concat"
    )
    assert collectives >= parallel_ops  # one per group (two stages for misplaced fused ops)
    if "data" in name and name.startswith(("mlp", "bert", "dlrm", "xdl", "candle_uno")):
        assert (collectives, transfers) == (0, 0)  # data parallelism moves only gradients
    if name.startswith(("resnext50-data", "inception_v3-data")):
        assert collectives == 2  # batch norm cannot split the batch: the batch is gathered once
    if name.startswith(("mlp", "bert")):
        assert transfers == 0  # the test plans place every piece where it is read
    world = int(name.rsplit("-", 1)[1])
    assert f"world_size={world}," in text


def test_missing_machine_is_an_error_naming_the_attribute() -> None:
    module = build("mlp-data-2")
    del module.attributes["unityc.machine"]
    with pytest.raises(CodegenError, match=r"unityc\.machine"):
        emit_program(module)
    module.attributes["unityc.machine"] = StringAttr("cpu:1")
    with pytest.raises(CodegenError, match="does not fit cpu:1") as error:
        emit_program(module)
    assert error.value.op is not None and error.value.op.name == "pcg.weight"


def test_hybrid_plan_gives_every_rank_its_own_weight_piece() -> None:
    """In the 2 x 2 hybrid MLP plan a column-parallel weight is held as 2 shards x 2 copies:
    four distinct pieces, one per rank."""
    text = emit_program(build("mlp-hybrid-4"))
    layout = re.search(
        r'"tower1.0.weight": Layout\(\(32, 16\), "float32", shard=\(2, 1\), copy=2, pieces=\{(.*?)\}', text
    )
    assert layout is not None
    pieces = dict(re.findall(r"(\d): (\(\d, \d, \d, \d\))", layout.group(1)))
    assert len(pieces) == 4 and len(set(pieces.values())) == 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_dropout_is_the_eager_dropout(monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype) -> None:
    """The compiled dropout (one loop writing the output and the mask) gives the eager output
    and gradient bit for bit, and keeps for backward what eager keeps: the one-byte mask."""
    from unityc.runtime import context
    from unityc.runtime.saved import SavedBytes

    shape = (2, 3, 24, 40)
    x = torch.randn(shape, dtype=dtype)
    grad = torch.randn(shape, dtype=dtype)

    def run(limit: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        monkeypatch.setattr(context, "FUSED_MASK_FROM", limit)
        leaf = x.clone().requires_grad_()
        with SavedBytes() as saved:
            out = _context().dropout(leaf * 1, 0.1, "probs", (0, 0, 0, 0), shape)
        out.backward(grad)
        assert leaf.grad is not None
        return out.detach(), leaf.grad, saved.bytes

    eager, fused = run(1 << 62), run(0)
    assert context._fused() is not None
    assert torch.equal(eager[0], fused[0]) and torch.equal(eager[1], fused[1])
    assert eager[2] == fused[2] == math.prod(shape)


@pytest.mark.parametrize("width", [64, 48])
def test_math_attention_scales_the_query_only_where_exact(width: int) -> None:
    """A power-of-two scale (1/sqrt(64)) is applied to q (S x D work) instead of the S x S
    scores: bit for bit the scores' scaling, forward and backward; other widths keep it."""
    from unityc.runtime.kernels import _math_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, width, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, 2, 16, width)
    out = _math_attention(q, k, v, None, 0, None, None, None)
    out.backward(grad)
    mine = [out.detach(), *(t.grad.clone() for t in (q, k, v) if t.grad is not None)]
    for t in (q, k, v):
        t.grad = None
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(width)
    allowed = torch.ones(16, 16, dtype=torch.bool).tril()
    ref = torch.softmax(scores.masked_fill(~allowed, torch.finfo(scores.dtype).min), -1) @ v
    ref.backward(grad)
    theirs = [ref.detach(), *(t.grad for t in (q, k, v) if t.grad is not None)]
    assert len(mine) == len(theirs) == 4
    assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True))
