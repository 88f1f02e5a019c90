"""The three floors are checked: `lint-imports` keeps every contract of pyproject.toml on the
tree, and breaks the one an injected import violates (a copy of the package with one
function-local import added, the kind of import that is easiest to slip in unnoticed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = "import sys\nfrom importlinter.cli import lint_imports_command\nsys.exit(lint_imports_command())"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache"],
        cwd=root,
        env={**os.environ, "COLUMNS": "400", "PYTHONPATH": os.pathsep.join([str(root), *sys.path[1:]])},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_tree_keeps_every_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in done.stdout


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package and the contracts, copied (the tests add one import each to the copy)."""
    root = tmp_path_factory.mktemp("layers")
    shutil.copytree(ROOT / "unityc", root / "unityc", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


@pytest.mark.parametrize(
    ("module", "imported", "contract"),
    [
        ("runtime/patterns.py", "xdsl.ir", "The runtime (what generated programs import)"),
        ("runtime/plan.py", "unityc.models.spec", "The runtime (what generated programs import)"),
        ("graph/__init__.py", "unityc.search.unity", "Middle floor"),
        ("cost/pricing.py", "unityc.codegen.analysis", "Three floors"),
        ("passes/estimate.py", "unityc.codegen", "Top floor"),
    ],
)
def test_an_injected_import_breaks_its_contract(
    copy: Path, module: str, imported: str, contract: str
) -> None:
    path = copy / "unityc" / module
    original = path.read_text()
    path.write_text(f"{original}\n\ndef _injected() -> None:\n    import {imported}  # noqa: F401\n")
    try:
        done = lint_imports(copy)
    finally:
        path.write_text(original)
    assert done.returncode != 0, done.stdout
    broken = [line.removesuffix(" BROKEN") for line in done.stdout.splitlines() if line.endswith(" BROKEN")]
    assert any(name.startswith(contract) for name in broken), done.stdout
    line = len(original.splitlines()) + 4  # the injected import's line: the chain it reports
    assert f"(l.{line})" in done.stdout, done.stdout
