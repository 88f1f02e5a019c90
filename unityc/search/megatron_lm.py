"""The `megatron-lm` baseline: the 3-D configuration Megatron-LM's users pick by hand (Narayanan
et al. 2021, §5 and the repository's recommended settings), built from the plan kinds the
search has (`pipeline.materialize` with tensor-parallel stages, ZeRO and recomputation levers)
and priced by `estimate` like every other plan.

1. *Tensor degree* t: the largest dividing a node (and the machine, `strategies.tensor_degrees`)
   that divides the heads and key/value heads of every fused attention (Megatron splits
   attention by heads); 1 where none does.
2. *Micro-batch 1*: each data-parallel replica runs one sample per micro-batch, so a plan of data
   degree d runs M = B / d micro-batches through its pipeline (with one stage: gradient
   accumulation over M micro-batches, one gradient sync and update).
3. *Pipeline stages* P: the fewest (P x t dividing the devices, the batch dividing by the data
   degree d = D / (t P), at most the graph's pipeline layers) whose plan fits with the
   distributed optimizer (ZeRO-1 over the copies of every weight held in copies: the
   data-parallel group, and the tensor-parallel group for the few replicated weights such as
   norms) and *selective recomputation* (the attention core: a fused attention op, or a score
   batch matmul through its softmax to the context batch matmul); where no P fits so, the fewest
   that fit with every op recomputed (full recomputation); where none fits at all, the plan of
   the smallest peak. Stages are the graph's layers (`pipeline.layer_of`) cut where forward
   FLOPs are most even; 1F1B.
4. *Interleaving*: with P > 1 stages and M a multiple of P, v = 2 and 4 model chunks per rank
   group where the layers allow (interleaved 1F1B); the fastest of v = 1, 2, 4 that fits.
5. *Data parallelism* over the rest: each stage group of t x d devices runs the Megatron layout
   (`strategies.megatron_layouts`) tensor parallel t x data parallel d.

6. *Sequence parallelism* (Korthikanti et al. 2022, on by default as Megatron-LM's users run
   it with tensor parallelism): in each tensor group the norms, dropout and residual adds run
   sharded on the sequence (`strategies.megatron_layouts` of a `Layout(sequence=True)`), each all-reduce after
   a row-parallel linear a `parallel.reduce_scatter` onto the sequence and each column-parallel
   input a `parallel.all_gather` from it: the same volume, 1/t of those ops' activations, which
   is what lets a large model fit with selective rather than full recomputation.
7. *Context parallelism* (Megatron-LM's `--context-parallel-size` c, what its users set by hand
   for long sequences): the smallest c (`context_degrees`: 2, 4, ... splitting the sequence and
   the devices left by the tensor group) leaving each rank at most `HAND_CHUNK` tokens of the
   sequence (Llama 3's 128K-token stage: 16 ways, 8K each), none for a sequence that short; then,
   where nothing fits with it, the other degrees, smallest first. Every attention split over
   the sequence by the ring (`strategies.megatron_layouts`), the token stream sharded c ways
   from the embedding on. Full recomputation only where no degree fits with selective.
8. *Expert parallelism* (Megatron-Core's `--expert-model-parallel-size` e, for an MoE graph):
   as its users set it, the experts of a node or fewer (`hand_experts`: the largest degree of
   `experts.expert_degrees` that divides the experts and the data replicas, within a node
   beside the tensor group), carved out of the data-parallel ranks; attention and the dense
   layers stay tensor-parallel.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace

from unityc.cost.estimate import gradient_flags
from unityc.graph import Graph
from unityc.machine.spec import Machine
from unityc.search.experts import expert_degrees, graph_experts, with_experts
from unityc.search.layers import PipelineError, Stage, batch_size, layer_of
from unityc.search.layout import FULL, RECOMPUTE_LEVELS, SELECTIVE, Layout, tilings
from unityc.search.pipeline import materialize, plain_graph
from unityc.search.plans import PricedPlan, Pricing
from unityc.search.strategies import tensor_degrees
from unityc.search.tokens import context_length

VIRTUAL_CHOICES = (1, 2, 4)
"""Model chunks per rank group tried where the layers and micro-batches allow."""

ZERO_STAGES = (1, 2, 3)
"""ZeRO over the data-parallel rest: the optimizer state, then the gradients, then the weights
sharded across each weight's copies."""


def Config(
    tensor: int,
    stages: int,
    data: int,
    virtual: int,
    microbatches: int,
    recompute: str,
    sequence: bool = False,
    microbatch_size: int = 1,
    zero: int = 1,
) -> Layout:
    """A hand-picked configuration in the positional order earlier code (benchmarks, tests) spells
    it: the `Layout` of those degrees, ZeRO-1 (Megatron-LM's distributed optimizer) unless given."""
    return Layout(
        data=data,
        tensor=tensor,
        pipeline=stages,
        virtual=virtual,
        microbatches=microbatches,
        recompute=recompute,
        sequence=sequence and tensor > 1,  # (Config took it at tensor 1 and ignored it)
        microbatch_size=microbatch_size,
        zero=zero,
    )


def attention_heads(graph: Graph) -> list[int]:
    """The heads and key/value heads of every fused attention of `graph`."""
    out: list[int] = []
    for node in graph.nodes.values():
        if node.op != "pcg.attention":
            continue
        heads = node.attr("heads")
        out += [heads, node.attr("kv_heads") or heads]
    return out


def tensor_degree(graph: Graph, machine: Machine) -> int:
    """The largest tensor degree dividing a node and the machine that splits every fused
    attention by whole heads (1 if none)."""
    return head_degrees(graph, machine)[0]


def attention_core(graph: Graph) -> set[int]:
    """The ops of every attention core: a fused attention op, or from a score batch matmul
    (two computed operands) through the ops up to its softmax and on to the batch matmul that
    reads the probabilities (Megatron's selective recomputation)."""
    core: set[int] = set()
    users = graph.users()
    for nid, node in graph.nodes.items():
        if node.op == "pcg.attention":
            core.add(nid)
        if node.op != "pcg.softmax":
            continue
        region = {nid}
        back = node.operands[0]
        while back is not None and graph.nodes[back[0]].op != "pcg.batch_matmul":
            producer = graph.nodes[back[0]]
            if producer.is_source or len(users[back[0]]) > 1:
                break
            region.add(back[0])
            back = producer.operands[0]
        if back is None or graph.nodes[back[0]].op != "pcg.batch_matmul":
            continue  # a softmax that is no attention's
        region.add(back[0])
        ahead = nid
        while len(users[ahead]) == 1:
            (ahead,) = users[ahead]
            region.add(ahead)
            if graph.nodes[ahead].op == "pcg.batch_matmul":
                core |= region
                break
            if graph.nodes[ahead].op not in ("pcg.dropout", "pcg.cast", "pcg.identity"):
                break
    return core


def with_megatron_levers(plan: Graph, layout: Layout) -> Graph:
    """`plan` with ZeRO-`layout.zero` on every weight held in copies that gets a gradient (ZeRO-1:
    the distributed optimizer; a weight held on several stages, a tied embedding, keeps its
    copies whole, as the program requires), and the attention core (`selective`) or every pcg op
    (`full`) recomputed (`layout.recompute`)."""
    recompute, zero = layout.recompute, layout.zero
    out = plan.copy()
    _, gets_grad = gradient_flags(out, out.topological())
    keys = Counter(n.attr("key") for n in out.nodes.values() if n.op == "pcg.weight")
    core = attention_core(out) if recompute == SELECTIVE else set()
    for nid, node in out.nodes.items():
        if node.op == "pcg.weight":
            if node.types[0].copy_degree >= 2 and (nid, 0) in gets_grad and keys[node.attr("key")] == 1:
                out.nodes[nid] = node.with_plan(zero=zero)
            continue
        every = recompute == FULL and node.op.startswith("pcg.") and not node.is_source
        if every or nid in core:
            out.nodes[nid] = node.with_plan(recompute=True)
    return out


def build(
    graph: Graph, machine: Machine, layout: Layout, pricing: Pricing, name: str = "megatron-lm"
) -> PricedPlan:
    """The plan of `layout` (`graph` unparallelized), priced, named `name`."""
    if layout.devices != machine.num_devices:
        raise ValueError(
            f"megatron-lm: {layout!r} runs on {layout.devices} devices, not {machine.num_devices}"
        )
    width = layout.group
    chunks = layout.pipeline * layout.virtual
    stages = tuple(Stage(k, k + 1, (k % layout.pipeline) * width, width) for k in range(chunks))
    plan = materialize(graph, machine, stages, layout.schedule, layout, chunks)
    plan = with_megatron_levers(plan, layout)
    return PricedPlan(name, plan, pricing.estimate(plan, machine), None, layout.describe())


def stage_counts(graph: Graph, machine: Machine, shape: Layout) -> Iterator[Layout]:
    """`shape` (its tensor degree, levers) over the machine in increasing pipeline stages P
    (`tilings`): P x t divides the devices, the data degree d the rest, dividing the batch, P at
    most the graph's pipeline layers; M = B / d micro-batches of 1 per replica."""
    layers = len(layer_of(graph)[0]) + 1
    B = batch_size(graph)
    D = machine.num_devices
    group = shape.tensor * shape.context
    choices = {
        "context": [shape.context],
        "tensor": [shape.tensor],
        "pipeline": range(1, min(layers, D // group) + 1),
    }
    for layout in with_experts(tilings(D, choices, "data", shape), graph, machine):
        if B % layout.data == 0:
            yield replace(layout, microbatches=B // layout.data)


def megatron_lm_plan(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    tensor: int = 0,
    stages: int = 0,
    virtual: int = 0,
    sequence: bool = True,
    context: int = 0,
    tried: list[PricedPlan] | None = None,
    expert: int = 0,
) -> PricedPlan:
    """Megatron-LM's hand-picked plan (see the module docstring); `tensor`, `stages`, `virtual`,
    `context`, `expert` fix those choices (0: chosen as a user would); `sequence`: sequence parallel.
    `tried`: an empty list that gets every plan priced on the way (the stage counts that did not
    fit included), for `three_d_plans(priced=...)` to reuse where its scan repeats them (at
    GPT-3-175B on 12,288 GPUs each is tens of CPU seconds). Raises PipelineError where the
    graph has no batched input, or the given degrees do not tile the machine or split the batch."""
    graph = plain_graph(graph)
    t = tensor or tensor_degree(graph, machine)
    chosen = expert or hand_expert_degree(graph, machine, tensor)
    while not tensor and t > 1 and not _beside(machine, t, chosen):
        t //= 2  # the expert degree is carved out of the data ranks beside the tensor group
    if machine.num_devices % t:
        raise PipelineError(f"megatron-lm: tensor degree {t} does not divide {machine.num_devices} devices")
    contexts = [context] if context else hand_contexts(graph, machine, t)
    counts = {
        c: hand_experts(stage_counts(graph, machine, Layout(tensor=t, context=c)), stages, chosen, expert > 0)
        for c in contexts
    }
    if expert and not any(counts.values()):
        raise PipelineError(_expert_problem(graph, machine, expert, t, contexts))
    if not any(counts.values()):
        context_text = "" if contexts == [1] else f" x context {'/'.join(map(str, contexts))}"
        raise PipelineError(
            f"megatron-lm: no pipeline of {stages or 'any number of'} stages x tensor {t}{context_text} "
            f"tiles the {machine.num_devices} devices with a data degree dividing the batch of "
            f"{batch_size(graph)}"
        )
    tried = [] if tried is None else tried
    for recompute in (SELECTIVE, FULL):
        for c in contexts:
            shape = Layout(tensor=t, context=c, sequence=sequence and t > 1, zero=1, recompute=recompute)
            found = _fewest_stages(graph, machine, pricing, shape, counts[c], tried, virtual)
            if found is not None:
                return found[0]
    if not tried:
        raise PipelineError("megatron-lm: no configuration could be built on this graph and machine")
    return min(tried, key=lambda p: p.estimate.peak_memory)


def _fewest_stages(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    shape: Layout,
    counts: list[Layout],
    tried: list[PricedPlan],
    virtual: int = 0,
    name: str = "megatron-lm",
) -> tuple[PricedPlan, Layout] | None:
    """The plan of the fewest stages in `counts` (`stage_counts`, increasing) that fits with
    `shape`'s tensor degree, recomputation and sequence parallelism, micro-batch 1 per replica,
    interleaved where that is faster (`virtual`: that many chunks only, 0: chosen), and its
    layout; None where none fits. Every plan priced is appended to `tried`."""
    layers = len(layer_of(graph)[0]) + 1
    for count in counts:
        base = _at(shape, count, virtual or 1)
        if virtual > 1 and not virtual_choices(base.pipeline, base.microbatches, layers, virtual):
            continue
        plain = _try(graph, machine, base, pricing, tried, name)
        if plain is None or not plain.estimate.fits:
            continue
        chosen, config = plain, base
        for v in [] if virtual else virtual_choices(base.pipeline, base.microbatches, layers):
            chunked = _try(graph, machine, replace(base, virtual=v), pricing, tried, name)
            if chunked is not None and _better(chunked, chosen):
                chosen, config = chunked, replace(base, virtual=v)
        return chosen, config
    return None


def _at(shape: Layout, count: Layout, virtual: int = 1) -> Layout:
    """`shape`'s levers at `count`'s degrees and micro-batches (`stage_counts`)."""
    return replace(
        shape,
        data=count.data,
        pipeline=count.pipeline,
        virtual=virtual,
        microbatches=count.microbatches,
        expert=count.expert,
    )


def hand_expert_degree(graph: Graph, machine: Machine, tensor: int = 0) -> int:
    """The expert degree a Megatron-Core user sets (`--expert-model-parallel-size`) for an MoE
    graph: the experts of a node or fewer, the largest degree dividing the experts within a node
    beside a given `tensor` group (beside none where the tensor degree is chosen: it then takes
    what the node has left, for attention); 1 for a dense graph."""
    within = expert_degrees(machine, graph_experts(graph), tensor or 1)
    per_node = math.gcd(machine.nodes[0].num_devices, machine.num_devices)
    return next((e for e in within if e <= per_node), 1)


def _expert_problem(graph: Graph, machine: Machine, expert: int, tensor: int, contexts: list[int]) -> str:
    """Why no configuration has the expert degree `expert` the user gave (beside tensor degree
    `tensor`): the message of the error that replaces a plan without it."""
    head = f"megatron-lm: expert={expert} cannot apply"
    experts = graph_experts(graph)
    if not experts:
        return f"{head}: the graph has no experts (no pcg.experts op)"
    if experts % expert:
        return f"{head}: it does not divide the graph's {experts} experts"
    offered = expert_degrees(machine, experts, tensor)
    if expert not in offered:
        degrees = ", ".join(map(str, offered))
        where = f"beside tensor {tensor} on {machine.name}"
        return f"{head} {where}: the expert degrees that place there are {degrees}"
    shapes = [Layout(tensor=tensor, context=c) for c in contexts]
    data = sorted({n.data for shape in shapes for n in stage_counts(graph, machine, shape)})
    return (
        f"{head}: the expert group is carved out of the data-parallel ranks and {expert} divides no "
        f"data degree here ({', '.join(map(str, data)) or 'none'}: the batch of {batch_size(graph)} over "
        f"{machine.num_devices} devices beside tensor {tensor})"
    )


def _beside(machine: Machine, tensor: int, expert: int) -> bool:
    """Whether an expert group of `expert` fits beside a tensor group of `tensor`: within a node
    where it is no larger than one, else over whole nodes of the remaining ranks."""
    per_node = math.gcd(machine.nodes[0].num_devices, machine.num_devices)
    if expert <= per_node:
        return per_node % (tensor * expert) == 0
    return (machine.num_devices // tensor) % expert == 0


def hand_experts(
    counts: Iterable[Layout], stages: int = 0, expert: int = 1, given: bool = False
) -> list[Layout]:
    """`counts` (`stage_counts`: each tiling with each of `experts.expert_degrees`) of `stages`
    stages (0: any), each tiling once, at the expert degree `expert` (`hand_expert_degree`);
    where a tiling's data replicas cannot take it, at the first degree offered there (the most
    experts per node that divides them), unless the degree is `given` (then that tiling is left out)."""
    counts = [n for n in counts if stages in (0, n.pipeline)]
    if given:
        return [n for n in counts if n.expert == expert]
    tilings: dict[Layout, list[Layout]] = {}
    for n in counts:
        tilings.setdefault(replace(n, expert=1), []).append(n)
    return [next((n for n in offered if n.expert == expert), offered[0]) for offered in tilings.values()]


def context_degrees(graph: Graph, machine: Machine, tensor: int) -> list[int]:
    """Context-parallel degrees beyond 1 (`strategies.megatron_layouts`), smallest first: powers
    of two splitting the self-attentions' sequence (`tokens.context_length`) and the devices
    beside a tensor group of `tensor`, at most `MAX_CONTEXT` (Llama 3's 128K-token stage ran
    with 16); none for a graph without such attention."""
    length = context_length(graph)
    out: list[int] = []
    c = 2
    while length and c <= MAX_CONTEXT and length % c == 0 and (machine.num_devices // tensor) % c == 0:
        out.append(c)
        c *= 2
    return out


def hand_contexts(graph: Graph, machine: Machine, tensor: int) -> list[int]:
    """The context degrees a Megatron-LM user tries, in order: the smallest (1 included) that
    leaves each rank at most `HAND_CHUNK` tokens (else the largest), then the others ascending;
    only 1 for a sequence of at most `HAND_CHUNK` (no one sets context parallelism for it)."""
    degrees = [1, *context_degrees(graph, machine, tensor)]
    length = context_length(graph)
    if length <= HAND_CHUNK:
        return [1]
    hand = next((c for c in degrees if length // c <= HAND_CHUNK), degrees[-1])
    return [hand, *(c for c in degrees if c != hand)]


HAND_CHUNK = 8192
"""Tokens of the sequence per rank that Megatron-LM users aim context parallelism at."""

MAX_CONTEXT = 16
"""The largest context degree tried (Dubey et al. 2024 trained Llama 3 at 128K tokens with 16)."""

LONG_SEQUENCE = 16384
"""The sequence from which the joint search's 3-D plans try context parallelism: below it the
activations of a sequence are small beside the weights (Megatron-LM's guidance sets it for 8K
and more), and each degree adds a scan of stage counts; the `megatron-lm` baseline tries it at
any length where nothing fits without it."""


def head_degrees(graph: Graph, machine: Machine) -> list[int]:
    """Tensor degrees dividing a node and the machine that split every fused attention by whole
    heads, largest first, then 1."""
    heads = attention_heads(graph)
    return [t for t in tensor_degrees(machine) if all(h % t == 0 for h in heads)] + [1]


def three_d_plans(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    worth: Callable[[Layout], bool] = lambda shape: True,
    priced: Sequence[PricedPlan] = (),
) -> Iterator[PricedPlan]:
    """The joint search's 3-D candidates, named "3-d", as each is priced: for every tensor degree
    splitting the heads (`head_degrees`), with and without sequence parallelism, and every
    recomputation level (`RECOMPUTE_LEVELS`: full, the attention core, none), the plan of the
    fewest pipeline stages across nodes that fits with ZeRO-1 over the data-parallel rest,
    micro-batch 1 per replica (accumulation to the global batch), interleaved where faster
    (`_fewest_stages`), and more stages while each count is faster (`_deeper`: fewer data
    replicas to synchronise); and where fewer stages fit with more sharding, the plan of the fewest
    that fit with ZeRO-3 (or ZeRO-2 there, `_sharded`: a smaller bubble for a gather per weight
    and micro-batch, as torchtitan runs FSDP2 with pipelines and tensor parallelism). Less
    recomputation never needs fewer stages, so each level's scans start at the previous level's
    stage counts (a few estimates per tensor degree, not the product of every degree).
    `worth(shape)`: whether a plan of that layout's recomputation could still beat the plan at
    hand (`bounds.three_d_bound`); levels that cannot are skipped. `priced`: plans built here before
    (the `megatron-lm` plan), reused where a configuration repeats one. Raises PipelineError
    where the graph has no batched input.

    For a sequence of `LONG_SEQUENCE` tokens or more, the same with context parallelism
    (`hand_contexts`' degrees) at the largest tensor degree, as Megatron-LM places it beyond a
    node's tensor group, first (there the activations are what a plan must fit); the caller
    takes one only where it is faster. Below that length, none is tried. Each context-parallel
    plan found exchanges by the ring, or by the all-to-all where that is faster (`_exchanged`)."""
    graph = plain_graph(graph)
    tensors = head_degrees(graph, machine)
    shapes = [(t, 1) for t in tensors]
    if context_length(graph) >= LONG_SEQUENCE:
        degrees = [c for c in hand_contexts(graph, machine, tensors[0]) if c > 1]
        shapes = [(tensors[0], c) for c in degrees] + shapes
    for t, c in shapes:
        all_counts = list(stage_counts(graph, machine, Layout(tensor=t, context=c)))
        for sequence in (True, False) if t > 1 else (False,):
            counts = sharded = all_counts  # the stage counts left to scan with ZeRO-1, with ZeRO-3
            for recompute in RECOMPUTE_LEVELS:
                if not counts and not sharded:
                    break  # less recomputation fits nowhere either
                shape = Layout(tensor=t, context=c, sequence=sequence, zero=1, recompute=recompute)
                if not worth(shape):
                    continue
                tried = list(priced)
                found = _fewest_stages(graph, machine, pricing, shape, counts, tried, name="3-d")
                fewest = found[1].pipeline if found else None
                deeper = _deeper(graph, machine, pricing, shape, counts, found, tried)
                fewer = [c for c in sharded if fewest is None or c.pipeline < fewest]
                more = _sharded(graph, machine, pricing, shape, fewer, tried)
                for plan, config in [f for f in (found, deeper, more) if f is not None]:
                    plan, config = _exchanged(graph, machine, pricing, config, plan, tried)
                    yield _larger_microbatches(graph, machine, pricing, config, plan)
                counts = [c for c in counts if fewest is not None and c.pipeline >= fewest]
                floor = more[1].pipeline if more else fewest
                sharded = [c for c in sharded if floor is not None and c.pipeline >= floor]


def _deeper(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    shape: Layout,
    counts: list[Layout],
    found: tuple[PricedPlan, Layout] | None,
    tried: list[PricedPlan],
) -> tuple[PricedPlan, Layout] | None:
    """Where more stages than the fewest that fit (`found`) are faster, the fastest of them and
    its layout, scanning `counts` upwards (interleaved where faster) while each stage count
    beats the one before; None where the next count is no faster. More stages leave fewer data
    replicas, so less gradient traffic across nodes, and (interleaved) a bubble no larger:
    GPT-3-175B on 64 A100s fits at tensor 8 x pipeline 4 x data 2 once weights are bf16 with
    fp32 master shards, but Megatron-LM's tensor 8 x pipeline 8, 4 chunks, is faster."""
    if found is None:
        return None
    best: tuple[PricedPlan, Layout] | None = None
    last = found[1].pipeline
    for pipeline in sorted({c.pipeline for c in counts if c.pipeline > last}):
        at = [c for c in counts if c.pipeline == pipeline]
        nxt = _fewest_stages(graph, machine, pricing, shape, at, tried, name="3-d")
        if nxt is None or not _better(nxt[0], (best or found)[0]):
            break
        best = nxt
    return best


def _sharded(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    shape: Layout,
    counts: list[Layout],
    tried: list[PricedPlan],
) -> tuple[PricedPlan, Layout] | None:
    """Of `counts` (fewer stages than ZeRO-1 fits in), the plan of the fewest stages that fits
    with `shape` and ZeRO-3, or ZeRO-2 at that count where that fits too and is faster, and its
    configuration; None where none does. A count whose ZeRO-1 plan in `tried` overflows
    a device even without its weights and gradients is not priced: ZeRO-3 saves no more."""
    hopeless = {plan.note for plan in tried if not plan.estimate.fits and _overflows_unsharded(plan)}
    hopeful = [c for c in counts if _at(shape, c).describe() not in hopeless]
    found = _fewest_stages(graph, machine, pricing, replace(shape, zero=3), hopeful, tried, name="3-d")
    if found is None:
        return None
    plan, config = found
    lighter = _try(graph, machine, replace(config, zero=2), pricing, tried, "3-d")
    if lighter is not None and _better(lighter, plan):
        return lighter, replace(config, zero=2)
    return plan, config


def _overflows_unsharded(plan: PricedPlan) -> bool:
    """Whether some device of `plan` would overflow with none of its weights and gradients."""
    return any(
        d.memory.total - d.memory.weights - d.memory.gradients > d.capacity for d in plan.estimate.devices
    )


def virtual_choices(stages: int, microbatches: int, layers: int, virtual: int = 0) -> list[int]:
    """Chunks per stage group beyond 1 that a plan of `stages` stages may interleave: the
    layers give each chunk one at least, the micro-batches are a multiple of the stages."""
    if stages < 2 or microbatches % stages:
        return []
    wanted = (virtual,) if virtual else VIRTUAL_CHOICES
    return [v for v in wanted if v > 1 and stages * v <= layers]


def ulysses_splits(graph: Graph, tensor: int, context: int) -> bool:
    """Whether the all-to-all exchange (DeepSpeed-Ulysses) can split every fused attention of
    `graph` over a context group of `context` beside tensor degree `tensor`: a tensor task's
    heads divide by the context degree, its key/value heads divide by it or divide it (what
    `pcg.attention`'s context form accepts)."""
    heads = attention_heads(graph)
    for h, kv in zip(heads[::2], heads[1::2], strict=True):
        if h % tensor or kv % tensor:
            return False
        local, local_kv = h // tensor, kv // tensor
        if local % context or (local_kv % context and context % local_kv):
            return False
    return bool(heads)


def _exchanged(
    graph: Graph,
    machine: Machine,
    pricing: Pricing,
    config: Layout,
    plan: PricedPlan,
    tried: list[PricedPlan],
) -> tuple[PricedPlan, Layout]:
    """`plan` (of `config`, its attentions exchanging by the ring) or the same layout with the
    all-to-all exchange where that splits the heads (`ulysses_splits`), fits and is faster (the
    ring's sends priced as they overlap the blocks, the all-to-alls by alpha-beta:
    `cost/context.py`); with its configuration."""
    if (
        config.context < 2
        or config.exchange != "ring"
        or not ulysses_splits(graph, config.tensor, config.context)
    ):
        return plan, config
    twin = replace(config, exchange="all-to-all")
    other = _try(graph, machine, twin, pricing, tried, "3-d")
    if other is not None and _better(other, plan):
        return other, twin
    return plan, config


def _better(a: PricedPlan, b: PricedPlan) -> bool:
    """Whether `a` fits and is faster than `b`."""
    return a.estimate.fits and a.estimate.iteration_s < b.estimate.iteration_s


def _larger_microbatches(
    graph: Graph, machine: Machine, pricing: Pricing, config: Layout, plan: PricedPlan
) -> PricedPlan:
    """`plan` (of `config`, micro-batch 1 per replica) with micro-batches of 2, 4, ... samples
    while that fits and is faster (fewer, larger kernels; fewer accumulation steps), the
    micro-batch count kept a multiple of the stages where interleaved."""
    best = plan
    count = config.microbatches
    while count % 2 == 0:
        count //= 2
        if config.virtual > 1 and count % config.pipeline:
            break
        config = replace(config, microbatches=count, microbatch_size=config.microbatch_size * 2)
        larger = _try(graph, machine, config, pricing, [], plan.name)
        if larger is None or not _better(larger, best):
            break
        best = larger
    return best


def _try(
    graph: Graph,
    machine: Machine,
    config: Layout,
    pricing: Pricing,
    tried: list[PricedPlan],
    name: str = "megatron-lm",
) -> PricedPlan | None:
    """The plan of `config`, or None where the layout cannot be had on the machine; one in
    `tried` of the same configuration is reused (renamed), not priced again."""
    for known in tried:
        if known.note == config.describe():
            return PricedPlan(name, known.graph, known.estimate, known.mapped, known.note)
    try:
        plan = build(graph, machine, config, pricing, name)
    except (PipelineError, ValueError):
        return None
    tried.append(plan)
    return plan


__all__ = [
    "Config",
    "attention_core",
    "head_degrees",
    "megatron_lm_plan",
    "tensor_degree",
    "three_d_plans",
    "with_megatron_levers",
]
