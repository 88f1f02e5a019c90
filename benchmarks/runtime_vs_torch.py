"""Generated programs against torch's own parts running the same plan, side by side.

    python benchmarks/runtime_vs_torch.py [--model llama|bert] [--nproc 2] [--steps 5]
                                          [--rounds 5] [--pairs dp,zero1,zero2,zero3,recompute]

For a Hugging Face model (`llama`: LlamaForCausalLM, hidden 256, 4 layers, 8 heads / 4 KV
heads, ffn 512, vocab 1024; `bert`: BertForMaskedLM, hidden 256, 4 layers, 8 heads, ffn 1024,
vocab 1024; batch 16 x 64 tokens, SGD, fp32) builds the plans of the `zero{stage recompute}`
baseline on cpu:N, emits each with `-t torch`, and runs ONE torchrun in which every rank
alternates blocks of `--steps` steps of each generated program and of its torch counterpart on
the plain module, `--rounds` times after warm-up, so that both see the same machine state:

| pair | unityc plan | torch |
|---|---|---|
| dp | data-parallel (zero stage 0) | `DistributedDataParallel` |
| zero1 | ZeRO-1 | DDP + `ZeroRedundancyOptimizer` |
| zero2 | ZeRO-2 | FSDP2 `fully_shard` per layer + root, `reshard_after_forward=False` |
| zero3 | ZeRO-3 | FSDP2 `fully_shard` per layer + root, `reshard_after_forward=True` |
| recompute | data-parallel, every op recomputed | DDP, `torch.utils.checkpoint` per layer |
| gpipe, 1f1b | 2 stages, 4 micro-batches | the LM split by hand, `ScheduleGPipe` / `Schedule1F1B` |

(The pipelines split the model by hand at half its layers, stage r on rank r: Llama's decoder
layers, or BERT's embeddings and encoder layers then the rest of the encoder and the MLM head.)

Prints the median step time of each (slowest rank per step), the cost model's estimate of the
plan, and the ratio unityc / torch (the target is at most 1.05); then the median CPU time of a
step summed over the ranks (every thread of each process: gloo's included) and its ratio, which
other load on the machine disturbs less than the wall time. The machine load (1-minute
average) before and after is printed too: on a shared machine the ratios matter, not the times.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent

MODELS = {
    "llama": (
        "hf:llama",
        (
            ("hidden", "256"),
            ("layers", "4"),
            ("heads", "8"),
            ("kv_heads", "4"),
            ("ffn", "512"),
            ("vocab", "1024"),
            ("seq", "64"),
        ),
    ),
    "bert": (
        "hf:bert",
        (
            ("hidden", "256"),
            ("layers", "4"),
            ("heads", "8"),
            ("ffn", "1024"),
            ("vocab", "1024"),
            ("seq", "64"),
        ),
    ),
}
# pair -> (ZeRO stage, recompute every op)
PAIRS = {
    "dp": (0, False),
    "zero1": (1, False),
    "zero2": (2, False),
    "zero3": (3, False),
    "recompute": (0, True),
}
SCHEDULES = ("gpipe", "1f1b")  # two stages, MICROBATCHES micro-batches
MICROBATCHES = 4
TORCH_NAMES = {
    "dp": "DDP",
    "zero1": "ZeroRedundancyOptimizer",
    "zero2": "FSDP2 (no reshard)",
    "zero3": "FSDP2",
    "recompute": "DDP + checkpoint",
    "gpipe": "ScheduleGPipe by hand",
    "1f1b": "Schedule1F1B by hand",
}
LR = 0.001


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="llama", choices=sorted(MODELS), help="model (default llama)")
    parser.add_argument("--nproc", type=int, default=2, help="processes (default 2)")
    parser.add_argument("--batch", type=int, default=16, help="global batch (default 16)")
    parser.add_argument("--steps", type=int, default=5, help="steps per timed block (default 5)")
    parser.add_argument("--rounds", type=int, default=5, help="blocks of each, alternating (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps of each (default 2)")
    parser.add_argument("--pairs", default=",".join(PAIRS), help=f"pairs to run (default {','.join(PAIRS)})")
    parser.add_argument("--worker", metavar="MANIFEST", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    if args.worker:
        return worker(args)
    from xdsl.dialects.builtin import StringAttr

    from unityc.codegen import emit_program
    from unityc.cost.estimate import estimate_module
    from unityc.dialects.source import make_context, parse_source
    from unityc.frontend import ModelSpec, import_model
    from unityc.graph import from_module, to_module
    from unityc.machine import load_machine
    from unityc.machine.presets import preset
    from unityc.passes.gpipe import GpipePass
    from unityc.search.baselines import zero
    from unityc.search.unity import UnityOptions

    pairs = [p for p in args.pairs.split(",") if p]
    known = (*PAIRS, *SCHEDULES)
    unknown = [p for p in pairs if p not in known]
    if unknown:
        print(f"error: unknown pair(s) {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    name, overrides = MODELS[args.model]
    machine = f"cpu:{args.nproc}"
    print(f"importing {name} {dict(overrides)} batch {args.batch} ...", flush=True)
    spec = ModelSpec(name, "small", batch=args.batch, overrides=overrides)
    imported = import_model(spec)
    graph = from_module(imported)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = []
        for pair in pairs:
            if pair in SCHEDULES:
                module = parse_source(make_context(), str(imported), "model.mlir")
                gpipe = GpipePass(machine=machine, stages=2, microbatches=MICROBATCHES, schedule=pair)
                gpipe.apply(make_context(), module)
                estimate = estimate_module(module, load_machine(machine)).iteration_s
            else:
                stage, recompute = PAIRS[pair]
                planned = zero(graph, preset(machine), UnityOptions(optimizer="sgd"), None, stage, recompute)
                planned.graph.module_attrs["unityc.machine"] = StringAttr(machine)
                module, estimate = to_module(planned.graph), planned.estimate.iteration_s
            program = Path(tmp) / f"{pair}.py"
            program.write_text(emit_program(module, source=f"{args.model}-{pair}"))
            manifest.append({"pair": pair, "program": str(program), "estimate": estimate})
        (Path(tmp) / "manifest.json").write_text(json.dumps(manifest))
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}",
            __file__, "--worker", str(Path(tmp) / "manifest.json"), "--model", args.model,
            "--steps", str(args.steps), "--rounds", str(args.rounds), "--warmup", str(args.warmup),
        ]  # fmt: skip
        load = os.getloadavg()[0]
        started = time.perf_counter()
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        done = subprocess.run(command, env=env, capture_output=True, text=True)
    print(done.stdout, end="")
    print(f"load average (1 min) {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"{time.perf_counter() - started:.0f} s wall")  # fmt: skip
    if done.returncode:
        print(done.stderr[-4000:], file=sys.stderr)
    return done.returncode


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _layers(module: Any) -> list[Any]:
    """The model's repeated blocks: the longest ModuleList (decoder / encoder layers)."""
    import torch

    lists = [m for m in module.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


def torch_step(pair: str, plan: Any, build: Any, rank: int, world: int, device: Any) -> Callable[[int], None]:
    """One training step of torch's own implementation of the pair's plan on the plain module."""
    import torch
    from torch.distributed._composable.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    from unityc.runtime.sources import load_reference

    loaded = load_reference(plan.model, build)
    module = loaded.module.to(device)
    if pair in SCHEDULES:
        return _pipelined(pair, module, {k: v.to(device) for k, v in loaded.inputs.items()}, rank, device)
    shard = {k: v.chunk(world)[rank].to(device) for k, v in loaded.inputs.items()}
    if pair in ("zero2", "zero3"):
        reshard = pair == "zero3"
        for layer in _layers(module):
            fully_shard(layer, reshard_after_forward=reshard)
        fully_shard(module, reshard_after_forward=reshard)
        model: Any = module
    else:
        if pair == "recompute":
            _checkpointed(module)
        # static_graph: BERT's pooler takes no part in the loss, and checkpointed layers
        # re-enter autograd; DDP's static graph handles both at no per-step cost.
        model = DistributedDataParallel(module, static_graph=True)
    params = list(model.parameters())
    if pair == "zero1":
        optimizer: Any = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=LR)
    else:
        optimizer = torch.optim.SGD(params, lr=LR)

    def step(_: int) -> None:
        loss = model(**shard)[0]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


class _FirstHalf(torch.nn.Module):
    """Stage 0 of a causal LM split by hand: the embedding and the first half of the decoder
    layers; passes the attention mask on to stage 1."""

    def __init__(self, base: Any):
        super().__init__()
        self.base = base

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        return self.base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state, attention_mask


class _SecondHalf(torch.nn.Module):
    """Stage 1: the other decoder layers, the final norm and the LM head (logits)."""

    def __init__(self, base: Any, head: Any):
        super().__init__()
        self.base, self.head = base, head

    def forward(self, hidden: Any, attention_mask: Any) -> Any:
        return self.head(self.base(inputs_embeds=hidden, attention_mask=attention_mask).last_hidden_state)


class _BertFirst(torch.nn.Module):
    """Stage 0 of BERT split by hand: the embeddings and the first encoder layers; passes the
    attention mask on to stage 1."""

    def __init__(self, bert: Any, layers: list[Any]):
        super().__init__()
        self.bert, self.layers = bert, torch.nn.ModuleList(layers)

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        hidden = self.bert.embeddings(input_ids=input_ids)
        return _bert_layers(self.bert, self.layers, hidden, attention_mask), attention_mask


class _BertSecond(torch.nn.Module):
    """Stage 1: the other encoder layers and the MLM head (logits)."""

    def __init__(self, bert: Any, layers: list[Any], head: Any):
        super().__init__()
        self.bert, self.layers, self.head = bert, torch.nn.ModuleList(layers), head

    def forward(self, hidden: Any, attention_mask: Any) -> Any:
        return self.head(_bert_layers(self.bert, self.layers, hidden, attention_mask))


def _bert_layers(bert: Any, layers: Any, hidden: Any, attention_mask: Any) -> Any:
    """Encoder layers over `hidden`, with the attention mask BertModel makes of the 2-D one."""
    mask, _ = bert._create_attention_masks(
        attention_mask=attention_mask,
        encoder_attention_mask=None,
        embedding_output=hidden,
        encoder_hidden_states=None,
        past_key_values=None,
    )
    for layer in layers:
        out = layer(hidden, attention_mask=mask)
        hidden = out[0] if isinstance(out, tuple) else out
    return hidden


def _stage_module(wrapped: Any, rank: int) -> Any:
    """Rank r's half of the model: Llama's decoder layers or BERT's encoder layers halved."""
    model = wrapped.model
    if hasattr(model, "bert"):
        bert, layers = model.bert, list(model.bert.encoder.layer)
        half = len(layers) // 2
        return _BertFirst(bert, layers[:half]) if rank == 0 else _BertSecond(bert, layers[half:], model.cls)
    base, layers = model.model, model.model.layers
    half = len(layers) // 2
    if rank == 0:
        base.layers = torch.nn.ModuleList(layers[:half])
        base.norm = torch.nn.Identity()
        return _FirstHalf(base)
    base.layers = torch.nn.ModuleList(layers[half:])
    base.embed_tokens = None
    return _SecondHalf(base, model.lm_head)


def _pipelined(
    pair: str, wrapped: Any, inputs: dict[str, Any], rank: int, device: Any
) -> Callable[[int], None]:
    """The Hugging Face model split by hand into two stages (rank r runs stage r, `_stage_module`),
    run by torch.distributed.pipelining's schedule of the pair, with the same cross-entropy as
    the plan's model (`_LossFirst`: labels shifted by one for a causal LM)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    causal = wrapped.causal
    module = _stage_module(wrapped, rank).to(device)
    stage = PipelineStage(module, rank, 2, device)

    def loss(logits: Any, labels: Any) -> Any:
        scores, targets = (logits[:, :-1], labels[:, 1:]) if causal else (logits, labels)
        return torch.nn.functional.cross_entropy(scores.reshape(-1, scores.shape[-1]), targets.reshape(-1))

    schedule = (ScheduleGPipe if pair == "gpipe" else Schedule1F1B)(stage, MICROBATCHES, loss_fn=loss)
    optimizer = torch.optim.SGD(module.parameters(), lr=LR)

    def step(_: int) -> None:
        if rank == 0:
            schedule.step(inputs["input_ids"], inputs["attention_mask"])
        else:
            schedule.step(target=inputs["labels"], losses=[])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def _checkpointed(module: Any) -> None:
    """Every layer's forward recomputed in the backward (`torch.utils.checkpoint`)."""
    import torch.utils.checkpoint

    for layer in _layers(module):
        forward = layer.forward

        def wrapped(*a: Any, _forward: Any = forward, **k: Any) -> Any:
            return torch.utils.checkpoint.checkpoint(_forward, *a, use_reentrant=False, **k)

        layer.forward = wrapped


def worker(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    from unityc.runtime.train import Trainer, pick_device
    from unityc.runtime.train import parse_args as program_args

    manifest = json.loads(Path(args.worker).read_text())
    backend, device = pick_device()
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    steps: dict[str, Callable[[int], None]] = {}
    for entry in manifest:
        program = _load(entry["program"])
        forward = getattr(program, "PROGRAM", None) or program.forward  # PROGRAM: a pipelined program
        trainer = getattr(forward, "trainer", Trainer)(
            program.PLAN, forward, program_args(program.PLAN, ["--lr", str(LR)]), backend, device,
            None, program.build_reference,
        )  # fmt: skip

        def ours(i: int, t: Trainer = trainer) -> None:
            t.step(i)
            t.zero.zero_grad()

        steps[f"unityc {entry['pair']}"] = ours
        steps[f"torch {entry['pair']}"] = torch_step(
            entry["pair"], program.PLAN, program.build_reference, rank, world, device
        )

    def block(step: Callable[[int], None], count: int) -> list[tuple[float, float]]:
        times = []
        for i in range(count):
            dist.barrier()
            start, cpu = time.perf_counter(), time.process_time()
            step(i)
            times.append((time.perf_counter() - start, time.process_time() - cpu))
        return times

    for step in steps.values():
        block(step, args.warmup)
    timed: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            timed[name] += block(step, args.steps)
    measured: dict[str, tuple[list[float], list[float]]] = {}
    for name, times in timed.items():
        wall = torch.tensor([t[0] for t in times], dtype=torch.float64)
        cpu = torch.tensor([t[1] for t in times], dtype=torch.float64)
        dist.all_reduce(wall, op=dist.ReduceOp.MAX)  # the slowest rank's step
        dist.all_reduce(cpu, op=dist.ReduceOp.SUM)  # every rank's CPU time (all its threads)
        measured[name] = (wall.tolist(), cpu.tolist())
    if rank == 0:
        report(args, manifest, world, backend, measured)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def report(
    args: argparse.Namespace,
    manifest: list[dict[str, Any]],
    world: int,
    backend: str,
    measured: dict[str, tuple[list[float], list[float]]],
) -> None:
    count = len(next(iter(measured.values()))[0])
    blocks = f"{count} steps each in alternating blocks of {args.steps}"
    print(f"\n{args.model}, {world} ranks ({backend}), {blocks}\n")
    print(
        "| pair | unityc ms | estimate ms | torch | torch ms | unityc / torch "
        "| unityc CPU ms | torch CPU ms | CPU ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for entry in manifest:
        pair = entry["pair"]
        ours, theirs = measured[f"unityc {pair}"], measured[f"torch {pair}"]
        us, them = [statistics.median(t) for t in ours], [statistics.median(t) for t in theirs]
        print(
            f"| {pair} | {us[0] * 1e3:.1f} | {entry['estimate'] * 1e3:.1f} | {TORCH_NAMES[pair]} "
            f"| {them[0] * 1e3:.1f} | {us[0] / them[0]:.3f} | {us[1] * 1e3:.1f} | {them[1] * 1e3:.1f} "
            f"| {us[1] / them[1]:.3f} |"
        )


if __name__ == "__main__":
    sys.exit(main())
