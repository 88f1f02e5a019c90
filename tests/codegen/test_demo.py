"""`make demo` runs the whole chain: import, search, interpreter check, codegen, torchrun --check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchrun


def test_demo_runs_the_whole_chain(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "unityc.tools.demo", "--out", str(tmp_path), "--steps", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout + done.stderr  # the search reports on stderr
    # the inter-op plan: one tower per process (a `parallel.sum_concat`, or on cpu:2's measured
    # gloo hand-off, cheaper, the towers' ops placed on both processes with point-to-point moves)
    plan = (tmp_path / "plan.mlir").read_text()
    assert "#pcg.view<start 0>" in plan and "#pcg.view<start 1>" in plan
    assert "equal: worst relative error" in out
    assert "check passed: 2 step(s)" in out
    for name in ("mlp.mlir", "plan.mlir", "plan.json", "train.py"):
        assert (tmp_path / name).is_file(), name
