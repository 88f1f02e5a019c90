"""Every file and folder the README's recipes name exists (the op checklist, "Add a parallel
dimension", "Add a baseline"): a recipe that points at a moved or renamed file fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ("Add an op: the checklist", "Add a parallel dimension", "Add a baseline")
PATH = re.compile(r"`((?:unityc|tests|benchmarks|docs)/[\w./*-]*)`")


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


@pytest.mark.parametrize("title", RECIPES)
def test_recipe_paths_exist(title: str) -> None:
    section = _section((ROOT / "README.md").read_text(), title)
    named = PATH.findall(section)
    assert len(named) >= 5, f"{title}: too few paths found ({named})"
    missing = [p for p in named if not any(ROOT.glob(p.rstrip("/")))]
    assert missing == [], f"{title} names paths that do not exist: {missing}"
