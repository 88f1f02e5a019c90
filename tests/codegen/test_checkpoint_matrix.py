"""Checkpoints across plan kinds and rank counts: a ZeRO-3 plan saves (its flat shards as the
rectangular boxes of the logical weights they cover) and resumes exactly, in ZeRO-3 and in
data-parallel and ZeRO-1 plans on 2 and 4 ranks; a data-parallel checkpoint resumes in ZeRO-3 on
4 ranks; the plain module loads a ZeRO-3 checkpoint. "Exactly": steps 3 and 4 of every resumed
run print the losses of the uninterrupted 4-step run, digit for digit (Adam, so the optimizer
state must come back too), and `--check` (whose reference resumes from the checkpoint as well)
passes. `--resume DIR` is given the `--save` folder (the newest complete step) or a step folder.

The model is the zoo MLP with a 30x15 first weight: 450 elements in shards of 225 (2 ranks) or
113 (4 ranks, the last padded), so shards start and end inside rows. Beside it, HF GPT-2 (small,
no dropout: micro-batched plans draw other dropout masks) as a pipelined plan on 2 ranks (2
stages, 1F1B, ZeRO-1; the packed `c_attn` read as weight parts) saves, and a Megatron plan
(tensor 2 x data 2) on 4 ranks resumes it (and `--init`s from it with SGD), and the plain module
loads it. Tiny HF Mixtral (issue 40) saves under expert parallelism 2 on 2 ranks and resumes
under EP 4 on 4 ranks and plain data parallelism on 2, and the plain module loads it. Two
torchruns (one per process count) run every program one after the other
(`unityc.runtime.batch`). The full matrix (every kind x every kind, 2 and 4 ranks, tied weights
too) is `benchmarks/checkpoint_matrix.py`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from test_torchrun import _sections
from torchrun import Run, torchrun, write_program
from xdsl.dialects.builtin import ModuleOp, StringAttr

from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.machine.presets import preset
from unityc.models.spec import load_model
from unityc.runtime import checkpoint
from unityc.search.baselines import megatron_lm, zero
from unityc.search.layout import Layout
from unityc.search.megatron_lm import build
from unityc.search.pipeline import plain_graph
from unityc.search.plans import Pricing
from unityc.search.unity import UnityOptions

pytestmark = pytest.mark.torchrun

SPEC = ModelSpec("mlp", "small", batch=8, overrides=(("in_features", "15"), ("hidden_dims", "[30,30]")))
TRAIN = ["--steps", "4", "--optimizer", "adam", "--log-every", "1"]
LOSS = re.compile(r"^step (\d+): loss ([0-9.]+)", re.MULTILINE)
GPT2 = ModelSpec("hf:gpt2", "small", batch=8, overrides=(("dropout", "0.0"),))
MIXTRAL = ModelSpec("hf:MixtralConfig", "small", batch=4)
"""Issue 40: tiny Mixtral (4 experts, top-2), saved under expert parallelism 2 (data 2 x expert
2 on 2 ranks: each rank holds 2 experts' slices of the 3-D expert weights) and resumed under EP 4
(4 ranks, one expert each), plain data parallelism and the plain module."""
EXPERT_PLANS = {"mixtral-ep2-2": (2, 2), "mixtral-ep4-4": (4, 4), "mixtral-dp-2": (2, 1)}
"""name: (ranks, expert degree; 1: plain data parallel)."""
PROGRAMS = {  # name: (ranks, ZeRO stage; 0: plain data parallel)
    "dp-2": (2, 0),
    "zero1-2": (2, 1),
    "zero3-2": (2, 3),
    "dp-4": (4, 0),
    "zero3-4": (4, 3),
}


@dataclass
class Matrix:
    directory: Path
    sections: dict[str, str] = field(default_factory=dict)
    runs: dict[int, Run] = field(default_factory=dict)

    def section(self, name: str) -> str:
        if name not in self.sections:
            report = "\n".join(run.report() for run in self.runs.values())
            raise AssertionError(f"no output for {name}: the batch ended early\n{report}")
        return self.sections[name]

    def losses(self, name: str) -> dict[int, str]:
        return {int(step): loss for step, loss in LOSS.findall(self.section(name))}


def plan(module: ModuleOp, ranks: int, stage: int) -> ModuleOp:
    machine = f"cpu:{ranks}"
    planned = zero(from_module(module), preset(machine), UnityOptions(optimizer="adam"), None, stage)
    planned.graph.module_attrs["unityc.machine"] = StringAttr(machine)
    return to_module(planned.graph)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    directory = tmp_path_factory.mktemp("matrix")
    module = import_model(SPEC)
    programs = {
        name: str(write_program(plan(module, ranks, stage), directory, name))
        for name, (ranks, stage) in PROGRAMS.items()
    }
    gpt2 = import_model(GPT2)
    options = UnityOptions(optimizer="adam")
    for name, ranks, stages, tensor in (("gpt2-pipelined-2", 2, 2, 1), ("gpt2-megatron-4", 4, 1, 2)):
        planned = megatron_lm(from_module(gpt2), preset(f"cpu:{ranks}"), options, None, tensor, stages)
        planned.graph.module_attrs["unityc.machine"] = StringAttr(f"cpu:{ranks}")
        programs[name] = str(write_program(to_module(planned.graph), directory, name))
    mixtral = plain_graph(from_module(import_model(MIXTRAL)))
    for name, (ranks, expert) in EXPERT_PLANS.items():
        layout = Layout(data=ranks, expert=expert)
        planned = build(mixtral, preset(f"cpu:{ranks}"), layout, Pricing(optimizer="adam")).graph
        planned.module_attrs["unityc.machine"] = StringAttr(f"cpu:{ranks}")
        programs[name] = str(write_program(to_module(planned), directory, name))
    ck = directory / "ck"
    zero3, dp, gpt2_ck = str(ck / "zero3"), str(ck / "dp"), str(ck / "gpt2")
    moe_ck = str(ck / "mixtral" / "step-2")
    entries = {
        2: [
            ("uninterrupted", "zero3-2", []),
            ("zero3-saves", "zero3-2", ["--stop-after", "2", "--save", zero3]),
            ("dp-saves", "dp-2", ["--stop-after", "2", "--save", dp]),
            ("zero3-resumes-zero3", "zero3-2", ["--resume", zero3, "--check"]),
            ("zero1-resumes-zero3", "zero1-2", ["--resume", f"{zero3}/step-2", "--check"]),
            ("gpt2-pipelined-saves", "gpt2-pipelined-2", ["--save-every", "2", "--save", gpt2_ck]),
            ("mixtral-ep2-saves", "mixtral-ep2-2", ["--save-every", "2", "--save", str(ck / "mixtral")]),
            ("mixtral-dp-resumes-ep2", "mixtral-dp-2", ["--resume", moe_ck, "--check"]),
        ],
        4: [
            ("dp4-resumes-zero3", "dp-4", ["--resume", zero3, "--check"]),
            ("zero3-4-resumes-dp", "zero3-4", ["--resume", dp, "--check"]),
            (
                "gpt2-megatron4-resumes-pipelined",
                "gpt2-megatron-4",
                ["--resume", f"{gpt2_ck}/step-2", "--check"],
            ),
            ("mixtral-ep4-resumes-ep2", "mixtral-ep4-4", ["--resume", moe_ck, "--check"]),
            (  # weights only: another optimizer is --init's purpose, not an error
                "gpt2-megatron4-inits-sgd",
                "gpt2-megatron-4",
                ["--steps", "1", "--optimizer", "sgd", "--init", f"{gpt2_ck}/step-2"],
            ),
        ],
    }
    out = Matrix(directory)
    for ranks, runs in entries.items():
        manifest = directory / f"manifest-{ranks}.json"
        listed = [{"name": n, "program": programs[p], "args": [*TRAIN, *a]} for n, p, a in runs]
        manifest.write_text(json.dumps(listed))
        run = torchrun("unityc.runtime.batch", ranks, str(manifest), cwd=directory)
        out.runs[ranks] = run
        out.sections.update(_sections(run.output))
    return out


def test_a_zero3_plan_saves_complete_checkpoints(matrix: Matrix) -> None:
    section = matrix.section("zero3-saves")
    assert section.endswith(": exit 0"), section
    folder = matrix.directory / "ck" / "zero3"
    assert (folder / "step-2" / ".metadata").is_file()
    assert (folder / checkpoint.LATEST).read_text().strip() == "step-2"
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")], "a temporary folder is left"


@pytest.mark.parametrize(
    ("name", "baseline", "digits"),
    [
        ("zero3-resumes-zero3", "uninterrupted", 0),
        ("zero1-resumes-zero3", "uninterrupted", 0),
        ("dp4-resumes-zero3", "uninterrupted", 0),
        ("zero3-4-resumes-dp", "uninterrupted", 0),
        # tensor parallel sums in another order than the pipeline: the 6th decimal may differ by 1
        ("gpt2-megatron4-resumes-pipelined", "gpt2-pipelined-saves", 1),
        # (issue 40) the experts' rows summed per rank in other groupings than under EP 2
        ("mixtral-ep4-resumes-ep2", "mixtral-ep2-saves", 1),
        ("mixtral-dp-resumes-ep2", "mixtral-ep2-saves", 1),
    ],
)
def test_resumed_runs_repeat_the_uninterrupted_losses(
    matrix: Matrix, name: str, baseline: str, digits: int
) -> None:
    section = matrix.section(name)
    assert section.endswith(": exit 0"), section
    assert "resumed at step 2" in section and "check passed: 2 step(s)" in section, section
    uninterrupted = matrix.losses(baseline)
    assert sorted(uninterrupted) == [1, 2, 3, 4], uninterrupted
    checked = re.findall(r"^step (\d+): loss ([0-9.]+) \(reference", section, re.M)
    resumed = {int(step): loss for step, loss in checked}
    assert sorted(resumed) == [3, 4], section
    for step in (3, 4):
        off = abs(float(resumed[step]) - float(uninterrupted[step]))
        assert off <= digits * 1e-6 + 1e-9, (step, resumed, uninterrupted)


def test_the_plain_module_loads_a_zero3_checkpoint(matrix: Matrix) -> None:
    """The ZeRO-3 and the data-parallel checkpoint of step 2 hold the same logical weights."""
    assert matrix.section("dp-saves").endswith(": exit 0")
    ck = matrix.directory / "ck"
    zero3, dp, fresh = (load_model(SPEC).module for _ in range(3))
    assert checkpoint.load_module(zero3, ck / "zero3") == []  # the --save folder: its newest step
    assert checkpoint.load_module(dp, ck / "dp" / "step-2") == []
    for (key, got), want, before in zip(
        zero3.state_dict().items(), dp.state_dict().values(), fresh.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=key)
        assert not torch.equal(got, before), f"{key} did not change in training"


def test_the_plain_module_loads_a_pipelined_checkpoint_of_weight_parts(matrix: Matrix) -> None:
    """GPT-2's pipelined plan holds `c_attn` as three parts on its stages; the checkpoint holds
    the packed tensor under the model's own key and shape, trained."""
    assert matrix.section("gpt2-pipelined-saves").endswith(": exit 0")
    module, fresh = (load_model(GPT2).module for _ in range(2))
    assert checkpoint.load_module(module, matrix.directory / "ck" / "gpt2" / "step-2") == []
    key = "model.transformer.h.0.attn.c_attn.weight"
    got, before = module.state_dict()[key], fresh.state_dict()[key]
    assert got.shape == before.shape == (32, 96)
    assert not torch.equal(got, before), "c_attn did not change in training"


def test_init_takes_the_weights_only(matrix: Matrix) -> None:
    """`--init` of an Adam checkpoint into an SGD run is accepted (a fresh optimizer, step 0), and
    its first loss is that of the checkpoint's weights: the uninterrupted run's step 3."""
    section = matrix.section("gpt2-megatron4-inits-sgd")
    assert section.endswith(": exit 0"), section
    assert "(--init: a fresh optimizer)" in section and "SGD" in section, section
    first = matrix.losses("gpt2-megatron4-inits-sgd")[1]
    assert abs(float(first) - float(matrix.losses("gpt2-pipelined-saves")[3])) <= 1e-6 + 1e-9, section


def test_the_plain_module_loads_an_expert_parallel_checkpoint(matrix: Matrix) -> None:
    """Mixtral's EP 2 checkpoint holds each 3-D expert weight whole under the model's own key
    (both ranks' expert slices), trained, and the plain module loads every key of it."""
    assert matrix.section("mixtral-ep2-saves").endswith(": exit 0")
    module, fresh = (load_model(MIXTRAL).module for _ in range(2))
    assert checkpoint.load_module(module, matrix.directory / "ck" / "mixtral" / "step-2") == []
    key = "model.model.layers.0.mlp.experts.gate_up_proj"
    got, before = module.state_dict()[key], fresh.state_dict()[key]
    assert got.shape == before.shape == (4, 128, 32)
    assert all(not torch.equal(got[e], before[e]) for e in range(4)), "an expert's slice did not train"
