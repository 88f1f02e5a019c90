import os
import sys

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))

settings.register_profile(
    "unityc",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
    database=None,
)
settings.load_profile("unityc")


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with torchrun tests first, those with the most tests first (a rough measure of their
    set-up: one fixture makes every program of its file); the other files after, in their order.

    `make test` hands whole files to its two workers in this order (`--dist loadfile
    --no-loadscope-reorder`): each module's fixtures are built once, in one worker, and the long
    files start first, so the many short files fill the tail. (xdist's default `--dist load`
    sent the first 400 of ~3,200 tests, nearly every torchrun file, to one worker.)"""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(_file(item), []).append(item)

    def order(tests: list[pytest.Item]) -> int:
        return -len(tests) if any(t.get_closest_marker("torchrun") for t in tests) else 1

    items[:] = [item for tests in sorted(files.values(), key=order) for item in tests]
