"""Images padded to even shards (issue 29): GSPMD's answer to a dim no device count divides.

Eight 1024-row images on 48 devices need 6 pieces per image, and no dim of a U-Net (1024 / 2^k
rows, 64 x 2^k channels) divides by 3. Rather than uneven pieces (every reader of a piece shape,
shard degree, halo, layout and collective would change), `pad_images` rewrites the graph so the
rows divide: the image gets zero rows at the bottom (1024 -> 1056 = 3 x 352, and 352 = 22 x 16
survives four 2x poolings), the network runs on the padded tensors with ordinary equal shards,
and the real rows are sliced off before anything that mixes rows (the loss) and before every
output. It is exact because the padded rows hold zero wherever a zero is what the unpadded
graph would read there:

* a window (convolution, pooling) whose real outputs read past the last real row reads the
  zero padding the unpadded op would have read; its stride divides the real and the padded
  rows, so padded and real rows never share a window (pad at the bottom only: the top edge's
  padding is untouched). A max pool reading past the real rows would take the zeros for
  values: it is refused (the rows are sliced off before it);
* an op that makes the padded rows non-zero (a convolution's bias or its windows straddling
  the edge) leaves them `dirty`; they are multiplied by a 0/1 row mask (a [1, 1, H, 1]
  constant, cut like the images) only before an op that would read them: a window reaching
  past the real rows, a batch norm;
* a batch norm is spelled out (`strategies.spelled_batch_norm`) with its sums divided by the
  real count, so its statistics are the unpadded image's, and its mean and shift masked (small
  [1, C, H, 1] products), so its padded rows stay zero: a conv -> batch norm -> ReLU chain
  costs one full-size mask, before the batch norm;
* element-wise ops, channel concats, reshapes and transposes that keep the padded dim whole
  (a pixel shuffle) carry the padding along; any other reader of a padded tensor gets the real
  rows (a `pcg.split`), so what follows runs as before.

Gradients follow: the padding, masks and slices are ordinary ops. The padded graph computes
about (padded / real rows - 1) more (3 % for 1056 / 1024) plus the masks, which the cost model
prices like any op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from xdsl.dialects.builtin import AnyFloat, BytesAttr, DenseIntOrFPElementsAttr, Float32Type, Float64Type
from xdsl.dialects.builtin import TensorType as BuiltinTensorType

from unityc.dialects import pcg
from unityc.dialects.pcg import families as fam
from unityc.dialects.pcg import family_ops
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.precision import BF16_MIXED
from unityc.graph import Graph, Node, Ref
from unityc.graph.precision import graph_precision
from unityc.search.spatial_layout import spatial_grids
from unityc.search.strategies import spelled_batch_norm

ZERO_PRESERVING = frozenset(family_ops(fam.ZeroPreserving))
"""Element-wise ops with f(0) = 0: a clean padded tensor stays clean."""
FINITE = frozenset(family_ops(fam.Finite))
"""Element-wise ops finite at any finite input: the padded rows' values (zero or the dirty ones
a real row's neighbours give) never become inf or NaN, which a 0/1 mask could not clear."""
BINARY = frozenset(family_ops(pcg.AddOp, pcg.SubOp, pcg.MulOp))
"""The binary ops a padded operand passes through (a quotient of padded zeros is not finite)."""
WINDOWS = frozenset(family_ops(fam.Windowed))


class PaddingError(ValueError):
    """The graph cannot be padded as asked (no image, a size that does not grow)."""


@dataclass(frozen=True)
class Padded:
    """A tensor of the padded graph whose dim `dim` holds `real` real entries then padding."""

    dim: int
    real: int
    clean: bool
    """Whether the padding entries are exactly zero."""


def image_input(graph: Graph) -> int:
    """The id of the graph's image input: its first rank-4 floating-point input."""
    for nid in graph.topological():
        node = graph.nodes[nid]
        t = node.types[0] if node.types else None
        if node.op == "pcg.input" and t is not None and t.rank == 4 and isinstance(t.element_type, AnyFloat):
            return nid
    raise PaddingError("the graph has no image input (a rank-4 floating-point pcg.input) to pad")


def downsampling(graph: Graph) -> int:
    """The image's rows over the fewest rows any window's output has (16 for a 4-stage U-Net):
    a padded height must be a multiple of this times the split degree to survive every pooling."""
    rows = graph.nodes[image_input(graph)].types[0].shape[2]
    outs = [graph.nodes[nid].types[0].shape[2] for nid in graph.nodes if graph.nodes[nid].op in WINDOWS]
    fewest = min(outs, default=rows)
    return rows // fewest if fewest and rows % fewest == 0 else 1


def padded_rows(graph: Graph, degree: int) -> int:
    """The fewest rows >= the image's that `degree` shards survive every down-sampling with."""
    rows = graph.nodes[image_input(graph)].types[0].shape[2]
    step = degree * downsampling(graph)
    return -(-rows // step) * step


def pad_images(graph: Graph, rows: int) -> Graph:
    """`graph` with its image input padded to `rows` rows (zeros at the bottom), the network run
    on the padded tensors and the real rows sliced back (see the module docstring). The inputs,
    weights and outputs are the graph's own, so every plan of the result trains the same model.
    Raises PaddingError where `rows` is not more than the image's."""
    image = image_input(graph)
    t = graph.nodes[image].types[0]
    if rows <= t.shape[2]:
        raise PaddingError(f"the image has {t.shape[2]} rows: padding to {rows} would not add any")
    return _Padder(graph).run(image, rows)


class _Padder:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.out = Graph(module_attrs=graph.module_attrs, function_attrs=dict(graph.function_attrs))
        self.map: dict[Ref, Ref] = {}
        self.padded: dict[Ref, Padded] = {}
        """New refs that are padded (keyed by the new graph's refs)."""
        self.sliced: dict[Ref, Ref] = {}
        self.masked: dict[Ref, Ref] = {}
        self.masks: dict[tuple[int, int, int, int, str], Ref] = {}
        self.mixed = graph_precision(graph) == BF16_MIXED

    def run(self, image: int, rows: int) -> Graph:
        for nid in self.graph.topological():
            node = self.graph.nodes[nid]
            if node.is_source:
                (ref,) = self.out.add_node(replace(node, operands=()))
                self.map[(nid, 0)] = ref
                if nid == image:
                    self.map[(nid, 0)] = self._pad_input(ref, rows)
                continue
            results = self._op(node)
            self.map.update({(nid, i): r for i, r in enumerate(results)})
        self.out.outputs = tuple(self._real_rows(self.map[r]) for r in self.graph.outputs)
        return self.out.prune()

    # --- the image ------------------------------------------------------------------------

    def _pad_input(self, ref: Ref, rows: int) -> Ref:
        t = self.out.type_of(ref)
        n, c, real, width = t.shape
        zeros = _literal(np.zeros((n, c, rows - real, width)), t)
        (pad,) = self.out.add_node(
            Node(
                "pcg.constant",
                (),
                (("value", zeros),),
                (TensorType((n, c, rows - real, width), t.element_type),),
            )
        )
        (padded,) = self.out.add("pcg.concat", [ref, pad], dim=2)
        self.padded[padded] = Padded(2, real, clean=True)
        return padded

    # --- one op ---------------------------------------------------------------------------

    def _op(self, node: Node) -> tuple[Ref, ...]:
        operands = [None if r is None else self.map[r] for r in node.operands]
        pads = [self.padded.get(r) if r is not None else None for r in operands]
        if not any(pads):
            return self.out.add_node(replace(node, operands=tuple(operands)))
        handler = {
            "pcg.conv2d": self._window,
            "pcg.pool2d": self._window,
            "pcg.batch_norm": self._batch_norm,
            "pcg.concat": self._concat,
            "pcg.reshape": self._reshape,
            "pcg.transpose": self._transpose,
        }.get(node.op)
        if handler is not None:
            done = handler(node, operands, pads)
            if done is not None:
                return done
        elif node.op in FINITE and (p := pads[0]) is not None:
            (y,) = self.out.add(node.op, operands, **dict(node.attrs))
            clean = p.clean and node.op in ZERO_PRESERVING
            self.padded[y] = Padded(p.dim, p.real, clean)
            return (y,)
        elif node.op in BINARY and (done := self._binary(node, operands, pads)) is not None:
            return done
        return self.out.add(node.op, [self._real(r) for r in operands], **dict(node.attrs))

    def _window(
        self, node: Node, operands: list[Ref | None], pads: list[Padded | None]
    ) -> tuple[Ref, ...] | None:
        """A convolution or pooling on the padded dim: its windows must line up with the real
        and the padded rows (stride dividing both); where a real output reads past the real
        rows, the input must be clean there (a max pool never: it would take the zeros)."""
        x, p = operands[0], pads[0]
        if x is None or p is None or p.dim not in (2, 3) or any(pads[1:]):
            return None
        axis = p.dim - 2
        size = self.out.type_of(x).shape[p.dim]
        stride, pad, dilation = (
            _pair(node.attr(a), axis, 1 if a != "padding" else 0) for a in ("stride", "padding", "dilation")
        )
        if node.op == "pcg.conv2d":
            assert operands[1] is not None
            kernel = self.out.type_of(operands[1]).shape[p.dim]
        else:
            kernel = _pair(node.attr("kernel"), axis, 1)

        def out_size(rows: int) -> int:
            return (rows + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1

        if out_size(p.real) * stride != p.real or out_size(size) * stride != size:
            return None
        reach = p.real - stride - pad + dilation * (kernel - 1)  # the last real output's last row
        if reach >= p.real and node.op == "pcg.pool2d" and node.attr("kind") == "max":
            return None
        if reach >= p.real:
            x = self._clean(x)
        (y,) = self.out.add(node.op, [x, *operands[1:]], **dict(node.attrs))
        # the first padded output row's window starts `pad` rows above the padding: with any
        # padding it reads real rows, so only an unpadded pool of zeros gives zeros
        clean = node.op == "pcg.pool2d" and self.padded[x].clean and pad == 0
        self.padded[y] = Padded(p.dim, p.real // stride, clean)
        return (y,)

    def _batch_norm(
        self, node: Node, operands: list[Ref | None], pads: list[Padded | None]
    ) -> tuple[Ref, ...] | None:
        x, w, b = operands
        p = pads[0]
        if x is None or p is None or p.dim == 1 or any(pads[1:]):
            return None
        x = self._clean(x)
        t = self.out.type_of(x)
        count = math.prod(t.shape[d] for d in range(t.rank) if d != 1) // t.shape[p.dim] * p.real
        y = spelled_batch_norm(self.out, x, w, b, node.attr("eps"), self.mixed, (self._mask(x), count))
        self.padded[y] = Padded(p.dim, p.real, clean=True)
        return (y,)

    def _binary(
        self, node: Node, operands: list[Ref | None], pads: list[Padded | None]
    ) -> tuple[Ref, ...] | None:
        """add/sub/mul of tensors padded alike, or of one and a tensor broadcast along the
        padded dim (a batch norm's [1, C, 1, 1] statistics)."""
        known = [p for p in pads if p is not None]
        first = known[0]
        if any((p.dim, p.real) != (first.dim, first.real) for p in known):
            return None
        types = [self.out.type_of(r) for r in operands if r is not None]
        rank = max(t.rank for t in types)
        for r, p in zip(operands, pads, strict=True):
            assert r is not None
            t = self.out.type_of(r)
            if p is not None and t.rank != rank:
                return None  # a padded operand broadcast to more dims: its padded dim moves
            d = first.dim - (rank - t.rank)
            if p is None and d >= 0 and t.shape[d] != 1:
                return None  # an unpadded operand with rows of its own
        (y,) = self.out.add(node.op, operands, **dict(node.attrs))
        cleans = [p is not None and p.clean for p in pads]
        self.padded[y] = Padded(first.dim, first.real, any(cleans) if node.op == "pcg.mul" else all(cleans))
        return (y,)

    def _concat(
        self, node: Node, operands: list[Ref | None], pads: list[Padded | None]
    ) -> tuple[Ref, ...] | None:
        first = pads[0]
        if first is None or node.attr("dim") % len(self.out.type_of(operands[0]).shape) == first.dim:  # type: ignore[arg-type]
            return None
        if any(p is None or (p.dim, p.real) != (first.dim, first.real) for p in pads):
            return None
        (y,) = self.out.add(node.op, operands, **dict(node.attrs))
        self.padded[y] = Padded(first.dim, first.real, all(p is not None and p.clean for p in pads))
        return (y,)

    def _transpose(
        self, node: Node, operands: list[Ref | None], pads: list[Padded | None]
    ) -> tuple[Ref, ...] | None:
        p = pads[0]
        assert p is not None
        perm = list(node.attr("perm"))
        (y,) = self.out.add(node.op, operands, **dict(node.attrs))
        self.padded[y] = Padded(perm.index(p.dim), p.real, p.clean)
        return (y,)

    def _reshape(
        self, node: Node, operands: list[Ref | None], pads: list[Padded | None]
    ) -> tuple[Ref, ...] | None:
        """A reshape that keeps the padded dim the outermost of its group (a pixel shuffle's
        split of the channels beside it, or its merge of the rows with the sub-rows after them):
        the padding stays at the end of the group's dim."""
        x, p = operands[0], pads[0]
        assert x is not None and p is not None
        shape = list(self.out.type_of(x).shape)
        size = shape[p.dim]
        real_in = [*shape[: p.dim], p.real, *shape[p.dim + 1 :]]
        target = list(node.attr("shape"))
        before = math.prod(real_in[: p.dim])
        for j in range(len(target)):
            if math.prod(target[:j]) != before:
                continue
            inner, q = target[j] // p.real if target[j] % p.real == 0 else 0, p.dim + 1
            while inner and math.prod(real_in[:q]) < math.prod(target[: j + 1]):
                q += 1
            if (
                not inner
                or math.prod(real_in[:q]) != math.prod(target[: j + 1])
                or math.prod(real_in[p.dim + 1 : q]) != inner
            ):
                continue
            new = [*target[:j], size * inner, *target[j + 1 :]]
            (y,) = self.out.add(node.op, [x], shape=new)
            self.padded[y] = Padded(j, p.real * inner, p.clean)
            return (y,)
        return None

    # --- masks and slices -----------------------------------------------------------------

    def _mask(self, ref: Ref) -> Ref:
        """The 0/1 constant that keeps `ref`'s real entries ([1, ..., size, ..., 1])."""
        p, t = self.padded[ref], self.out.type_of(ref)
        size = t.shape[p.dim]
        key = (t.rank, p.dim, size, p.real, str(t.element_type))
        if key not in self.masks:
            shape = [1] * t.rank
            shape[p.dim] = size
            values = (np.arange(size) < p.real).astype(np.float64).reshape(shape)
            mask_type = TensorType(shape, t.element_type)
            node = Node("pcg.constant", (), (("value", _literal(values, mask_type)),), (mask_type,))
            (self.masks[key],) = self.out.add_node(node)
        return self.masks[key]

    def _clean(self, ref: Ref) -> Ref:
        """`ref` with its padding zeroed (multiplied by its mask) where it is not already."""
        p = self.padded[ref]
        if p.clean:
            return ref
        if ref not in self.masked:
            (y,) = self.out.add("pcg.mul", [ref, self._mask(ref)])
            self.padded[y] = replace(p, clean=True)
            self.masked[ref] = y
        return self.masked[ref]

    def _real(self, ref: Ref | None) -> Ref | None:
        """`_real_rows` of an optional operand."""
        return None if ref is None else self._real_rows(ref)

    def _real_rows(self, ref: Ref) -> Ref:
        """`ref`'s real entries (the padding split off), or `ref` where it is not padded."""
        if ref not in self.padded:
            return ref
        if ref not in self.sliced:
            p, t = self.padded[ref], self.out.type_of(ref)
            real, _ = self.out.add("pcg.split", [ref], dim=p.dim, sizes=[p.real, t.shape[p.dim] - p.real])
            self.sliced[ref] = real
        return self.sliced[ref]


def _pair(value: object, axis: int, default: int) -> int:
    if value is None:
        return default
    values = list(value)  # type: ignore[call-overload]
    return int(values[axis] if len(values) > 1 else values[0]) if values else default


def _literal(values: np.ndarray, t: TensorType) -> DenseIntOrFPElementsAttr:
    """`values` as a dense literal of `t`'s element type (f32 or f64)."""
    element = t.element_type
    if not isinstance(element, Float32Type | Float64Type):
        raise PaddingError(f"cannot pad an image of element type {element}")
    dtype = np.dtype(np.float32 if isinstance(element, Float32Type) else np.float64).newbyteorder("<")
    raw = values.astype(dtype).tobytes()
    return DenseIntOrFPElementsAttr(BuiltinTensorType(element, list(values.shape)), BytesAttr(raw))


def padded_layout(graph: Graph, n: int, batch: int, limit: float = 0.5) -> int | None:
    """The rows to pad the image to so that n devices, `batch` of them data parallel, split
    every image n / batch ways over height x width: for each grid whose width divides the
    columns at every down-sampling, the fewest rows its height survives, the least padding
    first (at most `limit` of the rows). None where no grid needs padding or none fits."""
    image = graph.nodes[image_input(graph)].types[0]
    if n % batch or image.shape[0] % batch:
        return None
    rows, cols = image.shape[2], image.shape[3]
    factor = downsampling(graph)
    best: int | None = None
    for h, w in spatial_grids(n // batch):
        if cols % (w * factor) or rows % (h * factor) == 0:
            continue
        padded = -(-rows // (h * factor)) * h * factor
        if padded - rows <= limit * rows and (best is None or padded < best):
            best = padded
    return best
