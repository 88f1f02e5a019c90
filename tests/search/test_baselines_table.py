"""The baselines are one table (`search.baselines.TABLE`: name, builder, rules, turn beside the
search): every row has its pass (`unityc-opt -p NAME`), every baseline pass a row, every pass
option a keyword its builder takes, and `--unity-search` prices every row in its turn."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest
from search_graphs import machine, mlp

from unityc.passes.baselines import BASELINE_PASSES
from unityc.passes.options import SearchOptions
from unityc.passes.unity_search import BESIDE_ORDER, SEARCHES
from unityc.search.baselines import AFTER, BASELINES, TABLE, baseline, run_baseline
from unityc.tools.search_cli import search_passes


def test_every_row_has_a_pass_and_every_pass_a_row() -> None:
    passes = search_passes()
    assert len(BASELINES) == len(TABLE) == len(set(BASELINES))
    assert [b for b in BASELINES if b not in passes] == []
    assert [p.name for p in BASELINE_PASSES if p.name not in BASELINES] == []


def test_pass_options_are_builder_keywords() -> None:
    shared = {f.name for f in fields(SearchOptions)}
    for cls in BASELINE_PASSES:
        own = {f.name for f in fields(cls)} - shared  # type: ignore[arg-type]
        takes = set(inspect.signature(baseline(cls.name).build).parameters) - {"r"}
        assert own == takes, cls.name


def test_turns() -> None:
    assert sorted(BESIDE_ORDER) == sorted(b.name for b in TABLE if b.turn is not AFTER)
    assert set(SEARCHES) == {b.name for b in TABLE if b.rules} == {"sequential", "exhaustive"}
    assert BESIDE_ORDER[0] == "zero" and BESIDE_ORDER[-1] == "data-parallel"
    with pytest.raises(ValueError, match=r"unknown baseline 'dp' \(known: data-parallel, megatron,"):
        baseline("dp")


def test_builder_reads_its_pass_options() -> None:
    graph, m = mlp(layers=2), machine("cpu:2")
    assert run_baseline("zero", graph, m, [], stage=2).note.endswith("ZeRO-2")
    with pytest.raises(ValueError, match="must be >= 0"):
        run_baseline("megatron-lm", graph, m, [], tensor=-1)
