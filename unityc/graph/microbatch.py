"""The graph of one micro-batch (`microbatch_graph`), what the cost model prices for a plan that
cuts its batch into micro-batches: a pipelined plan and gradient accumulation alike. The xDSL
side (`dialects/pipeline.microbatch_module`) builds the same graph for the interpreter and the
program, and refuses what cannot run in micro-batches."""

from __future__ import annotations

from dataclasses import replace

from unityc.dialects.forms import FormError
from unityc.dialects.pcg_types import TensorType
from unityc.graph import Graph, infer_types


def microbatch_graph(graph: Graph, microbatches: int) -> Graph:
    """The graph of one micro-batch, for pricing: dim 0 of every input divided by M and every
    type computed from the inputs inferred again (a reshape's leading size divided with it);
    weights, constants and what only they feed keep their types. Batch norm gets micro-batch
    statistics here (GPipe's semantics); the program side decides whether it may run so."""
    if microbatches == 1:
        return graph
    out = graph.copy()
    out.function_attrs = out.kept_function_attrs()
    batched: set[int] = set()
    for nid in graph.topological():
        node = graph.nodes[nid]
        if node.op == "pcg.input":
            t = node.types[0]
            if t.rank == 0 or t.shape[0] % (microbatches * t.shard[0]):
                raise ValueError(
                    f"{microbatches} micro-batches do not divide the batch of input '{node.attr('key')}' "
                    f"({t.shape[0] if t.rank else 'a scalar'} in {t.shard[0] if t.rank else 1} shard(s))"
                )
            shape = (t.shape[0] // microbatches, *t.shape[1:])
            micro_t = TensorType(shape, t.element_type, t.shard, t.sum_degree, t.copy_degree)
            out.nodes[nid] = replace(node, types=(micro_t,))
            batched.add(nid)
            continue
        if not any(r[0] in batched for r in node.operand_refs()):
            continue
        attrs = node.attrs
        if node.op == "pcg.reshape":
            target = list(node.attr("shape"))
            if not target or target[0] % microbatches:
                raise ValueError(
                    f"pcg.reshape {_named(node.hint, nid)} to {target} cannot be split into {microbatches}"
                )
            target[0] //= microbatches
            attrs = tuple((k, tuple(target) if k == "shape" else v) for k, v in attrs)
        operand_types = tuple(None if r is None else out.type_of(r) for r in node.operands)
        try:
            types = infer_types(node.op, attrs, operand_types)
        except (FormError, ValueError, TypeError, KeyError, IndexError) as e:
            shapes = ", ".join(
                f"{'batched ' if r is not None and r[0] in batched else ''}{list(t.shape)}"
                for r, t in zip(node.operands, operand_types, strict=True)
                if t is not None
            )
            raise ValueError(
                f"{node.op} {_named(node.hint, nid)} has no micro-batch form (operands {shapes}: a value "
                f"not computed from the inputs keeps its whole-batch shape): {e}"
            ) from None
        out.nodes[nid] = replace(node, attrs=attrs, types=types)
        batched.add(nid)
    return out


def _named(hint: str | None, nid: int) -> str:
    """An op as the .mlir file names it: `%hint` (node id where it has no name)."""
    return f"%{hint}" if hint else f"(node {nid})"


__all__ = ["microbatch_graph"]
