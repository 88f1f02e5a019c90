"""Pipelined plans through the whole chain: `gpipe{...}` plans of the MLP, the zoo BERT and
Hugging Face GPT-2 (every schedule, GPipe, 1F1B and interleaved 1F1B, on 2 ranks and on 4, where
BERT and GPT-2 have 2-way data parallelism inside each stage), and the
MLP with tensor-parallel stages (1F1B and interleaved on 4 ranks: collectives inside stages; 1F1B
on 8 ranks, tensor 2 x data 2 inside each stage) and with ZeRO-2/3 and recomputation inside the
hybrid's stages, run by `torch.distributed.pipelining` under torchrun with `--check` (loss,
outputs, every gradient and every updated weight against single-device PyTorch). The MLP also
returns its logits, so each micro-batch's outputs must come back in place. A program whose last
stage sums the micro-batch losses instead of averaging them (its loss times M) must fail
`--check`; trained on `--data` batches, the stages see each step's batch. The programs of each
rank count run in one torchrun (`unityc.runtime.batch`): 2, 4 and 8 ranks."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from test_torchrun import _sections
from torchrun import torchrun, write_program

from unityc.dialects.source import make_context, parse_source
from unityc.frontend import ModelSpec, import_model
from unityc.passes.gpipe import GpipePass

pytestmark = pytest.mark.torchrun

MLP = f"{Path(__file__).parent.parent / 'pipeline' / 'deep_mlp.py'}:make"
"""The MLP of examples/mlp.mlir, 4 layers deep (enough cuts for 8 stages); returns its logits too."""

# (name, ranks, model, batch, (stages, micro-batches, schedule))
PLANS = [
    ("mlp-gpipe-2", 2, MLP, 16, (2, 4, "gpipe")),
    ("mlp-1f1b-2", 2, MLP, 16, (2, 4, "1f1b")),
    ("mlp-interleaved-2", 2, MLP, 16, (4, 4, "interleaved-1f1b")),
    ("bert-gpipe-2", 2, "bert", 4, (2, 2, "gpipe")),
    ("bert-1f1b-2", 2, "bert", 4, (2, 2, "1f1b")),
    ("bert-interleaved-2", 2, "bert", 4, (4, 4, "interleaved-1f1b")),
    ("gpt2-gpipe-2", 2, "hf:gpt2", 4, (2, 2, "gpipe")),
    ("gpt2-1f1b-2", 2, "hf:gpt2", 4, (2, 2, "1f1b")),
    ("gpt2-interleaved-2", 2, "hf:gpt2", 4, (4, 4, "interleaved-1f1b")),
    ("mlp-gpipe-4", 4, MLP, 16, (4, 4, "gpipe")),
    ("mlp-1f1b-hybrid-4", 4, MLP, 16, (2, 2, "1f1b")),
    ("mlp-interleaved-4", 4, MLP, 16, (8, 4, "interleaved-1f1b")),
    ("bert-gpipe-hybrid-4", 4, "bert", 4, (2, 2, "gpipe")),
    ("bert-1f1b-hybrid-4", 4, "bert", 4, (2, 2, "1f1b")),
    ("bert-interleaved-hybrid-4", 4, "bert", 8, (4, 4, "interleaved-1f1b")),
    ("gpt2-gpipe-hybrid-4", 4, "hf:gpt2", 4, (2, 2, "gpipe")),
    ("gpt2-1f1b-hybrid-4", 4, "hf:gpt2", 4, (2, 2, "1f1b")),
    ("gpt2-interleaved-hybrid-4", 4, "hf:gpt2", 8, (4, 4, "interleaved-1f1b")),
]
# (name, ranks, model, batch, schedule, micro-batches, stage bounds as fractions of the layers):
# plans whose stages are tensor parallel (the Megatron layout, `materialize(tensor=2)`, as the
# joint search makes them): on 4 ranks 2 stage groups of 2 (tensor 2), on 8 ranks 2 groups of 4
# (tensor 2 x data 2 inside each stage); collectives inside the stages' code
TENSOR = [
    ("mlp-tp-1f1b-4", 4, MLP, 16, "1f1b", 2, (0, 1 / 2, 1)),
    ("mlp-tp-interleaved-4", 4, MLP, 16, "interleaved-1f1b", 4, (0, 1 / 4, 1 / 2, 3 / 4, 1)),
    ("mlp-tp-dp-1f1b-8", 8, MLP, 16, "1f1b", 2, (0, 1 / 2, 1)),
]
LEVERS = "mlp-zero-recompute-hybrid-4"
"""mlp-1f1b-hybrid-4 with memory levers inside its stages: stage 0's weights ZeRO-2, stage 1's
ZeRO-3, every linear and relu recomputed (a run across the stage boundary: one per stage), Adam."""
SUMMED = "mlp-summed-2"
"""mlp-1f1b-2 with its last stage's loss times the 4 micro-batches: the sum, not the mean."""
RESUME = "mlp-1f1b-resume-2"
"""mlp-1f1b-2 trained 3 steps on `--data` with Adam: uninterrupted (`-full`), stopped after step 1
with a checkpoint (`-half`), resumed from it under --check (`-resume`)."""
TIED = "bert-tied-2"
"""bert-1f1b-2 (its word embedding read by the embedding on stage 0 and the MLM head on stage 1)
checkpointed after step 1 and resumed from it under --check."""
DATA = "mlp-1f1b-data-2"
"""mlp-1f1b-2 trained on `--data` batches (each step's own, none of them the example batch)."""


@dataclass
class Runs:
    sections: dict[str, str] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    outputs: dict[int, str] = field(default_factory=dict)

    def section(self, name: str, ranks: int) -> str:
        if name not in self.sections:
            tail = "\n".join(self.outputs.get(ranks, "").splitlines()[-60:])
            raise AssertionError(f"no output for {name}: the batch ended early\n{tail}")
        return self.sections[name]


@cache
def _imported(model: str, batch: int) -> str:
    return str(import_model(ModelSpec(model, "small", batch)))


def _program(
    directory: Path, name: str, model: str, batch: int, options: tuple[int, int, str], ranks: int
) -> Path:
    """The `gpipe{...}` plan's program (the pass and the target in-process: no start-up)."""
    module = parse_source(make_context(), _imported(model, batch), f"{name}-model.mlir")
    stages, microbatches, schedule = options
    plan = GpipePass(machine=f"cpu:{ranks}", stages=stages, microbatches=microbatches, schedule=schedule)
    plan.apply(make_context(), module)
    return write_program(module, directory, name)


def _tensor_program(
    directory: Path, name: str, ranks: int, model: str, batch: int, schedule: str, microbatches: int,
    cuts: tuple[float, ...],
) -> Path:  # fmt: skip
    """2 stage groups of ranks / 2 on cpu:`ranks`, each tensor parallel 2 x data parallel the
    rest (interleaved: each group 2 stages)."""
    from xdsl.dialects.builtin import StringAttr

    from unityc.graph import from_module, to_module
    from unityc.machine import load_machine
    from unityc.search.layers import LayerCosts, Stage
    from unityc.search.layout import Layout
    from unityc.search.pipeline import materialize

    graph = from_module(parse_source(make_context(), _imported(model, batch), f"{name}-model.mlir"))
    machine = load_machine(f"cpu:{ranks}")
    layers = LayerCosts(graph, machine).count
    bounds = [round(c * layers) for c in cuts]
    width = ranks // 2
    stages = [Stage(bounds[k], bounds[k + 1], width * (k % 2), width) for k in range(len(bounds) - 1)]
    virtual = len(stages) // 2
    layout = Layout(data=width // 2, tensor=2, pipeline=2, virtual=virtual, microbatches=microbatches)
    plan = materialize(graph, machine, stages, schedule, layout)
    module = to_module(plan)
    module.attributes["unityc.machine"] = StringAttr(f"cpu:{ranks}")
    return write_program(module, directory, name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    directory = tmp_path_factory.mktemp("pipelined")
    entries: dict[int, list[dict[str, object]]] = {2: [], 4: [], 8: []}
    result = Runs()
    for name, ranks, model, batch, options in PLANS:
        program = _program(directory, name, model, batch, options, ranks)
        result.texts[name] = program.read_text()
        entries[ranks].append({"name": name, "program": str(program), "args": ["--check", "--steps", "2"]})
    for name, ranks, model, batch, schedule, microbatches, cuts in TENSOR:
        program = _tensor_program(directory, name, ranks, model, batch, schedule, microbatches, cuts)
        result.texts[name] = program.read_text()
        entries[ranks].append({"name": name, "program": str(program), "args": ["--check", "--steps", "2"]})
    levers = re.sub(
        r'(pcg\.weight key "[^"]+" \{view = #pcg\.view<start (\d), \[intra 1\]>)',
        lambda w: f"{w.group(1)}, zero = {2 if w.group(2) == '0' else 3} : i64",
        (directory / "mlp-1f1b-hybrid-4.mlir").read_text(),
    )
    levers = re.sub(r"(= pcg\.(relu|linear) [^{]*\{)view", r"\1recompute, view", levers)
    module = parse_source(make_context(), levers, f"{LEVERS}.mlir")
    program = write_program(module, directory, LEVERS)
    result.texts[LEVERS] = program.read_text()
    args = ["--check", "--steps", "2", "--optimizer", "adam"]
    entries[4].append({"name": LEVERS, "program": str(program), "args": args})
    summed = directory / f"{SUMMED}.py"
    loss_line = "    return (nll_loss_forward, "
    assert result.texts["mlp-1f1b-2"].count(loss_line) == 1
    summed.write_text(result.texts["mlp-1f1b-2"].replace(loss_line, "    return (nll_loss_forward * 4, "))
    entries[2].append({"name": SUMMED, "program": str(summed), "args": ["--check", "--steps", "1"]})
    data = ["--data", f"{MLP.removesuffix(':make')}:batches", "--check", "--steps", "2"]
    entries[2].append({"name": DATA, "program": str(directory / "mlp-1f1b-2.py"), "args": data})
    train = ["--data", f"{MLP.removesuffix(':make')}:batches", "--optimizer", "adam", "--steps", "3"]
    half = str(directory / "ck" / "step-1")
    for name, more in (
        ("full", ["--log-every", "1"]),
        ("half", ["--log-every", "1", "--stop-after", "1", "--save", str(directory / "ck")]),
        ("resume", ["--resume", half, "--check"]),
    ):
        program = str(directory / "mlp-1f1b-2.py")
        entries[2].append({"name": f"{RESUME}-{name}", "program": program, "args": train + more})
    bert = str(directory / "bert-1f1b-2.py")
    saved = ["--steps", "2", "--stop-after", "1", "--save", str(directory / "tied")]
    entries[2].append({"name": f"{TIED}-half", "program": bert, "args": saved})
    resumed = ["--steps", "2", "--resume", str(directory / "tied" / "step-1"), "--check"]
    entries[2].append({"name": f"{TIED}-resume", "program": bert, "args": resumed})
    for ranks, batch in entries.items():
        manifest = directory / f"batch{ranks}.json"
        manifest.write_text(json.dumps(batch))
        run = torchrun("unityc.runtime.batch", ranks, str(manifest), timeout=1800)
        result.outputs[ranks] = run.output
        result.sections.update(_sections(run.output))
    return result


@pytest.mark.parametrize(("name", "ranks"), [(p[0], p[1]) for p in PLANS], ids=[p[0] for p in PLANS])
def test_pipelined_plan_trains_like_the_reference(runs: Runs, name: str, ranks: int) -> None:
    section = runs.section(name, ranks)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    assert "gradients (worst" in section and "weights (worst" in section
    text = runs.texts[name]
    assert "PIPELINE = rt.Pipeline(" in text and "def stage_1(" in text
    assert "flops=" in text and "predicted_s=" in text  # progress lines report MFU as for any plan


@pytest.mark.parametrize(("name", "ranks"), [t[:2] for t in TENSOR], ids=[t[0] for t in TENSOR])
def test_tensor_parallel_stages_train_like_the_reference(runs: Runs, name: str, ranks: int) -> None:
    """Each stage's all-reduces run in its code on its tensor group's process group; the loss,
    held in copies over the last group, seeds the backward once. On 8 ranks each stage's weights
    are also copied over its 2 data-parallel replicas (their gradients averaged across them)."""
    section = runs.section(name, ranks)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    assert "gradients (worst" in section and "weights (worst" in section
    text = runs.texts[name]
    last = f"({ranks - 2}, {ranks - 1})"  # the last stage's last tensor-parallel pair
    assert f'Collective("all_reduce", ins={last}, outs={last}' in text
    assert last in text.split("groups=", 1)[1].split("\n", 1)[0]  # PLAN's groups hold the stage's
    replicas = "copy=2, pieces={0: (0, 0, 0, 0), 1: (1, 0, 0, 0), 2: (0, 0, 0, 1)"
    assert (f'"fc.0.weight": Layout((64, 32), "float32", shard=(2, 1), {replicas}' in text) == (ranks == 8)


def test_zero_and_recompute_run_inside_stages(runs: Runs) -> None:
    section = runs.section(LEVERS, 4)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    assert "(as the memory model predicts)" in section  # the shards' bytes
    text = runs.texts[LEVERS]
    assert "'fc.0.weight': 2" in text and "'fc.4.weight': 3" in text
    stages = text.split("def stage_1(")
    assert all("= checkpoint(_recompute_1, " in part for part in stages)


def test_hybrid_stages_are_data_parallel(runs: Runs) -> None:
    """On 4 ranks, 2 stages run on 2 ranks each: every stage function runs on its pair."""
    text = runs.texts["bert-1f1b-hybrid-4"]
    assert "PIPELINE = rt.Pipeline('1f1b', 2, ((0, 1), (2, 3)))" in text
    assert '"""Stage 1 on ranks 2, 3, one micro-batch' in text


def test_summed_microbatch_losses_fail_the_check(runs: Runs) -> None:
    section = runs.section(SUMMED, 2)
    assert section.endswith("exit 1"), section
    assert "check failed at step 1: loss differs" in section


def test_each_step_trains_on_its_own_batch(runs: Runs) -> None:
    """`--data` batches reach the stages (the reference trains on the same batches): a pipelined
    run fed the example batch every step would fail the check at step 1."""
    section = runs.section(DATA, 2)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section


def test_a_resumed_pipeline_repeats_the_uninterrupted_run(runs: Runs) -> None:
    """Weights, Adam's state and the step come back from the checkpoint, and the data resumes at
    the step: the losses of steps 2 and 3 are the uninterrupted run's, digit for digit."""
    losses = {}
    for name in ("full", "half", "resume"):
        section = runs.section(f"{RESUME}-{name}", 2)
        assert section.endswith("exit 0"), section
        losses[name] = {int(k): v for k, v in re.findall(r"^step (\d+): loss ([0-9.]+)", section, re.M)}
    assert sorted(losses["full"]) == [1, 2, 3] and losses["half"] == {1: losses["full"][1]}
    assert losses["resume"] == {k: losses["full"][k] for k in (2, 3)}, losses
    assert "check passed: 2 step(s)" in runs.section(f"{RESUME}-resume", 2)


def test_a_tied_weight_is_held_by_each_stage_reading_it(runs: Runs) -> None:
    """Megatron-LM's tied embedding: BERT's word embedding, read on both stages, is one weight
    held in a copy on each stage (PLAN and the checkpoint know one key), loaded equal, and its
    copies' gradients summed over the two ranks after the schedule: the check compares the
    gradient and the updated weight (every copy) with single-device PyTorch, also after resuming
    from a checkpoint. No stage sends it to another."""
    text = runs.texts["bert-1f1b-2"]
    layout = (
        '"word_embeddings.weight": Layout((128, 32), "float32", shard=(1, 1), copy=2, '
        "pieces={0: (0, 0, 0, 0), 1: (0, 0, 0, 1)})"
    )
    assert layout in text
    stage_0, stage_1 = text.split("def stage_1(")
    assert 'w.get("word_embeddings.weight")' in stage_0 and 'w.get("word_embeddings.weight")' in stage_1
    assert "word_embeddings_weight" not in stage_1.split("-> tuple:", 1)[0]  # not received
    for name in ("bert-1f1b-2", "bert-1f1b-hybrid-4"):
        section = runs.section(name, 2 if name.endswith("-2") else 4)
        assert "weights (worst" in section and "check passed: 2 step(s)" in section, section
    assert runs.section(f"{TIED}-half", 2).endswith("exit 0")
    resumed = runs.section(f"{TIED}-resume", 2)
    assert resumed.endswith("exit 0") and "check passed: 1 step(s)" in resumed, resumed
