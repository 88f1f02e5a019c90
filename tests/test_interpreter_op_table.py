"""The reference interpreter's op table is complete: every op of the pcg and parallel dialects
(taken from the dialects, not listed here) has an implementation registered on `PcgFunctions`
(pcg compute ops through the class-keyed `KERNELS`, sources and parallel ops by their own)."""

from __future__ import annotations

from unityc.dialects.parallel import PARALLEL
from unityc.dialects.pcg import PCG
from unityc.interpreter.functions import KERNELS, PcgFunctions


def test_every_pcg_and_parallel_op_has_an_implementation() -> None:
    registered = {op_type for op_type, _ in PcgFunctions._impls()}
    missing = sorted(op.name for op in {*PCG.operations, *PARALLEL.operations} - registered)
    assert not missing, f"ops the interpreter cannot run: {missing}"
    assert set(KERNELS) <= set(PCG.operations), "a kernel for an op the pcg dialect does not have"
