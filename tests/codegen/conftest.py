"""Codegen tests: `pytest tests/codegen` runs them alone; `-m "not torchrun"` skips the
differential runs (each starts torchrun: 5-20 s)."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "torchrun: runs a generated program under torchrun (gloo)")
