"""Differential tests: generated programs under torchrun (gloo) train exactly like the
single-device reference (`--check`: loss, outputs, every gradient and every updated weight
within 1e-4 relative error in fp32, or 1e-9 in float64, every step).

Plans: built from the small zoo models by `strategies.py` (checked by the interpreter first),
a hand-written plan through `unityc-opt -t torch`, and the plans `--unity-search` finds for
cpu:2 and cpu:4. To keep start-up costs down, all 2-process programs run in one torchrun and all
4-process ones in another (`unityc.runtime.batch`); each test reads its program's section.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from opt_runs import Call, opt_chains
from strategies import build
from torchrun import TIMEOUT_S, Run, sections, torchrun, without_compiler, write_program

from unityc.dialects.container import graph_function
from unityc.dialects.precision import BF16_MIXED as BF16
from unityc.dialects.precision import precision_attrs
from unityc.frontend import ModelSpec, import_model
from unityc.tools import demo

pytestmark = pytest.mark.torchrun
_sections = sections  # the name the sibling test modules import

PLAN_DIR = Path(__file__).parent.parent / "filecheck" / "codegen" / "Inputs"
FLOAT64 = ("--float64", "--tolerance", "1e-9")
ADAM = ("--optimizer", "adam")

# (plan, processes, extra flags)
PLANS = [
    ("mlp-data-2", 2, ()),
    ("mlp-tensor-2", 2, ADAM),
    ("mlp-reduction-2", 2, ()),
    ("bert-data-2", 2, ()),
    ("bert-megatron-2", 2, ADAM),
    ("dlrm-hybrid-2", 2, ADAM),
    ("resnext50-channels-2", 2, ()),
    ("inception_v3-data-2", 2, FLOAT64),  # fp32 noise of this deep CNN exceeds 1e-4 by itself
    ("xdl-data-2", 2, ()),
    ("candle_uno-data-2", 2, ADAM),
    ("mlp-data-4", 4, ()),
    ("mlp-hybrid-4", 4, ()),
    ("bert-heads-4", 4, ()),
    ("dlrm-hybrid-4", 4, ()),
    ("collectives-4", 4, ADAM),
    ("ignored-hybrid-4", 4, ADAM),  # ignore_index; rows x classes (vocabulary-parallel) sharded
]
ZOO = ["mlp", "bert", "dlrm", "xdl", "candle_uno", "resnext50", "inception_v3"]
# Small configs are too small for parallelism to pay on cpu:N (the search rightly keeps them on
# one process); these larger ones make it choose parallel plans, which must train exactly too.
PARALLEL_SPECS = {
    "mlp_wide": ModelSpec("mlp", "small", batch=demo.BATCH, overrides=tuple(demo.CONFIG.items())),
    "bert_b512": ModelSpec("bert", "small", batch=512),
}
SEARCH_FLAGS = {"mlp_wide": ("--budget", str(demo.DEMO_BUDGET))}
"""The demo's model is searched as the demo searches it (the default budget settles for a
point-to-point placement of the towers, without parallel ops)."""
SEARCHES = [(model, n) for n in (2, 4) for model in [*ZOO, *PARALLEL_SPECS]]
# The `megatron` baseline's plans (tensor parallel 2 on cpu:2; data 2 x tensor 2 on cpu:4)
LLAMA = str(Path(__file__).parent.parent / "search" / "Inputs" / "llama_like.py") + ":make"
MEGATRON_SPECS = {
    "bert": ModelSpec("bert", "small", batch=4),
    "gpt2": ModelSpec("hf:gpt2", "small", batch=4),
    "llama": ModelSpec(LLAMA, "small", batch=4),
    # GPT-2's own `labels=` loss: labels -100 at the padding, ignore_index kept; the vocabulary-
    # parallel head and cross-entropy (classes sharded; rows too on cpu:4, the kept count
    # all-reduced across them)
    "gpt2_own_loss": ModelSpec("hf:gpt2", "small", batch=4, overrides=(("own_loss", "True"),)),
}
MEGATRONS = [(model, n) for n in (2, 4) for model in MEGATRON_SPECS if (model, n) != ("gpt2", 2)]
"""GPT-2 Megatron on cpu:2 in fp32 is `test_torchrun_hf.py`'s gpt2-megatron (and, with Adam,
gpt2_own_loss here and the bf16 plan below)."""
IGNORED_DATA = "data-parallel-gpt2_own_loss-2"
"""GPT-2's own loss data parallel: each row shard divides by the kept count of the whole batch."""
CNNS = ("resnext50", "inception_v3")
BATCH_TIMEOUT_S = 2400
"""For each batch of programs (4-5 minutes for both on a quiet machine)."""

FACTORY = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.fc2 = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.fc2(torch.relu(self.fc1(x))), y)


def make(width: int = 16, batch: int = 8):
    return Net(width), (torch.randn(batch, 8), torch.randint(0, 4, (batch,)))
"""


@dataclass
class Batches:
    sections: dict[str, str] = field(default_factory=dict)
    runs: dict[int, Run] = field(default_factory=dict)
    unsearched: dict[str, str] = field(default_factory=dict)
    """Search plans the search itself failed to make: why."""
    parallel_ops: dict[str, int] = field(default_factory=dict)
    """Parallel ops (or pipeline stages past the first) in each searched plan."""

    def section(self, name: str, nproc: int) -> str:
        if name not in self.sections:
            raise AssertionError(f"no output for {name}: the batch ended early\n{self.runs[nproc].report()}")
        return self.sections[name]


def _opt(*args: str, cwd: Path | None = None) -> subprocess.subprocess.CompletedProcess[str]:
    """unityc-opt; searches of the small zoo models take up to ~90 s on a quiet machine."""
    command = [sys.executable, "-m", "unityc.tools.opt", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd)


def _factory_program(directory: Path) -> tuple[Path, list[Call]]:
    """A data-parallel program of a model from a factory file imported by a relative path in
    its own directory (the batch runs it from another directory), and the unityc-opt run that
    makes it."""
    home = directory / "factory"
    home.mkdir()
    (home / "net.py").write_text(FACTORY)
    with contextlib.chdir(home):
        module = import_model(ModelSpec("net.py:make", batch=8))
    (home / "net.mlir").write_text(str(module))
    program = home / "net-data-2.py"
    machine = 'data-parallel{machine="cpu:2"}'
    return program, [Call(("net.mlir", "-p", machine, "-t", "torch", "-o", program.name), str(home))]


def _search(directory: Path, model: str, nproc: int) -> tuple[Path, list[Call]]:
    """The program of the plan `--unity-search` finds, and the runs that make it."""
    source = directory / f"{model}.mlir"
    plan = directory / f"{model}-search-{nproc}.mlir"
    flags = SEARCH_FLAGS.get(model, ())
    program = plan.with_suffix(".py")
    search = ("--unity-search", "--machine", f"cpu:{nproc}", *flags, "-o", str(plan))
    return program, [Call((str(source), *search)), Call((str(plan), "-t", "torch", "-o", str(program)))]


def _searched(
    program: Path, search: subprocess.CompletedProcess[str], codegen: subprocess.CompletedProcess[str]
) -> str:
    """Why the search made no plan ("" when it made one). A plan the search made that codegen
    refuses is a codegen test failure: its program fails in the batch."""
    if search.returncode:
        return (search.stderr.strip().splitlines() or ["(no message)"])[-1]
    if codegen.returncode:
        program.write_text(f"raise SystemExit({codegen.stderr!r})\n")
    return ""


def _megatron(
    directory: Path, model: str, nproc: int, precision: str = "fp32", baseline: str = "megatron"
) -> tuple[Path, list[Call]]:
    """The program of the `megatron` (or another) baseline's plan for cpu:N (Adam), in
    `precision`, and the runs that make it."""
    name = model if precision == "fp32" else f"{model}-{precision}"
    source = directory / f"{name}-megatron.mlir"
    if not source.exists():
        module = import_model(MEGATRON_SPECS[model])
        graph_function(module).attributes.update(precision_attrs(precision))  # unityc-import --precision
        source.write_text(str(module))
    plan = directory / f"{name}-{baseline}-{nproc}.mlir"
    program = plan.with_suffix(".py")
    passes = f'{baseline}{{machine="cpu:{nproc}" optimizer="adam"}}'
    return program, [
        Call((str(source), "-p", passes, "-o", str(plan))),
        Call((str(plan), "-t", "torch", "-o", str(program))),
    ]


def _made(runs: Sequence[subprocess.CompletedProcess[str]]) -> None:
    for done in runs:
        assert done.returncode == 0, f"{' '.join(done.args)}:\n{done.stderr}"


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> Batches:
    directory = tmp_path_factory.mktemp("programs")
    entries: dict[int, list[dict[str, object]]] = {2: [], 4: []}

    def add(name: str, nproc: int, program: Path, *flags: str) -> None:
        entries[nproc].append({"name": name, "program": str(program), "args": list(flags)})

    for name, nproc, flags in PLANS:
        add(name, nproc, write_program(build(name), directory, name), "--check", "--steps", "2", *flags)
    tiny = directory / "tiny.py"
    assert _opt(str(PLAN_DIR / "tiny_mlp_plan.mlir"), "-t", "torch", "-o", str(tiny)).returncode == 0
    add("tiny", 2, tiny, "--check", "--steps", "3", "--optimizer", "adam", "--lr", "0.05")
    sabotaged = directory / "sabotaged.py"
    sabotaged.write_text(tiny.read_text().replace("p = F.linear(a, w2)\n", "p = F.linear(a, w2) * 1.01\n"))
    add("sabotaged", 2, sabotaged, "--check", "--steps", "2")

    result = Batches()
    for model in ZOO:
        (directory / f"{model}.mlir").write_text(str(import_model(ModelSpec(model, "small"))))
    for model, spec in PARALLEL_SPECS.items():
        (directory / f"{model}.mlir").write_text(str(import_model(spec)))
    factory, factory_runs = _factory_program(directory)
    searched = [_search(directory, *s) for s in SEARCHES]
    megatrons = [_megatron(directory, model, nproc) for model, nproc in MEGATRONS]
    bf16 = _megatron(directory, "gpt2", 2, BF16)
    ignored = _megatron(directory, "gpt2_own_loss", 2, baseline="data-parallel")
    # the searches first: the longest runs, dealt to both workers
    made = opt_chains([runs for _, runs in [*searched, *megatrons, bf16, ignored, (factory, factory_runs)]])
    searches, made = made[: len(searched)], made[len(searched) :]
    for done in made:
        _made(done)

    add("factory-elsewhere", 2, factory, "--check", "--steps", "2")
    add(
        "dropout",
        2,
        write_program(build("bert-megatron-2"), directory, "dropout"),
        "--steps",
        "3",
        "--check-copies",
    )
    # gradient buckets of a few KiB: BERT's 42 weights in many buckets, each started during the
    # backward by the hooks, in order; and the same sums reduced after the backward
    add("buckets", 2, write_program(build("bert-data-2"), directory, "buckets"), "--check", "--steps", "2",
        "--bucket-mb", "0.004")  # fmt: skip
    add("no-overlap", 2, write_program(build("mlp-data-2"), directory, "no-overlap"), "--check", "--steps",
        "2", "--no-overlap")  # fmt: skip

    for (model, nproc), (program, _), (search, codegen) in zip(SEARCHES, searched, searches, strict=True):
        name = f"search-{model}-{nproc}"
        if error := _searched(program, search, codegen):
            result.unsearched[name] = error
            continue
        plan_text = program.with_suffix(".mlir").read_text()
        # parallel ops, a pipeline (its stages move data by send/recv, not by parallel ops), or
        # ops placed on another process (towers of the MLP one per process: their operands move
        # point to point, without parallel ops)
        result.parallel_ops[name] = (
            plan_text.count("= parallel.")
            + plan_text.count("stage = 1 : i64")
            + len(re.findall(r"#pcg\.view<start [1-9]", plan_text))
        )
        add(name, nproc, program, "--check", "--steps", "2", *(FLOAT64 if model in CNNS else ()))

    for (model, nproc), (program, _) in zip(MEGATRONS, megatrons, strict=True):
        add(f"megatron-{model}-{nproc}", nproc, program, "--check", "--steps", "2", *ADAM)

    add("bf16-megatron-gpt2-2", 2, bf16[0], "--check", "--steps", "2", *ADAM)
    add(IGNORED_DATA, 2, ignored[0], "--check", "--steps", "2", *ADAM)

    for nproc, batch in entries.items():
        manifest = directory / f"batch{nproc}.json"
        manifest.write_text(json.dumps(batch))
        # every program runs where xdsl, z3 and lark cannot be imported (a node with torch alone)
        env = without_compiler(directory)
        run = torchrun("unityc.runtime.batch", nproc, str(manifest), timeout=BATCH_TIMEOUT_S, env=env)
        result.runs[nproc] = run
        result.sections.update(_sections(run.output))
    return result


@pytest.mark.parametrize(("name", "nproc", "flags"), PLANS, ids=[p[0] for p in PLANS])
def test_plan_trains_like_the_reference(
    batches: Batches, name: str, nproc: int, flags: tuple[str, ...]
) -> None:
    section = batches.section(name, nproc)
    assert section.endswith("exit 0"), section
    assert "check passed: 2 step(s)" in section
    assert "timing:" in section


def test_hand_written_plan_through_unityc_opt(batches: Batches) -> None:
    """The `-t torch` target end to end: broadcast, reduce and gather roots on rank 0, weights
    in copies, ops on one rank only; three Adam steps."""
    section = batches.section("tiny", 2)
    assert section.endswith("exit 0") and "check passed: 3 step(s)" in section, section


def test_check_names_the_first_mismatch(batches: Batches) -> None:
    """Row-parallel partial sums scaled by 1.01 fail --check, which names the loss first."""
    section = batches.section("sabotaged", 2)
    assert section.endswith("exit 1"), section
    assert "error: check failed at step 1: loss differs: relative error" in section


def test_program_of_a_factory_file_runs_from_another_directory(batches: Batches) -> None:
    """The factory file was imported by a relative path in its own directory; the batch runs
    the program from the test's directory, where that path means nothing. The recorded path
    is absolute, so every rank rebuilds the reference model."""
    section = batches.section("factory-elsewhere", 2)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section


def test_dropout_keeps_copies_equal(batches: Batches) -> None:
    """Without --check dropout is on; its masks hash the logical element index, so every copy
    of a replicated activation drops the same elements and weight copies stay identical."""
    section = batches.section("dropout", 2)
    assert section.endswith("exit 0") and "copies equal after 3 step(s)" in section, section
    losses = [float(m.group(1)) for m in re.finditer(r"^step \d+: loss ([-+0-9.e]+)", section, re.M)]
    assert len(losses) == 2 and losses[1] < losses[0]


def test_gradient_buckets_start_during_the_backward(batches: Batches) -> None:
    """Every bucket of every step starts from the post-accumulate-grad hooks, before the
    backward returns, and the gradients still equal the reference's."""
    section = batches.section("buckets", 2)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    found = re.search(r"gradient buckets \(rank 0\): (\d+) per step, (\d+) of (\d+) started", section)
    assert found is not None, section
    per_step, early, total = map(int, found.groups())
    assert per_step > 10 and early == total == 2 * per_step


def test_gradient_sync_without_overlap(batches: Batches) -> None:
    section = batches.section("no-overlap", 2)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    assert re.search(r"gradient buckets \(rank 0\): \d+ per step, 0 of \d+ started", section), section


@pytest.mark.parametrize(("model", "nproc"), MEGATRONS, ids=[f"{m}-{n}" for m, n in MEGATRONS])
def test_megatron_baseline_trains_like_the_reference(batches: Batches, model: str, nproc: int) -> None:
    section = batches.section(f"megatron-{model}-{nproc}", nproc)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section


def test_ignored_targets_data_parallel(batches: Batches) -> None:
    section = batches.section(IGNORED_DATA, 2)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section


@pytest.mark.parametrize(("model", "nproc"), SEARCHES, ids=[f"{m}-{n}" for m, n in SEARCHES])
def test_searched_plan_trains_like_the_reference(batches: Batches, model: str, nproc: int) -> None:
    name = f"search-{model}-{nproc}"
    assert name not in batches.unsearched, f"--unity-search made no plan: {batches.unsearched[name]}"
    section = batches.section(name, nproc)
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    if model in PARALLEL_SPECS:
        assert batches.parallel_ops[name] > 0, f"{name}: the search chose a one-device plan"


def test_bf16_mixed_plan_trains_like_the_autocast_reference(batches: Batches) -> None:
    """GPT-2 Megatron-style under bf16-mixed: forward under autocast, fp32 master weights
    (updated weights agree to fp32 rounding), compared with the single-device model under the
    same autocast at the bf16 tolerance; its tensor-parallel all-reduces move bf16."""
    section = batches.section("bf16-megatron-gpt2-2", 2)
    assert section.endswith("exit 0"), section
    assert "check passed: 2 step(s) within relative error 5e-02" in section, section
    assert "bf16-mixed (autocast)" in section
    weights = re.search(r"weights \(worst ([0-9.e+-]+) ", section)
    assert weights is not None and float(weights.group(1)) < 1e-5, section
