"""Loading a dialect, pass or target when it is first used, as xDSL's own registries do: a
`unityc-opt` run on a small file (one lit RUN line) then imports no cost model, rewrite library,
numpy or torch. One loader for every registry entry, named by module and attribute."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy(module: str, name: str) -> Callable[[], Any]:
    """A loader of `module`'s `name`, importing the module when called."""

    def load() -> Any:
        return getattr(importlib.import_module(module), name)

    load.__name__ = f"load_{name}"
    return load
