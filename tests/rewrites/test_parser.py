"""The rule language parser: ASTs, located errors, canonical printing that parses back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import f32

from unityc.dialects.pcg_types import TensorType
from unityc.rewrites.parser import (
    RuleSyntaxError,
    format_axiom,
    format_rule,
    load_axioms,
    load_library,
    parse_rules,
)
from unityc.rewrites.printer import format_expr
from unityc.rewrites.terms import App, AttrVar, BinOp, Cond, Domain, Expr, ListExpr, Lit, Query, Var

SPEC_EXAMPLES = """
rule relu_partition "ReLU is partitionable on any dim":
    relu(x) => combine[dim=d, degree=k](relu(partition[dim=d, degree=k](x)))
    where d: dim(x), k: degree
axiom matmul_reduce:
    matmul(parallel.reduce[degree=k](x), y) = parallel.reduce[degree=k](matmul(x, replicate[degree=k](y)))
rule merge_linears: linear(x, w1), linear(x, w2) => y.0, y.1
    let y = split[dim=-1, sizes=[size(w1, 0), size(w2, 0)]](linear(x, concat[dim=0](w1, w2)))
"""


def one_rule(text: str):
    (rule,) = parse_rules(text, "t.rules").rules
    return rule


def test_spec_examples_parse_to_the_expected_ast() -> None:
    parsed = parse_rules(SPEC_EXAMPLES, "spec.rules")
    relu, merge = parsed.rules
    (axiom,) = parsed.axioms
    x = Var("x")
    d, k = AttrVar("d"), AttrVar("k")
    partition = App("parallel.partition", (x,), (("dim", d), ("degree", k)))
    assert relu.source == (App("pcg.relu", (x,)),)
    assert relu.target == (
        App("parallel.combine", (App("pcg.relu", (partition,)),), (("dim", d), ("degree", k))),
    )
    assert relu.params == (("d", Domain("dim", x)), ("k", Domain("degree")))
    assert relu.doc == "ReLU is partitionable on any dim"
    assert relu.loc is not None and (relu.loc.line, relu.loc.column) == (2, 1)
    assert axiom.lhs.op == "pcg.matmul" and axiom.lhs.args[0].op == "parallel.reduce"  # type: ignore[union-attr]
    y0, y1 = merge.target
    assert isinstance(y0, App) and isinstance(y1, App)
    assert (y0.op, y0.result, y1.result) == ("pcg.split", 0, 1)
    assert y0.args == y1.args, "both outputs read one split (the let is substituted)"
    sizes = dict(y0.attrs)["sizes"]
    assert sizes == ListExpr((Query("size", Var("w1"), Lit(0)), Query("size", Var("w2"), Lit(0))))
    assert dict(y0.attrs)["dim"] == Lit(-1)


def test_properties_are_ordered_and_canonical() -> None:
    rule = one_rule(
        "rule r: split[sizes=[2, 2], dim=0](x).1"
        ' => gelu[tanh=false](cast[dtype="f32"](scalar_mul[scale=2](x)))'
    )
    (source,) = rule.source
    assert isinstance(source, App)
    assert source.attrs == (("dim", Lit(0)), ("sizes", Lit((2, 2))))
    gelu = rule.target[0]
    assert isinstance(gelu, App) and gelu.attrs == (), "a flag written =false is unset"
    cast = gelu.args[0]
    assert isinstance(cast, App) and cast.attrs == (("dtype", Lit(f32)),)
    scale = cast.args[0]
    assert isinstance(scale, App) and scale.attrs == (("scale", Lit(2.0)),)
    assert isinstance(dict(scale.attrs)["scale"].value, float)


def test_optional_operands_by_keyword_or_position() -> None:
    keyword = one_rule("rule r: linear(x, w, bias=b) => linear(x, w, b)")
    assert keyword.source == keyword.target
    assert keyword.source[0] == App("pcg.linear", (Var("x"), Var("w"), Var("b")))
    absent = one_rule("rule r: layer_norm[dims=1, eps=0.5](x, bias=b) => x")
    assert absent.source[0].args == (Var("x"), None, Var("b"))  # type: ignore[union-attr]
    variadic = one_rule("rule r: concat[dim=0](a, b, c) => a")
    assert len(variadic.source[0].args) == 3  # type: ignore[union-attr]


def test_chained_comparisons_expand_and_examples_parse() -> None:
    rule = one_rule(
        "rule r: softmax[dim=d](x) => softmax[dim=d](x) if 0 <= d < rank(x), 2 divides size(x, d)\n"
        "    example x: !pcg.tensor<4x6xf32, shard [2, 1]>, d = 1"
    )
    assert rule.conditions == (
        Cond("<=", Lit(0), AttrVar("d")),
        Cond("<", AttrVar("d"), Query("rank", Var("x"))),
        Cond("divides", Lit(2), Query("size", Var("x"), AttrVar("d"))),
    )
    assert rule.examples == (("x", TensorType([4, 6], f32, [2, 1])), ("d", 1))


def test_lets_can_build_on_each_other() -> None:
    rule = one_rule("rule r: relu(x) => b\n    let a = replicate[degree=2](x), b = relu(a)")
    assert rule.target == (App("pcg.relu", (App("parallel.replicate", (Var("x"),), (("degree", Lit(2)),)),)),)


ERRORS = [
    ("rule r: frob(x) => x", 1, 9, "unknown op 'frob'"),
    ("rule r: rellu(x) => x", 1, 9, "did you mean 'relu'"),
    ("rule r: reduce(x) => x", 1, 9, "'reduce' is ambiguous: write pcg.reduce or parallel.reduce"),
    ("rule r: relu(x, y) => x", 1, 9, "pcg.relu takes 1 operand (input), got 2"),
    ("rule r: linear(x) => x", 1, 9, "pcg.linear takes 2 to 3 operands"),
    ("rule r: linear(x, w, input=y) => x", 1, 22, "'input' is not an optional operand of pcg.linear"),
    ("rule r: relu(x, bias=y) => x", 1, 17, "it has none"),
    ("rule r: softmax[dims=1](x) => x", 1, 17, "pcg.softmax has no property 'dims' (properties: dim)"),
    ("rule r: softmax(x) => x", 1, 9, "pcg.softmax needs property 'dim'"),
    ("rule r: softmax[dim=1.5](x) => x", 1, 21, "takes an integer"),
    ("rule r: gelu[tanh=1](x) => x", 1, 19, "takes true or false"),
    ('rule r: cast[dtype="f99"](x) => x', 1, 20, "takes an element type"),
    ("rule r: relu(x) => y.0", 1, 20, "'y' is not a let name"),
    ("rule r: relu(x) => partition[dim=d, degree=2](x)", 1, 34, "parameter 'd' has no domain"),
    ("rule r: relu(x) => relu(z)", 1, 25, "tensor variable 'z' is not bound by the source"),
    ("rule r: relu(x) => relu(x) where d: dim(x)", 1, 34, "parameter 'd' is not used"),
    ("rule r: partition[dim=d, degree=2](x) => x where d: dim(x)", 1, 50, "'d' is bound by the source"),
    ("rule r: softmax[dim=d + 1](x) => x", 1, 21, "never bound there"),
    ("rule r: relu(x) => x, x", 1, 20, "the source has 1 outputs but the target has 2"),
    ("rule r: relu(x).1 => x", 1, 17, "pcg.relu has 1 result; .1 is none"),
    ("rule r: split[dim=0, sizes=[2, 2]](x).2 => x", 1, 39, "with 2 sizes has no result 2"),
    ("rule r: input(x) => x", 1, 9, "cannot appear in a term"),
    ("rule r: relu(x) => x if type(x) < 2", 1, 33, "type(t) may only be compared"),
    ("rule r: relu(x) => x if size(x) == 2", 1, 25, "size(tensor, dim) needs a dimension"),
    ("rule r: relu(x) => x\nrule r: relu(x) => x", 2, 6, "'r' is defined twice"),
    ("rule r: relu(x) => x\n  if rank(x) > 1\n  if rank(x) < 3", 3, 3, "a rule has one 'if' clause"),
    ("rule r: relu(x) => relu(x", 1, 25, "unexpected end of file"),
    ("rule r: relu(x) => relu(x) @", 1, 28, "unexpected character '@'"),
    ("rule r: relu(x) =>\n  relu(x) let", 2, 11, "unexpected end of file; expected a name"),
    (
        "axiom a: relu(x) =\n  x let y = x",
        2,
        5,
        "unexpected 'let'; expected 'axiom', 'if', 'rule', end of file",
    ),
    (
        "rule r: relu(x) => x example x: !pcg.tensor<4x3xf32, shard [2, 2]>",
        1,
        33,
        "shard degree 2 does not divide",
    ),
    ("rule r: relu(x) => x example z: !pcg.tensor<4xf32>", 1, 30, "'z', which is no tensor variable"),
    ("axiom a: relu(x) = relu(y)", 1, 25, "tensor variable 'y' occurs only on the right side"),
    ("axiom a: relu(x) = x if d > 0", 1, 25, "attribute variable 'd' occurs only in conditions"),
]


@pytest.mark.parametrize(("text", "line", "column", "message"), ERRORS, ids=[e[3][:40] for e in ERRORS])
def test_errors_are_located(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_rules(text, "bad.rules")
    error = info.value
    assert isinstance(error, ValueError)
    assert str(error).startswith(f"bad.rules:{line}:{column}: "), str(error)
    assert message in str(error)
    assert "\n" not in str(error), "one line"


def test_shipped_files_round_trip() -> None:
    axioms = load_axioms()
    rules = load_library()
    assert len(axioms) >= 40 and rules
    for axiom in axioms:
        assert parse_rules(format_axiom(axiom)).axioms == [axiom], format_axiom(axiom)
    for rule in rules:
        assert parse_rules(format_rule(rule)).rules == [rule], format_rule(rule)


def test_example_values_take_the_property_kind() -> None:
    rule = one_rule(
        "rule r: cast[dtype=t](scalar_mul[scale=s](x)) => cast[dtype=t](scalar_mul[scale=s](x))"
        ' example t = "f32", s = 2'
    )
    assert rule.examples == (("t", f32), ("s", 2.0))
    assert parse_rules(format_rule(rule)).rules == [rule]


def test_printing_uses_lets_for_shared_targets() -> None:
    rule = parse_rules(SPEC_EXAMPLES).rules[1]
    text = format_rule(rule)
    assert "=> t0.0, t0.1" in text and "let t0 = split[dim=-1" in text
    assert parse_rules(text).rules == [rule]


def test_round_trip_with_examples_params_and_docs() -> None:
    text = (
        'rule r "a doc with \\"quotes\\"": split[dim=d, sizes=[a, b]](x).1, relu(x) => relu(y), y\n'
        "    let y = split[dim=d, sizes=[a, b]](x).1\n"
        "    where n: range(-1, 3)\n"
        "    if n * 2 < a % 3 - (a - b)\n"
        "    example x: !pcg.tensor<4x4xf32, sum 2>, a = 2"
    )
    rule = one_rule(text)
    assert rule.doc == 'a doc with "quotes"'
    assert parse_rules(format_rule(rule)).rules == [rule]


# --- printing expressions: precedence and literals survive a round trip ------------------------

_LEAVES = st.one_of(
    st.integers(-50, 50).map(Lit),
    st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(Lit),
    st.sampled_from([AttrVar("a"), AttrVar("b")]),
    st.sampled_from([Query("rank", Var("x")), Query("size", Var("x"), AttrVar("a"))]),
)


def _binop(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.builds(BinOp, st.sampled_from(["+", "-", "*", "/", "%"]), children, children)


EXPRESSIONS = st.recursive(_LEAVES, _binop, max_leaves=8)


@settings(max_examples=200, deadline=None)
@given(EXPRESSIONS)
def test_expressions_print_and_parse_back(e: Expr) -> None:
    text = f"rule r: partition[dim=a, degree=b](x) => x if {format_expr(e)} == 0"
    (cond,) = one_rule(text).conditions
    assert cond.left == e, format_expr(e)
