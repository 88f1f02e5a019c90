"""Keeps freed host memory in the process between training steps (glibc's malloc).

A step allocates and frees the same large tensors every time (activations, gradients: from
hundreds of KiB to MiBs). glibc serves blocks above its mmap threshold with fresh `mmap`s, and
returns free memory at the top of its heap to the system once it exceeds the trim threshold;
both thresholds adapt to the sizes freed, so in practice every other step gives memory back
and the next one page-faults it in again (a few hundred to two thousand minor faults a step
for the benchmark models on a CPU core, 10-25 % of a step's CPU time in the steps they hit).
Fixing both thresholds keeps that memory mapped: blocks up to `MMAP_THRESHOLD` come from the
heap (glibc's largest allowed value) and the heap is trimmed only when `TRIM_THRESHOLD` bytes
are free at its top. The memory held is the step's own peak, as a GPU caching allocator holds.

Nothing is changed when the user already tunes malloc (`MALLOC_MMAP_THRESHOLD_`,
`MALLOC_TRIM_THRESHOLD_` or `GLIBC_TUNABLES` in the environment), or where the C library has
no `mallopt` (not glibc).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 2**20
"""glibc's upper limit for the mmap threshold on 64-bit systems (HEAP_MAX_SIZE / 2)."""
TRIM_THRESHOLD = 2**30
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory() -> bool:
    """Fixes glibc's mmap and trim thresholds (see the module docstring); True if it did."""
    if any(name in os.environ for name in USER_SETTINGS):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
