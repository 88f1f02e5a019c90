"""A weight read on two pipeline stages (BERT-Large's tied 30522 x 1024 word embedding: the
embedding on the first stage, the MLM head on the last), priced both ways on the cost model (run
on demand, never in `make test`):

* held: Megatron-LM's form, what `materialize` builds and the program runs: each stage reading
  it holds a copy, and the copies' gradients are all-reduced over their holders once per
  iteration;
* sent: the first stage holds it and sends it down the pipeline every micro-batch (its gradient
  back), what pipelined plans did before (`materialize(untied=False)`, still runnable).

Per machine: 2 stages (1F1B, M micro-batches) of equal width, an even split of the layers; the
estimate of both plans and the partition DP's profile of the same partition (`stage_costs`
simulated with the same schedule), which prices the held form.

    .venv/bin/python benchmarks/tied_pipeline.py [--batch 192] [--microbatches 8]

Estimated iteration times (roofline cost model), not measurements.
"""

from __future__ import annotations

import argparse
import sys

from pipelines import slow_nodes

from unityc.cost.pipeline import simulate_pipeline
from unityc.cost.staged import estimate_pipelined
from unityc.frontend import ModelSpec, import_model
from unityc.graph import from_module
from unityc.machine import load_machine
from unityc.search.layers import LayerCosts, Stage
from unityc.search.partition import StageModel, stage_costs
from unityc.search.pipeline import materialize


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=192)
    parser.add_argument("--microbatches", type=int, default=8)
    args = parser.parse_args(argv)
    graph = from_module(import_model(ModelSpec("bert", "paper", args.batch)))
    machines = [
        ("summit:2", load_machine("summit:2")),
        ("dgx-a100:2", load_machine("dgx-a100:2")),
        ("dgx-a100:2 over 100GbE", slow_nodes(load_machine("dgx-a100:2"))),
    ]
    M = args.microbatches
    print(
        f"BERT-Large (batch {args.batch}), 2 stages, 1F1B, {M} micro-batches; "
        "iteration time (ms), estimated\n"
    )
    header = ["machine", "stages", "held (estimate)", "sent (estimate)", "held / sent", "DP profile"]
    rows = []
    for name, machine in machines:
        width = machine.num_devices // 2
        costs = LayerCosts(graph, machine)
        L = costs.count
        stages = [Stage(0, L // 2, 0, width), Stage(L // 2, L, width, width)]
        held = estimate_pipelined(materialize(graph, machine, stages, "1f1b", M), machine)
        sent = estimate_pipelined(materialize(graph, machine, stages, "1f1b", M, untied=False), machine)
        profile = simulate_pipeline(stage_costs(StageModel(costs, M, "1f1b"), stages), "1f1b", M, 1)
        rows.append(
            [
                name,
                f"2 x {width}",
                f"{held.iteration_s * 1e3:.1f}",
                f"{sent.iteration_s * 1e3:.1f}",
                f"{held.iteration_s / sent.iteration_s:.2f}",
                f"{profile.iteration_s * 1e3:.1f}",
            ]
        )
        sys.stdout.flush()
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for r in [header, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")


if __name__ == "__main__":
    main()
