"""What the generated program saves for backward and how long its step takes, against Hugging
Face's own model with SDPA attention (issue 38).

For the Hugging Face Llama of issue 38 (hidden 512, 2 layers, 8 heads / 4 KV heads, ffn 1376,
vocab 1024) and GPT-2 and BERT of the same sizes (8 heads, no grouped-query heads), at seq x
batch 512 x 2 and 2048 x 1, fp32 and bf16-mixed, with and without a padding attention mask, one
training step of

  (a) the generated program of a serial plan (import -> the one-device plan -> codegen), run in
      this process as one gloo rank (`runtime.trainer.Trainer`, its forward under the plan's
      autocast, dropout on: the plan's hashed masks);
  (b) HF's model with `attn_implementation="sdpa"` (under `torch.autocast` for bf16-mixed, in
      training mode: dropout on), on the same inputs,

counts the bytes autograd saves for backward (`runtime.saved.SavedBytes`: unique storages,
parameters and their views excluded; autocast's bf16 weight copies counted, on both sides) and
prints them with the ratio and the estimate's activations (`estimate`'s device row). Then step
time (forward, backward, SGD update) on one CPU thread, the two alternating, median of --rounds,
with the load average at the row's end.

    python benchmarks/program_memory.py [--models llama,gpt2,bert] [--rows 512x2,2048x1]
        [--rounds 5] [--dropout 0.1]

`--dropout` sets GPT-2's and BERT's dropout probabilities (HF's default 0.1; Llama has none):
with attention dropout the program runs its written-out attention (its own hashed mask), and on
CPU so does torch's SDPA (`dropout_p > 0` falls back to the math kernel), so both keep Sq x Sk
tensors. Writes nothing; `program_memory_results.md` records a run.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

SIZES = (("hidden", "512"), ("layers", "2"), ("heads", "8"), ("ffn", "1376"), ("vocab", "1024"))
MODELS = {"llama": (*SIZES, ("kv_heads", "4")), "gpt2": SIZES, "bert": SIZES}
"""The models of issue 38's first Done-when row and their sizes (`hf:` overrides)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="of " + ", ".join(MODELS))
    parser.add_argument("--dropout", default="0.1", help="GPT-2's and BERT's dropout (default 0.1, HF's)")
    parser.add_argument("--rows", default="512x2,2048x1", help="seq x batch rows (default 512x2,2048x1)")
    parser.add_argument("--precisions", default="fp32,bf16-mixed")
    parser.add_argument("--masks", default="no,yes", help="with a padding attention_mask: no, yes or both")
    parser.add_argument("--rounds", type=int, default=5, help="timed steps of each, alternating (default 5)")
    return parser.parse_args(argv)


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _program(
    model: str, seq: int, batch: int, precision: str, mask: bool, dropout: str, directory: Path
) -> tuple[Any, float]:
    """The generated program's module of the serial plan, and the estimate's activations."""
    from xdsl.dialects.builtin import StringAttr

    from unityc.codegen import emit_program
    from unityc.dialects.container import graph_function
    from unityc.dialects.precision import precision_attrs
    from unityc.frontend import ModelSpec, import_model
    from unityc.graph import from_module, to_module
    from unityc.machine.presets import preset
    from unityc.search.baselines import zero
    from unityc.search.unity import UnityOptions

    overrides = (*MODELS[model], ("seq", str(seq)), ("mask", str(mask)), ("dropout", dropout))
    module = import_model(ModelSpec(f"hf:{model}", "small", batch, overrides=overrides))
    graph_function(module).attributes.update(precision_attrs(precision))
    planned = zero(from_module(module), preset("cpu:1"), UnityOptions(optimizer="sgd"), None, 0, False)
    planned.graph.module_attrs["unityc.machine"] = StringAttr("cpu:1")
    path = directory / f"program_{model}_{seq}x{batch}_{precision}_{int(mask)}.py"
    path.write_text(emit_program(to_module(planned.graph), source=path.stem))
    return _load(path), planned.estimate.devices[0].memory.activations


def _trainer(program: Any) -> Any:
    from unityc.runtime.flags import parse_args as program_args
    from unityc.runtime.trainer import Trainer

    args = program_args(program.PLAN, ["--steps", "1", "--optimizer", "sgd"])
    args.data_function = None
    device = torch.device("cpu")
    return Trainer(program.PLAN, program.forward, args, "gloo", device, None, program.build_reference)


def _program_saved(trainer: Any) -> int:
    """Bytes the program's forward saves, one step (what it holds between steps excluded:
    weights, their views and bf16 pieces): the trainer's own counter (`--saved-bytes`'s,
    `DistributedModel.count_saved`)."""
    from unityc.runtime.saved import SavedBytes

    counter = SavedBytes.of(trainer.persistent)
    trainer.model.count_saved(counter)
    trainer.step(0)
    trainer.model.count_saved(None)
    return counter.forward_bytes


def _hf(program: Any, precision: str) -> tuple[Callable[[], int], Callable[[], None]]:
    """HF's model with sdpa attention: (its saved bytes in one step, one training step)."""
    from unityc.runtime.saved import SavedBytes
    from unityc.runtime.sources import load_reference

    loaded = load_reference(program.PLAN.model, program.build_reference)
    wrapped = loaded.module  # `_LossFirst`: the HF model, its loss first
    wrapped.model.set_attn_implementation("sdpa")
    assert wrapped.model.config._attn_implementation == "sdpa"
    inputs = dict(loaded.inputs)
    params = list(wrapped.parameters())
    optimizer = torch.optim.SGD(params, lr=1e-3)
    cast = precision == "bf16-mixed"

    def saved() -> int:
        with SavedBytes.of(params) as counter, torch.autocast("cpu", torch.bfloat16, enabled=cast):
            loss = wrapped(**inputs)[0]
        loss.backward()
        optimizer.zero_grad(set_to_none=True)
        return counter.bytes

    def step() -> None:
        with torch.autocast("cpu", torch.bfloat16, enabled=cast):
            loss = wrapped(**inputs)[0]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return saved, step


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0", WORLD_SIZE="1")
    os.environ.update(LOCAL_RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    rows = [tuple(int(n) for n in row.split("x")) for row in args.rows.split(",")]
    masks = {"no": [False], "yes": [True], "no,yes": [False, True], "both": [False, True]}[args.masks]
    print(f"torch {torch.__version__}, 1 thread, load {os.getloadavg()[0]:.2f}; MB = 1e6 bytes")
    print(
        "| model, seq x batch, precision, padding mask | program | HF sdpa | program / HF"
        " | estimate's activations | program step | HF step | time ratio | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    cases = [
        (model, seq, batch, precision, mask)
        for model in args.models.split(",")
        for seq, batch in rows
        for precision in args.precisions.split(",")
        for mask in masks
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for model, seq, batch, precision, mask in cases:
            program, estimate = _program(model, seq, batch, precision, mask, args.dropout, Path(tmp))
            trainer = _trainer(program)
            ours = _program_saved(trainer)
            hf_saved, hf_step = _hf(program, precision)
            theirs = hf_saved()
            times: dict[str, list[float]] = {"program": [], "hf": []}
            steps = {"program": lambda trainer=trainer: trainer.step(0), "hf": hf_step}
            for _ in range(args.rounds):
                for name, run in steps.items():
                    started = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - started)
            ms = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            under = (estimate - ours) / ours * 100
            cells = [
                f"{model}, {seq} x {batch}, {precision}, {'yes' if mask else 'no'}",
                f"{ours / 1e6:.1f} MB",
                f"{theirs / 1e6:.1f} MB",
                f"{ours / theirs:.2f}x",
                f"{estimate / 1e6:.1f} MB ({under:+.1f} %)",
                f"{ms['program']:.0f} ms",
                f"{ms['hf']:.0f} ms",
                f"{ms['program'] / ms['hf']:.2f}x",
                f"{os.getloadavg()[0]:.1f}",
            ]
            print("| " + " | ".join(cells) + " |", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
