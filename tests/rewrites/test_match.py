"""Rules compiled into matchers over `Graph`: what binds, what blocks a match, and that applying
a rule keeps the interpreter's outputs."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from xdsl.context import Context
from xdsl.dialects.builtin import f32
from xdsl.utils.exceptions import PassFailedException

from unityc.dialects.pcg_types import TensorType
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, Ref, from_module
from unityc.graph.evaluate import evaluate
from unityc.interpreter import assemble, run_graph
from unityc.passes.apply_rules import ApplyRulesPass
from unityc.rewrites.match import CompiledRule, GraphIndex, compile_rules, first_rewrite, rewrites
from unityc.rewrites.parser import load_library
from unityc.rewrites.terms import (
    App,
    AttrVar,
    BinOp,
    Cond,
    Domain,
    Expr,
    ListExpr,
    Lit,
    Query,
    Rule,
    Term,
    Var,
)

x, y, w, w1, w2 = Var("x"), Var("y"), Var("w"), Var("w1"), Var("w2")
d, k = AttrVar("d"), AttrVar("k")


def expr(v: Any) -> Expr:
    return v if isinstance(v, Lit | AttrVar | ListExpr | BinOp | Query) else Lit(v)


def op(name: str, *args: Term | None, result: int = 0, **attrs: Any) -> App:
    full = name if "." in name else f"pcg.{name}"
    return App(full, args, tuple((n, expr(v)) for n, v in attrs.items()), result)


def par(name: str, *args: Term, **attrs: Any) -> App:
    return op(f"parallel.{name}", *args, **attrs)


def rank_minus_1(t: Term) -> Expr:
    return BinOp("-", Query("rank", t), Lit(1))


DIM_DEGREE = (("d", Domain("dim", x)), ("k", Domain("degree")))
DEGREE = (("k", Domain("degree")),)

RELU_PARTITION = Rule(
    "relu_partition",
    (op("relu", x),),
    (par("combine", op("relu", par("partition", x, dim=d, degree=k)), dim=d, degree=k),),
    params=DIM_DEGREE,
)
COLUMN_LINEAR = Rule(
    "linear_column",
    (op("linear", x, w),),
    (
        par(
            "combine",
            op("linear", par("replicate", x, degree=k), par("partition", w, dim=0, degree=k)),
            dim=rank_minus_1(x),
            degree=k,
        ),
    ),
    params=DEGREE,
)
ROW_LINEAR = Rule(
    "linear_row",
    (op("linear", x, w),),
    (
        par(
            "reduce",
            op(
                "linear",
                par("partition", x, dim=rank_minus_1(x), degree=k),
                par("partition", w, dim=1, degree=k),
            ),
            degree=k,
        ),
    ),
    params=DEGREE,
)
DATA_LINEAR = Rule(
    "linear_data",
    (op("linear", x, w),),
    (
        par(
            "combine",
            op("linear", par("partition", x, dim=0, degree=k), par("replicate", w, degree=k)),
            dim=0,
            degree=k,
        ),
    ),
    params=DEGREE,
)
MERGED = op(
    "split",
    op("linear", x, op("concat", w1, w2, dim=0)),
    dim=-1,
    sizes=ListExpr((Query("size", w1, Lit(0)), Query("size", w2, Lit(0)))),
)
MERGE_LINEARS = Rule(
    "merge_linears",
    (op("linear", x, w1), op("linear", x, w2)),
    (MERGED, op("split", *MERGED.args, result=1, **{n: e for n, e in MERGED.attrs})),
)
RELU_IDEMPOTENT = Rule("relu_idempotent", (op("relu", op("relu", x)),), (op("relu", x),))


def t(*shape: int, shard: list[int] | None = None) -> TensorType:
    return TensorType(list(shape), f32, shard, 1, 1)


def graph_with(outputs: list[Ref], g: Graph) -> Graph:
    g.outputs = tuple(outputs)
    return g


def match_count(rule: Rule, g: Graph, degrees: tuple[int, ...] = (2,)) -> int:
    return sum(1 for _ in CompiledRule(rule).matches(g, degrees))


def assert_same_outputs(before: Graph, after: Graph) -> None:
    a, b = evaluate(before), evaluate(after)
    assert len(before.outputs) == len(after.outputs)
    for r1, r2 in zip(before.outputs, after.outputs, strict=True):
        assert before.type_of(r1) == after.type_of(r2)
        torch.testing.assert_close(assemble(a[r1]), assemble(b[r2]), rtol=1e-9, atol=1e-9)


def assert_no_dead_nodes(g: Graph) -> None:
    assert set(g.nodes) == g.live()


# --- binding ------------------------------------------------------------------------------


def test_a_variable_used_twice_binds_one_tensor() -> None:
    g = Graph()
    a, b = g.add_source("pcg.input", "a", t(4)), g.add_source("pcg.input", "b", t(4))
    (same,) = g.add("pcg.add", [a, a])
    (different,) = g.add("pcg.add", [a, b])
    graph_with([same, different], g)
    double = Rule("double", (op("add", x, x),), (op("scalar_mul", x, scale=2.0),))
    (m,) = CompiledRule(double).matches(g)
    assert m.roots == (same,) and dict(m.tensors) == {"x": a}
    new = CompiledRule(double).apply(g, m)
    assert new is not None
    assert_same_outputs(g, new)


def test_literal_properties_must_be_equal_and_unwritten_ones_unset() -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(4, 6))
    (s0,) = g.add("pcg.softmax", [a], dim=0)
    (s1,) = g.add("pcg.softmax", [a], dim=1)
    (exact,) = g.add("pcg.gelu", [a])
    (approx,) = g.add("pcg.gelu", [a], tanh=True)
    graph_with([s0, s1, exact, approx], g)
    softmax1 = Rule("s", (op("softmax", x, dim=1),), (op("softmax", x, dim=1),))
    assert [m.roots for m in CompiledRule(softmax1).matches(g)] == [(s1,)]
    plain = Rule("g", (op("gelu", x),), (op("gelu", x),))
    assert [m.roots for m in CompiledRule(plain).matches(g)] == [(exact,)]
    tanh = Rule("g", (op("gelu", x, tanh=True),), (op("gelu", x, tanh=True),))
    assert [m.roots for m in CompiledRule(tanh).matches(g)] == [(approx,)]
    unset_flag = Rule("g", (op("gelu", x, tanh=False),), (op("gelu", x),))
    assert [m.roots for m in CompiledRule(unset_flag).matches(g)] == [(exact,)]


def test_an_attribute_variable_binds_once() -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(2, 3, 4))
    (p,) = g.add("pcg.transpose", [a], perm=(1, 0, 2))
    (same,) = g.add("pcg.transpose", [p], perm=(1, 0, 2))
    (q,) = g.add("pcg.transpose", [a], perm=(0, 2, 1))
    (other,) = g.add("pcg.transpose", [q], perm=(1, 0, 2))
    graph_with([same, other], g)
    twice = Rule("twice", (op("transpose", op("transpose", x, perm=AttrVar("p")), perm=AttrVar("p")),), (x,))
    (m,) = CompiledRule(twice).matches(g)
    assert m.roots == (same,) and dict(m.env) == {"p": (1, 0, 2)}


def test_an_attribute_variable_binds_an_unset_optional_property() -> None:
    g = Graph()
    x_ = g.add_source("pcg.input", "x", t(2, 4, 8))
    w_ = g.add_source("pcg.weight", "w", t(8, 8))
    (plain,) = g.add("pcg.attention", [x_, x_, x_, w_, w_, w_, w_, *[None] * 9], heads=2)
    (dropped,) = g.add("pcg.attention", [x_, x_, x_, w_, w_, w_, w_, *[None] * 9], heads=2, dropout=0.1)
    graph_with([plain, dropped], g)
    operands = [Var(n) for n in ("q", "k", "v", "wq", "wk", "wv", "wo")]
    rule = Rule(
        "a",
        (op("attention", *operands, heads=AttrVar("h"), dropout=AttrVar("p")),),
        (op("attention", *operands, heads=AttrVar("h"), dropout=AttrVar("p")),),
    )
    found = {m.roots: dict(m.env) for m in CompiledRule(rule).matches(g)}
    assert found == {(plain,): {"h": 2, "p": None}, (dropped,): {"h": 2, "p": 0.1}}
    without = Rule(
        "b",
        (op("attention", *operands, heads=AttrVar("h")),),
        (op("attention", *operands, heads=AttrVar("h")),),
    )
    assert [m.roots for m in CompiledRule(without).matches(g)] == [(plain,)]


def test_a_list_pattern_binds_its_items_and_conditions_filter() -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(6, 2))
    even = g.add("pcg.split", [a], dim=0, sizes=(3, 3))
    uneven = g.add("pcg.split", [a], dim=0, sizes=(2, 4))
    graph_with([*even, *uneven], g)
    sizes = ListExpr((AttrVar("m"), AttrVar("n")))
    halves = Rule(
        "halves",
        (op("split", x, dim=0, sizes=sizes),),
        (op("split", x, dim=0, sizes=sizes),),
        conditions=(Cond("==", AttrVar("m"), AttrVar("n")),),
    )
    (m,) = CompiledRule(halves).matches(g)
    assert m.roots == (even[0],) and dict(m.env) == {"m": 3, "n": 3}
    by_size = Rule(
        "big",
        (op("split", x, dim=0, sizes=sizes),),
        (op("split", x, dim=0, sizes=sizes),),
        conditions=(Cond(">", Query("size", op("split", x, dim=0, sizes=sizes), Lit(0)), Lit(2)),),
    )
    assert [m.roots for m in CompiledRule(by_size).matches(g)] == [(even[0],)]


# --- multi-output rules -------------------------------------------------------------------


def shared_input_graph() -> tuple[Graph, Ref, Ref]:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(4, 8))
    wa, wb = g.add_source("pcg.weight", "wa", t(6, 8)), g.add_source("pcg.weight", "wb", t(10, 8))
    (ha,) = g.add("pcg.linear", [a, wa, None])
    (hb,) = g.add("pcg.linear", [a, wb, None])
    (r,) = g.add("pcg.relu", [ha])
    return graph_with([r, hb], g), ha, hb


def test_multi_output_rule_matches_linears_sharing_an_input() -> None:
    g, ha, hb = shared_input_graph()
    found = list(rewrites(g, compile_rules([MERGE_LINEARS])))
    assert sorted(m.roots for m, _ in found) == sorted([(ha, hb), (hb, ha)])
    for _, new in found:
        assert new.op_counts()["pcg.linear"] == 1 and new.op_counts()["pcg.split"] == 1
        assert_no_dead_nodes(new)
        assert_same_outputs(g, new)


def test_multi_output_rule_needs_the_shared_variable() -> None:
    g = Graph()
    a, b = g.add_source("pcg.input", "a", t(4, 8)), g.add_source("pcg.input", "b", t(4, 8))
    wa, wb = g.add_source("pcg.weight", "wa", t(6, 8)), g.add_source("pcg.weight", "wb", t(6, 8))
    (ha,) = g.add("pcg.linear", [a, wa, None])
    (hb,) = g.add("pcg.linear", [b, wb, None])
    graph_with([ha, hb], g)
    assert match_count(MERGE_LINEARS, g) == 0


def test_a_match_that_would_create_a_cycle_is_rejected() -> None:
    # relu(a), relu(b) => split(relu(concat(a, b))): with b = relu(a) the target would read
    # its own output.
    g = Graph()
    a = g.add_source("pcg.input", "a", t(4, 2))
    (r1,) = g.add("pcg.relu", [a])
    (r2,) = g.add("pcg.relu", [r1])
    graph_with([r1, r2], g)
    joined = op(
        "split",
        op("relu", op("concat", x, y, dim=0)),
        dim=0,
        sizes=ListExpr((Query("size", x, Lit(0)), Query("size", y, Lit(0)))),
    )
    rule = Rule(
        "relu_concat",
        (op("relu", x), op("relu", y)),
        (joined, op("split", *joined.args, result=1, **dict(joined.attrs))),
    )
    assert match_count(rule, g) == 0
    c = g.add_source("pcg.input", "c", t(4, 2))
    (r3,) = g.add("pcg.relu", [c])
    graph_with([r1, r2, r3], g)
    pairs = {m.roots for m in CompiledRule(rule).matches(g)}
    assert pairs == {(r1, r3), (r3, r1), (r2, r3), (r3, r2)}


# --- TASO's rule: only outputs may be read from outside ----------------------------------


def test_an_inner_node_with_an_outside_user_blocks_the_match() -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(4))
    (inner,) = g.add("pcg.relu", [a])
    (outer,) = g.add("pcg.relu", [inner])
    (other,) = g.add("pcg.exp", [inner])
    graph_with([outer, other], g)
    assert match_count(RELU_IDEMPOTENT, g) == 0
    graph_with([outer], g)
    del g.nodes[other[0]]
    (m,) = CompiledRule(RELU_IDEMPOTENT).matches(g)
    new = CompiledRule(RELU_IDEMPOTENT).apply(g, m)
    assert new is not None and new.op_counts()["pcg.relu"] == 1
    assert_no_dead_nodes(new)
    assert_same_outputs(g, new)


def test_an_inner_node_that_is_a_graph_output_blocks_the_match() -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(4))
    (inner,) = g.add("pcg.relu", [a])
    (outer,) = g.add("pcg.relu", [inner])
    graph_with([outer, inner], g)
    assert match_count(RELU_IDEMPOTENT, g) == 0


# --- parameters and ill-typed targets -----------------------------------------------------


def test_parameters_enumerate_dims_and_degrees() -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(4, 6))
    (r,) = g.add("pcg.relu", [a])
    graph_with([r], g)
    rule = CompiledRule(RELU_PARTITION)
    params = [dict(m.params) for m in rule.matches(g, degrees=(2, 3))]
    assert params == [{"d": d_, "k": k_} for d_ in (0, 1) for k_ in (2, 3)]
    # 4 does not split into 3 shards: that target is ill-typed, so three rewrites remain
    applied = [dict(m.params) for m, _ in rewrites(g, [rule], degrees=(2, 3))]
    assert {"d": 0, "k": 3} not in applied and len(applied) == 3
    fixed = [dict(m.params) for m in rule.matches(g, degrees=(2,), fixed={"d": 1, "k": 3})]
    assert fixed == [{"d": 1, "k": 3}]


def test_ill_typed_targets_are_rejected() -> None:
    g = Graph()
    a = g.add_source("pcg.input", "a", t(4, 6))
    (r,) = g.add("pcg.relu", [a])
    graph_with([r], g)
    wrong_type = Rule("sharded", (op("relu", x),), (op("relu", par("partition", x, dim=0, degree=2)),))
    (m,) = CompiledRule(wrong_type).matches(g)
    assert CompiledRule(wrong_type).apply(g, m) is None  # the output would be sharded
    bad_form = Rule("bad", (op("relu", x),), (op("relu", par("combine", x, dim=0, degree=2)),))
    (m,) = CompiledRule(bad_form).matches(g)
    assert CompiledRule(bad_form).apply(g, m) is None  # x is not sharded: combine does not apply


def test_a_rule_must_name_known_ops_and_properties() -> None:
    with pytest.raises(ValueError, match=r"unknown op 'pcg\.frobnicate'"):
        CompiledRule(Rule("r", (op("frobnicate", x),), (x,)))
    with pytest.raises(ValueError, match="no property 'axis'"):
        CompiledRule(Rule("r", (op("softmax", x, axis=0),), (x,)))
    with pytest.raises(ValueError, match="source output must be an op"):
        CompiledRule(Rule("r", (x,), (op("relu", x),)))


# --- applying keeps the interpreter's outputs on zoo graphs ------------------------------


@cache
def zoo(name: str) -> Graph:
    return from_module(import_model(ModelSpec(name, "small")))


ATTENTION_HEADS = Rule(
    "attention_heads",
    (
        op(
            "attention",
            *(Var(n) for n in ("q", "k", "v", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "bo")),
            None,
            heads=AttrVar("h"),
            dropout=AttrVar("p"),
        ),
    ),
    (
        par(
            "reduce",
            op(
                "attention",
                *(par("replicate", Var(n), degree=k) for n in ("q", "k", "v")),
                *(par("partition", Var(n), dim=0, degree=k) for n in ("wq", "wk", "wv")),
                par("partition", Var("wo"), dim=1, degree=k),
                *(par("partition", Var(n), dim=0, degree=k) for n in ("bq", "bk", "bv")),
                par("replicate", Var("bo"), degree=k),
                None,
                heads=AttrVar("h"),
                dropout=AttrVar("p"),
            ),
            degree=k,
        ),
    ),
    conditions=(Cond("divides", k, AttrVar("h")),),
    params=DEGREE,
)

ZOO_RULES = [RELU_PARTITION, COLUMN_LINEAR, ROW_LINEAR, DATA_LINEAR, ATTENTION_HEADS]


@pytest.mark.parametrize("model", ["mlp", "bert"])
def test_rewrites_keep_the_outputs_of_zoo_graphs(model: str) -> None:
    g = zoo(model)
    compiled = compile_rules(ZOO_RULES)
    per_rule: dict[str, int] = {}
    checked = 0
    for m, new in rewrites(g, compiled, degrees=(2,)):
        per_rule[m.rule] = per_rule.get(m.rule, 0) + 1
        if per_rule[m.rule] > 2:  # the interpreter is slow: check the first two of each rule
            continue
        assert_no_dead_nodes(new)
        assert_same_outputs(g, new)
        checked += 1
    expected = {
        "mlp": {"relu_partition", "linear_column", "linear_row", "linear_data"},
        "bert": {"attention_heads"},
    }
    assert expected[model] <= set(per_rule)
    assert checked >= len(expected[model])


@pytest.mark.parametrize("model", ["mlp", "bert", "dlrm"])
def test_library_rewrites_keep_the_outputs_of_zoo_graphs(model: str) -> None:
    g = zoo(model)
    checked: set[str] = set()
    for m, new in rewrites(g, compile_rules(load_library()), degrees=(2,)):
        if m.rule in checked:  # the first rewrite of each rule that applies
            continue
        checked.add(m.rule)
        assert_no_dead_nodes(new)
        assert_same_outputs(g, new)
    assert len(checked) >= 3


def test_a_chain_of_first_rewrites_keeps_the_outputs() -> None:
    g = zoo("mlp")
    compiled = compile_rules([COLUMN_LINEAR, ROW_LINEAR, RELU_PARTITION])
    current = g
    for _ in range(3):
        found = first_rewrite(current, compiled, degrees=(2,))
        assert found is not None
        _, _, current = found
    assert_no_dead_nodes(current)
    assert_same_outputs(g, current)


def test_matches_come_in_program_order() -> None:
    g = zoo("mlp")
    index = GraphIndex(g)
    positions = [m.position for m in CompiledRule(COLUMN_LINEAR).matches(g, (2,), index)]
    assert positions == sorted(positions) and len(positions) == g.op_counts()["pcg.linear"]


# --- the xDSL pass ------------------------------------------------------------------------

RULES_FILE = Path(__file__).parent.parent / "filecheck" / "rules" / "Inputs" / "parallel.rules"


def test_apply_rules_pass_keeps_the_module_valid_and_its_loss() -> None:
    module = import_model(ModelSpec("mlp", "small"))
    before, _ = run_graph(module, seed=3, float_dtype=torch.float64)
    rewritten = module.clone()
    names = "linear_column,linear_row,relu_partition"
    ApplyRulesPass(file=str(RULES_FILE), names=names, limit=4).apply(Context(), rewritten)
    rewritten.verify()
    counts = from_module(rewritten).op_counts()
    assert counts["parallel.combine"] + counts.get("parallel.reduce", 0) == 4
    after, _ = run_graph(rewritten, seed=3, float_dtype=torch.float64)
    torch.testing.assert_close(assemble(after[0]), assemble(before[0]), rtol=1e-9, atol=1e-9)


def test_apply_rules_pass_refuses_a_wrong_rule(tmp_path: Path) -> None:
    rules = tmp_path / "wrong.rules"
    rules.write_text("rule exp_is_relu: exp(x) => relu(x)\n")
    module = import_model(ModelSpec("mlp", "small"))
    with pytest.raises(PassFailedException, match=r"rule 'exp_is_relu' \(.*wrong.rules:1:1\) is refuted"):
        ApplyRulesPass(file=str(rules)).apply(Context(), module)
