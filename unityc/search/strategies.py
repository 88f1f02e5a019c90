"""Whole-graph parallelization strategies built op by op (`rebuild.py`): the baselines' plans,
and the seeds the substitution search starts from besides the unparallelized graph.

* data parallel (`data_parallel_graph`): every op that can runs on its batch (dim 0) sharded n
  ways, its weights replicated; batch norms are synchronized (spelled out so that their batch
  statistics are all-reduced, as PyTorch's SyncBatchNorm does: the dialect's batch norm is
  exact, so it cannot shard the batch itself); an op that cannot shard its batch takes the
  first other n-way form it accepts (e.g. channels), else runs unsharded;
* Megatron (`megatron_layouts`, Megatron-LM's layout): tensor parallelism t within a node, data
  parallelism d across. Found in the graph, not from op names: a linear (any op reading one 2-D
  weight and the activations) starts column-parallel (its weight's output dim sharded) or
  vocabulary-parallel (an embedding's rows: partial sums); the sharding is carried through every
  op the dialect lets hold it without moving a computed operand (element-wise ops and gated
  products, reshapes and transposes of the head dim, the head-sharded batch matmuls, softmax and
  rotary embeddings) to the op that contracts it (the row-parallel linear: partial sums, reduced
  by one all-reduce); a fused `pcg.attention` is split by heads. A column split that some op
  would have to gather (a split of a fused QKV, a layer norm, a loss over the classes) is
  undone: that linear runs replicated. Everything else is replicated in the tensor-parallel
  group and data parallel across;
* spatial (`spatial_layout.spatial_graph`): images split over height x width (halo exchanges),
  optionally with data parallelism: Mesh-TensorFlow's spatial partitioning, the `spatial`
  baseline.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

from unityc.dialects.pcg_types import TensorType
from unityc.dialects.precision import BF16_MIXED
from unityc.graph import Graph, Node, Ref
from unityc.graph.precision import graph_precision
from unityc.machine.spec import Machine
from unityc.search.experts import EXPERT_OPS
from unityc.search.layout import Layout
from unityc.search.rebuild import (
    Operand,
    Proposal,
    reachable,
    rebuild,
    result_types,
    with_degrees,
)
from unityc.search.tokens import context_length, unflatten_tokens, with_context
from unityc.search.vocabulary import pad_vocabulary


def batch_forms(operands: Sequence[Operand], n: int) -> list[Proposal]:
    """Batch-sharded activations and inputs, replicated weights and constants; then, for each
    other dim, activations sharded there and weights sharded on their dim 0 or replicated."""
    proposals: list[Proposal] = []
    main = next((o.logical for o in operands if o.logical is not None and o.batched), None)
    dims = range(main.rank) if main is not None else range(1)
    for d in dims:
        for weights in ("copy", "dim0"):
            proposal: list[TensorType | None] = []
            for o in operands:
                if o.logical is None:
                    proposal.append(None)
                    continue
                activation = o.batched and o.logical.rank > d
                if activation:
                    proposal.append(with_degrees(o.logical, {d: n}))  # None (does not divide) drops it
                elif weights == "dim0" and d > 0:
                    proposal.append(with_degrees(o.logical, {0: n}))
                else:
                    proposal.append(with_degrees(o.logical, copy=n))
            if all(p is not None or o.logical is None for p, o in zip(proposal, operands, strict=True)):
                proposals.append(tuple(proposal))
            if d == 0:
                break
    return proposals


def with_levers(graph: Graph, zero: int = 0, recompute: bool = False) -> Graph:
    """A copy of a plan with every weight held in copies sharded ZeRO-`zero` across them, and
    (`recompute`) every pcg op but the sources recomputed in backward (parallel ops break the
    checkpointed regions: a region's collectives would run twice)."""
    out = graph.copy()
    for nid, node in out.nodes.items():
        if node.op == "pcg.weight" and zero and node.types[0].copy_degree >= 2:
            out.nodes[nid] = node.with_plan(zero=zero)
        elif recompute and node.op.startswith("pcg.") and not node.is_source:
            out.nodes[nid] = node.with_plan(recompute=True)
    return out


def data_parallel_graph(graph: Graph, n: int, keep: Collection[int] = ()) -> Graph:
    """Data parallel over n devices, batch norms synchronized (`sync_batch_norm`)."""
    return rebuild(sync_batch_norm(graph), lambda nid, node, operands: batch_forms(operands, n), keep)


class _Megatron:
    """One pass of the Megatron layout over a graph (a `rebuild` proposer); see `megatron_layouts`.

    A *start* is an op reading a 2-D weight and a batched activation replicated in the
    tensor-parallel group: it shards its weight so that its result either holds partial sums
    (a vocabulary-parallel embedding) or is sharded on its last dim (column-parallel); a
    column-parallel result is the start of a region. Every op reading a region's tensor keeps
    the sharding if the dialect lets it without moving a computed operand (its weights and
    constants may take any form): element-wise ops, reshapes and transposes of the sharded dim,
    the head-sharded batch matmuls and softmax. An op contracting the sharded dim (a
    row-parallel linear) gives partial sums and ends the region; the next op reduces them (the
    one all-reduce). An op that cannot keep the sharding would gather it: its region's starts
    are `broken` (the caller runs again with them replicated)."""

    def __init__(
        self,
        layout: Layout,
        replicated: Collection[int],
        loss: int | None,
        unsequenced: Collection[int] = (),
        wanted: dict[int, int] | None = None,
        length: int = 0,
    ) -> None:
        self.layout = layout
        self.d, self.t = layout.replicas, layout.tensor
        """The axes splitting the batch (data, and any other: `Layout.replicas`), the tensor group."""
        self.c, self.length = layout.context, length
        """Context parallelism: the token stream (dim 1 of this `length`, `_context_length`)
        sharded c ways; weights held in d x c copies (`copies`)."""
        self.copies = self.d * self.c
        self.e = layout.expert
        """Expert parallelism: each `EXPERT_OPS` op's experts split e ways within the data
        replicas (`_experts`)."""
        self.reading: Node | None = None
        """The op being proposed for (whether a batched input is a lookup's token ids: `_ids`)."""
        self.replicated, self.loss = replicated, loss
        self.sequence = layout.sequence
        """Megatron's sequence parallelism: ops outside the regions run sharded on dim 1."""
        self.unsequenced = unsequenced
        """Ops (of the input graph) kept whole in the group: a region op reads their result."""
        self.gathered: set[int] = set()
        """Sequence-sharded ops a region op would read (run whole in the group next pass)."""
        self.mixed: set[int] = set()
        """Sequence-sharded ops read beside a whole activation (`_mixed`)."""
        self.wanted: dict[int, int] = dict(wanted or {})
        """Ops (of the input graph) to shard on their dim of this (sequence) length: a
        sequence-parallel op broadcasts their result along the sequence."""
        self.regions: dict[Ref, frozenset[int]] = {}
        """Sharded tensors of the input graph -> the starts of their regions."""
        self.broken: set[int] = set()
        self.stops: Counter[str] = Counter()
        """The ops at which a region would have been gathered (why starts stay replicated)."""
        self.at_loss: set[int] = set()
        """Starts whose region was stopped by the loss (e.g. a cross-entropy over the classes) or
        by an op of `returned`."""
        self.returned: frozenset[int] = frozenset()
        """Ops whose results only the graph returns (`_returned`: a padded vocabulary's logits
        with the padding split off): stopped there, a region's result is gathered for them."""
        self.head_chains: frozenset[int] = frozenset()
        """Ops computing an attention's per-head operand from weights (`_head_chains`)."""

    def act(
        self, o: Operand, extra: dict[int, int] | None = None, copy: int = 1, whole: bool = False
    ) -> TensorType | None:
        """`o` data parallel d across the tensor-parallel groups, a token stream (`_in_context`)
        also sharded c ways on the sequence unless `whole` (then in c copies more), `extra`
        degrees within one group (on the sequence: within each context shard)."""
        assert o.logical is not None
        if not o.batched:
            return with_degrees(o.logical, extra, copy * self.copies)
        shard = {0: self.d} if self.d > 1 else {}
        if self._in_context(o) and not whole:
            shard[1] = self.c
        else:
            copy *= self.c
        for k, v in (extra or {}).items():
            shard[k] = shard.get(k, 1) * v
        return with_degrees(o.logical, shard, copy)

    def _in_context(self, o: Operand) -> bool:
        """Whether context parallelism shards `o` on its dim 1: a batched activation of rank 3 or
        more running along the sequence, a lookup's token ids (`_ids`), or (batch, sequence)
        labels flattened for a token loss (a padding mask, read whole by the attentions as their
        key columns, is not)."""
        if self.c == 1 or o.logical is None or o.logical.rank < 2 or o.logical.shape[1] != self.length:
            return False
        node = self.reading
        flattened = node is not None and bool(node.types) and node.types[0].rank < 2 and o.logical.rank == 2
        return _tokens(o) or (node is not None and _ids(o, node)) or (o.batched and flattened)

    def _source_forms(self, o: Operand) -> list[TensorType | None]:
        """A weight, input or constant: sharded t ways on each dim it can be, then replicated."""
        assert o.logical is not None
        dims = [k for k in range(o.logical.rank) if o.logical.shape[k] > 1 and not (k == 0 and o.batched)]
        forms = [self.act(o, {k: self.t}) for k in dims]
        return [f for f in forms if f is not None] + [self.act(o, copy=self.t)]

    def _choices(
        self, node: Node, operands: Sequence[Operand], candidates: list[list[TensorType | None]]
    ) -> Iterator[tuple[Proposal, tuple[TensorType, ...]]]:
        """Every accepted combination of the candidates, in order, with its result types (a
        candidate None for a present operand is a degree that does not divide, and one that
        would drop copies cannot be had: both skipped)."""
        present = [
            [c for c in cs if (c is not None or o.logical is None) and reachable(o, c)]
            for cs, o in zip(candidates, operands, strict=True)
        ]
        for proposal in itertools.product(*present):
            types = result_types(node, proposal)
            if types is not None:
                yield proposal, types

    def propose(self, nid: int, node: Node, operands: Sequence[Operand]) -> list[Proposal]:
        self.reading = node
        regions = frozenset().union(*(self.regions.get(r, ()) for r in node.operand_refs()))
        partial = any(o.current is not None and o.current.sum_degree > 1 for o in operands)
        if regions:
            kept = None if partial else self._keep(node, operands)
            if kept is None and not partial and self.c > 1:  # (HF's shifted logits, split on the sequence)
                kept = self._keep(node, operands, gather=True)
            sharded = self._sequence_operands(node, operands)
            if kept is None and sharded:  # whole in the group next pass, the region kept
                self.gathered |= sharded
                return self.fallback(operands)
            if kept is None:  # the sharding would be gathered
                self.broken |= regions
                self.stops[node.op] += 1
                if nid == self.loss or nid in self.returned:
                    self.at_loss |= regions
                return self.fallback(operands)
            proposal, types = kept
            self.regions.update({(nid, i): regions for i, r in enumerate(types) if r.sum_degree == 1})
            return [proposal]
        if node.op in EXPERT_OPS and self.e > 1:
            return _complete([self._experts(operands), *self.fallback(operands)], operands)
        if node.op == "pcg.attention":
            split = [self._heads(operands, whole=True)] if self.c > 1 else []  # (a mask's rows held whole)
            return _complete([self._heads(operands), *split, *self.fallback(operands)], operands)
        by_heads = self._by_heads(node, operands) if nid in self.head_chains else None
        if by_heads is not None:
            return [by_heads, *self.fallback(operands)]
        started = self._start(nid, node, operands)
        if started is None:
            along = self._along_sequence(nid, node, operands)
            return along + self._on_tokens(node, operands) + self.fallback(operands)
        proposal, types = started
        if types[0].sum_degree == 1:
            self.regions[(nid, 0)] = frozenset({nid})
        return [proposal]

    def _on_tokens(self, node: Node, operands: Sequence[Operand]) -> list[Proposal]:
        """With context parallelism, an op reading no weight (a token loss on flattened logits
        and labels) on its computed operands as they are: data parallel over the tokens, where
        the fallback would gather the sequence for it."""
        if self.c == 1 or any(o.source == "pcg.weight" for o in operands):
            return []
        kept = self._keep(node, operands)
        return [] if kept is None else [kept[0]]

    def _keep(
        self, node: Node, operands: Sequence[Operand], gather: bool = False
    ) -> tuple[Proposal, tuple[TensorType, ...]] | None:
        """The first form keeping every computed operand as it is (weights and constants free);
        `gather`: with its context shards gathered (a column-parallel region kept through an op
        that needs the whole sequence: the vocabulary-sharded logits before HF's shift)."""
        candidates = self._kept(operands, self._source_forms)
        if gather:
            candidates = [
                [self._context_gathered(o)] if o.source is None and o.current is not None else c
                for c, o in zip(candidates, operands, strict=True)
            ]
        return next(self._choices(node, operands, candidates), None)

    def _context_gathered(self, o: Operand) -> TensorType | None:
        """`o` as it is held, its sequence shard's context factor gathered into copies."""
        t = o.current
        assert t is not None and o.logical is not None
        if t.rank < 2 or t.shape[1] != self.length or t.shard[1] % self.c:
            return t
        shard = {k: v for k, v in enumerate(t.shard) if v > 1}
        shard[1] = t.shard[1] // self.c
        return with_degrees(o.logical, shard, t.copy_degree * self.c, t.sum_degree)

    def _kept(
        self, operands: Sequence[Operand], sourced: Callable[[Operand], list[TensorType | None]]
    ) -> list[list[TensorType | None]]:
        """Each operand's candidate forms: computed operands as they are, weights and constants
        as `sourced` offers them."""
        candidates: list[list[TensorType | None]] = []
        for o in operands:
            if o.logical is None:
                candidates.append([None])
            elif o.source is None:
                assert o.current is not None
                candidates.append([o.current])
            else:
                candidates.append(sourced(o))
        return candidates

    def _start(
        self, nid: int, node: Node, operands: Sequence[Operand]
    ) -> tuple[Proposal, tuple[TensorType, ...]] | None:
        """A vocabulary-parallel form (partial sums) if the op has one, else a column-parallel
        one (result sharded on its last dim) unless this start is to stay replicated."""
        weights = [
            o.source == "pcg.weight" and o.logical is not None and o.logical.rank == 2 for o in operands
        ]
        if self.t == 1 or sum(weights) != 1 or not any(o.batched for o in operands):
            return None
        candidates: list[list[TensorType | None]] = []
        for o in operands:
            if o.logical is None:
                candidates.append([None])
            elif o.source == "pcg.weight":
                candidates.append(self._source_forms(o))
            else:  # activations as they are, else replicated in the group (partial sums reduced)
                whole = o.current is not None and o.current.sum_degree == 1
                candidates.append(
                    list(dict.fromkeys([o.current if whole else None, self.act(o, copy=self.t)]))
                )
        choices = list(self._choices(node, operands, candidates))
        vocabulary = [c for c in choices if c[1][0].sum_degree == self.t]
        column = [
            c for c in choices
            if nid not in self.replicated and c[1][0].sum_degree == 1 and c[1][0].shard[-1] == self.t
        ]  # fmt: skip
        return next(iter(vocabulary + column), None)

    def _along_sequence(self, nid: int, node: Node, operands: Sequence[Operand]) -> list[Proposal]:
        """Megatron's sequence parallelism (Korthikanti et al. 2022): an op outside the regions
        (a norm, dropout, a residual add) runs on its batched activations of rank 3 or more
        sharded t ways on dim 1 (the sequence) besides d ways on the batch; an operand it
        broadcasts along the sequence (a position embedding) sharded alike where it can be,
        weights and other operands in any form it accepts. A partial sum read so is
        reduce-scattered onto the sequence, and a start reading a sequence-sharded tensor
        all-gathers it: the all-reduce's volume, in two halves, and 1/t of the activations of
        these ops. An op computing such a broadcast operand replicated is `wanted` sharded on its
        sequence-long dim in the next pass (no collective can drop a replicated tensor's copies).
        With context parallelism alone (no `sequence`) the same, on the c context shards: GPT-2's
        learned positions are looked up at each shard's own positions."""
        if not self.sequence and self.c == 1:
            return []
        if nid == self.loss:
            self._mixed(node, operands)
            return []
        if nid in self.unsequenced:  # whole in the group: what it reads sharded is gathered for it
            self.mixed |= self._sequence_operands(node, operands)
            for r in node.operand_refs():
                self.wanted.pop(r[0], None)
            return []
        tokens = [o.logical for o in operands if o.logical is not None and _tokens(o)]
        ids = [o.logical for o in operands if o.logical is not None and _ids(o, node)]
        if tokens:
            rank, length = tokens[0].rank, tokens[0].shape[1]
        elif ids:  # a replicated lookup (a vocabulary no tensor degree divides) starts the stream
            rank, length = 3, ids[0].shape[1]
        elif nid in self.wanted:
            rank, length = 0, self.wanted[nid]
        else:
            return []
        candidates: list[list[TensorType | None]] = []
        pending: set[int] = set()
        for ref, o in zip(node.operands, operands, strict=True):
            if o.logical is None or ref is None:
                candidates.append([None])
            elif _tokens(o) or _ids(o, node):
                candidates.append([self.act(o, {1: self.t}) if self.sequence else self.act(o, copy=self.t)])
            elif o.source is not None:
                # (a lookup's table is indexed, not broadcast: its rows do not run along the
                # sequence even where as many, GPT-3's 2,048 positions; sharded, they would be
                # partial sums of the vocabulary-parallel form)
                dims = (
                    []
                    if node.op in LOOKUPS and o.source == "pcg.weight"
                    else _sequence_dims(o.logical, rank, length)
                )
                along = [self._along(o, k) for k in dims]
                candidates.append(along + self._source_forms(o)[::-1])  # replicated before other shardings
            else:
                assert o.current is not None
                candidates.append([o.current])
                dims = _sequence_dims(o.logical, rank, length)
                if dims and o.current.shard[dims[0]] != self.along_degree:
                    pending.add(ref[0])
        for proposal, types in self._choices(node, operands, candidates):
            if rank or any(
                types[0].shard[k] == self.along_degree for k in _sequence_dims(types[0], 0, length)
            ):
                return [proposal]
        self.wanted.update({p: length for p in pending if p not in self.unsequenced})
        self._mixed(node, operands)
        return []

    def _mixed(self, node: Node, operands: Sequence[Operand]) -> None:
        """An op running whole in the group on a sequence-sharded activation and another held
        whole (GPT-2's residual add after an MLP on flattened tokens, whose reshape cannot
        carry the sequence sharding): the sharded one would be gathered only to meet the
        other, so its producer runs whole too next pass (back to where the sharding began)."""
        sharded = self._sequence_operands(node, operands)
        whole = any(
            _tokens(o) and o.source is None and o.current is not None and o.current.copy_degree % self.t == 0
            for o in operands
        )
        if sharded and whole:
            self.mixed |= sharded

    def _sequence_operands(self, node: Node, operands: Sequence[Operand]) -> set[int]:
        """The producers (input graph) of computed operands held sharded on the sequence."""
        if not self.sequence:
            return set()
        return {
            r[0]
            for r, o in zip(node.operands, operands, strict=True)
            if r is not None
            and o.source is None
            and o.current is not None
            and o.batched
            and o.current.rank >= 3
            and o.current.shard[1] == self.c * self.t
            and o.current.copy_degree == 1
        }

    def _by_heads(self, node: Node, operands: Sequence[Operand]) -> Proposal | None:
        """An op of a per-head operand's computation (`_head_chains`) sharded t ways on some
        dim (the heads): its computed operands as they are, its weights sharded where that
        shards the result (the bias table of T5's relative position embedding on its head dim;
        GPT-NeoX's packed query_key_value on its rows, which run head by head), so that the
        attentions reading it take their heads' slice of it without a collective."""

        def sourced(o: Operand) -> list[TensorType | None]:
            if o.source == "pcg.weight":
                return self._source_forms(o)
            return [self.act(o, copy=self.t)]  # constants (the buckets, a causal mask) whole

        for proposal, types in self._choices(node, operands, self._kept(operands, sourced)):
            if types[0].sum_degree == 1 and self.t in types[0].shard:
                return proposal
        return None

    def _heads(self, operands: Sequence[Operand], whole: bool = False) -> Proposal:
        """`pcg.attention` split by heads: q/k/v projections column-parallel, the output
        projection row-parallel (partial sums), its bias added once. With context parallelism
        (unless `whole`) also over the sequence (the op's `context` exchange): q, k, v as the
        token stream is, cos/sin and a mask's query rows sharded alike on their dim 2."""
        heads: list[TensorType | None] = []
        for i, o in enumerate(operands):
            if o.logical is None:
                heads.append(None)
            elif i < 3:
                heads.append(self.act(o, copy=self.t, whole=whole))
            elif i in (3, 4, 5, 7, 8, 9):
                heads.append(with_degrees(o.logical, {0: self.t}, self.copies))
            elif i == 6:
                heads.append(with_degrees(o.logical, {1: self.t}, self.copies))
            elif i == 10 or i >= 14:  # the output bias, the q/k norm weights: whole on every task
                heads.append(with_degrees(o.logical, copy=self.copies * self.t))
            elif i in (11, 12, 13) and self.c > 1 and not whole and self._rows(o):
                batch = o.logical.shape[0] > 1
                shard = {0: self.d, 2: self.c} if batch and self.d > 1 else {2: self.c}
                heads.append(with_degrees(o.logical, shard, self.t * (1 if batch else self.d)))
            elif (  # a per-head mask computed split by heads (`_by_heads`): its heads' slice
                i == 11
                and o.source is None
                and o.current is not None
                and o.logical.rank == 4
                and o.logical.shape[1] > 1
                and o.current.shard[1] == self.t
            ):
                heads.append(o.current)
            else:  # the mask: batch-sharded if it has a batch dim, else replicated
                heads.append(
                    self.act(o, copy=self.t)
                    if o.logical.shape[0] > 1
                    else with_degrees(o.logical, copy=self.copies * self.t)
                )
        return tuple(heads)

    def _experts(self, operands: Sequence[Operand]) -> Proposal:
        """`pcg.experts` expert-parallel (its form's factor "e"): the tokens, their expert ids and
        gates as the data replicas hold them (replicated in the tensor group), gate_up and down
        split e ways on the expert dim, each slice in d x c x t / e copies (its expert-data
        group: Megatron-Core's EP groups carved out of the data-parallel ranks). An e that does
        not divide the data replicas is an error (`experts.with_experts` offers none such), not
        a plan that silently keeps every expert on every replica."""
        if self.d % self.e:
            raise ValueError(f"expert {self.e} does not divide the data degree {self.d}")
        out: list[TensorType | None] = []
        for i, o in enumerate(operands):
            if o.logical is None:
                out.append(None)
            elif i < 3:
                out.append(self.act(o, copy=self.t))
            else:
                out.append(with_degrees(o.logical, {0: self.e}, self.copies * self.t // self.e))
        return tuple(out)

    def _rows(self, o: Operand) -> bool:
        """Whether an attention's mask, cos or sin runs along the query sequence (dim 2)."""
        return o.logical is not None and o.logical.rank == 4 and o.logical.shape[2] == self.length

    def _along(self, o: Operand, k: int) -> TensorType | None:
        """A source broadcast along the sequence (a position embedding) sharded on its dim `k`
        as the tokens are outside the regions (`along_degree`), copied over the rest."""
        assert o.logical is not None
        return with_degrees(o.logical, {k: self.along_degree}, self.d * self.t * self.c // self.along_degree)

    @property
    def along_degree(self) -> int:
        """How many ways the tokens are split on the sequence outside the regions: c x t with
        sequence parallelism, else c (replicated in the tensor group)."""
        return self.c * (self.t if self.sequence else 1)

    def fallback(self, operands: Sequence[Operand]) -> list[Proposal]:
        """Replicated in the tensor-parallel group (data parallel d; on the context shards, then
        whole in the context group), else data parallel over the whole group."""
        proposals: list[Proposal] = []
        for whole in (False, True) if self.c > 1 else (False,):
            replicated: list[TensorType | None] = []
            for o in operands:
                if o.logical is None:
                    replicated.append(None)
                elif o.batched or o.source is None:
                    replicated.append(self.act(o, copy=self.t, whole=whole))
                else:
                    replicated.append(with_degrees(o.logical, copy=self.copies * self.t))
            proposals.append(tuple(replicated))
        return _complete([*proposals, *batch_forms(operands, self.copies * self.t)], operands)


HEAD_OPERANDS = (3, 4, 5, 7, 8, 9)
"""`pcg.attention`'s query, key and value projection weights and biases: split by heads."""


def _head_chains(graph: Graph) -> frozenset[int]:
    """The ops computing an attention's per-head operand from weights, which the Megatron layout
    splits by heads (`_Megatron._by_heads`) so that the attention reads its heads' slice of it:
    a per-head mask ([1, H, Sq, Sk]: T5's relative position bias, shared by a stack's layers)
    back to the weight it reads (the bias table), and the views of a packed projection weight
    that give the op its wq/wk/wv and biases (GPT-NeoX's interleaved query_key_value). An op
    also read by anything but the chains and attentions stays out, and so do the ops computing
    what it reads: that operand is read whole (the attention then runs unsplit, still exact)."""
    users = graph.users()
    starts: set[int] = set()
    for node in graph.nodes.values():
        if node.op != "pcg.attention":
            continue
        for i, ref in enumerate(node.operands):
            if ref is None or graph.nodes[ref[0]].is_source:
                continue
            t = graph.type_of(ref)
            if i in HEAD_OPERANDS or (i == 11 and t.rank == 4 and t.shape[1] > 1):
                starts.add(ref[0])
    chain: set[int] = set()
    stack = list(starts)
    while stack:
        nid = stack.pop()
        node = graph.nodes[nid]
        if nid in chain or node.is_source:
            continue
        chain.add(nid)
        if any(graph.nodes[r[0]].op == "pcg.weight" for r in node.operand_refs()):
            continue  # reads the weight (T5's table): its other operands (the buckets) stay as they are
        stack.extend(r[0] for r in node.operand_refs())
    attention = {nid for nid, n in graph.nodes.items() if n.op == "pcg.attention"}
    while escaping := {nid for nid in chain if not set(users[nid]) <= chain | attention}:
        chain -= escaping  # (then what computes it, read by it, escapes in turn)
    return frozenset(chain)


LOOKUPS = ("pcg.embedding", "pcg.embedding_bag")
"""Ops indexing a table (their weight) by ids."""


def _tokens(o: Operand) -> bool:
    """Whether `o` is an activation (batch, sequence, ...) that sequence parallelism shards."""
    return o.logical is not None and o.batched and o.logical.rank >= 3


def _ids(o: Operand, node: Node) -> bool:
    """Whether `o` is a batched input of (batch, sequence) read by an op whose result has a
    sequence dim (token ids looked up in an embedding): sharded on the sequence with it."""
    lookup = bool(node.types) and node.types[0].rank >= 3
    return lookup and o.source == "pcg.input" and o.batched and o.logical is not None and o.logical.rank == 2


def _sequence_dims(t: TensorType, rank: int, length: int) -> list[int]:
    """The dim of `t` running along the sequence of a rank-`rank` activation (dim 1) where `t`
    is broadcast against it (aligned from the right) and as long; with `rank` 0, every dim of
    that `length`."""
    if not rank:
        return [k for k in range(t.rank) if t.shape[k] == length]
    k = t.rank - rank + 1
    return [k] if 0 <= k < t.rank and t.shape[k] == length else []


def _complete(proposals: Sequence[Proposal], operands: Sequence[Operand]) -> list[Proposal]:
    """The proposals with a type for every present operand (None: a degree did not divide)."""
    return [
        p
        for p in proposals
        if all(q is not None or o.logical is None for q, o in zip(p, operands, strict=True))
    ]


@dataclass(frozen=True)
class MegatronLayout:
    graph: Graph
    stops: Counter[str]
    """The ops at which a column-parallel region could not continue (those starts replicated)."""
    gathered: int = 0
    """Column-parallel starts whose result is gathered for the loss (or returned sharded)
    instead of running replicated (0: none)."""


MEGATRON_AXES = ("tensor", "context", "expert")
"""The axes beyond the batch's (`Layout.replicas`) that the Megatron layout lays out itself."""


def megatron_layouts(
    graph: Graph, layout: Layout, keep: Collection[int] = (), pad: bool = True
) -> list[MegatronLayout]:
    """`layout`'s tensor parallel x data parallel (Megatron-LM) over its stage group (every mesh
    axis but the pipeline's), batch norms synchronized (`sync_batch_norm`), with Megatron's
    sequence parallelism where `layout.sequence`. Every start (`_Megatron`) begins
    column-parallel; a start whose sharding some op would gather (or that reaches a graph output)
    is made replicated and the graph rebuilt, until none is. Then, if some starts were stopped
    only by the loss or a graph output (an output head before a cross-entropy that cannot take
    sharded classes, its logits returned), a second layout keeps those column-parallel and
    gathers their result for the loss (Megatron-LM's `gather_output`): less memory and compute
    than a replicated head, one all-gather more; the caller prices both. Raises ValueError for
    an axis no hook lays out (`MEGATRON_AXES`).

    Expert parallelism (`layout.expert` e, Megatron-Core's `--expert-model-parallel-size`,
    carved out of the data replicas): every `EXPERT_OPS` op's experts split e ways, its tokens
    as the replicas hold them (`_Megatron._experts`); attention and the dense linears keep their
    tensor-parallel forms.

    Context parallelism (`layout.context` c, Megatron-LM's `--context-parallel-size`): the token
    stream (the lookups' ids, every activation running along the sequence) sharded c ways on
    the sequence within each data replica, every attention split over it by `layout.exchange`
    (`with_context`; the ring by default, as Megatron-LM's `cp_comm_type` p2p), weights held in
    d x c copies (their gradients reduced over the context group too); an op that cannot take
    the shard (the loss after HF's shifted logits) runs whole in the context group.

    A vocabulary the tensor degree does not divide is padded first (`vocabulary.pad_vocabulary`,
    as Megatron-LM pads it), unless `pad` is false (a segment of a graph, whose tied weights
    other segments read unpadded)."""
    beyond = layout.beyond(("pipeline", *MEGATRON_AXES))
    if beyond:
        raise ValueError(f"megatron: no strategy lays out the {', '.join(beyond)} axis yet ({layout!r})")
    length = 0
    if pad:  # (a vocabulary t does not divide: GPT-2's)
        graph = pad_vocabulary(graph, layout.tensor)
    if layout.splits_tokens:  # GPT-2's flattened projections on the tokens, so the split runs through them
        graph = unflatten_tokens(graph)
    if layout.context > 1:
        graph, length = with_context(graph, layout.exchange), context_length(graph)
        if not length or length % layout.context:
            raise ValueError(
                f"megatron: context degree {layout.context} does not split the attention's sequence "
                f"({length or 'no self-attention'})"
            )
    base = sync_batch_norm(graph)
    loss = base.outputs[0][0] if base.outputs else None
    replicated: set[int] = set()
    stops: Counter[str] = Counter()
    at_loss: set[int] = set()
    elsewhere: set[int] = set()
    unsequenced: set[int] = set()
    wanted: dict[int, int] = {}
    head_chains, returned = _head_chains(base), _returned(base)
    while True:
        pass_ = _Megatron(layout, frozenset(replicated), loss, frozenset(unsequenced), wanted, length)
        pass_.head_chains, pass_.returned = head_chains, returned
        out = rebuild(base, pass_.propose, keep)
        stops += pass_.stops
        broken = pass_.broken
        at_loss |= pass_.at_loss
        elsewhere |= pass_.broken - pass_.at_loss
        grown = not pass_.wanted.keys() <= wanted.keys()
        # (not while broadcast operands are still whole, nor while starts are still breaking: a
        # broken start's region leaves whole activations beside sharded ones that the next pass,
        # the start replicated, no longer has; an odd vocabulary's column-parallel embedding)
        mixed = set() if grown or not broken <= replicated else pass_.mixed
        settled = pass_.wanted == wanted and pass_.gathered | mixed <= unsequenced
        if broken <= replicated and settled:
            break  # (a replicated start opens no region)
        replicated |= broken
        unsequenced |= pass_.gathered | mixed | (wanted.keys() - pass_.wanted.keys())  # (sets only grow)
        wanted = {k: v for k, v in pass_.wanted.items() if k not in unsequenced}
    layouts = [MegatronLayout(out, +stops)]
    gatherable = at_loss - elsewhere
    if gatherable:
        again = _Megatron(
            layout, frozenset(replicated - gatherable), loss, frozenset(unsequenced), wanted, length
        )
        again.head_chains, again.returned = head_chains, returned
        layouts.append(MegatronLayout(rebuild(base, again.propose, keep), +stops, len(gatherable)))
    return layouts


def _returned(graph: Graph) -> frozenset[int]:
    """Splits whose results no op reads and the graph returns (`vocabulary.pad_vocabulary`'s
    real columns of the logits the model returns)."""
    users = graph.users()
    outputs = {r[0] for r in graph.outputs}
    return frozenset(
        nid
        for nid in outputs
        if graph.nodes[nid].op == "pcg.split" and not users[nid] and nid != graph.outputs[0][0]
    )


def megatron_graph(
    graph: Graph, layout: Layout | int, tensor: int = 1, keep: Collection[int] = (), sequence: bool = False
) -> Graph:
    """The first of `megatron_layouts`; `megatron_graph(graph, d, t)` (the spelling tests use)
    reads as `Layout(data=d, tensor=t)`, with Megatron's sequence parallelism where `sequence`."""
    if isinstance(layout, Layout):
        if tensor != 1 or sequence:
            raise TypeError("megatron_graph: a Layout carries its own tensor degree and sequence flag")
    else:
        layout = Layout(data=layout, tensor=tensor, sequence=sequence and tensor > 1)
    return megatron_layouts(graph, layout, keep)[0].graph


def tensor_degrees(machine: Machine) -> list[int]:
    """Tensor-parallel degrees within a node (dividing both a node and the machine), largest first."""
    per_node = math.gcd(machine.nodes[0].num_devices, machine.num_devices)
    return [k for k in range(per_node, 1, -1) if per_node % k == 0]


def sync_batch_norm(graph: Graph) -> Graph:
    """A copy where every training batch norm is spelled out in ops that may shard the batch
    (PyTorch's SyncBatchNorm, `spelled_batch_norm`)."""
    out = graph.copy()
    mixed = graph_precision(graph) == BF16_MIXED
    for nid in graph.topological():
        node = out.nodes[nid]
        if node.op != "pcg.batch_norm":
            continue
        x, w, b = node.operands
        assert x is not None
        out.redirect({(nid, 0): spelled_batch_norm(out, x, w, b, node.attr("eps"), mixed)})
    return out.prune()


def spelled_batch_norm(
    out: Graph,
    x: Ref,
    w: Ref | None,
    b: Ref | None,
    eps: float,
    mixed: bool,
    valid: tuple[Ref, int] | None = None,
) -> Ref:
    """A training batch norm of `x` added to `out` as ops that may shard the batch (PyTorch's
    SyncBatchNorm): mean = reduce_mean(x), d = x - mean, var = reduce_mean(d * d),
    y = d / sqrt(var + eps) * weight + bias, means over every dim but the channels (dim 1). A
    batch-sharded mean is a partial sum; its all-reduce moves only C values, where sharding the
    channels instead would move every activation twice. Under bf16-mixed (`mixed`) x is cast to
    fp32 first, as torch's batch norm computes in fp32 under autocast: spelled out in bf16
    (every statistic, difference and quotient rounded) the backward's cancellation left a
    U-Net's gradients 50 % off the autocast reference.

    `valid`: (a 0/1 mask broadcasting over x, the count of its ones per channel) for an image
    padded with zero rows (`padding.pad_images`): x is zero where the mask is, the sums divide
    by the real count, and the mean and the bias are masked (small [1, C, H, 1] products) before
    they meet x, so the statistics are the unpadded image's and y is zero where x is."""
    t = out.type_of(x)
    dims = [d for d in range(t.rank) if d != 1]
    stat_shape = [1 if d != 1 else t.shape[1] for d in range(t.rank)]
    if mixed:
        (x,) = out.add("pcg.cast", [x], dtype=t.element_type)
    if valid is None:
        (mean,) = out.add("pcg.reduce", [x], kind="mean", dims=dims, keepdim=True)
        (d,) = out.add("pcg.sub", [x, mean])
        (sq,) = out.add("pcg.mul", [d, d])
        (var,) = out.add("pcg.reduce", [sq], kind="mean", dims=dims, keepdim=True)
    else:  # x is zero where the mask is, and so are d and y: the mask broadcasts the statistics
        mask, count = valid
        (total,) = out.add("pcg.reduce", [x], kind="sum", dims=dims, keepdim=True)
        (mean,) = out.add("pcg.scalar_mul", [total], scale=1.0 / count)
        (mean,) = out.add("pcg.mul", [mean, mask])
        (d,) = out.add("pcg.sub", [x, mean])
        (sq,) = out.add("pcg.mul", [d, d])
        (squares,) = out.add("pcg.reduce", [sq], kind="sum", dims=dims, keepdim=True)
        (var,) = out.add("pcg.scalar_mul", [squares], scale=1.0 / count)
    (shifted,) = out.add("pcg.scalar_add", [var], value=eps)
    (std,) = out.add("pcg.sqrt", [shifted])
    (y,) = out.add("pcg.div", [d, std])
    if w is not None:
        (scale,) = out.add("pcg.reshape", [w], shape=stat_shape)
        (y,) = out.add("pcg.mul", [y, scale])
    if b is not None:
        (shift,) = out.add("pcg.reshape", [b], shape=stat_shape)
        if valid is not None:
            (shift,) = out.add("pcg.mul", [shift, valid[0]])
        (y,) = out.add("pcg.add", [y, shift])
    return y
