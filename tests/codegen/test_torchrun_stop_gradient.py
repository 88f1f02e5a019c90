"""What a model detaches or computes under `torch.no_grad()` carries no gradient in the program
either: the import's `pcg.stop_gradient` ops (`tests/frontend/sweep_ops.py:no_grad_cycles`),
data-parallel on 2 ranks, train like the single-device module (`--check`: every gradient and
updated weight)."""

from __future__ import annotations

from pathlib import Path

from torchrun import torchrun, write_program

from unityc.dialects import pcg
from unityc.dialects.source import make_context
from unityc.frontend import ModelSpec, import_model
from unityc.passes.baselines import DataParallelPass

MODEL = Path(__file__).parents[1] / "frontend" / "sweep_ops.py"


def test_stop_gradients_train_like_the_module_on_two_ranks(tmp_path: Path) -> None:
    module = import_model(ModelSpec(f"{MODEL}:no_grad_cycles"))
    assert sum(isinstance(op, pcg.StopGradientOp) for op in module.walk()) == 2
    DataParallelPass(machine="cpu:2").apply(make_context(), module)
    program = write_program(module, tmp_path, "stopped")
    assert ".detach()" in program.read_text()
    run = torchrun(program, 2, "--check", "--steps", "2")
    assert run.returncode == 0, run.report()
    assert "check passed: 2 step(s)" in run.output, run.report()
