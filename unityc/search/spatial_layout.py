"""The spatial strategy (`spatial_graph`): images split over height x width (halo exchanges),
optionally with data parallelism: Mesh-TensorFlow's spatial partitioning, the `spatial`
baseline; and the layouts it can take (`spatial_layouts`)."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Sequence

from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, Node
from unityc.search.rebuild import Operand, Proposal, accepts, rebuild, unsharded, with_degrees
from unityc.search.strategies import batch_forms, sync_batch_norm


def spatial_grids(n: int) -> list[tuple[int, int]]:
    """Height x width splits of n devices, squarest first (halos shrink with the perimeter)."""
    grids = [(h, n // h) for h in range(1, n + 1) if n % h == 0]
    return sorted(grids, key=lambda g: (abs(math.log(g[0] / g[1])), -g[0]))


def _spatial_forms(
    operands: Sequence[Operand], n: int, batch: int, image_grid: tuple[int, int] | None = None
) -> list[Proposal]:
    """Images (batch-dim 4-D activations) sharded `batch` ways on the batch and n / batch ways
    over height x width (each grid, squarest first); other batch-dim activations as they are
    (a pixel shuffle's reshapes and transpose carry the split along) where they hold no copies,
    else on the batch with copies for the rest; a padded image's row masks and masked
    statistics cut like the images (`_row_mask_form`); weights and constants replicated. Then
    the data-parallel forms. An op reading no image (a mean times a row mask) tries the grid
    the images take (`image_grid`) first: the squarest grid may divide its rows but not the
    images' columns, and would move every image to meet it."""
    proposals: list[Proposal] = []
    grids = spatial_grids(n // batch)
    images = any(o.batched and o.logical is not None and o.logical.rank == 4 for o in operands)
    if image_grid in grids and not images:
        grids = [image_grid, *(g for g in grids if g != image_grid)]
    for h, w in grids:
        proposal: list[TensorType | None] = []
        for o in operands:
            if o.logical is None:
                proposal.append(None)
            elif o.batched and o.logical.rank == 4:
                proposal.append(with_degrees(o.logical, {0: batch, 2: h, 3: w}))
            elif o.batched and o.current is not None and o.current.copy_degree == 1:
                proposal.append(o.current)  # as it is: a reshape or transpose carries the split along
            elif o.batched:
                proposal.append(with_degrees(o.logical, {0: batch}, copy=n // batch))
            else:
                proposal.append(_row_mask_form(o, h, w, n) or with_degrees(o.logical, copy=n))
        if all(p is not None or o.logical is None for p, o in zip(proposal, operands, strict=True)):
            proposals.append(tuple(proposal))
    return proposals + batch_forms(operands, n)


def _row_mask_form(o: Operand, h: int, w: int, n: int) -> TensorType | None:
    """A padded image's row mask or masked statistics (`padding.pad_images`: a [1, 1, H, 1]
    constant, a [1, C, H, 1] product of it; H or W may be 1, broadcast) cut like the images
    over height x width, with copies for the rest of the n devices; None for a weight or any
    other operand, or where the cut does not divide it."""
    t = o.logical
    if o.source not in (None, "pcg.constant") or t is None or t.rank != 4 or t.shape[0] != 1:
        return None
    if max(t.shape[2:]) == 1:
        return None
    shard = {d: k for d, k in ((2, h), (3, w)) if t.shape[d] > 1}
    return with_degrees(t, shard, copy=n // math.prod(shard.values()))


def spatial_graph(graph: Graph, n: int, batch: int = 1, keep: Collection[int] = ()) -> Graph:
    """Spatial parallelism (Mesh-TensorFlow's spatial partitioning) over n devices, `batch` of
    them data parallel: every image op split over height x width on n / batch devices (the
    windows exchange halos), batch norms synchronized (`sync_batch_norm`: their statistics are
    partial sums over the shards, all-reduced); an op that cannot split so runs data parallel."""
    if n % batch:
        raise ValueError(f"spatial: {batch}-way data parallelism does not divide {n} devices")
    grid = _image_grid(graph, n, batch)
    return rebuild(
        sync_batch_norm(graph), lambda nid, node, operands: _spatial_forms(operands, n, batch, grid), keep
    )


def _first_convolution(graph: Graph) -> tuple[Node, TensorType, list[TensorType | None]] | None:
    """A graph's first convolution, its unsharded input and its other operands' types."""
    convs = [nid for nid in graph.topological() if graph.nodes[nid].op == "pcg.conv2d"]
    if not convs:
        return None
    first = graph.nodes[convs[0]]
    x, *rest = (None if r is None else unsharded(graph.type_of(r)) for r in first.operands)
    assert x is not None
    return first, x, rest


def _splits(
    first: Node, x: TensorType, rest: list[TensorType | None], m: int, b: int
) -> Iterator[tuple[int, int]]:
    """The grids (squarest first) over which m devices, b of them data parallel, split the
    first convolution's images."""
    weights = [None if t is None else with_degrees(t, copy=m) for t in rest]
    for h, w in spatial_grids(m // b):
        images = with_degrees(x, {0: b, 2: h, 3: w})
        if images is not None and accepts(first, (images, *weights)):
            yield h, w


def _image_grid(graph: Graph, n: int, batch: int) -> tuple[int, int] | None:
    """The height x width grid a spatial plan's first convolution takes, None if none."""
    found = _first_convolution(graph)
    return None if found is None else next(_splits(*found, n, batch), None)


def spatial_layouts(graph: Graph, n: int, every_device: bool = False) -> list[tuple[int, int]]:
    """(devices m, data-parallel degree b) of the spatial plans of a graph with convolutions on
    n devices: for each b dividing the images, the most devices m (a multiple of b, m / b >= 2)
    whose m / b ways over height x width split its first convolution (an image of 2^k rows
    cannot be cut 3 ways: on 48 devices a 1024-row U-Net uses 32; `padding.pad_images` pads
    it to rows that can); `every_device`: m = n only. [] for a graph without a convolution."""
    found = _first_convolution(graph)
    if found is None or n < 2:
        return []
    first, x, rest = found
    layouts: list[tuple[int, int]] = []
    for b in (b for b in range(1, n) if x.shape[0] % b == 0):
        counts = [n] if every_device else range(n - n % b, 2 * b - 1, -b)
        for m in counts:
            if m % b == 0 and next(_splits(first, x, rest, m, b), None) is not None:
                layouts.append((m, b))
                break
    return layouts
