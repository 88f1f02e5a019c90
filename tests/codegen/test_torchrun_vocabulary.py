"""Padded vocabularies under torchrun (`search/vocabulary.py`, issue 38): a tiny HF GPT-2 whose
1,001-token vocabulary no tensor degree divides trains exactly (`--check`: loss, outputs, every
gradient and updated weight against the unpadded single-device model, AdamW) under plans that
pad it, and its checkpoints move between padded and unpadded plans:

* 2 ranks: the Megatron plans of tensor 2 (table 1,002 rows, split by rows: a
  vocabulary-parallel lookup), the head replicated (the pass's choice at this size) and the head
  column-parallel with the vocabulary-parallel cross-entropy over its padded logits (the real
  columns gathered for the returned logits). The second saves after 2 steps; the first and the
  unpadded data-parallel plan resume it for steps 3-4 with equal losses, and the plain module
  loads it;
* 4 ranks, bf16-mixed: tensor 2 x pipeline 2 (1,002 rows), ZeRO-1, selective recomputation,
  sequence parallel (`megatron_lm.build`, the search's own builder) and tensor 4 x data 1
  (1,004 rows: the last shard holds 248 real rows and 3 of padding).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from test_torchrun import _sections
from torchrun import torchrun, write_program
from xdsl.dialects.builtin import StringAttr

from unityc.dialects.container import graph_function
from unityc.dialects.precision import BF16_MIXED, precision_attrs
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module, to_module
from unityc.machine.presets import preset
from unityc.models.spec import load_model
from unityc.runtime import checkpoint
from unityc.search.layout import SELECTIVE, Layout
from unityc.search.megatron_lm import build
from unityc.search.pipeline import plain_graph
from unityc.search.plans import Pricing, data_parallel_plan, megatron_plans

pytestmark = pytest.mark.torchrun

SPEC = ModelSpec("hf:GPT2Config", "small", 4, (("vocab", "1001"), ("layers", "2")))
LLAMA = ModelSpec("hf:LlamaConfig", "small", 4, (("vocab", "1001"), ("layers", "2")))
"""Grouped-query attention, rotary, RMS norms, SwiGLU, an untied head: padded alike."""
ARGS = ["--check", "--optimizer", "adamw"]


def _graph(precision: str = "fp32", spec: ModelSpec = SPEC) -> Graph:
    module = import_model(spec)
    if precision == "bf16":
        graph_function(module).attributes.update(precision_attrs(BF16_MIXED))
    return plain_graph(from_module(module))


def _write(plan: Graph, directory: Path, name: str, nproc: int) -> str:
    plan.module_attrs["unityc.machine"] = StringAttr(f"cpu:{nproc}")
    return str(write_program(to_module(plan), directory, name))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("vocabulary")
    saved = str(directory / "padded-checkpoint")
    graph, pricing = _graph(), Pricing(optimizer="adam")
    replicated, gathered = megatron_plans(graph, preset("cpu:2"), pricing)
    assert "gathered" in gathered.note and "gathered" not in replicated.note
    two = [
        ("gathered-head", gathered.graph, ["--steps", "2", "--save", saved]),
        ("replicated-head", replicated.graph, ["--steps", "4", "--resume", saved]),
        (
            "data-parallel",
            data_parallel_plan(graph, preset("cpu:2"), pricing).graph,
            ["--steps", "4", "--resume", saved],
        ),
    ]
    llama = megatron_plans(_graph(spec=LLAMA), preset("cpu:2"), pricing)
    two.append(
        ("llama-gathered-head", next(p for p in llama if "gathered" in p.note).graph, ["--steps", "2"])
    )
    bf16 = _graph("bf16")
    shapes = {
        "tp2-pp2-zero1-bf16": Layout(
            tensor=2, pipeline=2, microbatches=2, recompute=SELECTIVE, sequence=True, zero=1
        ),
        "tp4-bf16": Layout(tensor=4, microbatches=1),
    }
    four = [
        (n, build(bf16, preset("cpu:4"), s, pricing, "3-d").graph, ["--steps", "2"])
        for n, s in shapes.items()
    ]
    sections: dict[str, str] = {}
    for nproc, programs in ((2, two), (4, four)):
        entries = [
            {"name": n, "program": _write(p, directory, n, nproc), "args": [*ARGS, *a]}
            for n, p, a in programs
        ]
        manifest = directory / f"batch{nproc}.json"
        manifest.write_text(json.dumps(entries))
        run = torchrun("unityc.runtime.batch", nproc, str(manifest), cwd=directory)
        sections.update(_sections(run.output))
        for name, _, _ in programs:
            sections.setdefault(name, run.report())
    sections["checkpoint"] = saved
    sections["tp4 plan"] = (directory / "tp4-bf16.mlir").read_text()
    sections["gathered plan"] = (directory / "gathered-head.mlir").read_text()
    return sections


def _losses(section: str) -> dict[int, float]:
    return {int(s): float(loss) for s, loss in re.findall(r"^step (\d+): loss (\S+)", section, re.M)}


@pytest.mark.parametrize(
    "name",
    [
        "gathered-head",
        "replicated-head",
        "data-parallel",
        "llama-gathered-head",
        "tp2-pp2-zero1-bf16",
        "tp4-bf16",
    ],
)
def test_a_padded_vocabulary_trains_like_the_model(runs: dict[str, str], name: str) -> None:
    section = runs[name]
    assert section.endswith("exit 0") and "check passed" in section, section
    if name == "tp4-bf16":  # 1,004 rows in 4 shards of 251
        assert 'key "model.lm_head.weight[0:1001+3, :]"' in runs["tp4 plan"]


def test_the_padded_plan_splits_the_table_and_the_head(runs: dict[str, str]) -> None:
    """The plan the gathered-head program ran: both padded weights split by rows, neither held
    unpadded."""
    text = runs["gathered plan"]
    for key in ("model.transformer.wte.weight", "model.lm_head.weight"):
        assert re.search(
            rf'key "{re.escape(key)}\[0:1001\+1, :\]" .*: !pcg.tensor<1002x32xf32, shard \[2, 1\]>', text
        )
        assert f'key "{key}"' not in text


def test_checkpoints_move_between_padded_and_unpadded_plans(runs: dict[str, str]) -> None:
    resumed = [_losses(runs[n]) for n in ("replicated-head", "data-parallel")]
    assert sorted(resumed[0]) == sorted(resumed[1]) == [3, 4]  # steps 3-4, the same losses (fp32's rounding)
    assert all(resumed[1][k] == pytest.approx(v, rel=1e-6) for k, v in resumed[0].items())
    module = load_model(SPEC).module
    assert checkpoint.load_module(module, checkpoint.resolve(runs["checkpoint"])) == []
    table = module.state_dict()["model.transformer.wte.weight"]
    assert table.shape == (1001, 32) and torch.isfinite(table).all()
