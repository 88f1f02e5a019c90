"""Context parallelism end to end (issue 41, step 3): tiny HF Llama (grouped-query heads,
rotary, a causal+padding mask) with every attention split over the sequence on 2 gloo ranks,
by the ring and by the all-to-all (`context_plans.py`; each plan checked by the interpreter
against the unsplit graph first), trains exactly like the single-device model under torchrun
(`--check`: loss, outputs, every gradient and updated weight), fp32 and float64, in one
torchrun (`unityc.runtime.batch`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from context_plans import context_parallel, with_exchange
from plans import base_graph, plan_module
from test_torchrun import _sections
from torchrun import torchrun, write_program

pytestmark = pytest.mark.torchrun

EXCHANGES = ("ring", "all-to-all")


def test_context_parallel_llama_trains_like_the_reference(tmp_path: Path) -> None:
    base = base_graph("hf:llama", batch="2")
    entries = []
    for exchange in EXCHANGES:
        name = f"llama-context-{exchange}"
        program = write_program(
            plan_module(with_exchange(base, exchange), context_parallel(2), "cpu:2"), tmp_path, name
        )
        text = program.read_text()
        assert text.count("rt.ring_attention.context_attention(") == 2, "one context attention per layer"
        assert f'exchange="{exchange}"' in text
        for precision in ((), ("--float64",)):
            args = ["--check", "--steps", "2", *precision]
            entries.append(
                {"name": f"{name}{'-f64' if precision else ''}", "program": str(program), "args": args}
            )
    manifest = tmp_path / "batch.json"
    manifest.write_text(json.dumps(entries))
    run = torchrun("unityc.runtime.batch", 2, str(manifest), timeout=600)
    sections = _sections(run.output)
    for entry in entries:
        section = sections.get(entry["name"], "")
        assert "check passed: 2 step(s)" in section, f"{entry['name']}:\n{section or run.output[-3000:]}"
    assert run.returncode == 0, run.output[-3000:]
