"""Masks recorded as ops, through the whole chain: at a sequence whose causal mask is past the
importer's fold limit the mask is `pcg.compare_tensors` of position constants (then cast, and,
where), which `fuse-attention` recognizes as the attention's `causal` (`passes/attention_masks.py`),
leaving the padding mask [B, 1, 1, S] as its mask operand. The generated programs must train
exactly like the single-device model under torchrun (`--check`: loss, outputs, every gradient,
every updated weight) with the batch split (data parallelism) and with the heads split
(megatron: each head shard's attention is causal and reads the padding mask). Pad tokens end
every other sequence (hf:llama, hf:gpt2, hf:bert take the padding mask); hf:LlamaConfig takes
none and builds its mask from position ids repeated over the batch, with transformers'
packed-sequence check. Llama runs the fused SDPA kernel; GPT-2 and BERT, with attention dropout,
the written-out one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from opt_runs import Call, opt_chains
from test_torchrun import _sections
from torchrun import Run, torchrun

from unityc.frontend import ModelSpec, import_model
from unityc.frontend.importer import FOLD_LIMIT

pytestmark = pytest.mark.torchrun

SEQ = 72
"""72 x 72 = 5184 > FOLD_LIMIT: the causal masks are ops, not constants."""
BATCH = 4

# (name, model, unityc-opt pass pipeline)
PROGRAMS = [
    ("llama-data", "hf:llama", 'data-parallel{machine="cpu:2"}'),
    ("llama-megatron", "hf:llama", 'megatron{machine="cpu:2"}'),
    ("llama-nomask-data", "hf:LlamaConfig", 'data-parallel{machine="cpu:2"}'),
    ("gpt2-data", "hf:gpt2", 'data-parallel{machine="cpu:2"}'),
    ("bert-data", "hf:bert", 'data-parallel{machine="cpu:2"}'),
]
NAMES = [p[0] for p in PROGRAMS]
CAUSAL = {"llama-data", "llama-megatron", "llama-nomask-data", "gpt2-data"}


def _program(directory: Path, name: str, model: str, how: str) -> tuple[Path, list[Call]]:
    """The program of one plan and the unityc-opt runs that make it."""
    source = directory / f"{name}-model.mlir"
    source.write_text(str(import_model(ModelSpec(model, "small", BATCH, overrides=(("seq", str(SEQ)),)))))
    plan = directory / f"{name}.mlir"
    program = plan.with_suffix(".py")
    return program, [
        Call((str(source), "-p", how, "-o", str(plan))),
        Call((str(plan), "-t", "torch", "-o", str(program))),
    ]


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], dict[str, str], Run]:
    assert SEQ * SEQ > FOLD_LIMIT
    directory = tmp_path_factory.mktemp("mask_programs")
    plans, texts, entries = {}, {}, []
    made = [_program(directory, name, model, how) for name, model, how in PROGRAMS]
    for (name, _, _), (program, _), runs in zip(
        PROGRAMS, made, opt_chains([c for _, c in made]), strict=True
    ):
        for done in runs:
            assert done.returncode == 0, f"{name}: {done.stderr.strip()}"
        plans[name], texts[name] = program.with_suffix(".mlir").read_text(), program.read_text()
        entries.append({"name": name, "program": str(program), "args": ["--check", "--steps", "2"]})
    manifest = directory / "batch.json"
    manifest.write_text(json.dumps(entries))
    run = torchrun("unityc.runtime.batch", 2, str(manifest), timeout=900)
    return plans, texts, run


@pytest.mark.parametrize("name", NAMES)
def test_masked_program_trains_like_the_reference(programs, name: str) -> None:
    plans, texts, run = programs
    sections = _sections(run.output)
    assert name in sections, "\n".join(run.output.splitlines()[-60:])
    section = sections[name]
    assert section.endswith("exit 0") and "check passed: 2 step(s)" in section, section
    assert "= parallel." in plans[name], f"{name}: the plan has no parallel op"
    if name in CAUSAL:  # the causal mask is the attention's `causal`: neither stored nor built
        assert re.search(r"pcg\.attention .* causal\b", plans[name]), "the causal mask not recognized"
        assert not re.search(rf"x{SEQ}x{SEQ}x", plans[name]), "an S x S mask in the plan"
        assert "pcg.compare_tensors" not in plans[name]
        assert "causal=0" in texts[name]
    kernel = "math" if name.startswith(("gpt2-", "bert-")) else "sdpa"  # GPT-2, BERT: dropout
    assert f'kernel="{kernel}"' in texts[name]
