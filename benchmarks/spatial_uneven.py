"""What an uneven height split would give the U-Net's paper config where the devices per image
have a factor 3 (run on demand, never in `make test`).

    .venv/bin/python benchmarks/spatial_uneven.py                     # summit:4 (24 GPUs), summit:8 (48)
    .venv/bin/python benchmarks/spatial_uneven.py --machines summit:8

Eight 1024-row images on 48 GPUs need 6 pieces per image; no dim of the network (1024 / 2^k
rows, 64 x 2^k channels, 8 images) divides by 3, so today's equal-shard spatial plans use 32
(`spatial_layout.spatial_layouts`). An uneven split of 1024 rows 3 ways with its boundaries aligned
to the network's down-sampling (16: 352 / 336 / 336 rows, 176 / 168 / 168 after the first pool,
... 22 / 21 / 21 at the bottleneck) runs at the pace of its largest piece, which is exactly a
piece of the equal 3-way split of a 1056-row image (1056 = 3 x 352, and 1056 / 2^k divides by 3
down to the bottleneck's 66). So the equal plan of the same network on 1056 x 1056 images prices
the uneven plan from above: same largest piece, same halo rows, same batch-norm all-reduces, same
gradient all-reduce, plus 3 % more columns (its width is 1056 too).

For each machine: data parallelism on the images' devices, the best unpadded spatial plan (the
most devices an equal split reaches), the 1056-row twin on every device, and the plan that runs
instead: the 1024-row graph padded to 1056 rows (`search/padding.py`: zero rows, row masks,
batch norms over the real count, real rows sliced off before the loss) on every device, all on
the roofline model. The padded graph computes 3 % more rows than the real ones, where the twin
computes 6 % more (rows and columns), but pays for the masks and the masked statistics.
"""

from __future__ import annotations

import argparse
import resource
import time

from unityc.cost.units import format_bytes, format_time
from unityc.frontend import ModelSpec, import_model
from unityc.graph import Graph, from_module
from unityc.machine import load_machine
from unityc.search.padding import pad_images
from unityc.search.plans import Pricing, finish
from unityc.search.spatial_layout import spatial_graph, spatial_layouts
from unityc.search.strategies import data_parallel_graph

IMAGES = 8
ROWS, TWIN_ROWS = 1024, 1056


def unet(side: int) -> Graph:
    spec = ModelSpec("unet", "paper", batch=IMAGES, overrides=(("image", str(side)),))
    return from_module(import_model(spec))


def rows(machine_name: str) -> list[str]:
    machine = load_machine(machine_name)
    n = machine.num_devices
    pricing = Pricing()
    today, twin = unet(ROWS), unet(TWIN_ROWS)
    m, b = next((m, b) for m, b in spatial_layouts(today, n) if b == IMAGES)
    plans = [
        ("data parallel", IMAGES, finish("dp", data_parallel_graph(today, IMAGES), machine, pricing)),
        (
            f"spatial {m // b} x data {b}, {ROWS} rows",
            m,
            finish("spatial", spatial_graph(today, m, b), machine, pricing),
        ),
        (
            f"spatial {n // IMAGES} x data {IMAGES}, {TWIN_ROWS}-row twin",
            n,
            finish("spatial", spatial_graph(twin, n, IMAGES), machine, pricing),
        ),
        (
            f"spatial {n // IMAGES} x data {IMAGES}, {ROWS} rows padded to {TWIN_ROWS}",
            n,
            finish("spatial", spatial_graph(pad_images(today, TWIN_ROWS), n, IMAGES), machine, pricing),
        ),
    ]
    best_today = plans[1][2].estimate.iteration_s
    out = []
    for name, used, plan in plans:
        e = plan.estimate
        out.append(
            f"| {machine_name} | {n} | {name} | {used} | {format_time(e.iteration_s)} "
            f"| {best_today / e.iteration_s:.2f}x | {format_bytes(e.peak_memory)} "
            f"| {'yes' if e.fits else 'no'} |"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default="summit:4,summit:8", help="comma-separated")
    args = parser.parse_args()
    began = time.monotonic()
    print("| machine | GPUs | plan | GPUs used | iteration | vs the unpadded spatial | peak memory | fits |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.machines.split(","):
        for line in rows(name):
            print(line, flush=True)
    cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime
    print(f"\n{time.monotonic() - began:.0f} s wall, {cpu:.0f} s CPU")


if __name__ == "__main__":
    main()
