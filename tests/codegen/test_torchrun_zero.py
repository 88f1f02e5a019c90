"""ZeRO-1/2/3 and recomputed plans (the `zero{stage recompute}` baseline) of the zoo MLP, the
zoo BERT and a Hugging Face Llama train exactly like the single-device model under torchrun
(`--check`: loss, outputs, every gradient and updated weight), and every rank keeps exactly the
weight, gradient and optimizer-state bytes the memory model predicts (`--check` compares them;
a program whose prediction is off by one shard fails), the MLP's ZeRO-2 and ZeRO-3 with every
step's gradients clipped to a global norm. One torchrun per process count.

The 4-process MLP has a 30x15 weight: 450 elements in 4 shards of 113, the last padded.

In bf16-mixed (Llama at ZeRO-1 and ZeRO-2, BERT at ZeRO-2 with recomputation) the weights only
bf16 ops read are bf16 pieces with fp32 master shards (`runtime.zero`): still exact, and their
2 + 4 + 12/d bytes an element as predicted (4 processes: fewer than the fp32 pieces' 4 + 4 + 8/d).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest
from test_torchrun import PLAN_DIR, _opt, _sections
from torchrun import Run, torchrun, write_program
from xdsl.dialects.builtin import ModuleOp, StringAttr

from unityc.dialects.container import graph_function
from unityc.dialects.precision import BF16_MIXED, precision_attrs
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.machine.presets import preset
from unityc.search.baselines import zero
from unityc.search.unity import UnityOptions

pytestmark = pytest.mark.torchrun

MODELS = {
    "mlp": ModelSpec("mlp", "small", batch=8),
    "mlp_odd": ModelSpec(
        "mlp", "small", batch=8, overrides=(("in_features", "15"), ("hidden_dims", "[30,30]"))
    ),
    "bert": ModelSpec("bert", "small", batch=4),
    "llama": ModelSpec("hf:llama", "small", batch=8),
}
BF16 = {"llama_bf16": "llama", "bert_bf16": "bert"}
"""The models' bf16-mixed twins."""
ADAM = ("--optimizer", "adam")
CLIPPED = ("--lr", "1", "--clip-grad-norm", "0.001")
"""SGD whose every step is clipped (the norm is far above 0.001): the global norm counts the
ZeRO-2/3 gradients, which live in the shards (once counted as none, and left unclipped)."""
# (name, model, processes, ZeRO stage, recompute, flags)
PROGRAMS = [
    ("mlp-zero1", "mlp", 2, 1, False, ADAM),
    ("mlp-zero2", "mlp", 2, 2, False, CLIPPED),
    ("mlp-zero3", "mlp", 2, 3, False, CLIPPED),
    ("mlp-recompute", "mlp", 2, 0, True, ()),
    ("bert-zero2-recompute", "bert", 2, 2, True, ADAM),
    ("bert-zero3", "bert", 2, 3, False, ADAM),
    ("llama-zero1", "llama", 2, 1, False, ADAM),
    ("llama-zero3-recompute", "llama", 2, 3, True, ADAM),
    ("mlp-zero3-recompute", "mlp_odd", 4, 3, True, ADAM),
    ("mlp-zero2", "mlp_odd", 4, 2, False, ADAM),
    ("llama-zero3", "llama", 4, 3, False, ADAM),
    ("llama-zero1-bf16", "llama_bf16", 2, 1, False, ADAM),
    ("bert-zero2-bf16-recompute", "bert_bf16", 2, 2, True, ADAM),
    ("llama-zero2-bf16", "llama_bf16", 4, 2, False, ADAM),
]
TINY = "tiny-zero3-recompute"
"""The hand-written tiny plan (a Megatron tower beside a data-parallel one) with one ZeRO-3
weight read in a recomputed region, among broadcasts, reduces and gathers."""
SABOTAGED = "mlp-zero3-wrong-prediction"
"""mlp-zero3 with rank 1's predicted gradient bytes off by one shard: --check must fail."""


@dataclass
class Batches:
    sections: dict[str, str] = field(default_factory=dict)
    runs: dict[int, Run] = field(default_factory=dict)

    def section(self, name: str, nproc: int) -> str:
        key = f"{name}-{nproc}"
        if key not in self.sections:
            raise AssertionError(f"no output for {key}: the batch ended early\n{self.runs[nproc].report()}")
        return self.sections[key]


def plan(module: ModuleOp, nproc: int, stage: int, recompute: bool) -> ModuleOp:
    machine = f"cpu:{nproc}"
    planned = zero(
        from_module(module), preset(machine), UnityOptions(optimizer="adam"), None, stage, recompute
    )
    planned.graph.module_attrs["unityc.machine"] = StringAttr(machine)
    return to_module(planned.graph)


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> Batches:
    directory = tmp_path_factory.mktemp("zero")
    modules = {name: import_model(spec) for name, spec in MODELS.items()}
    for twin, model in BF16.items():
        modules[twin] = import_model(MODELS[model])
        graph_function(modules[twin]).attributes.update(precision_attrs(BF16_MIXED))
    entries: dict[int, list[dict[str, object]]] = {2: [], 4: []}
    for name, model, nproc, stage, recompute, flags in PROGRAMS:
        key = f"{name}-{nproc}"
        program = write_program(plan(modules[model], nproc, stage, recompute), directory, key)
        if model in BF16:
            assert "bf16_pieces=frozenset(" in program.read_text(), f"{key} holds no bf16 piece"
        entries[nproc].append(
            {"name": key, "program": str(program), "args": ["--check", "--steps", "2", *flags]}
        )
    honest = directory / "mlp-zero3-2.py"
    sabotaged = directory / f"{SABOTAGED}.py"
    text = honest.read_text()
    predicted = r"'sgd': \{0: \((\d+), (\d+), 0\), 1: \((\d+), (\d+), 0\)"
    doubled = lambda m: f"'sgd': {{0: ({m[1]}, {m[2]}, 0), 1: ({m[3]}, {int(m[4]) * 2}, 0)"  # noqa: E731
    wrong = re.sub(predicted, doubled, text)
    assert wrong != text
    sabotaged.write_text(wrong)
    entries[2].append(
        {"name": f"{SABOTAGED}-2", "program": str(sabotaged), "args": ["--check", "--steps", "1"]}
    )
    tiny = (PLAN_DIR / "tiny_mlp_plan.mlir").read_text()
    weight = '"tower2.0.weight" {view = #pcg.view<start 0, [intra 1]>'
    tiny = tiny.replace(weight, weight + ", zero = 3 : i64").replace(
        "%g = pcg.linear %x2, %v1 {", "%g = pcg.linear %x2, %v1 {recompute, "
    )
    (directory / f"{TINY}.mlir").write_text(tiny)
    assert _opt(f"{TINY}.mlir", "-t", "torch", "-o", f"{TINY}.py", cwd=directory).returncode == 0
    args = ["--check", "--steps", "2", *ADAM]
    entries[2].append({"name": f"{TINY}-2", "program": str(directory / f"{TINY}.py"), "args": args})
    out = Batches()
    for nproc, programs in entries.items():
        manifest = directory / f"manifest-{nproc}.json"
        manifest.write_text(json.dumps(programs))
        run = torchrun("unityc.runtime.batch", nproc, str(manifest), cwd=directory)
        out.runs[nproc] = run
        out.sections.update(_sections(run.output))
    return out


@pytest.mark.parametrize(("name", "nproc"), [*((p[0], p[2]) for p in PROGRAMS), (TINY, 2)])
def test_zero_program_trains_exactly_and_keeps_the_predicted_bytes(
    batches: Batches, name: str, nproc: int
) -> None:
    section = batches.section(name, nproc)
    assert section.endswith(": exit 0"), section
    assert "check passed: 2 step(s)" in section
    assert "(as the memory model predicts)" in section, section


def test_a_wrong_prediction_fails_the_check(batches: Batches) -> None:
    section = batches.section(SABOTAGED, 2)
    assert section.endswith(": exit 1"), section
    assert "(NOT as the memory model predicts)" in section
    assert "check failed at step 1: rank 1 keeps (weights, gradients, optimizer)" in section
