"""The importer covers the pcg dialect: every op the dialect defines (taken from the dialect, not
listed here) is built by some frontend lowering, or is declared in `NOT_IMPORTED` with the reason
no lowering builds it. The frontend's lowerings are keyed by ATen target; which op class each one
builds is read from the frontend's source (`pcg.<Op>` references), so a new dialect op with no
lowering, or a lowering removed, fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from unityc.dialects.pcg import PCG

FRONTEND = Path(__file__).resolve().parents[2] / "unityc" / "frontend"

NOT_IMPORTED: dict[str, str] = {
    "AttentionOp": "built by passes/fuse_attention.py from the imported matmul-softmax-matmul chain",
    "GatedActivationOp": "built by passes/fuse_norms.py from the imported act(gate) * up",
}


def _ops_built_by_frontend() -> set[str]:
    names: set[str] = set()
    for path in sorted(FRONTEND.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "pcg"
            ):
                names.add(node.attr)
    return names


def test_every_pcg_op_is_imported_or_has_a_reason() -> None:
    ops = {op.__name__ for op in PCG.operations}
    built = _ops_built_by_frontend()
    missing = sorted(ops - built - set(NOT_IMPORTED))
    assert not missing, f"pcg ops no importer lowering builds and with no declared reason: {missing}"
    assert not built & set(NOT_IMPORTED), (
        f"declared never imported but built: {sorted(built & set(NOT_IMPORTED))}"
    )
    assert set(NOT_IMPORTED) <= ops, "a reason for an op the dialect does not have"
    assert all(reason.strip() for reason in NOT_IMPORTED.values())
