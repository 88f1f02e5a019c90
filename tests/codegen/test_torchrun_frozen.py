"""Frozen weights stay frozen (issue 42): models fine-tuned the way people fine-tune
(`frozen_models.py`: a LoRA Llama, a frozen BERT under a trainable head, Whisper's encoder with its
frozen `embed_positions`) import with `pcg.weight ... frozen`, and their data-parallel, Megatron,
ZeRO-3 and searched plans train exactly like the single-device model on 2 ranks (`--check`: no
gradient of a frozen weight on either side, every frozen weight unchanged after the update, the
persistent bytes as the memory model predicts: gradients and optimizer state of the trained
weights only). All programs run in one torchrun (`unityc.runtime.batch`), with two more entries:

* the LoRA data-parallel program under Adam, saved: the checkpoint holds every weight, the frozen
  ones byte-identical to the model's initial values, the adapters trained;
* the same program with its `frozen=` line removed (the program then trains the whole model): its
  check must fail, naming the side that has a gradient the other has not.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from frozen_models import lora_llama
from test_torchrun import _sections
from torchrun import Run, torchrun, write_program

from unityc.cost.estimate import estimate_module
from unityc.dialects import pcg
from unityc.dialects.source import make_context, parse_source
from unityc.frontend import ModelSpec, import_model
from unityc.machine.loader import load_machine
from unityc.passes.baselines import DataParallelPass, MegatronPass, ZeroPass
from unityc.passes.unity_search import UnitySearchPass
from unityc.runtime.checkpoint import load_module

HERE = Path(__file__).parent
MODELS = f"{HERE / 'frozen_models.py'}"
BATCH = 8
PASSES = {
    "data": DataParallelPass(machine="cpu:2"),
    "megatron": MegatronPass(machine="cpu:2"),
    "zero3": ZeroPass(machine="cpu:2", stage=3),
    "search": UnitySearchPass(machine="cpu:2"),
}
MODEL_NAMES = ("lora_llama", "frozen_bert", "whisper_encoder")
ADAPTERS = 2 * (4 * 32 + 32 * 4 + 4 * 32 + 16 * 4)
"""The LoRA Llama's trained elements: per layer, q's down [4, 32] and up [32, 4], v's down [4, 32]
and up [16, 4] (two KV heads of 8)."""


@functools.cache
def _source(model: str) -> str:
    return str(import_model(ModelSpec(f"{MODELS}:{model}", "small", BATCH)))


@dataclass
class Runs:
    run: Run | None = None
    sections: dict[str, str] = field(default_factory=dict)
    saved: Path | None = None

    def section(self, name: str) -> str:
        assert self.run is not None
        section = self.sections.get(name)
        assert section is not None, f"no output for {name}: the batch ended early\n{self.run.report()}"
        return section


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    directory = tmp_path_factory.mktemp("frozen")
    entries = []
    check = ["--check", "--steps", "2"]
    for model in MODEL_NAMES:
        text = _source(model)
        for how, plan in PASSES.items():
            name = f"{model}-{how}"
            module = parse_source(make_context(), text, f"{name}.mlir")
            plan.apply(make_context(), module)
            program = write_program(module, directory, name)
            entries.append({"name": name, "program": str(program), "args": check})
    lora = directory / "lora_llama-data.py"
    saved = directory / "saved"
    entries.append(
        {
            "name": "lora-adam",
            "program": str(lora),
            "args": [*check, "--optimizer", "adam", "--save", str(saved)],
        }
    )
    unfrozen = directory / "lora_llama-unfrozen.py"
    lines = lora.read_text().splitlines(keepends=True)
    dropped = ("    frozen=", "    memory=")  # the prediction is of the frozen plan's bytes
    unfrozen.write_text("".join(line for line in lines if not line.startswith(dropped)))
    entries.append({"name": "lora-unfrozen", "program": str(unfrozen), "args": check})
    manifest = directory / "batch.json"
    manifest.write_text(json.dumps(entries))
    run = torchrun("unityc.runtime.batch", 2, str(manifest), timeout=1200)
    return Runs(run, _sections(run.output), saved / "step-2")


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_import_marks_exactly_the_frozen_weights(model: str) -> None:
    module = parse_source(make_context(), _source(model), f"{model}.mlir")
    weights = [op for op in module.walk() if isinstance(op, pcg.WeightOp)]
    frozen = {op.attrs()["key"] for op in weights if op.attrs()["frozen"]}
    if model == "whisper_encoder":
        assert frozen == {"body.embed_positions.weight"}
    elif model == "frozen_bert":
        assert frozen and all(k.startswith("body.") for k in frozen) and len(frozen) == len(weights) - 2
    else:
        reference, _ = lora_llama()
        trained = {k for k, p in reference.named_parameters() if p.requires_grad}
        assert {op.attrs()["key"] for op in weights} - frozen == trained
        assert all(".down." in k or ".up." in k for k in trained)


def test_lora_optimizer_state_counts_only_the_adapters() -> None:
    module = parse_source(make_context(), _source("lora_llama"), "lora.mlir")
    DataParallelPass(machine="cpu:2").apply(make_context(), module)
    estimate = estimate_module(module, load_machine("cpu:2"), optimizer="adam")
    for row in estimate.devices:  # Adam: two fp32 moments per trained element, per copy
        assert row.memory.optimizer == 2 * 4 * ADAPTERS
        assert row.memory.gradients == 4 * ADAPTERS


@pytest.mark.torchrun
@pytest.mark.parametrize("name", [f"{m}-{h}" for m in MODEL_NAMES for h in PASSES] + ["lora-adam"])
def test_frozen_model_trains_like_the_reference(runs: Runs, name: str) -> None:
    section = runs.section(name)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    assert "(as the memory model predicts)" in section, section


@pytest.mark.torchrun
def test_saved_frozen_weights_are_untouched(runs: Runs) -> None:
    runs.section("lora-adam")
    assert runs.saved is not None
    initial, _ = lora_llama()
    trained, _ = lora_llama()
    assert load_module(trained, runs.saved) == []  # every weight saved, frozen ones included
    after = dict(trained.named_parameters())
    for key, before in initial.named_parameters():
        if before.requires_grad:
            assert not torch.equal(before, after[key]), f"{key} was not trained"
        else:
            assert torch.equal(before, after[key]), f"frozen {key} changed"


@pytest.mark.torchrun
def test_a_program_training_frozen_weights_fails_its_check(runs: Runs) -> None:
    section = runs.section("lora-unfrozen")
    assert "exit 0" not in section.splitlines()[-1], section
    assert "the plan computed one" in section and "the reference has none" in section, section
