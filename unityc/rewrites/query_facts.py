"""What the Z3 encoding knows about the type queries of op results.

Conditions and axiom side conditions read types (`rank(x)`, `size(w, 0)`, `sum(x)`), and a
proof often needs such a fact about a term built by an axiom, e.g. that
`rank(linear(x, w)) = rank(x)` or that partitioning dim d by k multiplies `shard(., d)` by k.
Each fact is a quantified equation triggered by the query of an op application, and holds
wherever the application is well-typed (as the dialect's type inference computes it).
"""

from __future__ import annotations

from collections.abc import Callable

import z3

from unityc.dialects import pcg
from unityc.graph import op_class
from unityc.rewrites.z3_encoding import FuncKey, Symbols, sort_named

SHAPE_KEEPING = {"pcg.softmax", "pcg.layer_norm", "pcg.rms_norm", "pcg.gated_activation", "pcg.batch_norm"}
SHAPE_KEEPING.add("parallel.sum_concat")
SHAPE_KEEPING |= {
    f"parallel.{n}"
    for n in ("partition", "combine", "replicate", "reduce", "all_reduce", "reduce_scatter", "all_gather")
}
SHAPE_KEEPING.add("parallel.all_to_all")
DEGREE_KEEPING = {"pcg.softmax"}
TYPE_KEEPING = {"pcg.softmax"}


def general_facts(symbols: Symbols) -> list[z3.BoolRef]:
    """Ranks are non-negative, sizes and degrees positive, for every tensor."""
    q = symbols.queries
    t = z3.Const("_t", symbols.tensor)
    i = z3.Int("_i")
    facts = [
        z3.ForAll([t], q["rank"](t) >= 0, patterns=[q["rank"](t)]),
        z3.ForAll([t], q["sum"](t) >= 1, patterns=[q["sum"](t)]),
        z3.ForAll([t], q["copy"](t) >= 1, patterns=[q["copy"](t)]),
        z3.ForAll([t, i], q["size"](t, i) >= 1, patterns=[q["size"](t, i)]),
        z3.ForAll([t, i], q["shard"](t, i) >= 1, patterns=[q["shard"](t, i)]),
    ]
    return facts


def key_facts(key: FuncKey, symbols: Symbols) -> list[z3.BoolRef]:
    """The query facts of one function symbol (none for ops not described here)."""
    tensors = [z3.Const(f"_x{n}", symbols.tensor) for n in range(sum(key.operands))]
    attrs: dict[str, list[z3.ExprRef]] = {}
    values: list[z3.ExprRef] = []
    for prop, sort, count in key.attrs:
        if sort == "absent":
            continue
        attrs[prop] = [z3.Const(f"_{prop}{n}", sort_named(sort)) for n in range(count)]
        values += attrs[prop]
    result = symbols.func(key)(*tensors, *values)
    i = z3.Int("_i")
    bound = [*tensors, *values]
    q = symbols.queries
    facts: list[z3.BoolRef] = []

    def fact(query: str, value: Callable[[], z3.ExprRef], indexed: bool = False) -> None:
        lhs = q[query](result, i) if indexed else q[query](result)
        variables = [*bound, i] if indexed else bound
        facts.append(z3.ForAll(variables, lhs == value(), patterns=[lhs]))

    x = tensors[0] if tensors else None
    op = key.op
    if x is None:
        return facts
    cls = op_class(op)
    unary = issubclass(cls, pcg.UnaryOp)
    if unary or op in SHAPE_KEEPING:
        fact("rank", lambda: q["rank"](x))
        fact("size", lambda: q["size"](x, i), indexed=True)
    if unary or op in DEGREE_KEEPING:
        fact("shard", lambda: q["shard"](x, i), indexed=True)
        fact("sum", lambda: q["sum"](x))
        fact("copy", lambda: q["copy"](x))
    if (unary and op != "pcg.cast") or op in TYPE_KEEPING:
        fact("type", lambda: q["type"](x))
    if op.startswith("parallel."):
        _parallel_facts(op, x, attrs, i, fact, q, symbols)
    else:
        _pcg_facts(key, tensors, attrs, i, fact, q)
    return facts


def _parallel_facts(
    op: str, x: z3.ExprRef, attrs: dict, i: z3.ArithRef, fact: Callable, q: dict, symbols: Symbols
) -> None:
    # Degrees multiply and divide by a symbolic degree: nonlinear, so uninterpreted here (Z3
    # would otherwise search nonlinear models until it times out on every unprovable rule).
    times, over = symbols.imul, symbols.idiv
    k = attrs["degree"][0] if "degree" in attrs else z3.IntVal(2)
    shard, sum_, copy = q["shard"](x, i), q["sum"](x), q["copy"](x)
    if op == "parallel.sum_concat":
        fact("shard", lambda: shard, indexed=True)
        fact("sum", lambda: 2 * sum_)
        fact("copy", lambda: copy)
        return
    dim = attrs.get("dim", attrs.get("src", [None]))[0]
    grow = {"parallel.partition", "parallel.reduce_scatter"}
    shrink = {"parallel.combine", "parallel.all_gather"}
    if op in grow:
        fact("shard", lambda: z3.If(i == dim, times(shard, k), shard), indexed=True)
    elif op in shrink:
        fact("shard", lambda: z3.If(i == dim, over(shard, k), shard), indexed=True)
    elif op == "parallel.all_to_all":
        dst = attrs["dst"][0]
        fact(
            "shard",
            lambda: z3.If(i == dim, over(shard, k), z3.If(i == dst, times(shard, k), shard)),
            indexed=True,
        )
    else:
        fact("shard", lambda: shard, indexed=True)
    reduces = {"parallel.reduce", "parallel.all_reduce", "parallel.reduce_scatter"}
    copies = {"parallel.replicate", "parallel.all_reduce", "parallel.all_gather"}
    fact("sum", lambda: over(sum_, k) if op in reduces else sum_)
    fact("copy", lambda: times(copy, k) if op in copies else copy)


def _pcg_facts(
    key: FuncKey, tensors: list[z3.ExprRef], attrs: dict, i: z3.ArithRef, fact: Callable, q: dict
) -> None:
    op, x = key.op, tensors[0]
    rank, size = q["rank"], q["size"]
    if op in ("pcg.linear", "pcg.attention", "pcg.batch_matmul", "pcg.concat", "pcg.split", "pcg.transpose"):
        fact("rank", lambda: rank(x))
    if op == "pcg.linear":
        w = tensors[1]
        fact("size", lambda: z3.If(i == rank(x) - 1, size(w, 0), size(x, i)), indexed=True)
    elif op == "pcg.matmul":
        b = tensors[1]
        fact("rank", lambda: z3.IntVal(2))
        fact("size", lambda: z3.If(i == 0, size(x, 0), size(b, 1)), indexed=True)
    elif op == "pcg.batch_matmul":
        b = tensors[1]
        fact("size", lambda: z3.If(i == rank(x) - 1, size(b, i), size(x, i)), indexed=True)
    elif op == "pcg.attention":
        fact("size", lambda: size(x, i), indexed=True)
    elif op == "pcg.concat":
        d = attrs["dim"][0]
        total = z3.Sum([size(t, d) for t in tensors])
        fact("size", lambda: z3.If(i == d, total, size(x, i)), indexed=True)
    elif op == "pcg.split":
        d, sizes = attrs["dim"][0], attrs["sizes"]
        if key.result < len(sizes):
            fact("size", lambda: z3.If(i == d, sizes[key.result], size(x, i)), indexed=True)
    elif op == "pcg.transpose":
        perm = attrs["perm"]
        fact("size", lambda: _chain(i, [size(x, p) for p in perm]), indexed=True)
    elif op == "pcg.reshape":
        shape = attrs["shape"]
        fact("rank", lambda: z3.IntVal(len(shape)))
        fact("size", lambda: _chain(i, shape), indexed=True)
    elif op in ("pcg.add", "pcg.sub", "pcg.mul", "pcg.div"):
        b = tensors[1]
        fact("rank", lambda: z3.If(rank(x) >= rank(b), rank(x), rank(b)))


def _chain(i: z3.ArithRef, values: list[z3.ExprRef]) -> z3.ExprRef:
    """values[i] as nested ifs (the last value for any other i)."""
    out = values[-1] if values else z3.IntVal(1)
    for n in range(len(values) - 2, -1, -1):
        out = z3.If(i == n, values[n], out)
    return out
