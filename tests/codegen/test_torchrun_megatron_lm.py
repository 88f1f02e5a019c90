"""The `megatron-lm` baseline's plans run exactly under torchrun (`--check`: loss, outputs, every
gradient and updated weight against single-device PyTorch, Adam), on a Hugging Face Llama
(4 heads, batch 4) on 4 gloo processes:

* tensor 2 x pipeline 2, 2 chunks per stage group (interleaved 1F1B), 4 micro-batches of 1,
  ZeRO-1 on the weights the tensor group replicates (the norms), the attention recomputed;
* tensor 2 x data 2 in one stage: 2 micro-batches of 1 per replica accumulated before one
  gradient sync and update, ZeRO-1 over the data-parallel copies.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchrun import torchrun, write_program
from xdsl.dialects.builtin import StringAttr

from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module, to_module
from unityc.machine.presets import preset
from unityc.search.baselines import megatron_lm
from unityc.search.unity import UnityOptions

pytestmark = pytest.mark.torchrun

# (name, tensor, stages, virtual, expected note)
PLANS = [
    ("llama-tp2-pp2-interleaved", 2, 2, 2, "data 1 x tensor 2 x pipeline 2, 2 chunks per stage group"),
    ("llama-tp2-dp2-accumulated", 2, 1, 0, "data 2 x tensor 2 x pipeline 1, 1f1b, 2 micro-batches"),
]


@pytest.mark.parametrize(("name", "tensor", "stages", "virtual", "note"), PLANS, ids=[p[0] for p in PLANS])
def test_megatron_lm_plan_trains_exactly(
    tmp_path: Path, name: str, tensor: int, stages: int, virtual: int, note: str
) -> None:
    module = import_model(ModelSpec("hf:llama", "small", batch=4))
    plan = megatron_lm(
        from_module(module), preset("cpu:4"), UnityOptions(optimizer="adam"), None, tensor, stages, virtual
    )
    assert plan.note.startswith(note), plan.note
    assert plan.estimate.fits
    assert any(n.zero == 1 for n in plan.graph.nodes.values())
    assert any(n.recompute and n.op == "pcg.attention" for n in plan.graph.nodes.values())
    plan.graph.module_attrs["unityc.machine"] = StringAttr("cpu:4")
    program = write_program(to_module(plan.graph), tmp_path, name)
    run = torchrun(program, 4, "--check", "--optimizer", "adam", cwd=tmp_path)
    assert run.returncode == 0, run.report()
    assert "check passed" in run.output, run.output
