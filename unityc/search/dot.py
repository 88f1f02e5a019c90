"""The `dot` target: a plan as a Graphviz picture.

    unityc-opt plan.mlir -t dot -o plan.dot && dot -Tsvg plan.dot -o plan.svg

Every op is a node labelled with its kind and parallel degrees; ops are filled with one colour
per device group (the devices their machine view places them on, on the machine recorded as
`unityc.machine`, or given with `-t 'dot{machine="summit:2"}'`); parallel ops are drawn as
hexagons, weights and inputs as plain ellipses; edges carry the tensor's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.utils.target import Target

from unityc.cost.pricing import check_views, placement
from unityc.dialects.diagnostics import located
from unityc.graph import from_module
from unityc.machine import load_machine
from unityc.search.report import degrees_text

PALETTE = (
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
    "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
)  # fmt: skip


def _devices_text(devices: tuple[int, ...]) -> str:
    if not devices:
        return "-"
    if len(devices) > 2 and list(devices) == list(range(devices[0], devices[-1] + 1)):
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(map(str, devices))


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render_dot(module: ModuleOp, machine_name: str | None = None) -> str:
    graph = from_module(module)
    attr = module.attributes.get("unityc.machine")
    name = machine_name or (attr.data if isinstance(attr, StringAttr) else None)
    machine = None
    if name:
        try:
            machine = load_machine(name)
        except ValueError as e:  # the plan's own unityc.machine: located at the module
            raise e if machine_name else located(module, f"unityc.machine: {e}") from None
        check_views(module, machine)
    groups: dict[tuple[int, ...], str] = {}
    lines = ["digraph plan {", "  rankdir=TB;", '  node [style=filled, fontname="Helvetica", fontsize=10];']
    for nid in graph.topological():
        node = graph.nodes[nid]
        t = node.types[0]
        if machine is not None and node.view is not None:
            devices = tuple(sorted(set(placement(t, node.view, machine).values())))
        else:
            devices = ()
        color = groups.setdefault(devices, PALETTE[len(groups) % len(PALETTE)]) if devices else "white"
        parts = [node.op.split(".", 1)[1]]
        if node.is_source and node.attr("key"):
            parts.append(node.attr("key"))
        parts.append(degrees_text(t.task_degrees()))
        if devices:
            parts.append(f"devices {_devices_text(devices)}")
        label = "\\n".join(_escape(part) for part in parts)  # dot's line break inside a label
        shape = "hexagon" if node.op.startswith("parallel.") else "ellipse" if node.is_source else "box"
        lines.append(f'  n{nid} [label="{label}", shape={shape}, fillcolor="{color}"];')
        for ref in node.operand_refs():
            shape_text = "x".join(map(str, graph.type_of(ref).shape)) or "scalar"
            lines.append(f'  n{ref[0]} -> n{nid} [label="{shape_text}", fontsize=8];')
    lines.append("  subgraph cluster_legend {")
    lines.append('    label="device groups"; fontsize=10;')
    for i, (devices, color) in enumerate(groups.items()):
        lines.append(f'    g{i} [label="devices {_devices_text(devices)}", shape=box, fillcolor="{color}"];')
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class DotTarget(Target):
    name = "dot"

    machine: str = ""

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        output.write(render_dot(module, self.machine or None))
