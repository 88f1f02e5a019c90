"""A generated program a user trains with: real data (`--data`), any torch.optim optimizer with
clipping and a schedule, checkpoints that resume exactly and load into the plain Hugging Face
module and into another plan, progress lines.

The README's example: a character-level GPT-2 (`examples/charlm/charlm.py`) on the text of
Python's standard library, with the plan `--unity-search` finds for cpu:2 (pipelines compete;
pipelined programs stop and resume exactly too: tests/codegen/test_torchrun_pipeline.py). All
programs run in one torchrun (`unityc.runtime.batch`):

- `full`: 21 steps of AdamW (weight decay, clipping, cosine schedule), checkpoints at 20 and 21;
- `half` + `resume`: the same run stopped after step 10 and resumed from its checkpoint, under
  `--check` (the reference resumes from the checkpoint too): the same losses, digit for digit;
- `bf16`: the same training under `--precision bf16-mixed` (the searched plan of the bf16
  graph), under `--check` against the single-device model under autocast, every step;
- `other-plan`: the Megatron plan of the same model resumed from the searched plan's checkpoint
  (resharded on load), under `--check`: the same losses to float rounding;
- `net`: a tensor-parallel plan of a small MLP (sharded weights) with AdamW, clipping that
  bites, warm-up + cosine and batches cut per rank, under `--check` every step.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from opt_runs import Call, opt_chains
from torchrun import torchrun, without_compiler

from unityc.dialects.container import graph_function
from unityc.dialects.precision import BF16_MIXED, precision_attrs
from unityc.frontend import ModelSpec, import_model

pytestmark = pytest.mark.torchrun

ROOT = Path(__file__).parent.parent.parent
CHARLM = ROOT / "examples" / "charlm" / "charlm.py"
STEPS, STOP = 21, 10
TRAIN = (
    "--data", f"{CHARLM}:batches", "--optimizer", "adamw", "--optimizer-args", "weight_decay=0.1",
    "--lr", "1e-2", "--clip-grad-norm", "1.0", "--lr-schedule", "cosine", "--lr-warmup-steps", "3",
    "--steps", str(STEPS), "--log-every", "1",
)  # fmt: skip

NET = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(self.fc2(torch.relu(self.fc1(x))), y)


def make(batch: int = 8):
    return Net(), (torch.randn(batch, 8), torch.randint(0, 4, (batch,)))


def batches(pieces, start=0, scale=1.0):
    step = start
    while True:
        g = torch.Generator().manual_seed(step)
        x, y = scale * torch.randn(8, 8, generator=g), torch.randint(0, 4, (8,), generator=g)
        yield {key: value[pieces.slices(key)] for key, value in (("x", x), ("y", y))}
        step += 1
"""

Ran = tuple[Path, dict[str, str]]
"""The checkpoint directory and each program's output."""

LOSS = re.compile(r"^step (\d+): loss ([0-9.]+)", re.M)


def _program(source: Path, passes: list[str], name: str) -> tuple[Path, list[Call]]:
    """The program of a plan of `source` and the unityc-opt runs that make it."""
    plan = source.with_name(f"{name}.mlir")
    program = source.with_name(f"{name}.py")
    return program, [
        Call((str(source), *passes, "-o", str(plan))),
        Call((str(plan), "-t", "torch", "-o", str(program))),
    ]


def _losses(section: str) -> dict[int, float]:
    return {int(step): float(loss) for step, loss in LOSS.findall(section)}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    directory = tmp_path_factory.mktemp("training")
    source = directory / "charlm.mlir"
    module = import_model(ModelSpec(f"{CHARLM}:make"))
    source.write_text(str(module))
    bf16 = directory / "charlm-bf16.mlir"  # as `unityc-import --precision bf16-mixed` records it
    graph_function(module).attributes.update(precision_attrs(BF16_MIXED))
    bf16.write_text(str(module))
    (directory / "net.py").write_text(NET)
    (directory / "net.mlir").write_text(str(import_model(ModelSpec(f"{directory / 'net.py'}:make"))))
    made = [
        _program(source, ["--unity-search", "--machine", "cpu:2", "--budget", "4"], "charlm-search"),
        _program(source, ["-p", 'megatron{machine="cpu:2"}'], "charlm-megatron"),
        _program(
            bf16,
            ["--unity-search", "--machine", "cpu:2", "--budget", "4", "--pipelines", "off"],
            "charlm-bf16-search",
        ),
        _program(directory / "net.mlir", ["-p", 'megatron{machine="cpu:2"}'], "net-megatron"),
    ]
    for runs in opt_chains([calls for _, calls in made]):
        for done in runs:
            assert done.returncode == 0, done.stderr
    searched, megatron, searched_bf16, net = (program for program, _ in made)
    ck = directory / "ck"
    half = str(ck / "half" / f"step-{STOP}")
    entries = [
        ("full", searched, [*TRAIN, "--save", str(ck / "full"), "--save-every", "20"]),
        ("half", searched, [*TRAIN, "--stop-after", str(STOP), "--save", str(ck / "half")]),
        ("resume", searched, [*TRAIN, "--resume", half, "--check"]),
        ("other-plan", megatron, [*TRAIN, "--resume", half, "--check", "--stop-after", str(STOP + 3)]),
        ("bf16", searched_bf16, [*TRAIN, "--check"]),
        (
            "net",
            net,
            [
                "--check", "--steps", "4", "--data", f"{directory / 'net.py'}:batches",
                "--data-args", "scale=4.0", "--optimizer", "AdamW",
                "--optimizer-args", "weight_decay=0.1, betas=(0.8, 0.9)", "--clip-grad-norm", "0.05",
                "--lr-schedule", "cosine", "--lr-warmup-steps", "2",
            ],
        ),
    ]  # fmt: skip
    manifest = directory / "manifest.json"
    manifest.write_text(json.dumps([{"name": n, "program": str(p), "args": a} for n, p, a in entries]))
    done = torchrun("unityc.runtime.batch", 2, str(manifest), cwd=directory, env=without_compiler(directory))
    sections: dict[str, str] = {}
    for name, _, _ in entries:
        match = re.search(rf"^=== {name}\n(.*?)^=== {name}: exit (\d+)", done.output, re.M | re.S)
        assert match is not None, done.report()
        assert match.group(2) == "0", f"{name}:\n{match.group(1)}\n{done.report()}"
        sections[name] = match.group(1)
    return ck, sections


def test_the_character_model_learns(run: Ran) -> None:
    losses = _losses(run[1]["full"])
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert losses[STEPS] < 0.7 * losses[1], losses
    assert re.search(r"step 1: loss [0-9.]+, lr [0-9.e-]+, .* samples/s, \d+ tokens/s, MFU", run[1]["full"])


def test_bf16_mixed_training_learns_and_checks(run: Ran) -> None:
    """bf16-mixed: the loss falls as in fp32, and every step agrees with the single-device
    model under autocast at the bf16 tolerance (updated fp32 master weights to fp32 rounding)."""
    section = run[1]["bf16"]
    losses = _losses(section)
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert losses[STEPS] < 0.7 * losses[1], losses
    assert "bf16-mixed (autocast)" in section
    assert f"check passed: {STEPS} step(s) within relative error 5e-02" in section, section


def test_stop_and_resume_repeats_the_uninterrupted_run(run: Ran) -> None:
    full, half, resumed = (_losses(run[1][name]) for name in ("full", "half", "resume"))
    assert sorted(half) == list(range(1, STOP + 1)) and all(half[k] == full[k] for k in half)
    assert sorted(resumed) == list(range(STOP + 1, STEPS + 1))
    assert all(resumed[k] == full[k] for k in resumed), (resumed, full)
    assert f"check passed: {STEPS - STOP} step(s)" in run[1]["resume"]


def test_a_checkpoint_loads_into_another_plan(run: Ran) -> None:
    full, other = _losses(run[1]["full"]), _losses(run[1]["other-plan"])
    assert sorted(other) == [STOP + 1, STOP + 2, STOP + 3]
    assert all(abs(other[k] - full[k]) <= 1e-4 * full[k] for k in other), (other, full)


def test_the_final_checkpoint_loads_into_the_plain_hugging_face_module(
    run: tuple[Path, dict[str, str]],
) -> None:
    """The weights after step 20, in transformers' own GPT2LMHeadModel with its own loss, give the
    loss the program reported at step 21 (on the same batch)."""
    from transformers import GPT2LMHeadModel

    from unityc.runtime.checkpoint import load_module
    from unityc.runtime.factory import load_function

    config = load_function(CHARLM, "config")()
    model = GPT2LMHeadModel(config)
    missing = load_module(model, run[0] / "full" / "step-20")
    assert not [k for k in missing if k in dict(model.named_parameters())], missing
    batch = next(load_function(CHARLM, "batches")(start=20))
    with torch.no_grad():
        loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss.item()
    expected = _losses(run[1]["full"])[21]
    assert abs(loss - expected) <= 1e-4 * expected, (loss, expected)


def test_optimizers_clipping_and_schedules_are_exact_on_sharded_weights(
    run: tuple[Path, dict[str, str]],
) -> None:
    section = run[1]["net"]
    assert "AdamW(lr=0.01, weight_decay=0.1, betas=(0.8, 0.9)), cosine schedule" in section
    assert "clipped to global norm 0.05" in section
    assert "check passed: 4 step(s)" in section


def test_bad_optimizer_flags_are_usage_errors(tmp_path: Path) -> None:
    """Before any process group: a name torch.optim lacks, a non-literal argument, a bad schedule."""
    import subprocess

    (tmp_path / "net.py").write_text(NET)
    (tmp_path / "net.mlir").write_text(str(import_model(ModelSpec(f"{tmp_path / 'net.py'}:make"))))
    program, calls = _program(tmp_path / "net.mlir", ["-p", 'data-parallel{machine="cpu:2"}'], "net")
    [runs] = opt_chains([calls])
    assert all(done.returncode == 0 for done in runs), [done.stderr for done in runs]
    for flags, message in (
        (["--optimizer", "adamx"], "--optimizer adamx: not a torch.optim optimizer"),
        (["--optimizer-args", "weight_decay=x"], "the value of weight_decay is not a Python literal"),
        (["--clip-grad-norm", "0"], "--clip-grad-norm must be positive"),
        (["--resume", "a", "--init", "b"], "--resume and --init both give initial weights"),
    ):
        done = subprocess.run(
            [sys.executable, str(program), *flags], capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 2 and message in done.stderr, done.stderr
