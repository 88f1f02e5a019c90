"""The project's console scripts as a benchmark runs them: the virtual environment's, beside the
interpreter that runs the benchmark (so `.venv/bin/python benchmarks/x.py` needs no activated
venv), else whatever PATH has."""

from __future__ import annotations

import os
import sys


def tool(name: str) -> str:
    """`name` (`unityc-import`, `unityc-opt`, `torchrun`) beside this interpreter, else from PATH."""
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else name
