"""The runtime is a leaf: importing it imports torch and nothing else of unityc; a generated
program adds the model builders (`unityc.models`, torch only), nothing of the compiler; and a
program of a factory-file model runs where xDSL, Z3 and lark cannot be imported (a cluster node
with torch alone)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_torchrun import FACTORY, _opt
from torchrun import COMPILER, torchrun, without_compiler

from unityc.frontend import ModelSpec, import_model


def imported_after(code: str, allowed: tuple[str, ...] = ("unityc.runtime",)) -> list[str]:
    """Modules of unityc (outside the `allowed` packages) and of the compiler's dependencies that
    a fresh interpreter holds after running `code`."""
    probe = (
        f"{code}\nimport json, sys\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{COMPILER!r} or (m.startswith('unityc.') and not m.startswith({allowed!r})))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_importing_the_runtime_imports_nothing_of_the_compiler() -> None:
    assert imported_after("import unityc.runtime") == []


def test_what_a_program_uses_imports_nothing_of_the_compiler() -> None:
    code = (
        "import unityc.runtime as rt\n"
        "from unityc.runtime import Collective, Constant, Layout\n"
        "rt.main, rt.Context, rt.Plan, rt.Model, rt.kernels\n"
        "import unityc.runtime.batch\n"
        "from unityc.models.spec import build_reference"
    )
    assert imported_after(code, ("unityc.runtime", "unityc.models")) == []


def test_the_compiler_imports_the_patterns_without_torch() -> None:
    code = "import unityc.cost.communication\nimport sys\nassert 'torch' not in sys.modules, 'torch imported'"
    imported_after(code)


@pytest.mark.torchrun
def test_a_factory_program_runs_without_the_compiler(tmp_path: Path) -> None:
    """xdsl, z3 and lark shadowed by packages that refuse to import: the program of a
    factory-file model still trains and passes --check."""
    (tmp_path / "net.py").write_text(FACTORY)
    module = import_model(ModelSpec(str(tmp_path / "net.py") + ":make", batch=8))
    (tmp_path / "net.mlir").write_text(str(module))
    program = tmp_path / "train.py"
    done = _opt(
        str(tmp_path / "net.mlir"), "-p", 'data-parallel{machine="cpu:2"}', "-t", "torch", "-o", str(program)
    )
    assert done.returncode == 0, done.stderr
    run = torchrun(program, 2, "--check", "--steps", "2", env=without_compiler(tmp_path))
    assert run.returncode == 0, run.report()
    assert "check passed: 2 step(s)" in run.output, run.report()
