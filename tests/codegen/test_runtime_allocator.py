"""The runtime keeps freed host memory mapped between steps (`unityc.runtime.allocator`)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt"
)

STEPS = """
import resource, torch
from unityc.runtime.allocator import keep_freed_memory
done = {keep}
def step():
    # a step's activations (4 MiB each) are allocated one after the other and all freed
    # after its backward: the free top of the heap then exceeds glibc's trim threshold
    saved = [torch.ones(1 << 20) for _ in range(6)]
    del saved
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
for _ in range(20):
    step()
print(done, resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
"""


def _run(keep: bool, env: dict[str, str] | None = None) -> tuple[str, int]:
    code = STEPS.format(keep="keep_freed_memory()" if keep else "None")
    env = {**os.environ, **(env or {})}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    flag, faults = done.stdout.split()
    return flag, int(faults)


def test_steps_stop_page_faulting() -> None:
    """With the setting, repeated steps touch no new pages. The control shows the count sees
    faults: with glibc's mmap threshold held at its 128 KiB default (glibc's own adaptation of
    it, which the setting replaces, makes the default run fault in some steps and not others),
    every step maps its MiB-sized tensors afresh."""
    flag, faults = _run(keep=True)
    assert flag == "True" and faults < 50
    _, control = _run(keep=False, env={"MALLOC_MMAP_THRESHOLD_": "131072"})
    assert control > 10 * max(faults, 1)


def test_user_malloc_settings_win() -> None:
    flag, _ = _run(keep=True, env={"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert flag == "False"
