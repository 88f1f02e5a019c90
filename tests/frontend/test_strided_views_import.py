"""Views of strided tensors (after a transpose or permute, an interleave, unfold windows) import
as reshapes, transposes and gathers, and the graph matches the module (issue 42)."""

from __future__ import annotations

from pathlib import Path

from unityc.dialects import pcg
from unityc.frontend import ModelSpec
from unityc.frontend.check import check_import


def test_strided_views_import_exactly() -> None:
    module, checks = check_import(ModelSpec(f"{Path(__file__).parent / 'strided_views_model.py'}:make"))
    ops = list(module.walk())
    assert any(isinstance(op, pcg.GatherOp) for op in ops)  # the overlapping windows
    assert any(isinstance(op, pcg.TransposeOp) for op in ops)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert any(c.what == "gradient of 'fc.weight'" for c in checks)
