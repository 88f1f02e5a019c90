"""Shared by the cost-model tests: the hand-computable two-node machine, MLIR parsing, and a
generator of small mapped MLP plans."""

from __future__ import annotations

import os

from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.parser import Parser

from unityc.cost.estimate import Estimate, estimate_module
from unityc.dialects.parallel import PARALLEL
from unityc.dialects.pcg import PCG
from unityc.machine import Machine, load_spec_file

TWO_NODES_SPEC = os.path.join(os.path.dirname(__file__), "..", "machine", "two_nodes.toml")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def two_nodes() -> Machine:
    """2 nodes x 2 devices; 1 TFLOP/s f32, 100 GB/s memory; links 100 GB/s + 1 us within a
    node, 10 GB/s + 5 us between nodes; efficiency 1, no kernel latency."""
    return load_spec_file(TWO_NODES_SPEC)


def parse(text: str) -> ModuleOp:
    ctx = Context()
    for dialect in (Builtin, Func, PCG, PARALLEL):
        ctx.load_dialect(dialect)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module


def estimate(text: str, machine: Machine | None = None, **options: str) -> Estimate:
    return estimate_module(parse(text), machine or two_nodes(), **options)


def graph(body: str, result: str = "!pcg.tensor<f32>", returned: str = "%loss") -> str:
    results = f"({result})" if "," in result.replace(", s", "").replace(", c", "") else result
    return f"func.func @main() -> {results} {{\n{body}\n  func.return {returned} : {result}\n}}\n"


def view(dims: list[str], start: int = 0) -> str:
    return (
        f"{{view = #pcg.view<start {start}, [{', '.join(dims)}]>}}"
        if dims
        else f"{{view = #pcg.view<start {start}>}}"
    )


def mlp_plan(batch: int, inp: int, hidden: int, classes: int, a: int, b: int, inter: bool) -> str:
    """A 2-layer MLP, data parallel by `a` and tensor parallel by `b` (each 1 or 2), placed on
    the two-node machine: with two parallel dims, data across nodes and tensor within; with
    one, within a node unless `inter`."""

    def v(roles: str) -> str:
        """Data-parallel dims ('a') go across nodes when there are two parallel dims or when
        `inter`; tensor-parallel dims ('b') within a node unless they are alone and `inter`."""
        dims = []
        for role in roles:
            if role == "a" and a > 1:
                dims.append("inter 1" if inter or b > 1 else "intra 1")
            elif role == "b" and b > 1:
                dims.append("inter 1" if inter and a == 1 else "intra 1")
        return view(dims)

    def t(
        shape: tuple[int, ...], elt: str = "f32", shard: tuple[int, ...] = (), s: int = 1, c: int = 1
    ) -> str:
        parts = ["x".join(map(str, shape)) + "x" + elt if shape else elt]
        if shard and any(k > 1 for k in shard):
            parts.append(f"shard [{', '.join(map(str, shard))}]")
        if s > 1:
            parts.append(f"sum {s}")
        if c > 1:
            parts.append(f"copy {c}")
        return f"!pcg.tensor<{', '.join(parts)}>"

    lines: list[str] = []

    def op(text: str, roles: str) -> None:
        lines.append(f"  {text.replace('VIEW', v(roles))}")

    x, lab, w1, w2 = t((batch, inp)), t((batch,), "i64"), t((hidden, inp)), t((classes, hidden))
    op(f'%x = pcg.input key "x" VIEW : {x}', "")
    op(f'%label = pcg.input key "label" VIEW : {lab}', "")
    op(f'%w1 = pcg.weight key "w1" VIEW : {w1}', "")
    op(f'%w2 = pcg.weight key "w2" VIEW : {w2}', "")
    xv, lv, w1v, w2v = "%x", "%label", "%w1", "%w2"
    if a > 1:
        xt, lt = t((batch, inp), shard=(a, 1)), t((batch,), "i64", shard=(a,))
        op(f"%xp = parallel.partition %x dim 0 degree {a} VIEW : {x} -> {xt}", "a")
        op(f"%lp = parallel.partition %label dim 0 degree {a} VIEW : {lab} -> {lt}", "a")
        x, lab, xv, lv = xt, lt, "%xp", "%lp"
    if b > 1:
        xt = t((batch, inp), shard=(a, 1), c=b)
        op(f"%xr = parallel.replicate {xv} degree {b} VIEW : {x} -> {xt}", "ab")
        x, xv = xt, "%xr"
        w1t, w2t = t((hidden, inp), shard=(b, 1)), t((classes, hidden), shard=(1, b))
        op(f"%w1p = parallel.partition %w1 dim 0 degree {b} VIEW : {w1} -> {w1t}", "b")
        op(f"%w2p = parallel.partition %w2 dim 1 degree {b} VIEW : {w2} -> {w2t}", "b")
        w1, w2, w1v, w2v = w1t, w2t, "%w1p", "%w2p"
    if a > 1:
        w1t, w2t = t((hidden, inp), shard=(b, 1), c=a), t((classes, hidden), shard=(1, b), c=a)
        op(f"%w1r = parallel.replicate {w1v} degree {a} VIEW : {w1} -> {w1t}", "ba")
        op(f"%w2r = parallel.replicate {w2v} degree {a} VIEW : {w2} -> {w2t}", "ba")
        w1, w2, w1v, w2v = w1t, w2t, "%w1r", "%w2r"
    h = t((batch, hidden), shard=(a, b))
    op(f"%h = pcg.linear {xv}, {w1v} VIEW : {x}, {w1} -> {h}", "ab")
    op(f"%r = pcg.relu %h VIEW : {h} -> {h}", "ab")
    partial = t((batch, classes), shard=(a, 1), s=b)
    op(f"%o = pcg.linear %r, {w2v} VIEW : {h}, {w2} -> {partial}", "ab")
    logits, ov = partial, "%o"
    if b > 1:
        logits = t((batch, classes), shard=(a, 1))
        op(f"%lg = parallel.reduce %o degree {b} VIEW : {partial} -> {logits}", "a")
        ov = "%lg"
    loss_t = t((), s=a)
    op(f'%l = pcg.cross_entropy {ov}, {lv} reduction "mean" VIEW : {logits}, {lab} -> {loss_t}', "a")
    if a > 1:
        op(f"%loss = parallel.reduce %l degree {a} VIEW : {loss_t} -> {t(())}", "")
    else:
        lines.append("  %loss = pcg.identity %l : !pcg.tensor<f32> -> !pcg.tensor<f32>")
    return graph("\n".join(lines))
