"""Your own training loop, parallelized by unityc: Hugging Face GPT-2 on a text file.

    torchrun --standalone --nproc_per_node 2 examples/own_loop.py --plan megatron --steps 60
    torchrun --standalone --nproc_per_node 2 examples/own_loop.py --plan search --csv log.csv
    torchrun --standalone --nproc_per_node 2 examples/own_loop.py \\
        --plans data-parallel,megatron,zero3,1f1b --steps 3 --optimizer sgd --check

The loop is plain PyTorch: a `DataLoader` over windows of `own_loop.txt`, AdamW (or SGD), a
warm-up + cosine `LambdaLR`, gradient clipping, evaluation on held-out text every `--eval-every`
steps, a CSV log. unityc enters in two lines: `unityc.plan(model, example_batch, ...)` finds the
plan (the same on every rank: the search and the baselines are deterministic), and
`unityc.distribute(model, plan)` gives the module the loop trains. Every rank loads the same
batches (the same seeded shuffle) and passes the whole batch; each takes the rows its plan holds.

`--check` also runs the same loop on the plain, single-device model (on every rank, from the same
weights and batches) and compares each step's loss and, at the end, every weight with the plan's
(relative error, `--tolerance`, 1e-4 as a generated program's `--check`); and it trains the plan's
generated program (what `unityc-opt plan.mlir -t torch` writes, its own loop: `--data`, the
optimizer, schedule and clipping by its flags) on the same batches, whose losses and weights must
equal the API's to the same tolerance. It exits 1 naming the first mismatch. Use `--optimizer
sgd` with it: Adam divides each element by its own gradient, so float noise on gradients that
are zero in exact arithmetic moves weights by a visible part of the learning rate
(`docs/running.md`).
"""

from __future__ import annotations

import argparse
import copy
import csv
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

import unityc

TEXT = Path(__file__).with_name("own_loop.txt")
VOCAB = 128  # ASCII
PLANS: dict[str, tuple[str, dict[str, Any]]] = {
    "data-parallel": ("data-parallel", {}),
    "megatron": ("megatron", {}),
    "zero3": ("zero", {"stage": 3}),
    "1f1b": ("gpipe", {"stages": 2, "microbatches": 2, "schedule": "1f1b"}),
    "search": ("search", {"budget": 8, "baselines": "none"}),
}
"""--plan NAME -> (unityc.plan's strategy, its options)."""


class LanguageModel(nn.Module):
    """GPT-2 whose forward returns the training loss first (next-character cross-entropy)."""

    def __init__(self, hidden: int, layers: int, heads: int, seq: int, dropout: float) -> None:
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(
            vocab_size=VOCAB, n_positions=seq, n_embd=hidden, n_layer=layers, n_head=heads,
            resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, use_cache=False,
            tie_word_embeddings=False,
        )  # fmt: skip
        self.gpt = GPT2LMHeadModel(config)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.gpt(input_ids=input_ids).logits
        loss = nn.functional.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), input_ids[:, 1:].reshape(-1))
        return loss, logits


class Windows(Dataset):
    """Every window of `seq` characters of `text` (as ASCII codes), one sample each."""

    def __init__(self, text: str, seq: int) -> None:
        self.codes = torch.tensor([min(ord(c), VOCAB - 1) for c in text], dtype=torch.int64)
        self.seq = seq

    def __len__(self) -> int:
        return len(self.codes) - self.seq

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.codes[i : i + self.seq]}


def loaders(batch: int, seq: int, seed: int) -> tuple[DataLoader, DataLoader]:
    """Training windows shuffled by a seeded generator (the same order on every rank), and the
    last tenth of the text for evaluation."""
    text = TEXT.read_text()
    cut = len(text) * 9 // 10
    shuffled = torch.Generator().manual_seed(seed)
    train = DataLoader(Windows(text[:cut], seq), batch, shuffle=True, drop_last=True, generator=shuffled)
    held_out = DataLoader(Windows(text[cut:], seq), batch, drop_last=True)
    return train, held_out


def forever(loader: DataLoader) -> Iterator[dict[str, torch.Tensor]]:
    while True:
        yield from loader


def schedule(warmup: int, steps: int) -> Callable[[int], float]:
    """Linear warm-up, then cosine decay to a tenth."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    return factor


def train(model: nn.Module, args: argparse.Namespace, name: str, log: Any) -> list[float]:
    """The user's loop: the same code for the plain module and the distributed one (whose
    `step` runs forward and backward, a pipeline's schedule included, and whose
    `clip_grad_norm_` takes the norm across shards)."""
    distributed = isinstance(model, unityc.DistributedModel)
    params = list(model.parameters())
    if args.optimizer == "sgd":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.01)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule(args.warmup, args.steps))
    train_data, held_out = loaders(args.batch, args.seq, args.seed)
    batches = forever(train_data)
    losses = []
    for step in range(1, args.steps + 1):
        batch = next(batches)
        if distributed:
            loss = model.step(**batch)[0]
            norm = model.clip_grad_norm_(args.clip)
        else:
            loss = model(**batch)[0]
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(params, args.clip)
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
        evaluated = ""
        if step % args.eval_every == 0 or step == args.steps:
            evaluated = f"{evaluate(model, held_out):.4f}"
        if log is not None:
            log.writerow([name, step, f"{float(loss):.6f}", f"{lr:.3g}", f"{float(norm):.4f}", evaluated])
        if rank() == 0 and (evaluated or step == 1):
            print(
                f"{name}: step {step}: loss {float(loss):.4f}, lr {lr:.2e}, held-out {evaluated or '-'}",
                flush=True,
            )
    return losses


@torch.no_grad()
def evaluate(model: nn.Module, held_out: DataLoader, batches: int = 2) -> float:
    model.eval()
    total = [float(model(**batch)[0]) for batch, _ in zip(held_out, range(batches), strict=False)]
    model.train()
    return sum(total) / len(total)


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def generated_program(
    plan: unityc.Plan, model: nn.Module, args: argparse.Namespace
) -> tuple[list[float], Any]:
    """The plan's generated program trained on the same batches with the same optimizer,
    schedule and clipping as `train` (its flags), in this process (one rank of it): its losses
    and its `Trainer` (whose `model.state_dict()` holds the trained weights)."""
    from unityc.runtime.flags import parse_args
    from unityc.runtime.trainer import Trainer
    from unityc.tools.api import program_of

    program = program_of(plan)
    optimizer = ["--optimizer", "sgd", "--optimizer-args", "momentum=0.9"]
    if args.optimizer == "adamw":
        optimizer = ["--optimizer", "adamw", "--optimizer-args", "weight_decay=0.01"]
    flags = parse_args(program.PLAN, [
        "--steps", str(args.steps), *optimizer, "--lr", str(args.lr), "--clip-grad-norm", str(args.clip),
        "--lr-schedule", "cosine", "--lr-warmup-steps", str(args.warmup), "--lr-min-ratio", "0.1",
        "--log-every", str(10**9),
    ])  # fmt: skip
    batches = forever(loaders(args.batch, args.seq, args.seed)[0])  # the loop's batches, in its order
    flags.data_function = lambda: batches
    example = next(iter(loaders(args.batch, args.seq, args.seed)[0]))
    forward = getattr(program, "PROGRAM", None) or program.forward  # a pipelined program's stages
    build = lambda _: (model, example)  # noqa: E731
    trainer = Trainer(program.PLAN, forward, flags, "gloo", torch.device("cpu"), None, build)
    losses: list[float] = []
    trainer.on_step = lambda _: losses.append(float(trainer.model.loss_of(trainer.outputs[0])))
    trainer.run()
    return losses, trainer


def compare(name: str, losses: list[float], expected: list[float], model: Any, reference: Any,
            tolerance: float, other: str = "single-device") -> str | None:  # fmt: skip
    """The first step or weight where the plan's run differs from the `other` one."""
    from unityc.runtime.check import relative_error

    for step, (got, want) in enumerate(zip(losses, expected, strict=True), 1):
        if abs(got - want) > tolerance * abs(want):
            return f"{name}: step {step}: loss {got:.6f}, {other} {want:.6f}"
    weights = model.state_dict()
    worst = (0.0, "")
    for key, want in reference.state_dict().items():
        error = relative_error(weights[key].double(), want.double())
        worst = max(worst, (error, key))
        if error > tolerance:
            steps = len(losses)
            return f"{name}: weight '{key}' after {steps} steps: relative error {error:.2e} > {tolerance:.0e}"
    if rank() == 0:
        print(f"{name}: equal to the {other} loop: {len(losses)} losses, {len(weights)} weights "
              f"(worst {worst[0]:.1e}, '{worst[1]}')", flush=True)  # fmt: skip
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--plan", default="megatron", choices=PLANS, help="the plan (default megatron)")
    parser.add_argument("--plans", help="several plans one after another, comma-separated")
    parser.add_argument("--machine", default="cpu:2", help="the machine to plan for (default cpu:2)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--optimizer", default="adamw", choices=("adamw", "sgd"))
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--eval-every", type=int, default=20)
    parser.add_argument("--csv", help="log every step here (rank 0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="compare with the single-device loop")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)
    names = args.plans.split(",") if args.plans else [args.plan]
    unknown = [n for n in names if n not in PLANS]
    if unknown:
        parser.error(f"unknown plan '{unknown[0]}' (known: {', '.join(PLANS)})")
    dist.init_process_group("gloo")
    out = open(args.csv, "w", newline="") if args.csv and rank() == 0 else None  # noqa: SIM115
    log = csv.writer(out) if out is not None else None
    if log is not None:
        log.writerow(["plan", "step", "loss", "lr", "grad_norm", "held_out_loss"])
    failure = None
    try:
        for name in names:
            torch.manual_seed(args.seed)
            model = LanguageModel(args.hidden, args.layers, args.heads, args.seq, args.dropout)
            reference = copy.deepcopy(model)
            twin = copy.deepcopy(model)  # what the generated program starts from
            example = next(iter(loaders(args.batch, args.seq, args.seed)[0]))
            strategy, options = PLANS[name]
            plan = unityc.plan(model, example, machine=args.machine, strategy=strategy, **options)
            if rank() == 0:
                print(f"{name}: {plan!r}", flush=True)
            distributed = unityc.distribute(model, plan)
            losses = train(distributed, args, name, log)
            if args.check:
                expected = train(reference, args, f"{name} (single device)", None)
                failure = failure or compare(name, losses, expected, distributed, reference, args.tolerance)
                programs, trainer = generated_program(plan, twin, args)
                failure = failure or compare(
                    name, losses, programs, distributed, trainer.model, args.tolerance, "generated program's"
                )
    except unityc.PlanError as e:
        print(f"rank {rank()}: error: {e}", file=sys.stderr)
        return 1
    finally:
        if out is not None:
            out.close()
    if failure:
        if rank() == 0:
            print(f"check failed: {failure}", file=sys.stderr)
        return 1
    if args.check and rank() == 0:
        print(f"check passed: {len(names)} plan(s) within relative error {args.tolerance:.0e}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
