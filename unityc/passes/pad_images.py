"""pad-images: the image input padded with zero rows at the bottom so that a height split of
`degree` ways divides every window's rows (issue 29; the transform is `search/padding.py`).

    unityc-opt unet.mlir -p 'pad-images{degree=3}'       # the paper U-Net: 1024 -> 1056 rows
    unityc-opt unet.mlir -p 'pad-images{rows=1056}'

The network runs on the padded tensors (windows whose strides divide the real and the padded
rows, 0/1 row masks before an op that would read the padding, batch norms spelled out over the
real count) and the real rows are sliced off before the loss and every output, so the graph
trains the same model: same inputs, weights and outputs. Equal-shard plans of it (the `spatial`
baseline, `--unity-search`, which also tries it where devices would idle) then use devices the
unpadded rows cannot split over. Give `degree` (the rows become the next multiple of it times
the network's down-sampling) or `rows`; the graph must not be planned yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from unityc.dialects.container import training_function
from unityc.graph import from_module, to_module
from unityc.passes.adapter import replace_module
from unityc.search.padding import image_input, pad_images, padded_rows


@dataclass(frozen=True)
class PadImagesPass(ModulePass):
    name = "pad-images"

    degree: int = 0
    """A height split the padded rows must survive (with every down-sampling)."""
    rows: int = 0
    """The padded rows, where given instead of `degree`."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        training_function(op)  # one graph, its loss a scalar: located errors before any work
        graph = from_module(op)
        image = graph.nodes[image_input(graph)].types[0]
        if (self.degree > 0) == (self.rows > 0):
            raise ValueError("pad-images: give one of degree (a height split to divide) or rows (> 0)")
        if any(node.view is not None or node.stage is not None for node in graph.nodes.values()):
            raise ValueError("pad-images: the graph is already planned; pad the model before planning it")
        rows = self.rows or padded_rows(graph, self.degree)
        if rows == image.shape[2] and self.degree:
            raise ValueError(
                f"pad-images: {self.degree} ways already divide the {rows} rows at every down-sampling"
            )
        replace_module(op, to_module(pad_images(graph, rows)))
