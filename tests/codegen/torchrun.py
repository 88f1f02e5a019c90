"""Running generated programs under torchrun (gloo, CPU) from the tests and benchmarks."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from unityc.codegen import emit_program

TIMEOUT_S = 300


@dataclass
class Run:
    returncode: int
    output: str


def write_program(module: ModuleOp, directory: Path, name: str) -> Path:
    (directory / f"{name}.mlir").write_text(str(module))
    path = directory / f"{name}.py"
    path.write_text(emit_program(module, source=f"{name}.mlir"))
    return path


def torchrun(program: Path | str, nproc: int, *args: str, timeout: int = TIMEOUT_S) -> Run:
    """Runs `program` (a file, or a module name) on `nproc` gloo processes; returns its exit
    status and output."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    if isinstance(program, str):
        command.append("-m")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [*command, str(program), *args],
        cwd=program.parent if isinstance(program, Path) else None,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(done.returncode, done.stdout + done.stderr)
