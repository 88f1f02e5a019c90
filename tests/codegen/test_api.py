"""The Python API (`unityc.plan`, `unityc.load_plan`, `unityc.distribute`): a plan made in-process,
its errors, and a user's own loop trained through it.

- in this process, on a one-rank gloo group: a plan's value, errors naming their cause (model,
  inputs, options, world size, batch, optimizer), and a cpu:1 plan trained by the user's loop
  exactly as the plain module;
- one torchrun (2 gloo ranks): `examples/own_loop.py` (HF GPT-2, a DataLoader over a text file,
  evaluation, a CSV log, a warm-up + cosine schedule, clipping) through a data-parallel, a
  Megatron, a ZeRO-3 and a 1F1B-pipelined plan, each step's loss and every final weight equal to
  the same loop on the single-device module (relative error 1e-4, `--check`'s), and to the plan's
  generated program trained by its own loop on the same batches.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import pydoc
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from opt_runs import Call, opt_chains
from torch import nn
from torchrun import sections, torchrun

import unityc
from unityc.models.spec import ModelSpec, load_model
from unityc.runtime import checkpoint

ROOT = Path(__file__).parent.parent.parent
EXAMPLE = ROOT / "examples" / "own_loop.py"
HF_RUN = Path(__file__).with_name("api_hf_run.py")


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.fc2(torch.relu(self.fc1(x)))
        return nn.functional.cross_entropy(out, y), out


def batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(8, 8, generator=g), "y": torch.randint(0, 4, (8,), generator=g)}


@pytest.fixture(scope="module")
def net() -> Net:
    torch.manual_seed(0)
    return Net()


@pytest.fixture(scope="module")
def serial(net: Net) -> unityc.Plan:
    return unityc.plan(net, batch(), machine="cpu:1", strategy="data-parallel")


@pytest.fixture
def one_rank() -> Iterator[None]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_plan_is_a_value_that_saves_and_loads(net: Net, tmp_path: Path) -> None:
    plan = unityc.plan(net, batch(), machine="cpu:2", strategy="megatron")
    assert (plan.world_size, plan.machine, plan.strategy) == (2, "cpu:2", "megatron")
    assert str(plan.degrees["fc1.weight"]) == "shard [2, 1]" and plan.iteration_s > 0 and plan.fits
    assert "megatron" in str(plan) and "iteration time" in str(plan)
    with pytest.raises(AttributeError):
        plan.machine = "cpu:4"  # type: ignore[misc]
    plan.save(tmp_path / "plan.mlir")
    loaded = unityc.load_plan(tmp_path / "plan.mlir")
    assert loaded.mlir == plan.mlir and loaded.degrees == plan.degrees and hash(loaded) != 0


def test_the_search_report_is_the_plans_summary(net: Net) -> None:
    plan = unityc.plan(
        net, (batch()["x"], batch()["y"]), machine="cpu:2", budget=2, baselines="data-parallel"
    )
    assert plan.strategy == "search" and "baselines" in str(plan) and "data-parallel" in str(plan)


@pytest.mark.parametrize(
    ("model", "inputs", "options", "says"),
    [
        (None, None, {}, "the model must be an nn.Module or a model name, got NoneType"),
        ("net", {"x": [1.0]}, {}, "example input 'x' is a list, not a tensor"),
        ("net", None, {"strategy": "fsdp"}, "unknown strategy 'fsdp'"),
        ("net", None, {"bugdet": 3}, "search: unknown option 'bugdet'"),
        ("net", None, {"precision": "fp8"}, "precision: expected one of fp32, bf16-mixed, got 'fp8'"),
        ("net", None, {"machine": "tpu:9"}, "search: "),
        ("net", None, {"accumulation": 0}, "accumulation: expected a whole number of micro-batches"),
        (
            "net",
            {"x": torch.randn(8, 5), "y": torch.zeros(8, dtype=torch.int64)},
            {},
            "cannot import the model",
        ),
    ],
)
def test_bad_input_is_one_line_naming_it(
    net: Net, model: object, inputs: object, options: dict, says: str
) -> None:
    with pytest.raises(unityc.PlanError) as e:
        unityc.plan(net if model == "net" else model, inputs or batch(), **options)  # type: ignore[arg-type]
    assert says in str(e.value) and "\n" not in str(e.value)


def test_help_lists_the_api() -> None:
    text = pydoc.render_doc(unityc, renderer=pydoc.plaintext)
    for name in ("unityc.plan", "unityc.distribute", "unityc.load_plan", "Plan"):
        assert name in text


def test_the_users_loop_trains_as_the_plain_module(
    net: Net, serial: unityc.Plan, one_rank: None, tmp_path: Path
) -> None:
    reference = copy.deepcopy(net)
    model = unityc.distribute(net, serial)
    assert [k for k, _ in model.named_parameters()] == [k for k, _ in reference.named_parameters()]
    ours = torch.optim.AdamW(model.parameters(), lr=1e-2)
    theirs = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    schedules = [torch.optim.lr_scheduler.CosineAnnealingLR(o, 5) for o in (ours, theirs)]
    for step in range(3):
        for m, o in ((model, ours), (reference, theirs)):
            loss = m(**batch(step))[0]
            loss.backward()
            norm = m.clip_grad_norm_(0.5) if m is model else nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            o.step()
            o.zero_grad()
        assert loss.item() > 0 and float(norm) > 0
    for s in schedules:
        s.step()
    state, expected = model.state_dict(), reference.state_dict()
    assert all(torch.allclose(state[k], v, rtol=1e-5, atol=1e-7) for k, v in expected.items())
    assert not torch.allclose(
        state["fc1.weight"], net.fc1.weight
    )  # trained; the model's own weights untouched
    model.eval()
    with torch.no_grad():
        assert torch.allclose(model(**batch())[0], reference(**batch())[0], rtol=1e-5)
    model.save(str(tmp_path / "step-3"), ours, step=3)  # the DCP checkpoint a program resumes
    again = unityc.distribute(net, serial)
    assert again.load(str(tmp_path / "step-3")) == 3
    assert all(torch.equal(v, state[k]) for k, v in again.state_dict().items())
    plain = Net()
    assert checkpoint.load_module(plain, tmp_path / "step-3") == []
    assert torch.equal(plain.fc2.bias, state["fc2.bias"])
    again.load_state_dict(net.state_dict())
    assert torch.equal(again.state_dict()["fc1.weight"], net.fc1.weight.detach())


def test_an_accumulating_plan_steps_as_the_plain_module(net: Net, one_rank: None) -> None:
    plan = unityc.plan(net, batch(), machine="cpu:1", strategy="data-parallel", accumulation=2)
    reference = copy.deepcopy(net)
    model = unityc.distribute(net, plan)
    ours, theirs = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, reference))
    for step in range(2):
        loss = model.step(**batch(step))[0]  # two micro-batches of 4 rows, one sync
        expected = reference(**batch(step))[0]
        expected.backward()
        assert torch.allclose(loss, expected, rtol=1e-6)
        for o in (ours, theirs):
            o.step()
            o.zero_grad()
    state = model.state_dict()
    assert all(torch.allclose(state[k], v, rtol=1e-5, atol=1e-7) for k, v in reference.state_dict().items())
    with pytest.raises(ValueError, match=r"accumulates 2 micro-batches per step: .* model\.step"):
        model(**batch())
    with torch.no_grad():  # evaluation: the forward of both micro-batches
        assert torch.allclose(model(**batch())[0], reference(**batch())[0], rtol=1e-6)


def test_frozen_parameters_stay_frozen(serial: unityc.Plan, one_rank: None) -> None:
    torch.manual_seed(0)
    net = Net()
    net.fc1.weight.requires_grad_(False)
    model = unityc.distribute(net, serial)
    assert [k for k, _ in model.named_parameters()] == ["fc1.bias", "fc2.weight", "fc2.bias"]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=0.1)
    model(**batch())[0].backward()
    optimizer.step()
    state = model.state_dict()
    assert torch.equal(state["fc1.weight"], net.fc1.weight) and not torch.equal(
        state["fc1.bias"], net.fc1.bias
    )


def test_distribute_names_what_does_not_match(net: Net, serial: unityc.Plan, one_rank: None) -> None:
    two = unityc.plan(net, batch(), machine="cpu:2", strategy="data-parallel")
    with pytest.raises(
        unityc.PlanError, match=r"the plan was made for 2 processes .* this process group has 1"
    ):
        unityc.distribute(net, two)
    model = unityc.distribute(net, serial)
    wrong = {"x": torch.randn(4, 8), "y": torch.zeros(4, dtype=torch.int64)}
    with pytest.raises(ValueError, match=r"input 'x' has shape \[4, 8\], the plan was made for \[8, 8\]"):
        model(**wrong)
    with pytest.raises(ValueError, match="the plan has no input 'z'"):
        model(**batch(), z=torch.zeros(1))
    lbfgs = torch.optim.LBFGS(model.parameters())
    model(**batch())[0].backward()
    with pytest.raises(ValueError, match="LBFGS needs a closure"):
        lbfgs.step(lambda: model(**batch())[0])


@pytest.mark.torchrun
def test_own_loop_trains_every_plan_kind_as_one_device(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    plans = "data-parallel,megatron,zero3,1f1b"
    args = ("--plans", plans, "--steps", "3", "--optimizer", "sgd", "--check", "--eval-every", "2")
    run = torchrun(EXAMPLE, 2, *args, "--csv", str(log), "--hidden", "32", "--seq", "16")
    assert run.returncode == 0, run.report()
    for name in plans.split(","):
        assert f"{name}: equal to the single-device loop: 3 losses, 29 weights" in run.output
        assert f"{name}: equal to the generated program's loop: 3 losses, 29 weights" in run.output
    assert "check passed: 4 plan(s) within relative error 1e-04" in run.output
    rows = list(csv.DictReader(io.StringIO(log.read_text())))
    assert [r["plan"] for r in rows] == [n for n in plans.split(",") for _ in range(3)]
    assert all(r["held_out_loss"] for r in rows if r["step"] in ("2", "3"))


@pytest.mark.torchrun
def test_hugging_face_models_train_through_the_api_and_resume_in_the_program(tmp_path: Path) -> None:
    """HF Llama (Megatron) and BERT (ZeRO-3) trained through the API with AdamW, a cosine
    schedule and clipping, as the plain module; the checkpoint it saved resumes in the plan's
    generated program (under --check: weights and AdamW state as the single-device model's) and
    loads into the plain module."""
    run = torchrun(HF_RUN, 2, str(tmp_path))
    assert run.returncode == 0, run.report()
    entries = []
    names = ("llama", "bert")
    for name in names:
        assert f"{name}: step 2: loss" in run.output and f"{name}: saved after 2 steps" in run.output
    [made] = opt_chains([[Call((f"{n}.mlir", "-t", "torch", "-o", f"{n}.py"), str(tmp_path)) for n in names]])
    for name, done in zip(names, made, strict=True):
        assert done.returncode == 0, done.stderr
        args = ["--resume", str(tmp_path / name / "step-2"), "--steps", "3", "--check", "--optimizer",
                "adamw", "--optimizer-args", "weight_decay=0.01", "--lr", "1e-3"]  # fmt: skip
        entries.append({"name": name, "program": str(tmp_path / f"{name}.py"), "args": args})
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(entries))
    resumed = torchrun("unityc.runtime.batch", 2, str(manifest), cwd=tmp_path)
    found = sections(resumed.output)
    for name, model in (("llama", "hf:llama"), ("bert", "hf:bert")):
        section = found.get(name, resumed.report())
        assert section.endswith(": exit 0") and "resumed at step 2" in section, section
        assert "check passed: 1 step(s)" in section, section
        plain = load_model(ModelSpec(model)).module
        missing = checkpoint.load_module(plain, tmp_path / name / "step-2")
        saved, state = torch.load(tmp_path / f"{name}-state.pt"), plain.state_dict()
        # what the checkpoint lacks the forward never reads (BERT's cls.predictions.bias: the
        # decoder's own bias is the one added), so the plan holds no weight of it
        assert missing == ([] if name == "llama" else ["model.cls.predictions.bias"])
        assert set(saved) <= set(state) and all(torch.equal(v, state[k]) for k, v in saved.items())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
