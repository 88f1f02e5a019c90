"""A vocabulary padded to a multiple of the tensor degree (issue 38): Megatron-LM's answer to a
vocabulary no tensor degree divides.

GPT-2's 50,257 tokens do not divide by 2, so without padding a tensor-parallel plan holds the
token embedding and the output head whole on every rank of its group: on GPT-3-175B's first
pipeline stage that is 0.62 B parameters, 16 bytes each under Adam, where Megatron-LM holds an
eighth. Megatron-LM pads the vocabulary (`--make-vocab-size-divisible-by`, 128 x t rows); here
`pad_vocabulary` pads it to the next multiple of the degree (the cost model prices no kernel
alignment, so more rows would only cost), and the graph trains the same model:

* the vocabulary's weights, the head's [V, H] (or [H, V]) weight and [V] bias and every
  embedding table of V rows, become padded parts of their stored tensors
  (`model.transformer.wte.weight[0:50257+7, :]`, `runtime/parts.py`): the stored rows then
  zeros. Where the plan meets the model (reference weights, `--check`, checkpoints in the
  model's own keys) the zeros are dropped, so a checkpoint loads under any plan;
* a lookup never reads a padded row (every token id is below V);
* the head's logits get padded columns, zero (a zero row times anything, plus a zero bias),
  carried through the reshapes and splits before the loss; the cross-entropy is told its real
  classes (`pcg.cross_entropy`'s `classes`), which count the padded columns as -inf, so their
  probability and gradient are zero: the padded weight rows get a zero gradient and stay zero
  under any optimizer (Adam's moments and weight decay of a zero row are zero);
* any other reader of a padded tensor (the logits the model returns) reads the real columns
  (a `pcg.split` off the padding).

The rewrite keeps every node id (weights and ops are retyped in place, the splits are new
nodes), so the node sets a caller holds (`megatron_layouts`' keep) still name the same ops.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from unityc.dialects.pcg_types import TensorType
from unityc.dialects.registry import canonical_attrs, infer_types
from unityc.graph import Graph, Node, Ref
from unityc.runtime.parts import WeightKey

CARRIERS = frozenset({"pcg.reshape", "pcg.split", "pcg.cast", "pcg.identity"})
"""Ops between an output head and its loss that carry the logits' last dim along (HF's shift
of the logits is a split on the sequence, its flattening a reshape)."""
HEADS = {"pcg.linear": 0, "pcg.matmul": 1}
"""Ops computing logits from a weight: the weight's vocabulary dim ([V, H] for a linear, [H, V]
for a matmul)."""


MOST = 0.01
"""The most padding, as a share of the rows: a vocabulary pads (7 rows on GPT-2's 50,257 at
degree 8), a 2-class head (BERT's next-sentence classifier) does not, its table of token types
with it: there the shards would hold mostly zeros."""


@dataclass(frozen=True)
class Vocabulary:
    """A cross-entropy's vocabulary as `pad_vocabulary` finds it."""

    classes: int
    """Its size V."""
    width: int
    """The logits' columns (V, or more where padded already)."""
    loss: int
    """The cross-entropy."""
    head: int
    """The op computing its logits from `weights`."""
    weights: tuple[tuple[int, int], ...]
    """(weight node, its vocabulary dim): the head's weight and bias, the embedding tables."""


def vocabularies(graph: Graph) -> list[Vocabulary]:
    """The graph's cross-entropies whose logits an output head computes from whole weights (the
    vocabularies `pad_vocabulary` can pad), each with its embedding tables of V rows."""
    found = []
    for nid, node in graph.nodes.items():
        if node.op != "pcg.cross_entropy" or node.operands[0] is None:
            continue
        width = graph.type_of(node.operands[0]).shape[1]
        head = _head(graph, node.operands[0], width)
        if head is None:
            continue
        weights = dict(_head_weights(graph, head))
        if not weights:
            continue
        for table in _tables(graph, width):
            weights.setdefault(table, 0)
        classes = node.attr("classes") or width
        found.append(Vocabulary(classes, width, nid, head, tuple(sorted(weights.items()))))
    return found


def padded_size(classes: int, multiple: int) -> int:
    """The fewest rows >= `classes` that `multiple` divides."""
    return -(-classes // multiple) * multiple


def pad_vocabulary(graph: Graph, multiple: int) -> Graph:
    """`graph` with each vocabulary (`vocabularies`) padded to a multiple of `multiple` (see the
    module docstring) where that adds at most `MOST` of its rows; `graph` itself where none
    pads (each divides already, or would pad more, or none is found)."""
    if multiple <= 1:
        return graph
    todo = [v for v in vocabularies(graph) if 0 < padded_size(v.width, multiple) - v.width <= MOST * v.width]
    if not todo:
        return graph
    return _Padder(graph.copy()).run(todo, multiple)


def _head(graph: Graph, ref: Ref, width: int) -> int | None:
    """The head computing the logits `ref` (last dim `width`) through `CARRIERS`, or None."""
    while True:
        node = graph.nodes[ref[0]]
        t = graph.type_of(ref)
        if t.rank == 0 or t.shape[-1] != width:
            return None
        if node.op in HEADS:
            return ref[0]
        if node.op not in CARRIERS or node.operands[0] is None:
            return None
        x = graph.type_of(node.operands[0])
        if x.rank == 0 or x.shape[-1] != width or (node.op == "pcg.split" and _dim(node, x) == x.rank - 1):
            return None
        ref = node.operands[0]


def _dim(node: Node, t: TensorType) -> int:
    dim = int(node.attr("dim"))
    return dim + t.rank if dim < 0 else dim


def _whole_weight(graph: Graph, ref: Ref | None) -> bool:
    if ref is None:
        return False
    node = graph.nodes[ref[0]]
    return node.op == "pcg.weight" and not WeightKey.parse(node.attr("key")).is_part


def _head_weights(graph: Graph, head: int) -> list[tuple[int, int]]:
    """The head's weight (and a linear's bias) with their vocabulary dims; none where the
    weight is not a whole `pcg.weight` (a part of a packed tensor cannot grow)."""
    node = graph.nodes[head]
    weight = node.operands[1]
    if not _whole_weight(graph, weight):
        return []
    assert weight is not None
    out = [(weight[0], HEADS[node.op])]
    bias = node.operands[2] if node.op == "pcg.linear" and len(node.operands) > 2 else None
    if bias is not None:
        if not _whole_weight(graph, bias):
            return []
        out.append((bias[0], 0))
    return out


def _tables(graph: Graph, rows: int) -> list[int]:
    """The whole embedding tables of `rows` rows (a vocabulary's input embedding)."""
    out = []
    for node in graph.nodes.values():
        table = node.operands[1] if node.op == "pcg.embedding" and len(node.operands) > 1 else None
        if _whole_weight(graph, table) and graph.type_of(table).shape[0] == rows:  # type: ignore[arg-type]
            out.append(table[0])  # type: ignore[index]
    return out


class _Padder:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.padded: dict[Ref, tuple[int, int]] = {}
        """Padded tensors -> (dim, real entries)."""
        self.real: dict[Ref, Ref] = {}

    def run(self, todo: list[Vocabulary], multiple: int) -> Graph:
        g = self.graph
        order = g.topological()
        losses = {}
        heads = {v.head for v in todo}
        for vocabulary in todo:
            for weight, dim in vocabulary.weights:
                self._pad_weight(weight, dim, vocabulary.width, padded_size(vocabulary.width, multiple))
            losses[vocabulary.loss] = vocabulary
        for nid in order:
            node = g.nodes[nid]
            if node.is_source or not any(r in self.padded for r in node.operand_refs()):
                continue
            if nid in losses:
                self._retype(nid, {"classes": losses[nid].classes})
            elif node.op == "pcg.embedding" and node.operands[0] not in self.padded:
                continue  # (a lookup in a padded table: every id is a real row, its result as it was)
            elif nid in heads or (node.op in CARRIERS and self._carries(node)):
                self._carry(nid)
            else:
                self._unpad_operands(nid)
        g.outputs = tuple(self._real(r) for r in g.outputs)
        return g

    def _pad_weight(self, nid: int, dim: int, real: int, size: int) -> None:
        node = self.graph.nodes[nid]
        t = node.types[0]
        key = WeightKey.padded(node.attr("key"), t.shape, dim, size - real)
        shape = list(t.shape)
        shape[dim] = size
        attrs = canonical_attrs(node.op, {**dict(node.attrs), "key": str(key)})
        self.graph.nodes[nid] = replace(node, attrs=attrs, types=(TensorType(tuple(shape), t.element_type),))
        self.padded[(nid, 0)] = (dim, real)

    def _carries(self, node: Node) -> bool:
        """Whether a carrier keeps its padded operand's padded dim last (a split elsewhere, a
        reshape keeping the last dim)."""
        ref = node.operands[0]
        assert ref is not None
        dim, real = self.padded[ref]
        t = self.graph.type_of(ref)
        if dim != t.rank - 1:
            return False
        if node.op == "pcg.split":
            return _dim(node, t) != dim
        if node.op == "pcg.reshape":
            return tuple(node.attr("shape"))[-1:] == (real,)
        return True

    def _carry(self, nid: int) -> None:
        """Retypes op `nid` (a head or a carrier) on its padded operands, its results padded on
        their last dim (a reshape's shape grows with its operand's last dim)."""
        node = self.graph.nodes[nid]
        real = next(self.padded[r][1] for r in node.operand_refs() if r in self.padded)
        attrs: dict[str, object] = {}
        if node.op == "pcg.reshape":
            width = self.graph.type_of(node.operands[0]).shape[-1]  # type: ignore[arg-type]
            attrs["shape"] = (*tuple(node.attr("shape"))[:-1], width)
        for i, t in enumerate(self._retype(nid, attrs)):
            self.padded[(nid, i)] = (t.rank - 1, real)

    def _retype(self, nid: int, attrs: dict[str, object]) -> tuple[TensorType, ...]:
        g = self.graph
        node = g.nodes[nid]
        canonical = canonical_attrs(node.op, {**dict(node.attrs), **attrs})
        operands = tuple(None if r is None else g.type_of(r) for r in node.operands)
        types = infer_types(node.op, canonical, operands)
        g.nodes[nid] = replace(node, attrs=canonical, types=types)
        return types

    def _unpad_operands(self, nid: int) -> None:
        node = self.graph.nodes[nid]
        operands = tuple(None if r is None else self._real(r) for r in node.operands)
        self.graph.nodes[nid] = replace(node, operands=operands)

    def _real(self, ref: Ref) -> Ref:
        """`ref` without its padding (a split of it, made once), or `ref` where not padded."""
        if ref not in self.padded:
            return ref
        if ref not in self.real:
            dim, real = self.padded[ref]
            size = self.graph.type_of(ref).shape[dim]
            self.real[ref] = self.graph.add("pcg.split", [ref], dim=dim, sizes=[real, size - real])[0]
        return self.real[ref]
