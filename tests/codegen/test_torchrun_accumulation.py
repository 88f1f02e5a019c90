"""Gradient accumulation (`unityc.accumulation = k`, `dialects/plan.py`) trains exactly like the
single-device model under torchrun (`--check`: loss, outputs, every gradient and updated weight):
data-parallel plans of the zoo MLP and BERT with 2 and 4 steps, with SGD and Adam, with ZeRO-1/2/3
and recomputation, under bf16-mixed (data parallel, ZeRO-2/3 with recomputation, a pipeline: one
bf16 copy of each weight per step), a pipelined plan whose schedule runs twice per step, and a
run checkpointed after one step and resumed (the losses are the uninterrupted run's). One
torchrun (`unityc.runtime.batch`) runs them all on 2 gloo processes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace

import pytest
from test_torchrun import _sections
from torchrun import Run, torchrun, write_program
from xdsl.dialects.builtin import ModuleOp, StringAttr

from unityc.dialects.container import graph_function
from unityc.dialects.precision import BF16_MIXED, precision_attrs
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.machine.presets import preset
from unityc.passes.gpipe import GpipePass
from unityc.search.baselines import data_parallel, zero
from unityc.search.unity import UnityOptions

pytestmark = pytest.mark.torchrun

MODELS = {"mlp": ModelSpec("mlp", "small", batch=8), "bert": ModelSpec("bert", "small", batch=4)}
ADAM = ("--optimizer", "adam")
# (name, model, plan: "dp" | "zero<stage>" | "zero<stage>-recompute" | "gpipe", steps, flags)
PROGRAMS = [
    ("mlp-dp-acc2", "mlp", "dp", 2, ()),
    ("mlp-dp-acc4-adam", "mlp", "dp", 4, ADAM),
    ("mlp-zero1-acc2", "mlp", "zero1", 2, ADAM),
    ("mlp-zero2-acc4", "mlp", "zero2", 4, ADAM),
    ("mlp-zero3-recompute-acc2", "mlp", "zero3-recompute", 2, ADAM),
    ("bert-zero2-recompute-acc2", "bert", "zero2-recompute", 2, ADAM),
    ("mlp-bf16-dp-acc2", "mlp-bf16", "dp", 2, ADAM),
    # bf16-mixed shares one bf16 copy of each weight across the step's micro-batches
    # (`runtime.precision.step_region`): through recomputation and a pipeline's schedule too
    ("mlp-bf16-zero2-recompute-acc2", "mlp-bf16", "zero2-recompute", 2, ADAM),  # recomputed: cached
    ("mlp-bf16-zero3-recompute-acc2", "mlp-bf16", "zero3-recompute", 2, ADAM),  # gathered: cast each time
    ("mlp-bf16-gpipe-acc2", "mlp-bf16", "gpipe", 2, ADAM),
    ("mlp-gpipe-acc2", "mlp", "gpipe", 2, ADAM),
]
RESUMED = "mlp-dp-acc2-resume"
"""mlp-dp-acc2 with Adam for 3 steps (`-full`), stopped after 1 with a checkpoint (`-half`),
resumed from it under --check (`-resume`)."""


@dataclass
class Batch:
    sections: dict[str, str] = field(default_factory=dict)
    run: Run | None = None
    texts: dict[str, str] = field(default_factory=dict)

    def section(self, name: str) -> str:
        if name not in self.sections:
            assert self.run is not None
            raise AssertionError(f"no output for {name}: the batch ended early\n{self.run.report()}")
        return self.sections[name]


def planned(module: ModuleOp, kind: str, steps: int) -> ModuleOp:
    """The plan `kind` of the model for cpu:2, with `steps` gradient accumulation steps."""
    machine = "cpu:2"
    if kind == "gpipe":
        module = module.clone()
        GpipePass(machine=machine, stages=2, microbatches=2).apply(None, module)  # type: ignore[arg-type]
        graph = from_module(module)
    elif kind == "dp":
        graph = data_parallel(from_module(module), preset(machine), UnityOptions(optimizer="adam")).graph
    else:
        stage = int(kind[4])
        options = UnityOptions(optimizer="adam")
        graph = zero(from_module(module), preset(machine), options, None, stage, "recompute" in kind).graph
    graph.module_attrs["unityc.machine"] = StringAttr(machine)
    graph.set_plan(replace(graph.plan, accumulation=steps))
    return to_module(graph)


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> Batch:
    directory = tmp_path_factory.mktemp("accumulation")
    modules = {name: import_model(spec) for name, spec in MODELS.items()}
    bf16 = import_model(MODELS["mlp"])
    graph_function(bf16).attributes.update(precision_attrs(BF16_MIXED))
    modules["mlp-bf16"] = bf16
    out = Batch()
    entries: list[dict[str, object]] = []
    for name, model, kind, steps, flags in PROGRAMS:
        program = write_program(planned(modules[model], kind, steps), directory, name)
        out.texts[name] = program.read_text()
        entries.append({"name": name, "program": str(program), "args": ["--check", "--steps", "2", *flags]})
    program = str(directory / "mlp-dp-acc2.py")
    train = ["--optimizer", "adam", "--steps", "3", "--log-every", "1"]
    for part, more in (
        ("full", []),
        ("half", ["--stop-after", "1", "--save", str(directory / "ck")]),
        ("resume", ["--resume", str(directory / "ck" / "step-1"), "--check"]),
    ):
        entries.append({"name": f"{RESUMED}-{part}", "program": program, "args": train + more})
    manifest = directory / "manifest.json"
    manifest.write_text(json.dumps(entries))
    out.run = torchrun("unityc.runtime.batch", 2, str(manifest), cwd=directory)
    out.sections.update(_sections(out.run.output))
    return out


@pytest.mark.parametrize("name", [p[0] for p in PROGRAMS])
def test_accumulated_plan_trains_exactly(batch: Batch, name: str) -> None:
    section = batch.section(name)
    assert section.endswith(": exit 0"), section
    assert "check passed: 2 step(s)" in section, section


def test_the_program_runs_one_micro_batch_forward_and_says_how_many(batch: Batch) -> None:
    """PLAN holds the whole batch's inputs (what the data and the reference read), `forward` one
    micro-batch's: 8 rows in 2 pieces, 4 steps, so 1 row per piece and 2 in the logical type."""
    text = batch.texts["mlp-dp-acc4-adam"]
    assert "    accumulation=4," in text
    assert '"input1": Layout((8, 16), "float32", shard=(2, 1)' in text
    assert 'input1 = x["input1"]  # 2x16xf32, shard [2, 1] on all ranks' in text
    assert "accumulation=" not in batch.texts["mlp-dp-acc2"].replace("accumulation=2,", "")


def test_the_gradient_sync_runs_once_per_step(batch: Batch) -> None:
    """The buckets of weight copies start during the last micro-batch's backward only: one
    bucket per step, as without accumulation."""
    section = batch.section("mlp-dp-acc2")
    assert "gradient buckets (rank 0): 1 per step, 2 of 2 started during the backward" in section, section


def test_a_resumed_accumulated_run_repeats_the_uninterrupted_run(batch: Batch) -> None:
    losses = {}
    for part in ("full", "half", "resume"):
        section = batch.section(f"{RESUMED}-{part}")
        assert section.endswith("exit 0"), section
        losses[part] = {int(k): v for k, v in re.findall(r"^step (\d+): loss ([0-9.]+)", section, re.M)}
    assert sorted(losses["full"]) == [1, 2, 3] and losses["half"] == {1: losses["full"][1]}
    assert losses["resume"] == {k: losses["full"][k] for k in (2, 3)}, losses
    assert "check passed: 2 step(s)" in batch.section(f"{RESUMED}-resume")
