"""The memory model follows the program (issue 38 item 5): for each plan kind, the bytes the
generated program keeps for backward on each rank, counted by `--saved-bytes`
(`unityc/runtime/saved.py`: a saved-tensor hook over unique storages, parameters and their views
excluded), equal the estimate's stored activations of that device (`DeviceMemory.activations`:
one micro-batch's saved tensors times the micro-batches in flight) within 5 %.

The plans are built by the function the `megatron-lm` baseline and the joint search's 3-D
candidates use (`search.megatron_lm.build`, one `Config` each) on 2 gloo ranks, tiny Hugging Face
configs: data parallel, Megatron tensor x sequence (the column-parallel linears keep the
sequence shard, `runtime.regather`; with selective recomputation the checkpoint runs the
all-gather itself), ZeRO-1 and ZeRO-3 (ZeRO-1/2 in bf16-mixed
hold bf16 pieces, whose reads keep no autocast copy, `runtime.zero`), a 1F1B pipeline of two stages with
two micro-batches, selective and full recomputation, two accumulated micro-batches (Llama in fp32,
most in bf16-mixed too: the 1F1B stage 0 holds two micro-batches but one bf16 copy of each weight,
made once per step, `runtime.precision.step_region`), and data parallel GPT-2 and BERT (dropout,
attention dropout, LayerNorm, learned positions), and GPT-2's 1F1B pipeline in bf16-mixed (its
transposed Conv1D weights are views of the weights' bf16 copies, also made once per step,
`runtime.precision.step_cast`), and its Megatron tensor x sequence plan with selective
recomputation in bf16-mixed (the flattened Conv1D projections kept on the tokens so the sequence
split runs through the MLP; the recomputed attention's checkpoint keeps the step's bf16 copies
of its weight views as inputs). All in one torchrun (`unityc.runtime.batch`),
two steps each, no --check (the figure is the second step's: the first also runs torch's
pipeline shape inference; dropout is off under --check). The test prints each figure (`-s`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_torchrun import _sections
from torchrun import Run, torchrun, write_program
from xdsl.dialects.builtin import StringAttr

from unityc.dialects.container import graph_function
from unityc.dialects.precision import BF16_MIXED, FP32, precision_attrs
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.machine.presets import preset
from unityc.models.huggingface import SmallDefaultsWarning
from unityc.search.layout import FULL, NONE, SELECTIVE, Layout
from unityc.search.megatron_lm import Config, build
from unityc.search.pipeline import plain_graph
from unityc.search.plans import Pricing

TOLERANCE = 0.05
MACHINE = "cpu:2"

KINDS = {
    "data": Config(1, 1, 2, 1, 1, NONE),
    "tensor-sequence": Config(2, 1, 1, 1, 1, NONE, sequence=True),
    "tensor-sequence-selective": Config(2, 1, 1, 1, 1, SELECTIVE, sequence=True),
    "zero3": Config(1, 1, 2, 1, 1, NONE, zero=3),
    "zero1": Config(1, 1, 2, 1, 1, NONE, zero=1),
    "1f1b": Config(1, 2, 1, 1, 2, NONE),
    "selective": Config(1, 1, 2, 1, 1, SELECTIVE),
    "full": Config(1, 1, 2, 1, 1, FULL),
    "accumulation": Config(1, 1, 2, 1, 2, NONE),
}

# (model, precision, kind)
CASES = [
    *(("llama", FP32, kind) for kind in KINDS),
    *(
        ("llama", BF16_MIXED, kind)
        for kind in ("data", "tensor-sequence", "zero3", "1f1b", "selective", "accumulation")
    ),
    ("llama", BF16_MIXED, "tensor-sequence-selective"),  # the checkpoint runs its all-gather
    ("llama", BF16_MIXED, "zero1"),  # bf16 pieces: no autocast copy of the weights to keep
    ("gpt2", FP32, "data"),
    ("gpt2", BF16_MIXED, "data"),
    ("gpt2", BF16_MIXED, "1f1b"),  # the transposed Conv1D weights' bf16 copies: once per step
    ("gpt2", BF16_MIXED, "zero1"),  # the Conv1D weights' bf16 pieces, read through transposes
    # GPT-2's projections on the sequence shards (`tokens.unflatten_tokens`), its tanh GELU one
    # op; the checkpointed attention keeps its weights' bf16 copies as inputs, once per step
    ("gpt2", BF16_MIXED, "tensor-sequence-selective"),
    ("bert", BF16_MIXED, "data"),
]

# On 4 ranks (`MACHINE_4`), a 4-layer Llama at batch 8: the plan kinds that need more than two
# devices or more than two layers: ZeRO-2, tensor x sequence beside data parallelism, the
# interleaved pipeline (2 stages of 2 chunks each, 4 micro-batches), 1F1B beside tensor x
# sequence, and the interleaved pipeline with selective recomputation in bf16-mixed.
MACHINE_4 = "cpu:4"
MODEL_4 = (("layers", "4"),)
KINDS_4 = {
    "zero2": Config(1, 1, 4, 1, 1, NONE, zero=2),
    "tensor-sequence-data": Config(2, 1, 2, 1, 1, NONE, sequence=True),
    "interleaved": Config(1, 2, 2, 2, 4, NONE),
    "1f1b-tensor-sequence": Config(2, 2, 1, 1, 2, NONE, sequence=True),
    "interleaved-selective": Config(1, 2, 2, 2, 4, SELECTIVE),
}
KNOWN_4: dict[tuple[str, str], pytest.MarkDecorator] = {}
"""Known gaps, (precision, kind) -> an xfail mark: none (the interleaved pipeline's last group,
once 12-16 % over its estimate, was the stages' shares leaving out attention's internals,
`cost.staged._stage_activations`)."""
CASES_4 = [
    *(("llama", FP32, kind) for kind in KINDS_4),
    ("llama", BF16_MIXED, "tensor-sequence-data"),
    ("llama", BF16_MIXED, "zero2"),
    ("llama", BF16_MIXED, "interleaved-selective"),
]


def case_name(model: str, precision: str, kind: str) -> str:
    return f"{model}-{precision}-{kind}"


@dataclass
class Runs:
    estimated: dict[str, dict[int, float]] = field(default_factory=dict)
    measured: dict[str, list[dict]] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)
    run: Run | None = None


def measure(
    directory: Path,
    cases: Sequence[tuple[str, str, str]],
    kinds: Mapping[str, Layout] = KINDS,
    machine: str = MACHINE,
    batch: int = 4,
    overrides: tuple[tuple[str, str], ...] = (),
) -> Runs:
    """Each case's plan on `machine`, estimated, then run in one torchrun with --saved-bytes on
    as many ranks as `machine` has devices (also what `benchmarks/program_memory_plans.py` runs)."""
    result = Runs()
    entries = []
    modules = {}
    for model, precision, kind in cases:
        if (model, precision) not in modules:
            module = import_model(ModelSpec(f"hf:{model}", "small", batch=batch, overrides=overrides))
            graph_function(module).attributes.update(precision_attrs(precision))
            modules[model, precision] = module
        name = case_name(model, precision, kind)
        graph = plain_graph(from_module(modules[model, precision]))
        plan = build(graph, preset(machine), kinds[kind], Pricing(optimizer="sgd"), kind)
        result.estimated[name] = {row.device: row.memory.activations for row in plan.estimate.devices}
        plan.graph.module_attrs["unityc.machine"] = StringAttr(machine)
        program = write_program(to_module(plan.graph), directory, name)
        saved = directory / f"{name}.json"
        args = ["--steps", "2", "--warmup", "0", "--saved-bytes", str(saved)]
        entries.append({"name": name, "program": str(program), "args": args})
    manifest = directory / "batch.json"
    manifest.write_text(json.dumps(entries))
    result.run = torchrun("unityc.runtime.batch", preset(machine).num_devices, str(manifest), cwd=directory)
    result.sections = _sections(result.run.output)
    for entry in entries:
        path = Path(entry["args"][-1])
        if path.exists():
            result.measured[entry["name"]] = json.loads(path.read_text())["ranks"]
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return measure(tmp_path_factory.mktemp("saved_bytes"), CASES)


@pytest.fixture(scope="module")
def runs_4(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    with pytest.warns(SmallDefaultsWarning):
        return measure(tmp_path_factory.mktemp("saved_bytes_4"), CASES_4, KINDS_4, MACHINE_4, 8, MODEL_4)


@pytest.mark.torchrun
@pytest.mark.parametrize(
    "model, precision, kind",
    [pytest.param(m, p, k, id=case_name(m, p, k)) for m, p, k in CASES],
)
def test_estimate_follows_the_saved_bytes(runs: Runs, model: str, precision: str, kind: str) -> None:
    check_case(runs, case_name(model, precision, kind))


@pytest.mark.torchrun
@pytest.mark.parametrize(
    "model, precision, kind",
    [pytest.param(m, p, k, id=case_name(m, p, k), marks=KNOWN_4.get((p, k), ())) for m, p, k in CASES_4],
)
def test_estimate_follows_the_saved_bytes_on_4_ranks(
    runs_4: Runs, model: str, precision: str, kind: str
) -> None:
    check_case(runs_4, case_name(model, precision, kind))


def check_case(runs: Runs, name: str) -> None:
    assert runs.run is not None
    records = runs.measured.get(name)
    assert records is not None, f"no --saved-bytes record for {name}\n{runs.run.report()}"
    assert runs.sections.get(name, "").endswith("exit 0"), runs.sections.get(name)
    lines, wrong = [], []
    for rank, record in enumerate(records):
        measured = record["peak_bytes"]
        estimated = runs.estimated[name].get(rank, 0.0)
        lines.append(
            f"rank {rank}: measured {measured} B {record['forward_by_dtype']}, estimated {estimated:.0f} B"
        )
        assert measured > 0, lines[-1]
        if abs(estimated - measured) > TOLERANCE * measured:
            wrong.append(lines[-1])
    print(f"{name}: " + "; ".join(lines))
    assert not wrong, f"{name}: the estimate is more than {TOLERANCE:.0%} off: " + "; ".join(wrong)
