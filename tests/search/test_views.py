"""Search views: enumeration, placement, and agreement with `#pcg.view` placement."""

from __future__ import annotations

from search_graphs import t

from unityc.cost.pricing import placement
from unityc.machine import load_machine
from unityc.search.views import Block, View, as_view, canonical_view, to_attr, view_placement, views_in


def test_views_cover_every_order_and_aligned_starts() -> None:
    views = views_in((2, 3, 1, 1), Block(0, 12), max_starts=2)
    assert set(views) == {View(0, (3, 1)), View(0, (1, 2)), View(6, (3, 1)), View(6, (1, 2))}
    assert views_in((4, 1, 1), Block(0, 2)) == ()  # more tasks than devices
    assert views_in((1, 1, 1), Block(4, 2), max_starts=1) == (View(4, ()),)


def test_canonical_view_is_row_major() -> None:
    assert canonical_view((2, 3, 1, 1), 6) == View(6, (3, 1))
    assert view_placement((2, 3, 1, 1), View(6, (3, 1)))[(1, 2, 0, 0)] == 11


def test_as_view_recovers_linear_placements_only() -> None:
    degrees = (2, 1, 2)
    where = view_placement(degrees, View(1, (1, 2)))
    assert as_view(degrees, where) == View(1, (1, 2))
    scrambled = dict(where)
    scrambled[(1, 0, 1)], scrambled[(0, 0, 1)] = scrambled[(0, 0, 1)], scrambled[(1, 0, 1)]
    assert as_view(degrees, scrambled) is None


def test_attrs_place_tasks_where_search_views_do() -> None:
    """Strides of whole nodes become `inter`; a task dim longer than a node runs into the next."""
    machine = load_machine("summit:4")  # 4 nodes x 6
    for degrees, view in [
        ((24, 1, 1), View(0, (1,))),  # one dim spanning four nodes
        ((4, 6, 1, 1), View(0, (6, 1))),  # data across nodes, tensor within
        ((6, 4, 1, 1), View(0, (1, 6))),
        ((2, 1, 3), View(12, (3, 1))),
    ]:
        attr = to_attr(view, machine)
        shard = list(degrees[:-2])
        tt = t(*(12 * k for k in shard))
        tt = type(tt)(tt.shape, tt.element_type, shard, degrees[-2], degrees[-1])
        assert placement(tt, attr, machine) == view_placement(degrees, view)
    assert to_attr(View(0, (6, 1)), machine).inter == (True, False)
