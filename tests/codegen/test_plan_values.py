"""The values a generated program carries validate themselves and are hashable (frozen all
through): a Layout whose shard has another rank than its shape, or a piece outside its degrees,
is refused where it is made, not when a rank slices a tensor with it."""

from __future__ import annotations

import pytest

from unityc.runtime import Layout


def layout(**changes: object) -> Layout:
    fields: dict[str, object] = {
        "shape": (4, 6),
        "dtype": "float32",
        "shard": (2, 1),
        "copy": 2,
        "pieces": {0: (0, 0, 0, 0), 1: (0, 0, 0, 1), 2: (1, 0, 0, 0), 3: (1, 0, 0, 1)},
    }
    fields.update(changes)
    return Layout(**fields)  # type: ignore[arg-type]


def test_a_shard_of_another_rank_than_the_shape_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shard \[2\] has rank 1, the shape \[4, 6\] has rank 2"):
        layout(shard=(2,), pieces={})
    with pytest.raises(ValueError, match="has rank 3"):
        layout(shard=(2, 1, 1), pieces={})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"shard": (0, 1), "pieces": {}}, "degrees >= 1"),
        ({"copy": 0, "pieces": {}}, "degrees >= 1"),
        ({"pieces": {0: (2, 0, 0, 0)}}, r"rank 0's piece \(2, 0, 0, 0\) is no coordinate"),
        ({"pieces": {0: (0, 0, 0)}}, "is no coordinate"),
        ({"dtype": "float8"}, "unknown dtype 'float8'"),
    ],
)
def test_a_malformed_layout_is_refused(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        layout(**changes)


def test_layouts_are_hashable_and_frozen() -> None:
    a, b = layout(), layout()
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert layout(copy=1, pieces={0: (0, 0, 0, 0)}) not in {a}
    with pytest.raises(TypeError):
        a.pieces[0] = (1, 0, 0, 0)  # type: ignore[index]
