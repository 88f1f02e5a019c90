"""The code generator's op table is complete: every op of the pcg dialect (taken from the
dialect, not listed here) has a `KERNELS` row keyed by its class, or is declared in
`WRITTEN_BY_EMITTER` with the reason it needs none. Parallel ops are collectives, written by
`codegen/collectives.py` from the plan's communication, not by a kernel table."""

from __future__ import annotations

from unityc.codegen.kernels import KERNELS, WRITTEN_BY_EMITTER
from unityc.dialects.pcg import PCG


def test_every_pcg_op_has_a_kernel_or_a_reason() -> None:
    ops = set(PCG.operations)
    missing = sorted(op.name for op in ops - set(KERNELS) - set(WRITTEN_BY_EMITTER))
    assert not missing, f"pcg ops without a codegen kernel or a declared reason: {missing}"
    assert not set(KERNELS) & set(WRITTEN_BY_EMITTER), "an op is both a kernel and written by the emitter"
    assert set(KERNELS) | set(WRITTEN_BY_EMITTER) <= ops, "a row for an op the dialect does not have"
    assert all(reason.strip() for reason in WRITTEN_BY_EMITTER.values())
