"""Random instances of rule patterns, chosen while the pattern is built.

`SamplingBuilder` adds a pattern to a graph like `terms.Builder`, but a tensor variable or an
attribute variable without a value gets one the first time an op reads it, chosen knowing
the op, the operand slot and the operands already built: a weight of `linear` is rank 2, a
softmax dim lies in -rank..rank-1, split sizes add up to the split dimension, a second
operand often copies the first one's type. Most instances then build, even for ops with
strict shape rules such as attention, without a solver.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any

from xdsl.dialects.builtin import f32, f64, i64

from unityc.dialects import pcg
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.syntax import Kind
from unityc.graph import Graph, Ref, op_class
from unityc.rewrites.terms import (
    App,
    AttrVar,
    Builder,
    Domain,
    EvalError,
    Expr,
    ListExpr,
    Term,
    Var,
    eval_expr,
    subterms,
)

SIZES = (2, 4, 6, 8, 12)

# Ranks an operand slot accepts (slots not listed: any rank from 1 to 4).
SLOT_RANKS: dict[tuple[str, str], tuple[int, ...]] = {
    ("pcg.linear", "weight"): (2,),
    ("pcg.linear", "bias"): (1,),
    ("pcg.matmul", "lhs"): (2,),
    ("pcg.matmul", "rhs"): (2,),
    ("pcg.batch_matmul", "lhs"): (3,),
    ("pcg.batch_matmul", "rhs"): (3,),
    ("pcg.conv2d", "input"): (4,),
    ("pcg.conv2d", "weight"): (4,),
    ("pcg.conv2d", "bias"): (1,),
    ("pcg.pool2d", "input"): (4,),
    ("pcg.batch_norm", "input"): (2, 3, 4),
    ("pcg.batch_norm", "weight"): (1,),
    ("pcg.batch_norm", "bias"): (1,),
    ("pcg.layer_norm", "weight"): (1,),
    ("pcg.layer_norm", "bias"): (1,),
    ("pcg.rms_norm", "weight"): (1,),
    ("pcg.embedding", "indices"): (1, 2),
    ("pcg.embedding", "weight"): (2,),
    ("pcg.embedding_bag", "indices"): (2,),
    ("pcg.embedding_bag", "weight"): (2,),
    ("pcg.cross_entropy", "logits"): (2,),
    ("pcg.cross_entropy", "target"): (1,),
    **{("pcg.attention", s): (3,) for s in ("query", "key", "value")},
    **{("pcg.attention", s): (2,) for s in ("wq", "wk", "wv", "wo")},
    **{("pcg.attention", s): (1,) for s in ("bq", "bk", "bv", "bo")},
    **{("pcg.attention", s): (4,) for s in ("mask", "cos", "sin")},
    **{("pcg.attention", s): (1,) for s in ("q_norm", "k_norm")},
}
INDEX_SLOTS = {
    ("pcg.embedding", "indices"),
    ("pcg.embedding_bag", "indices"),
    ("pcg.cross_entropy", "target"),
}
KERNELS = (1, 2, 3)
"""A convolution weight's window sizes."""
WINDOW_OPS = ("pcg.conv2d", "pcg.pool2d")
"""Ops whose list properties are a sliding window's (`Sampler._window`)."""
STRING_CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("pcg.reduce", "kind"): ("sum", "mean", "max", "min", "argmax", "argmin"),
    ("pcg.pool2d", "kind"): ("max", "avg"),
    ("pcg.embedding_bag", "mode"): ("sum", "mean"),
    ("pcg.cross_entropy", "reduction"): ("mean", "sum"),
    ("pcg.mse_loss", "reduction"): ("mean", "sum"),
    ("pcg.compare", "kind"): pcg.COMPARISONS,
    ("pcg.compare_tensors", "kind"): pcg.COMPARISONS,
    ("pcg.attention", "context"): pcg.AttentionOp.CONTEXT_EXCHANGES,
    ("pcg.gated_activation", "act"): pcg.GATED_ACTIVATIONS,
}
# Parallel ops whose operand must hold partial sums, or shards on the dim property named here,
# divisible by their degree: their operands are sampled so that they do.
SUM_READERS = {"parallel.reduce", "parallel.all_reduce", "parallel.reduce_scatter"}
SHARD_READERS = {"parallel.combine": "dim", "parallel.all_gather": "dim", "parallel.all_to_all": "src"}
DEGREE_READERS = SUM_READERS | set(SHARD_READERS)
FLOAT_CHOICES: dict[str, tuple[float, ...]] = {
    "exponent": (2.0, 3.0),
    "p": (0.1,),
    "eps": (1e-5,),
    "dropout": (0.0,),
    "norm_eps": (1e-6,),
    "scale": (0.25, 0.5),
    "softcap": (2.0, 50.0),
    "low": (-1.0, 0.0),
    "high": (0.5, 6.0),
}


def _kv_heads(operands: Sequence[TensorType | None], heads: Any) -> int:
    """The KV heads attention's wk rows hold for `heads` query heads (heads itself if none fit)."""
    q, wk = operands[0], operands[4] if len(operands) > 4 else None
    if not isinstance(heads, int) or q is None or wk is None or q.shape[-1] % heads:
        return heads if isinstance(heads, int) else 1
    width = q.shape[-1] // heads
    groups = wk.shape[0] // width
    return groups if wk.shape[0] % width == 0 and groups and heads % groups == 0 else heads


class Sampler:
    """Seeded choices for one instance: a base size, whether to use uniform sizes and degrees."""

    def __init__(self, rng: random.Random, degrees: Sequence[int]):
        self.rng = rng
        self.degrees = tuple(degrees)
        self.base = rng.choice(SIZES)
        self.uniform = rng.random() < 0.7
        self.parallel = rng.random() < 0.6
        self.made: list[TensorType] = []
        self.attention_wq: TensorType | None = None
        self.attention_wk: TensorType | None = None
        self.attention_q: TensorType | None = None
        self.attention_cos: TensorType | None = None

    # --- tensors ----------------------------------------------------------------------------

    def tensor(
        self,
        op: str,
        slot: str,
        siblings: Sequence[TensorType],
        fixed: Mapping[str, Any],
        constraint: tuple[str, str] | None = None,
    ) -> TensorType:
        """A type for a variable first read by `op` at `slot`; `fixed` holds the op's properties
        that already have values (a parallel op's degree and dim shape the operand);
        `constraint` is the op slot that fixes its rank, if another op than `op` does."""
        where = constraint or (op, slot)
        grouped = self._kv_weight(where)
        if grouped is not None:
            return grouped
        ranks = SLOT_RANKS.get(where, (1, 2, 3, 4))
        element = i64 if where in INDEX_SLOTS else f32
        similar = [t for t in (*siblings, *self.made) if t.rank in ranks and t.element_type == element]
        if siblings and op == "parallel.sum_concat":
            return siblings[0]
        if similar and self.rng.random() < 0.5 and op not in DEGREE_READERS:
            return self.rng.choice(similar)
        rank = self.rng.choice(ranks)
        shape = [self.base if self.uniform else self.rng.choice(SIZES) for _ in range(rank)]
        if where == ("pcg.conv2d", "weight") and rank == 4:
            shape[2:] = [self.rng.choice(KERNELS)] * 2  # a window, not a feature size
        shard, sum_, copy = self._degrees(shape, element)
        given = fixed.get("degree")
        degree = given if isinstance(given, int) else self.rng.choice(self.degrees)
        if op in SUM_READERS and element in (f32, f64):
            sum_ = degree * (sum_ if self.rng.random() < 0.3 else 1)
        if op in SHARD_READERS and rank:
            dim = fixed.get(SHARD_READERS[op])
            dim = dim if isinstance(dim, int) and 0 <= dim < rank else self.rng.randrange(rank)
            shard[dim] = degree * (self.rng.choice(self.degrees) if self.rng.random() < 0.3 else 1)
            shape[dim] = self._multiple(shape[dim], shard[dim])
        t = TensorType(shape, element, shard, sum_, copy)
        self.made.append(t)
        if where == ("pcg.attention", "wq"):
            self.attention_wq = t
        if where == ("pcg.attention", "query"):
            self.attention_q = t
        return t

    def _rotary_table(self, slot: str) -> TensorType | None:
        """Rotary cos/sin [1, 1, S, d] for attention's query [B, S, E] (d an even divisor of E,
        which then fixes the heads); sin takes cos's type."""
        if slot == "sin":
            return self.attention_cos
        q = self.attention_q
        if q is None:
            return None
        widths = [q.shape[2] // h for h in (1, 2, 4) if q.shape[2] % h == 0 and (q.shape[2] // h) % 2 == 0]
        if not widths:
            return None
        self.attention_cos = TensorType([1, 1, q.shape[1], self.rng.choice(widths)], q.element_type)
        return self.attention_cos

    def _kv_weight(self, where: tuple[str, str]) -> TensorType | None:
        """Most of the time, attention's wk and wv take half of wq's rows (half as many KV heads
        as query heads: grouped-query attention, `kv_heads` chosen to match)."""
        if where in (("pcg.attention", "cos"), ("pcg.attention", "sin")):
            return self._rotary_table(where[1])
        wq = self.attention_wq
        if where not in (("pcg.attention", "wk"), ("pcg.attention", "wv")) or wq is None:
            return None
        if where[1] == "wv":
            return self.attention_wk
        if wq.shape[0] % 2 or self.rng.random() < 0.25:
            return None
        self.attention_wk = TensorType([wq.shape[0] // 2, wq.shape[1]], wq.element_type)
        return self.attention_wk

    def _multiple(self, size: int, degree: int) -> int:
        """`size` if `degree` divides it, else a size from SIZES (or a small multiple) that it divides."""
        if size % degree == 0:
            return size
        fits = [s for s in SIZES if s % degree == 0]
        return self.rng.choice(fits) if fits else degree * 2

    def _degrees(self, shape: Sequence[int], element: Any) -> tuple[list[int], int, int]:
        if not self.parallel:
            return [1] * len(shape), 1, 1
        shard = [2 if size % 2 == 0 and self.rng.random() < 0.25 else 1 for size in shape]
        floating = element in (f32, f64)
        sum_ = 2 if floating and self.rng.random() < 0.2 else 1
        copy = 2 if self.rng.random() < 0.2 else 1
        return shard, sum_, copy

    # --- attributes -------------------------------------------------------------------------

    def attr(
        self, op: str, prop: str, kind: Kind, operands: Sequence[TensorType | None], fixed: Mapping[str, Any]
    ) -> Any:
        """A value for property `prop` of `op`; `fixed` holds the op's properties known so far."""
        first = next((t for t in operands if t is not None), None)
        rng = self.rng
        if op == "pcg.attention" and prop == "kv_heads":
            return _kv_heads(operands, fixed.get("heads"))
        cos = operands[12] if op == "pcg.attention" and len(operands) > 12 else None
        if prop == "heads" and cos is not None and first is not None and first.shape[-1] % cos.shape[-1] == 0:
            return first.shape[-1] // cos.shape[-1]
        if kind is Kind.INT and op.startswith("parallel.") and first is not None:
            return self._parallel_int(op, prop, first, fixed)
        if kind is Kind.INT:
            return self._int(op, prop, first)
        if kind is Kind.INTS and op in WINDOW_OPS:
            return self._window(op, prop, operands, fixed)
        if kind is Kind.INTS:
            return self._ints(prop, first.rank if first is not None else 2, first)
        if kind is Kind.FLOAT:
            return rng.choice(FLOAT_CHOICES.get(prop, (0.5, 1.5, 2.0, -1.0, 3.0)))
        if kind is Kind.STR:
            return rng.choice(STRING_CHOICES.get((op, prop), ("sum",)))
        if kind is Kind.FLAG:
            return rng.random() < 0.5
        if kind is Kind.TYPE:
            return rng.choice((f32, f64))
        raise EvalError(f"cannot choose a value for property '{prop}' of {op}")

    def _parallel_int(self, op: str, prop: str, t: TensorType, fixed: Mapping[str, Any]) -> int:
        """Dims and degrees a parallel op accepts for operand `t` (random if none does)."""
        given = fixed.get("degree")
        degrees = (given,) if isinstance(given, int) else self.degrees
        dims = range(t.rank)
        if prop == "degree":
            if op in SUM_READERS:
                options = [k for k in (*self.degrees, t.sum_degree) if k > 1 and t.sum_degree % k == 0]
            elif op in SHARD_READERS and isinstance(fixed.get(SHARD_READERS[op]), int):
                k_dim = t.shard[fixed[SHARD_READERS[op]]]
                options = [k for k in (*self.degrees, k_dim) if k > 1 and k_dim % k == 0]
            elif op == "parallel.partition" and isinstance(fixed.get("dim"), int):
                piece = t.piece_shape[fixed["dim"]]
                options = [k for k in self.degrees if piece % k == 0]
            else:
                options = []
            return self.rng.choice(options or list(self.degrees))
        if prop == SHARD_READERS.get(op):
            options = [d for d in dims if any(t.shard[d] % k == 0 and t.shard[d] > 1 for k in degrees)]
        elif prop in ("dim", "dst") and op in (
            "parallel.partition",
            "parallel.reduce_scatter",
            "parallel.all_to_all",
        ):
            options = [d for d in dims if any(t.piece_shape[d] % k == 0 for k in degrees)]
        else:
            options = list(dims)
        return self.rng.choice(options or list(dims) or [0])

    def _int(self, op: str, prop: str, first: TensorType | None) -> int:
        rng = self.rng
        rank = first.rank if first is not None else 2
        if prop == "dim":
            return rng.randrange(-rank, rank) if rank else 0
        if prop == "degree":
            return rng.choice(self.degrees)
        if prop == "heads" and first is not None and first.rank:
            return rng.choice([h for h in (1, 2, 3, 4) if first.shape[-1] % h == 0])
        if prop == "dims":
            return rng.randint(1, max(rank, 1))
        if prop == "groups":
            return 1
        return rng.randint(1, 4)

    def _window(
        self, op: str, prop: str, operands: Sequence[TensorType | None], fixed: Mapping[str, Any]
    ) -> tuple[int, int]:
        """A sliding window's kernel, stride, padding or dilation: strides of 1 or 2 and, half the
        time, the padding that lines a window's output up with its input (output x stride =
        input: "same" windows, the ones that split over height and width with a halo), else none.
        A convolution's kernel is its weight's (dims 2 and 3), a pool's 1 to 3."""
        rng = self.rng
        if prop == "kernel":
            return (rng.choice((1, 2, 3)),) * 2
        if prop == "dilation":
            return (1, 1)
        if prop == "stride":
            return (rng.choice((1, 2)),) * 2
        weight = operands[1] if op == "pcg.conv2d" and len(operands) > 1 else None
        kernels = weight.shape[2:] if weight is not None and weight.rank == 4 else fixed.get("kernel", (1, 1))
        strides = fixed.get("stride", (1, 1))
        limit = (kernels[0] // 2, kernels[1] // 2) if op == "pcg.pool2d" else kernels
        if rng.random() < 0.5:
            return (0, 0)
        lined = [max(0, (k - s) // 2 + (k - s) % 2) for k, s in zip(kernels, strides, strict=True)]
        return (min(lined[0], limit[0]), min(lined[1], limit[1]))

    def _ints(self, prop: str, rank: int, first: TensorType | None) -> tuple[int, ...]:
        rng = self.rng
        if prop == "perm":
            perm = list(range(rank))
            rng.shuffle(perm)
            return tuple(perm)
        if prop == "dims":
            return tuple(sorted(rng.sample(range(rank), rng.randint(1, max(rank, 1))))) if rank else ()
        if prop in ("kernel", "stride", "dilation"):
            return (1, 1)
        if prop == "padding":
            return (0, 0)
        if prop == "shape" and first is not None:
            return (math.prod(first.shape),) if rng.random() < 0.5 else first.shape
        if prop == "indices" and first is not None:
            return (0, 1)
        raise EvalError(f"cannot choose a list for property '{prop}'")

    def sizes(self, total: int, parts: int) -> tuple[int, ...]:
        """`parts` positive sizes adding up to `total` (equal halves most of the time)."""
        if parts < 1 or total < parts:
            raise EvalError(f"cannot split {total} into {parts} parts")
        if total % parts == 0 and self.rng.random() < 0.6:
            return (total // parts,) * parts
        cuts = sorted(self.rng.sample(range(1, total), parts - 1))
        return tuple(b - a for a, b in itertools.pairwise([0, *cuts, total]))

    def param(self, domain: Domain, type_of: Callable[[Term], TensorType]) -> int:
        if domain.kind == "degree":
            return self.rng.choice(self.degrees)
        if domain.kind == "range":
            return self.rng.randrange(domain.lo, domain.hi)
        assert domain.term is not None
        rank = type_of(domain.term).rank
        if rank == 0:
            raise EvalError("dim() of a rank-0 tensor is empty")
        return self.rng.randrange(rank)


class SamplingBuilder(Builder):
    """A Builder that gives unbound tensor and attribute variables sampled values on first use."""

    def __init__(
        self, graph: Graph, tensors: dict[str, Ref], env: MutableMapping[str, Any], sampler: Sampler
    ):
        super().__init__(graph, tensors, env)
        self.tensors: dict[str, Ref] = tensors
        self.env: MutableMapping[str, Any] = env
        self.sampler = sampler
        self.slots: dict[str, tuple[str, str]] = {}
        """The op slot that constrains each variable's type (see `prepare`)."""

    def prepare(self, terms: Sequence[Term]) -> None:
        """Notes, for each variable, the op slot that constrains it, looking through the ops
        that keep shapes (parallel ops, element-wise unary ops): the weight under
        `replicate` in attention's wq slot is still a [E, E] weight."""

        def walk(term: Term | None, slot: tuple[str, str] | None) -> None:
            if isinstance(term, Var):
                if slot is not None:
                    self.slots.setdefault(term.name, slot)
                return
            if not isinstance(term, App):
                return
            names = [n for n, _ in op_class(term.op).get_irdl_definition().operands]
            keeps_shape = term.op.startswith("parallel.") or issubclass(op_class(term.op), pcg.UnaryOp)
            for i, arg in enumerate(term.args):
                inner = slot if keeps_shape and slot is not None else (term.op, names[min(i, len(names) - 1)])
                walk(arg, inner)

        for term in terms:
            walk(term, None)

    def ref(self, term: Term) -> Ref:
        if isinstance(term, App) and term not in self.built:
            self._bind(term)
        if isinstance(term, Var) and term.name not in self.tensors:
            self._new_tensor(term.name, "", "", [], {})
        return super().ref(term)

    def _bind(self, term: App) -> None:
        slots = [name for name, _ in op_class(term.op).get_irdl_definition().operands]
        if len(slots) != len(term.args):  # variadic (concat): every operand is slot 0
            slots = [slots[0]] * len(term.args)
        built: list[TensorType | None] = []
        for slot, arg in zip(slots, term.args, strict=True):
            if isinstance(arg, Var) and arg.name not in self.tensors:
                siblings = [t for t in built if t is not None]
                self._new_tensor(arg.name, term.op, slot, siblings, self._known_attrs(term))
            built.append(None if arg is None else self.type_of(arg))
        kinds = {name: kind for name, kind, _ in op_class(term.op).PROPS}
        for prop, e in term.attrs:
            self._bind_expr(term, prop, kinds[prop], e, built)

    def _known_attrs(self, term: App) -> dict[str, Any]:
        """The term's properties that can be evaluated now (without choosing any type)."""
        known: dict[str, Any] = {}
        for prop, e in term.attrs:
            try:
                known[prop] = eval_expr(e, self.env, self._bound_type)
            except (EvalError, KeyError, IndexError, TypeError):
                continue
        return known

    def _bound_type(self, term: Term) -> TensorType:
        if any(isinstance(t, Var) and t.name not in self.tensors for t in subterms(term)):
            raise EvalError("not chosen yet")
        return self.type_of(term)

    def _bind_expr(
        self, term: App, prop: str, kind: Kind, e: Expr, operands: list[TensorType | None]
    ) -> None:
        if isinstance(e, AttrVar) and e.name not in self.env:
            self.env[e.name] = self.sampler.attr(term.op, prop, kind, operands, self._known_attrs(term))
            return
        if not isinstance(e, ListExpr):
            return
        free = [i.name for i in e.items if isinstance(i, AttrVar) and i.name not in self.env]
        if not free:
            return
        attrs = dict(term.attrs)
        if prop == "perm" and operands and operands[0] is not None and operands[0].rank == len(e.items):
            perm = self.sampler.attr(term.op, prop, Kind.INTS, operands, {})
            for item, value in zip(e.items, perm, strict=True):
                if isinstance(item, AttrVar) and item.name not in self.env:
                    self.env[item.name] = value
            return
        if prop == "sizes" and operands and operands[0] is not None and "dim" in attrs:
            # the split's dim comes before sizes in the op's properties, so it is bound by now
            dim = eval_expr(attrs["dim"], self.env, self.type_of)
            sizes = self.sampler.sizes(operands[0].shape[dim], len(e.items))
            for item, size in zip(e.items, sizes, strict=True):
                if isinstance(item, AttrVar) and item.name not in self.env:
                    self.env[item.name] = size
            return
        if term.op in WINDOW_OPS:  # a window's per-dim list: lined-up windows (Sampler._window)
            window = self.sampler.attr(term.op, prop, Kind.INTS, operands, self._known_attrs(term))
            for item, value in zip(e.items, window, strict=False):
                if isinstance(item, AttrVar) and item.name not in self.env:
                    self.env[item.name] = value
            return
        for name in free:
            self.env[name] = self.sampler.attr(term.op, prop, Kind.INT, operands, {})

    def _new_tensor(
        self, name: str, op: str, slot: str, siblings: list[TensorType], fixed: Mapping[str, Any]
    ) -> None:
        if name in self.tensors:
            return
        t = self.sampler.tensor(op, slot, siblings, fixed, self.slots.get(name))
        self.tensors[name] = self.graph.add_source("pcg.input", name, t)
