"""`aten.max.dim`/`min.dim` (values and indices), `amax`/`amin` and a whole-tensor `max`
import as `pcg.reduce` and the graph matches the module (issue 42)."""

from __future__ import annotations

from pathlib import Path

from unityc.dialects import pcg
from unityc.frontend import ModelSpec
from unityc.frontend.check import check_import


def test_max_min_import_exactly() -> None:
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'max_min_model.py'}:make"))
    kinds = sorted(op.attrs()["kind"] for op in module.walk() if isinstance(op, pcg.ReduceOp))
    # the min's unused indices are not built
    assert kinds == ["amax", "amax", "amin", "argmax", "max", "min"]
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'fc.") for c in checks)
    assert any(c.what == "output 1" for c in checks)  # the indices
