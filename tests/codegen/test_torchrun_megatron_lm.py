"""The `megatron-lm` baseline's plans run exactly under torchrun (`--check`: loss, outputs, every
gradient and updated weight against single-device PyTorch, Adam), on a Hugging Face Llama
(4 heads), sequence parallel in every tensor group (Megatron-LM's default, Korthikanti et al.
2022: norms and residual adds sharded on the sequence, reduce-scatter and all-gather in place of
each all-reduce):

* on 4 gloo processes (one torchrun, `unityc.runtime.batch`), batch 4:
  * tensor 2 x pipeline 2, 2 chunks per stage group (interleaved 1F1B), 4 micro-batches of 1,
    ZeRO-1 on the weights the tensor group replicates (the norms), the attention recomputed;
  * tensor 2 x data 2 in one stage: 2 micro-batches of 1 per replica accumulated before one
    gradient sync and update, ZeRO-1 over the data-parallel copies;
* on 8 gloo processes, batch 8, the 3-D plan of issue 25: tensor 2 x pipeline 2 x data 2 with
  ZeRO-1, sequence parallelism, 2 micro-batches per pipeline flush and 2 gradient accumulation
  steps (`unityc.accumulation = 2`: the schedule runs twice before one sync and update);
* in the same two launches, the other shapes the joint search's 3-D candidates
  (`three_d_plans`) take, built by the function the search builds them with (`build`, one
  `Layout` each): data 4 in one stage with 2 micro-batches of 2 rows and no recomputation (the
  shape the search returns for BERT-Large on 8 x 8 GiB, `benchmarks/accumulation.py`), interleaved
  chunks with tensor and data parallelism, tensor 2 x data 4 with sequence parallelism and no
  recomputation; and tensor 2 x pipeline 2 x data 2 with ZeRO-2 (micro-batches of 2 rows, full
  recomputation) and with ZeRO-3 (sequence parallel, the attention recomputed): the sharded
  shapes `three_d_plans` tries where ZeRO-1 needs more stages, ZeRO-3's gathers and ZeRO-2/3's
  reduce-scatters after each micro-batch's backward inside torch pipeline stages, each rank's
  shards as the memory model predicts; and context 2 x tensor 2 (sequence parallel) and
  context 2 x pipeline 2 (issue 41: every attention split over the sequence by the ring);
* in the 4-rank launch too, issue 41's cells (`CONTEXT`): tiny HF Llama (grouped-query heads,
  rotary) and GPT-2 (learned positions, its flattened Conv1D projections kept on the sequence)
  at sequence 256 with a padding mask, fp32 and bf16-mixed: context 4 and data 2 x context 2
  (2 samples per replica), by the ring and by the all-to-all, context 2 x tensor 2 and context
  2 x pipeline 2;
* in the 4-rank launch too, issue 40's cells (`EXPERTS`): tiny HF Mixtral and Qwen2-MoE with
  expert parallelism 2 beside tensor 2 (fp32, bf16-mixed) and beside pipeline 2 (bf16-mixed), and
  tiny DeepSeek-V3 (latent attention, grouped router, its rotary's zero buffer a batch-sized
  splat that each micro-batch cuts) with expert parallelism 2 beside pipeline 2.

Every program runs 2 steps (the second starts from weights the first updated, Adam's moments
included), and each model spec is imported once for the whole fixture (`Imports`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from test_torchrun import _sections
from torchrun import torchrun, write_program
from xdsl.dialects.builtin import ModuleOp, StringAttr

from unityc.dialects.container import graph_function
from unityc.dialects.precision import BF16_MIXED, precision_attrs
from unityc.dialects.source import make_context, parse_source
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module, to_module
from unityc.machine.presets import preset
from unityc.search.baselines import megatron_lm
from unityc.search.layout import FULL, NONE, SELECTIVE, Layout
from unityc.search.megatron_lm import build
from unityc.search.pipeline import plain_graph
from unityc.search.plans import Pricing
from unityc.search.unity import UnityOptions

pytestmark = pytest.mark.torchrun

# (name, tensor, stages, virtual, expected note)
PLANS = [
    ("llama-tp2-pp2-interleaved", 2, 2, 2, "data 1 x tensor 2 x pipeline 2, 2 chunks per stage group"),
    ("llama-tp2-dp2-accumulated", 2, 1, 0, "data 2 x tensor 2 x pipeline 1, 1f1b, 2 micro-batches"),
]
THREE_D = "llama-tp2-pp2-dp2-acc2-sp"
ACCUMULATION = 2
STEPS = 2
ARGS = ["--check", "--optimizer", "adam", "--steps", str(STEPS)]

# (name, devices, batch, Layout): the 3-D candidates' other shapes
SHAPES = [
    ("3d-dp4-mb2-rows2-none", 4, 16, Layout(data=4, microbatches=2, microbatch_size=2, zero=1)),
    (
        "3d-tp2-pp2-dp2-rows2-full-zero2",
        8,
        8,
        Layout(data=2, tensor=2, pipeline=2, microbatches=2, microbatch_size=2, zero=2, recompute=FULL),
    ),
    (
        "3d-tp2-pp2-dp2-sp-selective-zero3",
        8,
        8,
        Layout(data=2, tensor=2, pipeline=2, microbatches=4, sequence=True, zero=3, recompute=SELECTIVE),
    ),
    (
        "3d-tp2-pp2-dp2-v2-sp-selective",
        8,
        8,
        Layout(
            data=2,
            tensor=2,
            pipeline=2,
            virtual=2,
            microbatches=2,
            sequence=True,
            zero=1,
            recompute=SELECTIVE,
        ),
    ),
    ("3d-tp2-dp4-sp-none", 8, 8, Layout(data=4, tensor=2, microbatches=2, sequence=True, zero=1)),
    (  # context parallelism (issue 41): the ring inside a tensor group, then beside a pipeline
        "3d-cp2-tp2-sp-selective",
        4,
        4,
        Layout(context=2, tensor=2, microbatches=4, sequence=True, zero=1, recompute=SELECTIVE),
    ),
    (
        "3d-cp2-pp2-selective",
        4,
        4,
        Layout(context=2, pipeline=2, microbatches=4, zero=1, recompute=SELECTIVE),
    ),
]


# issue 41's Done-when cells: (model, precision) x (name, Layout), batch 4 at sequence 256
CONTEXT_MODELS = [(m, p) for m in ("llama", "gpt2") for p in ("fp32", "bf16")]
CONTEXT_LAYOUTS = [
    ("cp4-ring", Layout(context=4, microbatches=4)),
    ("cp4-a2a", Layout(context=4, microbatches=4, exchange="all-to-all")),
    ("dp2-cp2-rows2-ring", Layout(data=2, context=2, microbatch_size=2)),
    ("dp2-cp2-rows2-a2a", Layout(data=2, context=2, microbatch_size=2, exchange="all-to-all")),
    ("cp2-tp2-sp", Layout(context=2, tensor=2, microbatches=4, sequence=True, zero=1, recompute=SELECTIVE)),
    ("cp2-pp2", Layout(context=2, pipeline=2, microbatches=4, zero=1, recompute=SELECTIVE)),
]
CONTEXT = [(f"{m}-{p}-{n}", m, p, layout) for m, p in CONTEXT_MODELS for n, layout in CONTEXT_LAYOUTS]

# issue 40: expert parallelism beside tensor and pipeline parallelism, in the 4-rank launch:
# (name, HF config, precision, Layout), tiny configs (4 experts, top-2), batch 4, 2 steps
EXPERT_LEVERS = {"microbatches": 2, "zero": 1, "recompute": SELECTIVE}
EXPERTS = [
    ("mixtral-fp32-ep2-tp2", "MixtralConfig", "fp32", Layout(data=2, tensor=2, expert=2, **EXPERT_LEVERS)),
    ("mixtral-bf16-ep2-pp2", "MixtralConfig", "bf16", Layout(data=2, pipeline=2, expert=2, **EXPERT_LEVERS)),
    ("qwen2moe-bf16-ep2-tp2", "Qwen2MoeConfig", "bf16", Layout(data=2, tensor=2, expert=2, **EXPERT_LEVERS)),
    # DeepSeek-V3's rotary writes into a zero buffer: a batch-sized splat each micro-batch cuts
    (
        "deepseek-fp32-ep2-pp2",
        "DeepseekV3Config",
        "fp32",
        Layout(data=2, pipeline=2, expert=2, **EXPERT_LEVERS),
    ),
]
MOE_LAYERS = {"DeepseekV3Config": 1}
"""The tiny configs' MoE layers where not 2 (DeepSeek-V3's first layer is dense)."""


def context_spec(model: str) -> ModelSpec:
    """The tiny model at sequence 256 (dropout off: an attention with dropout is not split),
    batch 4, every other sequence ending in padding (`example_inputs`)."""
    settings = (("seq", "256"),) + ((("dropout", "0"),) if model == "gpt2" else ())
    return ModelSpec(f"hf:{model}", "small", 4, settings)


def llama(batch: int) -> ModelSpec:
    return ModelSpec("hf:llama", "small", batch=batch)


class Imports:
    """Each model spec imported once (an import is seconds; the fixture's plans share them)."""

    def __init__(self) -> None:
        self.modules: dict[ModelSpec, ModuleOp] = {}

    def module(self, spec: ModelSpec) -> ModuleOp:
        if spec not in self.modules:
            self.modules[spec] = import_model(spec)
        return self.modules[spec]

    def graph(self, spec: ModelSpec, precision: str = "fp32") -> Graph:
        """The plain graph of `spec`, fp32 or bf16-mixed (on a copy: the import stays fp32)."""
        module = self.module(spec)
        if precision == "bf16":
            module = module.clone()
            graph_function(module).attributes.update(precision_attrs(BF16_MIXED))
        return plain_graph(from_module(module))


OUTPUTS = "outputs.json"
"""The launches' outputs beside the plans' MLIR (`Runs.write`), for the other xdist workers."""


@dataclass
class Runs:
    plans: dict[str, Graph] = field(default_factory=dict)
    sections: dict[str, str] = field(default_factory=dict)
    reports: list[str] = field(default_factory=list)
    """Each launch's `Run.report` (why a program has no output)."""

    def section(self, name: str) -> str:
        if name not in self.sections:
            raise AssertionError(f"no output for {name}\n" + "\n".join(self.reports))
        return self.sections[name]

    def write(self, directory: Path) -> None:
        """The outputs, after every plan's `NAME.mlir` (`write_program`) is in `directory`."""
        outputs = {"plans": list(self.plans), "sections": self.sections, "reports": self.reports}
        (directory / OUTPUTS).write_text(json.dumps(outputs))

    @staticmethod
    def read(directory: Path) -> Runs:
        """What `write` left: each plan parsed from the MLIR its program was generated from."""
        outputs = json.loads((directory / OUTPUTS).read_text())
        plans = {}
        for name in outputs["plans"]:
            text = (directory / f"{name}.mlir").read_text()
            plans[name] = from_module(parse_source(make_context(), text, f"{name}.mlir"))
        return Runs(plans, outputs["sections"], outputs["reports"])


def three_d_plan(imports: Imports) -> Graph:
    """Tensor 2 x pipeline 2 x data 2 on cpu:8, batch 8: 2 accumulation steps of 4 rows, each
    a 1F1B flush of 2 micro-batches of 1 row per replica; ZeRO-1, selective recomputation,
    sequence parallel."""
    graph = imports.graph(llama(8))
    config = Layout(
        data=2,
        tensor=2,
        pipeline=2,
        microbatches=8 // 2 // ACCUMULATION,
        recompute=SELECTIVE,
        sequence=True,
        zero=1,
    )
    plan = build(graph, preset("cpu:8"), config, Pricing(optimizer="adam")).graph
    plan.set_plan(replace(plan.plan, accumulation=ACCUMULATION))
    return plan


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The plans and both launches' outputs. Under pytest-xdist (`make test`: `-n 2`) each worker
    that draws one of this module's tests sets the fixture up: the first to take the lock in the
    session's shared directory builds and launches, the others wait and read its outputs, so
    the launches run once per session."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return launch(tmp_path_factory.mktemp("megatron_lm"))
    directory = tmp_path_factory.getbasetemp().parent / "megatron_lm"
    directory.mkdir(exist_ok=True)
    with open(directory / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (directory / OUTPUTS).exists():
            return Runs.read(directory)
        result = launch(directory)
        result.write(directory)
        return result


def launch(directory: Path) -> Runs:
    """Builds every plan, writes its program to `directory` and runs them in one torchrun per
    process count (`unityc.runtime.batch`)."""
    result = Runs()
    imports = Imports()
    module = imports.module(llama(4))
    for name, tensor, stages, virtual, note in PLANS:
        options = UnityOptions(optimizer="adam")
        plan = megatron_lm(from_module(module), preset("cpu:4"), options, None, tensor, stages, virtual)
        assert plan.note.startswith(note) and plan.note.endswith("sequence parallel"), plan.note
        assert plan.estimate.fits
        result.plans[name] = plan.graph
    result.plans[THREE_D] = three_d_plan(imports)
    for name, devices, batch, config in SHAPES:
        graph = imports.graph(llama(batch))
        plan = build(graph, preset(f"cpu:{devices}"), config, Pricing(optimizer="adam"), "3-d")
        assert plan.note == config.describe() and plan.estimate.fits, plan.note
        result.plans[name] = plan.graph
    for m, p in CONTEXT_MODELS:
        graph = imports.graph(context_spec(m), p)
        for name, model, precision, config in CONTEXT:
            if (model, precision) == (m, p):
                plan = build(graph, preset("cpu:4"), config, Pricing(optimizer="adam"), "3-d")
                assert plan.note == config.describe() and plan.estimate.fits, plan.note
                result.plans[name] = plan.graph
    for name, config_class, precision, config in EXPERTS:
        graph = imports.graph(ModelSpec(f"hf:{config_class}", "small", 4), precision)
        plan = build(graph, preset("cpu:4"), config, Pricing(optimizer="adam"), "3-d")
        assert plan.note == config.describe() and plan.estimate.fits, plan.note
        result.plans[name] = plan.graph
    launches = {4: [p[0] for p in PLANS], 8: [THREE_D]}
    for name, devices, _, _ in SHAPES:
        launches[devices].append(name)
    launches[4] += [c[0] for c in CONTEXT] + [e[0] for e in EXPERTS]
    for nproc, names in launches.items():
        entries = []
        for name in names:
            graph = result.plans[name]
            graph.module_attrs["unityc.machine"] = StringAttr(f"cpu:{nproc}")
            program = write_program(to_module(graph), directory, name)
            entries.append({"name": name, "program": str(program), "args": ARGS})
        manifest = directory / f"batch{nproc}.json"
        manifest.write_text(json.dumps(entries))
        run = torchrun("unityc.runtime.batch", nproc, str(manifest), cwd=directory)
        result.reports.append(run.report())
        result.sections.update(_sections(run.output))
    return result


def collectives(graph: Graph) -> set[str]:
    return {n.op for n in graph.nodes.values() if n.op.startswith("parallel.") and "all" in n.op}


@pytest.mark.parametrize("name", [p[0] for p in PLANS] + [THREE_D])
def test_megatron_lm_plan_trains_exactly(runs: Runs, name: str) -> None:
    plan = runs.plans[name]
    assert any(n.zero == 1 for n in plan.nodes.values())
    assert any(n.recompute and n.op == "pcg.attention" for n in plan.nodes.values())
    assert {"parallel.reduce_scatter", "parallel.all_gather"} <= collectives(plan)
    assert "parallel.all_reduce" not in collectives(plan)  # every one became sequence parallel
    section = runs.section(name)
    assert section.endswith("exit 0") and f"check passed: {STEPS} step(s)" in section, section
    assert "gradients (worst" in section and "weights (worst" in section


@pytest.mark.parametrize("name, config", [(s[0], s[3]) for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_three_d_candidate_shape_trains_exactly(runs: Runs, name: str, config: Layout) -> None:
    plan = runs.plans[name]
    ops = [n for n in plan.nodes.values() if n.op.startswith("pcg.") and not n.is_source]
    assert any(n.recompute and n.op == "pcg.attention" for n in ops) == (config.recompute != NONE)
    assert all(n.recompute for n in ops) == (config.recompute == FULL)
    weights = [n for n in plan.nodes.values() if n.op == "pcg.weight"]
    assert any(n.zero for n in weights) and all(n.zero in (0, config.zero) for n in weights)
    assert ("parallel.reduce_scatter" in collectives(plan)) == config.sequence
    copies = config.data * config.context  # (context parallelism shards no weight)
    assert any(n.types[0].copy_degree == copies for n in plan.nodes.values() if n.op == "pcg.weight")
    if config.context > 1:
        attentions = [n for n in ops if n.op == "pcg.attention"]
        assert attentions and all(plan.type_of(n.operands[1]).shard[1] == config.context for n in attentions)
    if config.pipeline > 1:
        assert len({n.stage for n in plan.nodes.values()} - {None}) == config.pipeline * config.virtual
    assert plan.plan.pipeline is not None and plan.plan.pipeline.microbatches == config.microbatches
    section = runs.section(name)
    assert section.endswith("exit 0") and f"check passed: {STEPS} step(s)" in section, section
    assert "gradients (worst" in section and "weights (worst" in section
    assert "(as the memory model predicts)" in section  # each rank's shards, ZeRO-2/3 included


def test_three_d_plan_has_every_dimension(runs: Runs) -> None:
    plan = runs.plans[THREE_D]
    assert plan.plan.accumulation == ACCUMULATION
    assert plan.plan.pipeline is not None and plan.plan.pipeline.microbatches == 2
    assert {n.stage for n in plan.nodes.values()} - {None} == {0, 1}
    weights = [n.types[0] for n in plan.nodes.values() if n.op == "pcg.weight"]
    assert any(t.copy_degree == 2 and max(t.shard) == 2 for t in weights)  # tensor 2 within data 2


@pytest.mark.parametrize(
    "name, precision, config", [(c[0], c[2], c[3]) for c in CONTEXT], ids=[c[0] for c in CONTEXT]
)
def test_context_cell_trains_exactly(runs: Runs, name: str, precision: str, config: Layout) -> None:
    """Issue 41's cells: every attention split over the sequence by the layout's exchange (the
    token stream sharded on the sequence through GPT-2's positions and MLPs too), the weights
    in data x context copies, and the plan trains like single-device PyTorch (`--check`; under
    bf16-mixed against the autocast reference)."""
    plan = runs.plans[name]
    attentions = [n for n in plan.nodes.values() if n.op == "pcg.attention"]
    assert len(attentions) == 2 and all(n.attr("context") == config.exchange for n in attentions)
    assert all(plan.type_of(n.operands[0]).shard[1] % config.context == 0 for n in attentions)  # type: ignore[arg-type]
    projections = [n for n in plan.nodes.values() if n.op == "pcg.linear" and n.types[0].rank == 3]
    assert len(projections) > 2 and all(n.types[0].shard[1] % config.context == 0 for n in projections)
    weights = [n for n in plan.nodes.values() if n.op == "pcg.weight"]
    assert any(n.types[0].copy_degree == config.data * config.context for n in weights)
    section = runs.section(name)
    assert section.endswith("exit 0") and f"check passed: {STEPS} step(s)" in section, section
    assert "gradients (worst" in section and "weights (worst" in section
    assert ("bf16-mixed (autocast)" in section) == (precision == "bf16")


@pytest.mark.parametrize("name, config_class, precision, config", EXPERTS, ids=[e[0] for e in EXPERTS])
def test_expert_parallel_cell_trains_exactly(
    runs: Runs, name: str, config_class: str, precision: str, config: Layout
) -> None:
    """Issue 40's EP 2 x TP 2 and EP 2 x PP 2 cells on 4 ranks: every `pcg.experts`'s experts
    split 2 ways within the data replicas (each slice copied over its expert-data group), beside
    the attention's tensor split or the pipeline's stages, and the plan trains like single-device
    PyTorch (`--check`, the router's gradient included; bf16-mixed against the autocast
    reference, the routers' softmax in fp32 as the models compute it)."""
    plan = runs.plans[name]
    experts = [n for n in plan.nodes.values() if n.op == "pcg.experts"]
    assert len(experts) == MOE_LAYERS.get(config_class, 2)
    for node in experts:
        gate_up = plan.type_of(node.operands[3])  # type: ignore[arg-type]
        assert gate_up.shard[0] == config.expert
        assert gate_up.copy_degree == config.data * config.tensor // config.expert
    if config.pipeline > 1:
        assert {n.stage for n in plan.nodes.values()} - {None} == {0, 1}
    queries = [
        n.types[0]
        for n in plan.nodes.values()
        if n.op == "pcg.weight" and re.search(r"\.q_(b_)?proj\.", str(n.attr("key")))
    ]  # (DeepSeek-V3's latent attention: q_a_proj to the rank, q_b_proj to the heads)
    assert queries and all(t.shard[0] == config.tensor for t in queries)  # attention split by heads
    section = runs.section(name)
    assert section.endswith("exit 0") and f"check passed: {STEPS} step(s)" in section, section
    assert "gradients (worst" in section and "weights (worst" in section
    assert ("bf16-mixed (autocast)" in section) == (precision == "bf16")
