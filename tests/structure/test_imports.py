"""Structure limits the review asks for, measured on the tree with `ast`: function-local imports
of unityc's own modules stay under 5 % of its internal imports (imports belong at module top;
a local one is kept only for a real import cycle or a heavy optional dependency, with a comment
saying which), and no module grows past 800 lines."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TypeGuard

PACKAGE = Path(__file__).resolve().parents[2] / "unityc"
LOCAL_SHARE = 0.05
MAX_LINES = 800


def internal(node: ast.AST) -> TypeGuard[ast.Import | ast.ImportFrom]:
    """Whether an import statement imports a module of unityc itself."""
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "unityc"
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "unityc" for alias in node.names)
    return False


def imports(tree: ast.Module) -> tuple[int, list[int]]:
    """The number of internal imports in a module, and the lines of those inside a function."""
    local: list[int] = []
    total = 0
    for node in ast.walk(tree):
        if internal(node):
            total += 1
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        local += [inner.lineno for inner in ast.walk(node) if internal(inner)]
    # a function nested in a function is walked twice: count each import line once
    return total, sorted(set(local))


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_function_local_imports_are_under_five_percent() -> None:
    total = 0
    local: list[str] = []
    for path in modules():
        count, lines = imports(ast.parse(path.read_text(), str(path)))
        total += count
        local += [f"{path.relative_to(PACKAGE.parent)}:{line}" for line in lines]
    assert total > 100, "the measurement found too few imports: is the package where it is expected?"
    share = len(local) / total
    assert share < LOCAL_SHARE, (
        f"{len(local)} of {total} internal imports are function-local ({share:.1%}):\n" + "\n".join(local)
    )


def test_the_measurement_sees_local_and_top_imports() -> None:
    source = "import unityc.ir\nimport os\ndef f():\n    from . import x\n"
    tree = ast.parse(source + "    def g():\n        from unityc import y\n")
    assert imports(tree) == (3, [4, 6])


def test_no_module_is_over_800_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE.parent)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by concept): {long}"
