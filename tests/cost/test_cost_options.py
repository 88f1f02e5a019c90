"""The pricing passes' option group is one frozen value, checked where it is made."""

from __future__ import annotations

import pytest

from unityc.cost.options import CostOptions
from unityc.machine import MachineSpecError


def test_options_parse_once_into_a_hashable_value() -> None:
    a, b = CostOptions.parse("summit:2", "roofline", "adam"), CostOptions.parse("summit:2", optimizer="adam")
    assert a == b and hash(a) == hash(b)
    assert a.machine.num_devices == 12 and a.profile is None
    with pytest.raises(AttributeError):
        a.cost = "profile"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("cpu:2", "roofline", "lamb"), "unknown optimizer 'lamb'"),
        (("cpu:2", "measured"), "unknown cost model 'measured'"),
        (("cpu:2", "profile"), "needs a profile cache file"),
    ],
)
def test_a_bad_option_is_named(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CostOptions.parse(*args)


def test_an_unknown_machine_is_named_first() -> None:
    with pytest.raises(MachineSpecError):
        CostOptions.parse("nosuch:2", "measured", "lamb")
