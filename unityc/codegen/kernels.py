"""The Python expression one task of each pcg op computes on its rank's local pieces.

They follow `unityc/interpreter/kernels.py` (the executable definition of each op's tasks): where
a task's work depends on which task it is (partial-sum index 0 adds biases, a vocabulary shard
starts at its own row), the expression picks the value for this rank from a per-rank table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from unityc.dialects import pcg
from unityc.dialects.forms import Form
from unityc.dialects.pcg import PcgOp
from unityc.dialects.pcg_types import TORCH_NAMES, TensorType
from unityc.dialects.spatial import Halo, window_halo

Task = dict[str, int]


def rank_test(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    return f"rank == {ranks[0]}" if len(ranks) == 1 else f"rank in {tuple(ranks)}"


def literal(value: Any) -> str:
    """`value` (a number, bool or tuple of them) as Python source. Like repr, except that the
    non-finite floats, whose repr (`inf`, `-inf`, `nan`) is a bare name, become `float("-inf")`."""
    if isinstance(value, tuple):
        items = [literal(v) for v in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    return repr(value)


@dataclass
class Tasks:
    """The tasks of one op and the rank each runs on."""

    form: Form
    by_rank: dict[int, Task]
    world: int

    @property
    def ranks(self) -> list[int]:
        return sorted(self.by_rank)

    def degree(self, factor: str) -> int:
        return dict(self.form.factors).get(factor, 1)

    def table(self, fn: Callable[[Task], Any]) -> str:
        """An expression for fn(this rank's task): a literal when every task agrees."""
        values = {r: fn(t) for r, t in self.by_rank.items()}
        distinct = set(values.values())
        if len(distinct) == 1:
            return repr(distinct.pop())
        return "(" + ", ".join(repr(values.get(r)) for r in range(self.world)) + ")[rank]"

    def where(self, predicate: Callable[[Task], bool]) -> str | None:
        """A condition true on the task ranks where `predicate` holds (None: on all of them)."""
        chosen = [r for r, t in self.by_rank.items() if predicate(t)]
        if len(chosen) == len(self.by_rank):
            return None
        return rank_test(chosen) if chosen else "False"

    def first_partial(self, task: Task) -> bool:
        return self.form.coord(self.form.results[0], task)[-2] == 0


@dataclass
class Call:
    """What a kernel template needs: attributes, operand expressions (None where absent),
    operand and result types, the tasks, and a key naming the op (for dropout masks)."""

    attrs: dict[str, Any]
    args: list[str | None]
    operand_types: list[TensorType | None]
    results: list[TensorType]
    tasks: Tasks
    key: str
    groups: dict[tuple[int, ...], None] = field(default_factory=dict)
    """The plan's process groups (sorted ranks): a kernel reducing across shards adds its own."""
    grads: list[bool] = field(default_factory=list)
    """Per operand, whether it carries a gradient (a kernel's own exchanges send it back)."""
    dtypes: list[str] = field(default_factory=list)
    """Per operand, the torch dtype name the program holds it in (what its exchanges move)."""
    recompute_core: bool = False
    """An attention recomputing only its core in backward (`codegen.memory.core_recomputed`)."""

    def chains(self, factor: str) -> tuple[tuple[int, ...], ...]:
        """Per group of tasks that differ only in `factor`, their ranks in `factor` order."""
        groups: dict[tuple[tuple[str, int], ...], dict[int, int]] = {}
        for rank, task in self.tasks.by_rank.items():
            rest = tuple(sorted((f, i) for f, i in task.items() if f != factor))
            groups.setdefault(rest, {})[task.get(factor, 0)] = rank
        return tuple(tuple(g[i] for i in sorted(g)) for _, g in sorted(groups.items()))

    def shard_groups(self, factor: str) -> str | None:
        """`ctx.shards(...)`: per group of tasks that differ only in `factor`, their ranks in
        `factor` order (None where the factor has degree 1)."""
        if self.tasks.degree(factor) == 1:
            return None
        ordered = self.chains(factor)
        for ranks in ordered:
            self.groups.setdefault(tuple(sorted(ranks)))
        return f"ctx.shards({ordered!r})"

    def bias(self, b: str | None) -> str:
        """The bias only on tasks holding partial sum 0 (others' partial sums must not add it)."""
        if b is None:
            return "None"
        cond = self.tasks.where(self.tasks.first_partial)
        if cond is None:
            return b
        return "None" if cond == "False" else f"{b} if {cond} else None"

    def offsets(self, t: TensorType, factors: Sequence[str | None]) -> str:
        """Per rank, where this task's piece of a tensor shaped like `t` starts (one factor per
        dimension, None for an unsharded one)."""
        piece = t.piece_shape
        return self.tasks.table(
            lambda task: tuple(
                0 if f is None else task.get(f, 0) * p for f, p in zip(factors, piece, strict=True)
            )
        )


def _result_offsets(call: Call) -> str:
    layout = call.tasks.form.results[0]
    t = call.results[0]

    def offsets(task: Task) -> tuple[int, ...]:
        coord = call.tasks.form.coord(layout, task)
        return tuple(i * p for i, p in zip(coord, t.piece_shape, strict=False))

    return call.tasks.table(offsets)


def _dropout(call: Call) -> str:
    (x,) = call.args
    shape = call.results[0].shape
    return f'ctx.dropout({x}, {call.attrs["p"]!r}, "{call.key}", {_result_offsets(call)}, {shape})'


def _linear(call: Call) -> str:
    x, w, b = call.args
    bias = call.bias(b)
    return f"F.linear({x}, {w})" if bias == "None" else f"F.linear({x}, {w}, {bias})"


def _pair(values: Sequence[int] | None, default: int) -> tuple[int, int]:
    return (default, default) if values is None else (int(values[0]), int(values[1]))


def _spatial(
    call: Call, x: str | None, windows: Sequence[tuple[int, int, int, int]], fill: float
) -> tuple[str, tuple[int, int]]:
    """The input extended by the halo of each spatially sharded dim (`ctx.halo`: height, then
    width on the extended rows, so corners come along) and the padding left to the window."""
    t = call.operand_types[0]
    assert t is not None and x is not None
    padding = [pad for _, _, pad, _ in windows]
    for i, (factor, (kernel, stride, pad, dilation)) in enumerate(zip(("h", "w"), windows, strict=True)):
        if call.tasks.degree(factor) == 1:
            continue
        halo = window_halo(t.shape[2 + i], t.shard[2 + i], kernel, stride, pad, dilation)
        assert isinstance(halo, Halo), halo  # the op's verifier accepted the form
        x = (
            f"ctx.halo({x}, {2 + i}, {halo.above}, {halo.below}, {literal(fill)}, {call.chains(factor)!r}, "
            f'"{call.dtypes[0]}", grad={call.grads[0]})'
        )
        padding[i] = 0
    return x, (padding[0], padding[1])


def _conv2d(call: Call) -> str:
    x, w, b = call.args
    a = call.attrs
    groups = (a["groups"] or 1) // call.tasks.degree("g")
    stride, dilation = _pair(a["stride"], 1), _pair(a["dilation"], 1)
    pad = _pair(a["padding"], 0)
    assert w is not None
    kernel = call.operand_types[1].shape[2:]  # type: ignore[union-attr]
    windows = [(kernel[i], stride[i], pad[i], dilation[i]) for i in (0, 1)]
    x, padding = _spatial(call, x, windows, 0.0)
    return (
        f"F.conv2d({x}, {w}, {call.bias(b)}, stride={stride}, "
        f"padding={padding}, dilation={dilation}, groups={groups})"
    )


def _pool2d(call: Call) -> str:
    (x,) = call.args
    a = call.attrs
    kernel = _pair(a["kernel"], 1)
    stride = _pair(a["stride"], 0)
    stride = (stride[0] or kernel[0], stride[1] or kernel[1])
    pad = _pair(a["padding"], 0)
    windows = [(kernel[i], stride[i], pad[i], 1) for i in (0, 1)]
    maximum = a["kind"] == "max"
    x, padding = _spatial(call, x, windows, -math.inf if maximum else 0.0)
    pool = "F.max_pool2d" if maximum else "F.avg_pool2d"
    return f"{pool}({x}, {kernel}, {stride}, {padding})"


def _layer_norm(call: Call) -> str:
    x, w, b = call.args
    normalized = call.results[0].piece_shape[-call.attrs["dims"] :]
    return f"F.layer_norm({x}, {normalized}, {w}, {b}, {call.attrs['eps']!r})"


def _rms_norm(call: Call) -> str:
    x, w = call.args
    a = call.attrs
    text = f"rt.kernels.rms_norm({x}, {w or 'None'}, {a['dims']}, {literal(a['eps'])}"
    if a.get("offset"):
        text += f", offset={literal(a['offset'])}"
    return text + (", after_cast=True)" if a.get("weight_after_cast") else ")")


def _reduce(call: Call) -> str:
    (x,) = call.args
    t = call.operand_types[0]
    assert t is not None
    dims = tuple(sorted({d % t.rank for d in call.attrs["dims"]}))
    if not dims:
        return x or "None"
    keep = ", keepdim=True" if call.attrs["keepdim"] else ""
    kind = call.attrs["kind"]
    if kind in ("max", "min", "argmax", "argmin"):  # torch.max/min over one dim: (values, indices)
        pick = 1 if kind.startswith("arg") else 0
        return f"{x}.{kind.removeprefix('arg')}(dim={dims[0]}{keep})[{pick}]"
    if kind in ("amax", "amin"):
        return f"{x}.{kind}(dim={dims}{keep})"
    total = f"{x}.sum(dim={dims}{keep})"
    if call.attrs["kind"] == "mean":
        return f"{total} / {math.prod(t.shape[d] for d in dims)}"
    return total


def _vocab_start(call: Call) -> str | None:
    """Per rank, the first vocabulary row of this task's weight shard (None: unsharded)."""
    if call.tasks.degree("v") == 1:
        return None
    w = call.operand_types[1]
    assert w is not None
    rows = w.piece_shape[0]
    return call.tasks.table(lambda task: task.get("v", 0) * rows)


def _embedding(call: Call) -> str:
    ids, w = call.args
    start = _vocab_start(call)
    pad = call.attrs.get("padding_idx")
    if start is not None:
        return f"rt.kernels.vocab_lookup({ids}, {w}, {start}, {pad})"
    return f"F.embedding({ids}, {w})" if pad is None else f"F.embedding({ids}, {w}, padding_idx={pad})"


def _experts(call: Call) -> str:
    """The sort-based experts kernel; expert-parallel (factor "e"), the dispatch and combine of
    `runtime/experts.py` over the ranks differing only in it (the expert-parallel group)."""
    args = ", ".join(a or "None" for a in call.args)
    group = call.shard_groups(pcg.EXPERT_FACTOR)
    if group is None:
        return f'rt.kernels.experts({args}, "{call.attrs["activation"]}")'
    return f'rt.experts.expert_parallel_experts({args}, "{call.attrs["activation"]}", {group})'


def _embedding_bag(call: Call) -> str:
    ids, w = call.args
    t = call.operand_types[0]
    assert t is not None
    return f'rt.kernels.embedding_bag({ids}, {w}, {_vocab_start(call)}, "{call.attrs["mode"]}", {t.shape[1]})'


def _attention(call: Call) -> str:
    bq, bk, bv, bo, mask = call.args[7:12]
    cos, sin, q_norm, k_norm = [*call.args[12:], None, None, None, None][:4]
    heads = call.attrs["heads"] // call.tasks.degree("h")
    required = [str(a) for a in call.args[:7]]  # q, k, v, wq, wk, wv, wo: never absent
    args = [*required, bq or "None", bk or "None", bv or "None", call.bias(bo), mask or "None"]
    text = f"rt.kernels.attention({', '.join(args)}, heads={heads}"
    context = call.shard_groups("c")  # context parallelism: the exchange the op declares
    if context is not None:
        exchange = call.attrs["context"]
        text = f"rt.ring_attention.context_attention({', '.join(args)}, heads={heads}, "
        text += f'context={context}, exchange="{exchange}"'
    if cos is not None:
        text += f", cos={cos}, sin={sin}"
    if q_norm is not None:
        text += f", q_norm={q_norm}, k_norm={k_norm}, norm_eps={literal(call.attrs['norm_eps'])}"
    for name in ("scale", "softcap"):
        if call.attrs.get(name) is not None:
            text += f", {name}={literal(call.attrs[name])}"
    if call.attrs.get("causal"):
        qt = call.operand_types[0]
        assert qt is not None
        rows = qt.piece_shape[1]
        text += f", causal={call.tasks.table(lambda task: task.get('s', 0) * rows)}"
    text += f', kernel="{pcg.AttentionOp.kernel(call.attrs)}"'
    p = call.attrs.get("dropout") or 0.0
    if p > 0:
        qt, kt = call.operand_types[0], call.operand_types[1]
        assert qt is not None and kt is not None
        shape = (qt.shape[0], call.attrs["heads"], qt.shape[1], kt.shape[1])
        piece = (qt.piece_shape[0], heads, qt.piece_shape[1], 1)
        starts = call.tasks.table(
            lambda task: tuple(task.get(f, 0) * n for f, n in zip(("b", "h", "s", ""), piece, strict=True))
        )
        text += f', dropout=ctx.dropout_fn({p!r}, "{call.key}", {starts}, {shape})'
    if call.recompute_core:
        text += ", recompute_core=True"
    return text + ")"


def _loss_divisor(call: Call, count: int) -> int:
    return count if call.attrs["reduction"] == "mean" else 1


def _cross_entropy(call: Call) -> str:
    """Rows over the logical count (a mean), or the kept targets' count across the row shards
    (a mean with ignore_index); class shards reduce their rows' log-sum-exp together."""
    logits, target = call.args
    t = call.operand_types[0]
    assert t is not None
    ignore = call.attrs.get("ignore_index")
    mean = call.attrs["reduction"] == "mean"
    divisor = None if mean and ignore is not None else _loss_divisor(call, t.shape[0])
    args = [str(logits), str(target), repr(divisor)]
    if ignore is not None:
        args.append(f"ignore_index={ignore}")
    classes = call.shard_groups("v")
    if classes is not None:
        width = t.piece_shape[1]
        args += [f"start={call.tasks.table(lambda task: task.get('v', 0) * width)}", f"classes={classes}"]
    rows = call.shard_groups("n") if divisor is None else None
    if rows is not None:
        args.append(f"rows={rows}")
    if call.attrs.get("classes") is not None:  # a padded vocabulary
        args.append(f"real={call.attrs['classes']}")
    return f"rt.kernels.cross_entropy({', '.join(args)})"


def _mse(call: Call) -> str:
    x, target = call.args
    t = call.operand_types[0]
    assert t is not None
    return f"rt.kernels.mse_loss({x}, {target}, {_loss_divisor(call, math.prod(t.shape))})"


def _unary(template: str) -> Callable[[Call], str]:
    return lambda call: template.format(x=call.args[0], **call.attrs)


def _binary(symbol: str) -> Callable[[Call], str]:
    return lambda call: f"{call.args[0]} {symbol} {call.args[1]}"


TORCH_DTYPES = {str(t): name for t, name in TORCH_NAMES.items()}
"""By the element type's text (`f32`), as the cast's `dtype` attribute carries it."""


def torch_dtype_name(element_type: Any) -> str:
    return TORCH_DTYPES[str(element_type)]


KERNELS: dict[type[PcgOp], Callable[[Call], str]] = {
    pcg.ReluOp: _unary("F.relu({x})"),
    pcg.GeluOp: lambda c: (
        f'F.gelu({c.args[0]}, approximate="tanh")' if c.attrs["tanh"] else f"F.gelu({c.args[0]})"
    ),
    pcg.SigmoidOp: _unary("torch.sigmoid({x})"),
    pcg.TanhOp: _unary("torch.tanh({x})"),
    pcg.ExpOp: _unary("torch.exp({x})"),
    pcg.SqrtOp: _unary("torch.sqrt({x})"),
    pcg.Log1pOp: _unary("torch.log1p({x})"),
    pcg.LogOp: _unary("torch.log({x})"),
    pcg.AbsOp: _unary("torch.abs({x})"),
    pcg.IdentityOp: _unary("{x}"),
    pcg.StopGradientOp: _unary("{x}.detach()"),
    pcg.NegOp: _unary("-{x}"),
    pcg.ScalarMulOp: lambda c: f"{c.args[0]} * {literal(c.attrs['scale'])}",
    pcg.ScalarAddOp: lambda c: f"{c.args[0]} + {literal(c.attrs['value'])}",
    pcg.PowOp: lambda c: f"{c.args[0]} ** {literal(c.attrs['exponent'])}",
    pcg.ClampOp: lambda c: (
        f"rt.kernels.clamp({c.args[0]}, {literal(c.attrs.get('low'))}, {literal(c.attrs.get('high'))})"
    ),
    pcg.CompareOp: lambda c: f"torch.{c.attrs['kind']}({c.args[0]}, {literal(c.attrs['value'])})",
    pcg.CumsumOp: lambda c: f"torch.cumsum({c.args[0]}, {c.attrs['dim']}, dtype={c.args[0]}.dtype)",
    pcg.DropoutOp: _dropout,
    pcg.CastOp: lambda c: f"{c.args[0]}.to(torch.{torch_dtype_name(c.attrs['dtype'])})",
    pcg.AddOp: _binary("+"),
    pcg.SubOp: _binary("-"),
    pcg.MulOp: _binary("*"),
    pcg.GatedActivationOp: lambda c: (
        f'rt.kernels.gated_activation({c.args[0]}, {c.args[1]}, "{c.attrs["act"]}")'
    ),
    pcg.DivOp: _binary("/"),
    pcg.CompareTensorsOp: lambda c: f"torch.{c.attrs['kind']}({c.args[0]}, {c.args[1]})",
    pcg.LinearOp: _linear,
    pcg.MatmulOp: _binary("@"),
    pcg.BatchMatmulOp: _binary("@"),
    pcg.Conv2dOp: _conv2d,
    pcg.Pool2dOp: _pool2d,
    pcg.BatchNormOp: lambda c: (
        f"F.batch_norm({c.args[0]}, None, None, {c.args[1]}, {c.args[2]}, training=True, "
        f"eps={c.attrs['eps']!r})"
    ),
    pcg.LayerNormOp: _layer_norm,
    pcg.RmsNormOp: _rms_norm,
    pcg.SoftmaxOp: lambda c: f"torch.softmax({c.args[0]}, dim={c.attrs['dim']})",
    pcg.ConcatOp: lambda c: f"torch.cat([{', '.join(a or 'None' for a in c.args)}], dim={c.attrs['dim']})",
    pcg.SplitOp: lambda c: f"torch.split({c.args[0]}, {list(c.attrs['sizes'])}, dim={c.attrs['dim']})",
    pcg.ReshapeOp: lambda c: f"{c.args[0]}.reshape({c.results[0].piece_shape})",
    pcg.TransposeOp: lambda c: f"{c.args[0]}.permute({tuple(c.attrs['perm'])})",
    pcg.ReduceOp: _reduce,
    pcg.EmbeddingOp: _embedding,
    pcg.EmbeddingBagOp: _embedding_bag,
    pcg.AttentionOp: _attention,
    pcg.CrossEntropyOp: _cross_entropy,
    pcg.MseLossOp: _mse,
    pcg.TopkOp: lambda c: (
        f"rt.kernels.topk_indices({c.args[0]}, {c.attrs['k']}, {c.attrs.get('groups') or 1}, "
        f"{c.attrs.get('group_k')}, {c.attrs.get('group_top') or 1})"
    ),
    pcg.TakeOp: lambda c: f"torch.gather({c.args[0]}, {c.attrs['dim']}, {c.args[1]})",
    pcg.ExpertsOp: _experts,
}
"""pcg.gather is emitted by the writer: its indices become a table of the plan."""

WRITTEN_BY_EMITTER: dict[type[PcgOp], str] = {
    pcg.GatherOp: "its indices become a table of the plan (`emit.py`)",
    pcg.WeightOp: "a source: this rank's piece of the weight dict `w` (`emit.py`, `memory.SOURCES`)",
    pcg.InputOp: "a source: this rank's piece of the batch dict `x` (`emit.py`, `memory.SOURCES`)",
    pcg.ConstantOp: "a source: a constant packed into the program (`emit.py`, `memory.SOURCES`)",
}
"""The pcg ops without a `KERNELS` row, and why they need none."""
