"""Every registered pass, run on the staged plan of tests/filecheck/passes (two GPipe stages,
ZeRO-2 weights, recomputed ops), leaves a plan that is one (issue 28, first "Done when" line):
a rewrite pass keeps each surviving op's stage, ZeRO stage and recomputation (the lit test
plan_kept.mlir shows the ops each one builds), and the estimate after it prices the pipelined
plan; a search or baseline pass plans the model anew, and its plan verifies and is priced. The
pass list is the registry's (`unityc_passes` and xDSL's canonicalize), so a new pass fails here
until it is given a row. All in one process on a 20-op graph (~4 CPU s with the other structure tests)."""

from __future__ import annotations

import os

import pytest

from unityc.dialects.container import graph_function
from unityc.dialects.pipeline import check_pipeline, graph_ops
from unityc.dialects.plan import op_plan
from unityc.dialects.source import read_module
from unityc.tools.opt import main, unityc_passes

HERE = os.path.dirname(os.path.abspath(__file__))
STAGED = os.path.join(HERE, "..", "filecheck", "passes", "Inputs", "staged_plan.mlir")
RULES = os.path.join(HERE, "..", "search", "Inputs", "search.rules")
HETERO = os.path.join(HERE, "..", "..", "examples", "machines", "hetero_v100_m4.toml")

KEEPS = [
    "fuse-collectives",
    "canonicalize",
    "fold-scalar-mul",
    "fuse-attention",
    "fuse-norms",
    "apply-rules",
    "estimate",
]
"""Rewrite passes: the plan stays, op for op."""

REPLANS = {
    "unity-search": 'unity-search{machine="cpu:4" budget=1}',
    "data-parallel": 'data-parallel{machine="cpu:4"}',
    "megatron": 'megatron{machine="cpu:4"}',
    "megatron-lm": 'megatron-lm{machine="cpu:4"}',
    "sequential": 'sequential{machine="cpu:4" budget=1}',
    "exhaustive": f'exhaustive{{machine="cpu:2" rules="{RULES}"}}',
    "gpipe": 'gpipe{machine="cpu:4"}',
    "hetero-gpipe": f'hetero-gpipe{{machine="{HETERO}"}}',
    "zero": 'zero{machine="cpu:4" stage=3 recompute=true}',
    "galvatron": 'galvatron{machine="cpu:4"}',
    "pipedream": 'pipedream{machine="cpu:4"}',
}
"""Search and baseline passes: a new plan of the model the input's plan runs."""

REFUSES = {
    "spatial": ('spatial{machine="cpu:4"}', "no convolution to split"),
    "pad-images": ("pad-images{degree=3}", "no image input"),
}
"""Passes that do not apply to this model: a clear error, exit status 1."""


def test_every_registered_pass_has_a_row() -> None:
    registered = set(unityc_passes()) | {"canonicalize"}
    assert registered == set(KEEPS) | set(REPLANS) | set(REFUSES)


def opt(tmp_path, capsys, pipeline: str) -> tuple[int, str, str]:
    out = tmp_path / "out.mlir"
    rc = main([STAGED, "-p", pipeline, "-o", str(out)])
    err = capsys.readouterr().err
    return rc, out.read_text() if out.exists() else "", err


def plans(path: str) -> dict[str, tuple[str, int | None, int, bool]]:
    """Each named op's (name, stage, ZeRO stage, recomputed)."""
    out = {}
    for op in graph_ops(graph_function(read_module(path))):
        if op.results and op.results[0].name_hint:
            plan = op_plan(op)
            out[op.results[0].name_hint] = (op.name, plan.stage, plan.zero, plan.recompute)
    return out


@pytest.mark.parametrize("name", KEEPS)
def test_a_rewrite_pass_keeps_the_plan(name: str, tmp_path, capsys) -> None:
    spelled = f'{name}{{machine="cpu:4"}}' if name == "estimate" else name
    rc, _, err = opt(tmp_path, capsys, spelled)
    assert rc == 0, err
    before, after = plans(STAGED), plans(str(tmp_path / "out.mlir"))
    module = read_module(str(tmp_path / "out.mlir"))
    assert check_pipeline(graph_function(module)) is not None  # still two stages, every op staged
    assert all(op_plan(op).stage is not None for op in graph_ops(graph_function(module)))
    kept = [k for k in after if k in before and after[k][0] == before[k][0]]
    assert len(kept) >= len(before) // 2, (before, after)
    for key in kept:
        assert after[key] == before[key], key
    rc, _, err = opt(tmp_path, capsys, f'{spelled},estimate{{machine="cpu:4"}}')
    assert rc == 0 and "pipelined: 2 stages, gpipe, 2 micro-batches" in err, err


@pytest.mark.parametrize("name", sorted(REPLANS))
def test_a_search_pass_plans_anew_and_its_plan_is_priced(name: str, tmp_path, capsys) -> None:
    machine = HETERO if name == "hetero-gpipe" else "cpu:2" if name == "exhaustive" else "cpu:4"
    rc, text, err = opt(tmp_path, capsys, f'{REPLANS[name]},estimate{{machine="{machine}"}}')
    assert rc == 0, err
    module = read_module(str(tmp_path / "out.mlir"))
    pipelined = check_pipeline(graph_function(module)) is not None
    staged = [op_plan(op).stage is not None for op in graph_ops(graph_function(module))]
    assert all(staged) if pipelined else not any(staged), text
    assert "iteration time" in err, err


def test_a_pass_that_does_not_apply_says_so(tmp_path, capsys) -> None:
    for pipeline, words in REFUSES.values():
        rc, text, err = opt(tmp_path, capsys, pipeline)
        assert rc == 1 and words in err and "Traceback" not in err and not text, err


def test_pipedream_writes_a_plan_that_verifies(tmp_path, capsys) -> None:
    """Its DP ranks partitions with fewer micro-batches than stages (here 4 stages, 1 micro-batch):
    those run GPipe's schedule, which 1F1B's warm-up is then, as torch's 1F1B refuses them."""
    rc, _, err = opt(tmp_path, capsys, REPLANS["pipedream"])
    assert rc == 0, err
    check_pipeline(graph_function(read_module(str(tmp_path / "out.mlir"))))
