"""Every op of the dialects has a row in the interpreter's and the cost model's op tables (issue 28
item 5; the importer's and codegen's tables have their own tests: tests/structure/
test_importer_ops.py, tests/codegen/test_op_tables.py). The op lists are the dialects' own
(`pcg.ALL_OPS`, `parallel.ALL_OPS`), so a new op with no kernel or no price fails here."""

from __future__ import annotations

import ast
import inspect

from unityc.cost.communication import PARALLEL_PATTERN
from unityc.cost.compute import FORWARD_FLOPS
from unityc.dialects import parallel, pcg
from unityc.interpreter import functions
from unityc.interpreter.kernels import KERNELS

SOURCES = {pcg.InputOp, pcg.WeightOp, pcg.ConstantOp}
"""Run by the interpreter's source functions (seeded or fed values), not a kernel."""

PRICED_AS_COMPUTE = {"parallel.sum_concat": "a local add of partial sums (cost/pricing.sum_concat_parts)"}
"""Parallel ops the cost model prices as local work, not a collective."""


def test_every_pcg_op_has_an_interpreter_kernel() -> None:
    ops = set(pcg.ALL_OPS)
    missing = sorted(op.name for op in ops - set(KERNELS) - SOURCES)
    assert not missing, f"pcg ops without an interpreter kernel (interpreter/kernels.KERNELS): {missing}"
    assert set(KERNELS) <= ops, "a kernel for an op the pcg dialect does not have"


def test_every_parallel_op_is_interpreted() -> None:
    """run_parallel (a match on the op's class) and parallel_impl's own cases together name every
    parallel op class."""
    source = inspect.getsource(functions.run_parallel) + inspect.getsource(functions._make_functions)
    tree = ast.parse(source)
    named = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "parallel"
    }
    missing = sorted(op.name for op in parallel.ALL_OPS if op.__name__ not in named)
    assert not missing, f"parallel ops the interpreter never names: {missing}"


def test_every_op_has_a_price() -> None:
    pcg_names = {op.name for op in pcg.ALL_OPS}
    assert not sorted(pcg_names - set(FORWARD_FLOPS)), "pcg ops without a FLOP formula (cost/compute)"
    parallel_names = {op.name for op in parallel.ALL_OPS}
    missing = sorted(parallel_names - set(PARALLEL_PATTERN) - set(PRICED_AS_COMPUTE))
    assert not missing, f"parallel ops without a communication pattern (cost/communication): {missing}"
    assert set(PARALLEL_PATTERN) | set(PRICED_AS_COMPUTE) <= parallel_names
