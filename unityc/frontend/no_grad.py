"""What a model takes no gradient through, kept through the export.

`torch.export` records `x.detach()` as `aten.detach` and a `torch.no_grad()` block as a
`wrap_with_set_grad_enabled(False, ...)` call in the program it traces; the decompositions,
which make an inference graph, turn the first into an alias and inline the second, so the
imported graph would differentiate through both and train the weights the model does not (HRM's
reasoning cycles but the last; a router's detached probabilities). `keep_stop_gradients` makes
each detach, and each result of a no-grad block, `unityc::stop_gradient`, an op the
decompositions keep; the importer lowers it to `pcg.stop_gradient`.
"""

from __future__ import annotations

import operator

import torch
from torch import fx

aten = torch.ops.aten


@torch.library.custom_op("unityc::stop_gradient", mutates_args=())
def stop_gradient(x: torch.Tensor) -> torch.Tensor:
    """x, detached (a copy: a custom op's result may not alias its input)."""
    return x.detach().clone()


@stop_gradient.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def keep_stop_gradients(program: torch.export.ExportedProgram) -> int:
    """Rewrites, in place and before the decompositions, each `aten.detach` of `program` and each
    floating-point result of a top-level no-grad block into `unityc::stop_gradient`; how many."""
    graph = program.graph_module.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.detach.default:
            count += _replace(graph, node, node.args[0])  # type: ignore[arg-type]
        elif _no_grad_block(node):
            for result in [u for u in node.users if u.target is operator.getitem]:
                count += _after(graph, result)
    if count:
        graph.lint()
        program.graph_module.recompile()
    return count


def _no_grad_block(node: fx.Node) -> bool:
    hop = getattr(torch.ops.higher_order, "wrap_with_set_grad_enabled", None)
    return hop is not None and node.target is hop and node.args[:1] == (False,)


def _floating(node: fx.Node) -> bool:
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _replace(graph: fx.Graph, node: fx.Node, source: fx.Node) -> int:
    """`node` (a detach of `source`) as a stop_gradient of `source`."""
    if not _floating(source):
        return 0
    with graph.inserting_before(node):
        stopped = graph.call_function(torch.ops.unityc.stop_gradient.default, (source,))
    stopped.meta.update(node.meta)
    node.replace_all_uses_with(stopped)
    graph.erase_node(node)
    return 1


def _after(graph: fx.Graph, node: fx.Node) -> int:
    """Every reader of `node` reads a stop_gradient of it instead."""
    if not _floating(node) or not node.users:
        return 0
    with graph.inserting_after(node):
        stopped = graph.call_function(torch.ops.unityc.stop_gradient.default, (node,))
    stopped.meta.update(node.meta)
    node.replace_all_uses_with(stopped, delete_user_cb=lambda user: user is not stopped)
    return 1
