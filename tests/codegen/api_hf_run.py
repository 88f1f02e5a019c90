"""Worker of `test_api.py`'s Hugging Face case, on 2 gloo ranks: `unityc.distribute` drives
HF Llama (a Megatron plan) and HF BERT (ZeRO-3) with AdamW, a cosine schedule and clipping for
two steps beside the plain module trained by the same loop (the losses must agree; dropout off on
both sides, as under a program's --check), then saves a
checkpoint (`model.save`, DCP) and the plan into DIR for the generated program to resume.

    torchrun --nproc_per_node 2 api_hf_run.py DIR
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import unityc
from unityc.models.spec import ModelSpec, load_model

MODELS = {"llama": ("hf:llama", "megatron", {}), "bert": ("hf:bert", "zero", {"stage": 3})}
STEPS = 2


def loss_of(out: object) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out  # type: ignore[return-value]


def main(directory: Path) -> int:
    dist.init_process_group("gloo")
    for name, (model, strategy, options) in MODELS.items():
        loaded = load_model(ModelSpec(model))  # the seeded weights a generated program rebuilds
        plan = unityc.plan(model, None, machine="cpu:2", strategy=strategy, **options)
        # dropout off on both sides (BERT's), as under --check: the plan's masks are its own hash
        reference = copy.deepcopy(loaded.module).eval()  # neither model has batch statistics
        distributed = unityc.distribute(loaded.module, plan, check=True)
        runs = []
        for m in (distributed, reference):
            optimizer = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
            runs.append((m, optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 2 * STEPS)))
        for step in range(STEPS):
            losses = []
            for m, optimizer, scheduler in runs:
                loss = loss_of(m(**loaded.inputs))
                loss.backward()
                if m is distributed:
                    distributed.clip_grad_norm_(1.0)
                else:
                    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                losses.append(float(loss))
            got, want = losses
            if abs(got - want) > 1e-4 * abs(want):
                raise SystemExit(f"{name}: step {step + 1}: loss {got:.6f}, the plain module's {want:.6f}")
            if dist.get_rank() == 0:
                print(f"{name}: step {step + 1}: loss {got:.6f} (plain module {want:.6f})", flush=True)
        distributed.save(str(directory / name / f"step-{STEPS}"), runs[0][1], step=STEPS)
        state = distributed.state_dict()  # a collective
        if dist.get_rank() == 0:
            torch.save(state, directory / f"{name}-state.pt")
            plan.save(directory / f"{name}.mlir")
            print(f"{name}: saved after {STEPS} steps", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
