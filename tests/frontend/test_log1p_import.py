"""`aten.log1p` imports as `pcg.log1p` and the graph matches the module (issue 42)."""

from __future__ import annotations

from pathlib import Path

from unityc.dialects import pcg
from unityc.frontend import ModelSpec
from unityc.frontend.check import check_import


def test_log1p_imports_exactly() -> None:
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'log1p_model.py'}:make"))
    assert any(isinstance(op, pcg.Log1pOp) for op in module.walk())
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what.startswith("gradient of 'fc.") for c in checks)
