"""The parallelization strategies the differential tests run, as `Strategy` values.

Each names the zoo model it is for and how many devices it uses; `build(name)` returns the plan
module (checked by the interpreter against the unparallelized graph).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

from plans import PlanBuilder, Strategy, base_graph, interpret_equal, plan_module, retyped
from xdsl.dialects.builtin import ModuleOp, StringAttr

from unityc.dialects.pcg_types import TensorType
from unityc.dialects.plan import OpPlan
from unityc.dialects.view import MachineViewAttr
from unityc.graph import Graph, Node, Ref, to_module

SourceRule = Callable[[Node], tuple[Sequence[int] | None, int]]


def _key(node: Node) -> str:
    return str(node.attr("key", ""))


def batch_sharded(n: int, copies: int = 1) -> SourceRule:
    """Inputs split on the batch (dim 0) into n, copied `copies` times; the rest copied n*copies."""

    def rule(node: Node) -> tuple[Sequence[int] | None, int]:
        t = node.types[0]
        if node.op == "pcg.input":
            return [n] + [1] * (t.rank - 1), copies
        return None, n * copies

    return rule


# --- MLP: data, column/row tensor, reduction, hybrid --------------------------------------------


def _mlp_layer(node: Node) -> int:
    """Index of the tower layer a weight belongs to (tower1.4.weight -> 2)."""
    return int(re.search(r"\.(\d+)\.weight", _key(node)).group(1)) // 2  # type: ignore[union-attr]


def mlp_tensor(n: int, dp: int = 1) -> Strategy:
    """Megatron-style: even layers column-parallel, odd layers row-parallel (partial sums
    all-reduced before the next ReLU); with dp > 1 the batch is also split dp ways."""

    def sources(node: Node) -> tuple[Sequence[int] | None, int]:
        if node.op == "pcg.weight":
            return ([n, 1] if _mlp_layer(node) % 2 == 0 else [1, n]), dp
        t = node.types[0]
        return [dp] + [1] * (t.rank - 1), n

    return Strategy(n * dp, sources=sources)


def mlp_reduction(n: int) -> Strategy:
    """Reduction parallelism: every layer's input and weight split on the contraction dim;
    partial sums reduce-scattered back onto that dim before the ReLU."""

    def sources(node: Node) -> tuple[Sequence[int] | None, int]:
        t = node.types[0]
        if node.op == "pcg.weight":
            return [1, n], 1
        if t.rank == 2:
            return [1, n], 1
        return None, 1

    def results(b: PlanBuilder, node: Node, refs: tuple[Ref, ...]) -> tuple[Ref, ...]:
        t = b.type_of(refs[0])
        if node.op == "pcg.linear" and t.sum_degree > 1:
            return (b.par("reduce_scatter", refs[0], dim=1, degree=n),)
        return refs

    return Strategy(n, sources=sources, results=results)


# --- BERT: data, Megatron, attention heads -------------------------------------------------------

MEGATRON_COLUMNS = ("query", "key", "value", "intermediate")
MEGATRON_ROWS = ("attention.output.weight", "ffn_output.weight")


def bert_megatron(n: int, heads_only: bool = False) -> Strategy:
    """Attention heads split n ways (q/k/v rows, output columns); with heads_only False also
    the FFN (intermediate column-, ffn_output row-parallel) and the vocabulary: the word
    embedding (tied to the decoder) split by rows, so the lookup gives partial sums and the
    decoder is column-parallel. Everything else is replicated."""

    def sources(node: Node) -> tuple[Sequence[int] | None, int]:
        key = _key(node)
        t = node.types[0]
        ffn = "intermediate" in key or "ffn_output" in key
        if key == "word_embeddings.weight" and not heads_only:
            return [n, 1], 1
        if node.op == "pcg.weight" and not (heads_only and ffn):
            if any(f".{c}." in key for c in MEGATRON_COLUMNS):
                return [n] + [1] * (t.rank - 1), 1
            if any(key.endswith(r) for r in MEGATRON_ROWS):
                return [1, n], 1
        return None, n

    return Strategy(n, sources=sources)


# --- DLRM: model-parallel embeddings, data-parallel MLPs -------------------------------------------


ROW_SHARDED_TABLE = "embeddings.3.weight"


def dlrm_hybrid(n: int) -> Strategy:
    """Embedding tables whole on one device each (table t on device t % n) reading the whole
    batch, their outputs scattered onto the batch shards; the last (largest) table split by rows
    over two devices, its partial sums reduce-scattered onto the batch shards; MLPs
    data-parallel."""

    def sources(node: Node) -> tuple[Sequence[int] | None, int]:
        t = node.types[0]
        if node.op == "pcg.input":
            return ([n] + [1] * (t.rank - 1), 1) if _key(node) != "sparse" else (None, 1)
        if _key(node) == ROW_SHARDED_TABLE:
            return [2, 1], 1
        if _key(node).startswith("embeddings."):
            return None, 1
        return None, n

    def results(b: PlanBuilder, node: Node, refs: tuple[Ref, ...]) -> tuple[Ref, ...]:
        if node.op != "pcg.embedding_bag":
            return refs
        split = b.type_of(refs[0]).sum_degree
        ref = b.par("reduce_scatter", refs[0], dim=0, degree=split) if split > 1 else refs[0]
        return (b.par("partition", ref, dim=0, degree=n // split),) if n > split else (ref,)

    def view(b: PlanBuilder, node: Node, t: TensorType) -> MachineViewAttr | None:
        if node.op != "pcg.embedding_bag":
            return None
        key = _key(b.base.nodes[node.operands[1][0]])  # type: ignore[index]
        return None if key == ROW_SHARDED_TABLE else MachineViewAttr(int(key.split(".")[1]) % n)

    return Strategy(n, sources=sources, results=results, view=view)


# --- CNNs: data parallelism, output-channel parallelism ---------------------------------------------


def channel_parallel(n: int) -> Strategy:
    """Every convolution split on its output channels (weights and biases by rows), batch-norm
    weights alike; the images copied to every device. Each op then takes what it must (partial
    sums reduced, shards gathered) by repair."""

    def sources(node: Node) -> tuple[Sequence[int] | None, int]:
        t = node.types[0]
        if node.op == "pcg.weight" and t.rank in (1, 4) and t.shape[0] % n == 0:
            return [n] + [1] * (t.rank - 1), 1
        return None, n

    return Strategy(n, sources=sources)


def rows_and_classes(node: Node) -> tuple[Sequence[int] | None, int]:
    """A classifier data parallel 2 x vocabulary parallel 2: inputs split on the batch and
    copied; the output head's rows (classes) split, its copies one per batch shard; the rest
    copied."""
    t = node.types[0]
    if node.op == "pcg.input":
        return [2] + [1] * (t.rank - 1), 2
    if _key(node).startswith("head."):
        return [2] + [1] * (t.rank - 1), 2
    return None, 4


IGNORED_TARGETS = str(Path(__file__).parent / "ignored_targets.py") + ":make"


STRATEGIES: dict[str, tuple[str, Callable[[], Strategy]]] = {
    "mlp-serial-1": ("mlp", lambda: Strategy(1)),
    "bert-serial-1": ("bert", lambda: Strategy(1)),
    "dlrm-serial-1": ("dlrm", lambda: Strategy(1)),
    "mlp-data-2": ("mlp", lambda: Strategy(2, sources=batch_sharded(2))),
    "mlp-data-4": ("mlp", lambda: Strategy(4, sources=batch_sharded(4))),
    "mlp-tensor-2": ("mlp", lambda: mlp_tensor(2)),
    "mlp-reduction-2": ("mlp", lambda: mlp_reduction(2)),
    "mlp-hybrid-4": ("mlp", lambda: mlp_tensor(2, dp=2)),
    "bert-data-2": ("bert", lambda: Strategy(2, sources=batch_sharded(2))),
    "bert-megatron-2": ("bert", lambda: bert_megatron(2)),
    "bert-heads-4": ("bert", lambda: bert_megatron(4, heads_only=True)),
    "dlrm-data-2": ("dlrm", lambda: Strategy(2, sources=batch_sharded(2))),
    "dlrm-hybrid-2": ("dlrm", lambda: dlrm_hybrid(2)),
    "dlrm-hybrid-4": ("dlrm", lambda: dlrm_hybrid(4)),
    # batch_norm may not split the batch (its statistics span it): the first one gathers it
    "resnext50-data-2": ("resnext50", lambda: Strategy(2, sources=batch_sharded(2))),
    "resnext50-channels-2": ("resnext50", lambda: channel_parallel(2)),
    "inception_v3-data-2": ("inception_v3", lambda: Strategy(2, sources=batch_sharded(2))),
    "xdl-data-2": ("xdl", lambda: Strategy(2, sources=batch_sharded(2))),
    "candle_uno-data-2": ("candle_uno", lambda: Strategy(2, sources=batch_sharded(2))),
    "ignored-hybrid-4": (IGNORED_TARGETS, lambda: Strategy(4, sources=rows_and_classes)),
}


def build(name: str, **settings: str) -> ModuleOp:
    """The plan called `name` (a strategy above, or "collectives-4"), for the small config of
    its model changed by `settings` (zoo config keys, and `batch`)."""
    if name == "collectives-4":
        return collectives_plan()
    model, strategy = STRATEGIES[name]
    s = strategy()
    return plan_module(base_graph(model, **settings), s, f"cpu:{s.devices}")


# --- every collective, with pieces placed so that fused ops need their two-stage forms -------------


def collectives_plan() -> ModuleOp:
    """The tiny MLP on 4 ranks with an explicit chain of parallel ops: all_to_all and all_gather
    between disjoint rank sets (gather + scatter / broadcast), a broadcast whose root keeps no
    copy, reduce_scatter, sum_concat with pieces that move (p2p, with gradients), all_reduce."""
    base = base_graph("mlp", hidden_dims="[8, 6]", in_features="4")
    sources = {n.attr("key"): n for n in base.nodes.values() if n.is_source}
    g = Graph(module_attrs={**base.module_attrs, "unityc.machine": StringAttr("cpu:4")})

    def source(key: str, view: MachineViewAttr, shard: Sequence[int] | None = None, copy: int = 1) -> Ref:
        node = sources[key]
        t = retyped(node.types[0], shard, copy)
        return g.add_node(Node(node.op, (), node.attrs, (t,), OpPlan(view), node.hint))[0]

    def add(op: str, operands: list[Ref | None], view: MachineViewAttr, **attrs: object) -> Ref:
        return g.add(op, operands, view=view, **attrs)[0]

    on01, on23 = MachineViewAttr(0, [1]), MachineViewAttr(2, [1])
    # tower 1: batch-split linear, all_to_all onto ranks 2, 3, then all_gather back onto 0, 1
    x1 = source("input1", on01, [2, 1])
    h = add("pcg.linear", [x1, source("tower1.0.weight", on01, None, 2), None], on01)
    h = add("parallel.all_to_all", [h], on23, src=0, dst=1, degree=2)
    h = add("pcg.relu", [h], on23)
    h = add("parallel.all_gather", [h], on01, dim=1, degree=2)
    t1 = add("pcg.linear", [h, source("tower1.2.weight", on01, None, 2), None], on01)
    # tower 2: input broadcast from rank 3 to ranks 0, 1; Megatron; reduce_scatter; all_gather onto 2, 3
    x2 = add("parallel.replicate", [source("input2", MachineViewAttr(3))], on01, degree=2)
    h = add("pcg.linear", [x2, source("tower2.0.weight", on01, [2, 1]), None], on01)
    h = add("pcg.relu", [h], on01)
    h = add("pcg.linear", [h, source("tower2.2.weight", on01, [1, 2]), None], on01)
    h = add("parallel.reduce_scatter", [h], on01, dim=0, degree=2)
    t2 = add("parallel.all_gather", [h], on23, dim=0, degree=2)
    # the towers' sum as partial sums (copy 1 of t1 moves to rank 2, copy 0 of t2 to rank 1),
    # all-reduced into 4 copies
    both = add("parallel.sum_concat", [t1, t2], MachineViewAttr(0, [1, 2]))
    logits = add("parallel.all_reduce", [both], MachineViewAttr(0, [1]), degree=2)
    labels = source("labels", MachineViewAttr(0, [1]), None, 4)
    loss = add("pcg.cross_entropy", [logits, labels], MachineViewAttr(0, [1]), reduction="mean")
    g.outputs = (loss, logits)
    interpret_equal(base, g)
    return to_module(g)
