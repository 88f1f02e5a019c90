"""The plan checks of `dialects/pipeline.py` on a Graph: the graph of one micro-batch
(`microbatch_graph`), what the cost model prices for a plan that cuts its batch into
micro-batches (a pipelined plan and gradient accumulation alike), and whether a plan's
micro-batches and stages can run as its program runs them (`microbatchable`, `check_plan`),
what the search asks before it offers a pipelined plan. The rules are the ones the interpreter
and the program use (`microbatch_module`, `check_pipeline`), written once over the ops of either
IR form; nothing here converts to xDSL."""

from __future__ import annotations

from dataclasses import replace

from unityc.dialects.pipeline import FUNCTION, OUTPUTS, PlanProblem, check_stages, microbatch_types
from unityc.dialects.plan import Pipeline
from unityc.graph import Graph, Node, Ref


def microbatch_graph(graph: Graph, microbatches: int, exact: bool = False) -> Graph:
    """The graph of one micro-batch (`microbatch_types`): dim 0 of every input divided by M and
    every type computed from the inputs inferred again; weights, constants and what only they
    feed keep their types. Without `exact` (pricing) batch norm gets micro-batch statistics;
    with it, whatever would not compute the whole batch's loss is refused. ValueError (a
    PlanProblem) naming the op at fault."""
    if microbatches == 1 and not exact:
        return graph
    ops = _ops(graph, live=exact)
    try:
        micro = microbatch_types(ops, graph.outputs, microbatches, exact)
    except PlanProblem as e:
        raise PlanProblem(_text(graph, e), e.at) from None
    out = graph.copy()
    out.function_attrs = out.kept_function_attrs()
    for nid, (attrs, types) in micro.items():
        out.nodes[nid] = replace(graph.nodes[nid], attrs=attrs, types=types)
    return out


def microbatchable(graph: Graph) -> bool:
    """Whether micro-batches of `graph` compute its loss exactly (`microbatch_graph` with one
    micro-batch, exact: it refuses what no count allows: ops mixing samples such as batch norm,
    a summed loss, a reshape moving the batch out of dim 0). A plan of the graph computes the
    same values, so where this fails no pipelined plan is runnable."""
    try:
        microbatch_graph(graph, 1, exact=True)
    except ValueError:
        return False
    return True


def check_plan(graph: Graph, exact: bool = True) -> tuple[Pipeline, int] | None:
    """`check_stages` and, for a plan that cuts its batch, the micro-batch rules on a plan
    Graph: its schedule and stage count (None: not pipelined). PlanProblem, naming the op at
    fault, where its program could not run it; without `exact`, a plan whose micro-batches
    compute their own statistics (batch norm, GPipe's semantics) passes, as the cost model
    prices it."""
    ops = _ops(graph, live=True)
    plan = graph.plan
    try:
        checked = check_stages(plan, ops, name=lambda ref: _value(graph, ref))
    except PlanProblem as e:
        raise PlanProblem(_text(graph, e), e.at) from None
    if plan.batch_parts > 1:
        microbatch_graph(graph, plan.batch_parts, exact=exact)
    return checked


def _ops(graph: Graph, live: bool) -> dict[int, Node]:
    """The nodes in topological order; only those the outputs need where `live` (what the
    program holds: `to_module` writes those)."""
    order = graph.topological()
    if not live:
        return {nid: graph.nodes[nid] for nid in order}
    kept = graph.live()
    return {nid: graph.nodes[nid] for nid in order if nid in kept}


def _text(graph: Graph, problem: PlanProblem) -> str:
    if problem.at in (FUNCTION, OUTPUTS):
        return problem.message
    node = graph.nodes[problem.at]
    return problem.text(f"{node.op} {_named(node.hint, problem.at)}")


def _value(graph: Graph, ref: Ref) -> str:
    hint = graph.nodes[ref[0]].hint
    return f"%{hint}" if hint else "a value"


def _named(hint: str | None, nid: int) -> str:
    """An op as the .mlir file names it: `%hint` (node id where it has no name)."""
    return f"%{hint}" if hint else f"(node {nid})"


__all__ = ["check_plan", "microbatch_graph", "microbatchable"]
