"""`-t torch`: a plan (pcg + parallel ops with machine views) -> one SPMD training program.

    unityc-opt plan.mlir -t torch -o train.py
    torchrun --standalone --nproc_per_node 2 train.py --steps 10 [--check]

The program is standalone and readable: a `PLAN` value (machine, model spec, how every weight,
input and output is held, the process groups) and a `forward` in plain torch on this rank's
pieces. Each op's tasks placed on this rank run the op's kernel (as the reference interpreter
defines it) on local pieces; a piece a task reads from another rank is moved by `ctx.p2p` (the
cost model's implicit transfer); parallel ops run torch collectives through `ctx.parallel`,
whose backward is the dual collective. `unityc.runtime.main` does the rest: weights and data
from the reference model, backward, gradient sync of weight copies, the optimizer, timing,
--check.

Plans need `unityc.model` (the importer records it) and `unityc.machine` (the machine the plan was
made for, e.g. "cpu:2"; the search writes it; `-t 'torch{machine="cpu:4"}'` overrides it), and a
machine view on every op. Ranks are the machine's global device indices.
"""

from __future__ import annotations

import math
from pathlib import Path

from xdsl.dialects.builtin import DictionaryAttr, IntegerType, ModuleOp

from unityc.codegen.analysis import Analysis, CodegenError, analyze, index_bounds
from unityc.codegen.emit import Writer, layout_text
from unityc.codegen.memory import bf16_pieces, frozen_weights, predicted_memory, zero_stages
from unityc.codegen.pipeline import emit_pipelined, is_pipelined
from unityc.cost.estimate import estimate_module
from unityc.dialects.container import graph_function
from unityc.dialects.pcg_types import TensorType
from unityc.dialects.pipeline import graph_ops, graph_plan_of, microbatch_module
from unityc.dialects.precision import FP32
from unityc.dialects.syntax import UnitycOp
from unityc.models.spec import ModelError, ModelSpec, absolute_model, factory_file

__all__ = ["CodegenError", "emit_program"]


def _model_path(model: str, source: str) -> str:
    """A factory file's path as the program records it: absolute, so the program runs from any
    directory. The importer records absolute paths; a relative one (an older or hand-written
    plan) is taken from the current directory, or else from the plan's directory."""
    found = factory_file(model)
    if found is None or found[0].is_absolute():
        return model
    for base in (Path.cwd(), Path(source).parent):
        if (base / found[0]).is_file():
            return absolute_model(model, base)
    return model  # the program then says that the file is missing


def _model_text(model: DictionaryAttr, source: str) -> tuple[str, str]:
    """The `rt.Model(...)` of the recorded spec, and a summary for the header."""
    try:
        spec = ModelSpec.from_attr(model)
    except ModelError as e:
        raise CodegenError(str(e)) from None
    text = (
        f"rt.Model({_model_path(spec.model, source)!r}, {spec.config!r}, batch={spec.batch!r}, "
        f"overrides={tuple(spec.overrides)!r}, seed={spec.seed})"
    )
    return text, f"{spec.model} ({spec.config} config, seed {spec.seed})"


def _measures(module: ModuleOp, a: Analysis) -> dict[str, float]:
    """What the program's progress lines compare with: the model's training FLOPs per iteration,
    the machine's peak FLOP/s and the cost model's iteration time for this plan."""
    try:
        estimate = estimate_module(module, a.machine)
    except (ValueError, KeyError, NotImplementedError):
        return {}  # a plan the cost model cannot price still runs, without MFU
    peak = a.machine.total_peak_flops("f32", True)
    return {"flops": estimate.model_flops, "peak_flops": peak, "predicted_s": estimate.iteration_s}


def _table(name: str, entries: dict[str, str]) -> list[str]:
    if not entries:
        return [f"    {name}={{}},"]
    return [f"    {name}={{", *(f'        "{k}": {v},' for k, v in entries.items()), "    },"]


def _integer(t: TensorType) -> bool:
    return isinstance(t.element_type, IntegerType)


def emit_program(module: ModuleOp, machine: str | None = None, source: str = "plan.mlir") -> str:
    """The training program of a plan; raises CodegenError (with the op at fault) if the plan
    cannot run."""
    a = analyze(module, machine)
    accumulation = graph_plan_of(graph_function(module)).accumulation
    if is_pipelined(module):
        return emit_pipelined(module, a, machine, source, _measures(module, a), accumulation)
    forward, writer, head = _forward(module, a, machine, accumulation)
    summary = (
        f"Data movement per step: {writer.collectives} collective(s) in forward (their duals in backward), "
        f"{writer.transfers} implicit transfer(s)"
        + (f", per micro-batch of the {accumulation} accumulated." if accumulation > 1 else ".")
    )
    about = [
        "Every rank runs this file (SPMD). `forward` computes this rank's pieces: the tasks of each op that",
        "run on this rank apply the op's kernel to local pieces; `ctx.p2p` moves a piece a task reads from",
        "another rank; `ctx.parallel` runs a parallel op's collectives (backward: their duals, exact).",
    ]
    if accumulation > 1:
        about += [
            f"Gradient accumulation: `forward` computes one micro-batch; a step runs {accumulation} of them,",
            "micro-batch m reading chunk m of this rank's piece of every input, sums their gradients (the",
            "loss is their mean), then syncs the gradients once and updates once.",
        ]
    return "\n".join(
        [
            *program_head(a, head, source, summary, about, _measures(module, a), accumulation),
            *forward,
            "",
            "",
            'if __name__ == "__main__":',
            "    sys.exit(rt.main(PLAN, forward, build=build_reference))",
            "",
        ]
    )


def _forward(
    module: ModuleOp, a: Analysis, machine: str | None, accumulation: int
) -> tuple[list[str], Writer, Writer]:
    """The forward's lines, the writer that wrote them and the writer of PLAN's tables: one for
    a plan that runs its batch whole; with gradient accumulation the forward is the graph of one
    micro-batch's (`microbatch_module`) and PLAN holds the whole batch's weights and inputs (what
    the data and the reference read), the micro-batch's constants (`Writer.plan_sources`) and the
    forward's tables, process groups and recomputed regions."""
    writer = Writer(a)
    if accumulation == 1:
        return writer.forward(), writer, writer
    micro = microbatch_module(module, accumulation)
    origin = dict(zip(graph_ops(graph_function(micro)), graph_ops(graph_function(module)), strict=True))
    try:
        code = Writer(analyze(micro, machine))
        lines = code.forward()
    except CodegenError as e:
        at = origin.get(e.op, e.op) if isinstance(e.op, UnitycOp) else e.op  # the op of the plan itself
        raise CodegenError(str(e), at) from None
    writer.plan_sources(code.a)
    writer.tables = code.tables
    writer.groups.update(code.groups)
    writer.regions = code.regions
    return lines, code, writer


def program_head(
    a: Analysis,
    writer: Writer,
    source: str,
    summary: str,
    about: list[str],
    measures: dict[str, float] | None = None,
    accumulation: int = 1,
) -> list[str]:
    """The program's docstring (`summary`, how to run it, then `about`), imports and `PLAN` (the
    tables `writer` collected while writing the code; `measures`: what progress lines compare
    with; `accumulation`: the plan's gradient accumulation steps)."""
    model, model_summary = _model_text(a.model, source)
    inputs = [v for op in a.ops if op.name == "pcg.input" for v in op.results]
    samples = a.value(inputs[0]).type.shape[0] if inputs and a.value(inputs[0]).type.rank else 1
    first = a.value(inputs[0]).type if inputs else None
    tokens = math.prod(first.shape) if first is not None and first.rank >= 2 and _integer(first) else 0
    outputs = ", ".join(layout_text(a.value(v)) for v in a.outputs)
    groups = tuple(writer.groups)
    return [
        '"""Training program for the plan '
        + f"{source}, generated by unityc (`unityc-opt {source} -t torch`).",
        "",
        f"Model: {model_summary}. Machine: {a.machine_name}, {a.world} rank(s).",
        summary,
        "",
        f"Run: torchrun --standalone --nproc_per_node {a.world} {{this file}} [--steps N]",
        "     [--optimizer NAME] [--optimizer-args ARGS] [--lr LR] [--clip-grad-norm MAX] [--lr-schedule S]",
        "     [--data MODULE:FUNCTION] [--save DIR] [--resume DIR] [--log-every N] [--profile DIR]",
        "     [--check] [--json FILE] [--timeout S]   (--help lists them all)",
        "",
        *about,
        '"""',
        "",
        "import sys",
        "",
        "import torch",
        "import torch.nn.functional as F",
        *(["from torch.utils.checkpoint import checkpoint"] if writer.regions else []),
        "",
        "import unityc.runtime as rt",
        "from unityc.runtime import Collective, Constant, Layout",
        "from unityc.models.spec import build_reference",
        "",
        *(f"{name} = {text!r}  # a constant's bytes, zlib + base64" for text, name in writer.packed.items()),
        *([""] if writer.packed else []),
        "PLAN = rt.Plan(",
        f"    source={source!r},",
        f"    machine={a.machine_name!r},",
        f"    world_size={a.world},",
        f"    model={model},",
        f"    samples={samples},",
        f"    groups={groups!r},",
        *_table("weights", writer.weights),
        *_table("inputs", writer.inputs),
        f"    outputs=({outputs},),",
        *_table("constants", writer.constants),
        f"    tables={writer.tables!r},",
        *([f"    zero={zero_stages(a)!r},"] if zero_stages(a) else []),
        *([f"    frozen=frozenset({frozen_weights(a)!r}),"] if frozen_weights(a) else []),
        *([f"    bf16_pieces=frozenset({bf16_pieces(a)!r}),"] if bf16_pieces(a) else []),
        f"    memory={predicted_memory(a)!r},",
        *(f"    {k}={v!r}," for k, v in (measures or {}).items()),
        f"    tokens={tokens},",
        *([f"    bounds={index_bounds(a)!r},"] if index_bounds(a) else []),
        *([f"    precision={a.precision!r},"] if a.precision != FP32 else []),
        *([f"    accumulation={accumulation},"] if accumulation > 1 else []),
        ")",
        "",
        "",
    ]
