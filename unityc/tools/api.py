"""unityc as a library: plan a PyTorch model in-process, then train it inside your own loop.

    import unityc
    plan = unityc.plan(model, {"input_ids": ids, "labels": ids}, machine="cpu:2")
    print(plan)                      # the search's report: the plan, its estimate, the baselines
    plan.save("plan.mlir")           # MLIR: `unityc-opt plan.mlir -t torch` makes its program

    # on every rank, after torch.distributed.init_process_group():
    model = unityc.distribute(model, unityc.load_plan("plan.mlir"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)   # this rank's pieces
    loss = model(**batch)            # the whole batch, the same on every rank; the loss on every rank
    loss.backward()                  # gradients of weight copies synchronized during the backward
    model.clip_grad_norm_(1.0)       # the global norm, across shards
    optimizer.step()

`plan` runs the importer, then the search (or one baseline strategy) and the passes the command
line runs (`unityc-import`, `unityc-opt --unity-search`), in this process. `distribute` makes the
plan's program (`unityc-opt -t torch`) and hands it to the runtime's `DistributedModel`
(`unityc/runtime/module.py`). Every error is a `PlanError` (a ValueError) saying in one line what
is wrong: a model the importer cannot read, an input that is no tensor, an unknown option, a
world size the plan was not made for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.exceptions import DiagnosticException

from unityc.dialects.container import graph_function
from unityc.dialects.parallel import PARALLEL
from unityc.dialects.pcg import PCG
from unityc.dialects.pipeline import graph_plan_of
from unityc.dialects.source import output_problem, parse_source
from unityc.passes.unity_search import UnitySearchPass
from unityc.tools.importer import record_precision
from unityc.tools.search_cli import search_passes

if TYPE_CHECKING:
    import torch
    from torch import nn

    from unityc.runtime.module import DistributedModel

__all__ = ["Plan", "PlanError", "distribute", "load_plan", "plan", "strategies"]

SEARCH = "search"
"""The strategy `plan` runs by default: the joint search (`--unity-search`)."""

PRECISIONS = ("fp32", "bf16-mixed")


class PlanError(ValueError):
    """What `plan`, `load_plan` and `distribute` raise: one line naming the cause."""


@dataclass(frozen=True)
class Held:
    """How a plan holds one weight: its degrees and ZeRO stage (the weight's `Layout`)."""

    shard: tuple[int, ...]
    sum: int = 1
    copy: int = 1
    zero: int = 0

    def __str__(self) -> str:
        parts = [f"shard {list(self.shard)}"] if any(k > 1 for k in self.shard) else []
        parts += [f"sum {self.sum}"] if self.sum > 1 else []
        parts += [f"copy {self.copy}"] if self.copy > 1 else []
        parts += [f"zero {self.zero}"] if self.zero else []
        return ", ".join(parts) or "whole on one rank"


@dataclass(frozen=True)
class Plan:
    """A parallel plan: the rewritten graph with a machine view on every op (`mlir`), what it was
    made for, and what the cost model estimates. Frozen and hashable; `str(plan)` is its report."""

    mlir: str
    """The plan in MLIR, as `unityc-opt --unity-search -o plan.mlir` writes it."""
    machine: str
    world_size: int
    """Processes the plan runs on (the machine's devices): torchrun's --nproc_per_node."""
    strategy: str
    """`search` or the baseline it was made by (`data-parallel`, `megatron`, `zero`, `gpipe`, ...)."""
    iteration_s: float | None
    """The cost model's time of one training iteration (None: a plan it cannot price)."""
    peak_memory: float | None
    """The cost model's peak bytes on the fullest device (None: not priced)."""
    fits: bool | None
    """Whether every device's peak fits its memory (None: not priced)."""
    degrees: Mapping[str, Held] = field(default_factory=dict, compare=False)
    """State_dict key (or part of one) -> how the plan holds that weight."""
    pipeline: str = ""
    """A pipelined plan's schedule, stages and micro-batches ("" when not pipelined)."""
    summary: str = field(default="", compare=False)
    """The report: what the search or the strategy printed (the plan, baselines, estimate)."""

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise PlanError(f"a plan needs at least one process, got {self.world_size}")
        object.__setattr__(self, "degrees", types.MappingProxyType(dict(self.degrees)))

    def __hash__(self) -> int:
        return hash((self.mlir, self.machine, self.strategy))

    def __repr__(self) -> str:
        how = f", {self.pipeline}" if self.pipeline else ""
        return (
            f"Plan({self.strategy} on {self.machine}, {self.world_size} rank(s){how}, "
            f"{_priced(self.iteration_s, self.peak_memory, self.fits)})"
        )

    def __str__(self) -> str:
        return self.summary or repr(self)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Writes the plan as MLIR (`load_plan`, `unityc-opt path -t torch` read it)."""
        text = os.fspath(path)
        if problem := output_problem(text):
            raise PlanError(f"cannot save the plan to {text}: {problem}")
        with open(text, "w") as f:
            f.write(self.mlir)


def strategies() -> list[str]:
    """The strategies `plan(strategy=...)` takes: the search and every baseline pass."""
    return [SEARCH, *(n for n in search_passes() if n != "unity-search")]


def plan(
    model: nn.Module | str,
    example_inputs: Mapping[str, torch.Tensor] | Sequence[torch.Tensor] | torch.Tensor | None = None,
    *,
    machine: str = "cpu:1",
    optimizer: str = "sgd",
    precision: str = "fp32",
    strategy: str = SEARCH,
    seed: int = 0,
    accumulation: int = 1,
    **options: Any,
) -> Plan:
    """Imports `model` and searches a parallel plan for it, in this process.

    `model` is an `nn.Module` whose forward returns the training loss first (then any other
    outputs), called as `model(**example_inputs)` (a sequence of tensors is passed
    positionally); or what `unityc-import` takes (a zoo name, `file.py:factory`, `hf:gpt2`),
    whose own example inputs are used when `example_inputs` is None. The example inputs give the
    shapes of one training batch (the whole batch over all ranks).

    `machine` is a preset (`cpu:2`, `dgx-a100:8`, ...) or a `.toml` spec; `optimizer` the one the
    cost model prices (`sgd` or `adam`); `precision` `fp32` or `bf16-mixed`. `strategy` is
    `search` (the joint search, `--unity-search`) or a baseline (`strategies()`: `data-parallel`,
    `megatron`, `zero`, `gpipe`, ...). Every other keyword is an option of the strategy's pass, as
    on the command line with `-` as `_`: `budget=24`, `time_limit=60`, `baselines="none"`,
    `memory_budget=8.0` for the search; `stage=3` for `zero`; `stages=2, microbatches=4,
    schedule="1f1b"` for `gpipe`. `accumulation=k` makes the plan accumulate the gradients of k
    micro-batches per step (the batch cut into k along its rows; the distributed model's `step`
    runs them one after another and syncs once). Raises PlanError naming the cause."""
    if precision not in PRECISIONS:
        raise PlanError(f"precision: expected one of {', '.join(PRECISIONS)}, got '{precision}'")
    if isinstance(accumulation, bool) or not isinstance(accumulation, int) or accumulation < 1:
        raise PlanError(f"accumulation: expected a whole number of micro-batches >= 1, got {accumulation!r}")
    module = import_graph(model, example_inputs, seed)
    record_precision(module, precision)
    made = _pass(strategy, {"machine": machine, "optimizer": optimizer, **options})
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            made.apply(Context(), module)
    except (DiagnosticException, ValueError, NotImplementedError) as e:
        raise PlanError(f"{strategy}: {_one_line(e)}") from None
    if accumulation > 1:
        _accumulate(module, accumulation)
    return _planned(module, strategy, captured.getvalue(), optimizer)


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """The plan saved at `path` (by `Plan.save` or `unityc-opt ... -o plan.mlir`)."""
    text = os.fspath(path)
    try:
        with open(text) as f:
            source = f.read()
    except OSError as e:
        raise PlanError(f"cannot read the plan {text}: {e.strerror}") from None
    module = _parse(source, text)
    return _planned(module, _strategy_of(module), "")


def distribute(model: nn.Module, plan: Plan, **options: Any) -> DistributedModel:
    """This rank's part of `model` under `plan`: call it on every rank after
    `torch.distributed.init_process_group` (as many processes as `plan.world_size`).

    The result is an `nn.Module` (`unityc.runtime.module.DistributedModel`): called with the
    whole batch (the same on every rank; each rank takes the rows the plan gives it) it returns
    what the model returns, the loss first as a full scalar on every rank; `parameters()` are this
    rank's pieces under the model's own names; gradients of weight copies are summed during
    `backward()`. The model's weights are read once (they are not changed). Options:
    `device`, `timeout` (seconds a collective waits, default 600), `bucket_mb` (25),
    `overlap` (True: gradient all-reduces start during the backward), `full_outputs` (False:
    outputs other than the loss are this rank's pieces; True: whole tensors on every rank),
    `check` (False; True: dropout off in training too, as a generated program's `--check`, to
    compare with the plain module)."""
    from unityc.runtime.module import DistributedModel, PlanMismatch
    from unityc.runtime.sources import SourceError

    program = program_of(plan)
    try:
        forward = getattr(program, "PROGRAM", None) or program.forward  # a pipelined program's stages
        return DistributedModel(program.PLAN, forward, model, **options)
    except (PlanMismatch, SourceError) as e:
        raise PlanError(str(e)) from None
    except TypeError as e:
        raise PlanError(f"distribute: {e}") from None


# --- the parts -----------------------------------------------------------------------------


def import_graph(model: Any, example_inputs: Any, seed: int = 0) -> ModuleOp:
    """The model in the pcg dialect (`unityc-import`'s route); PlanError naming the cause."""
    from torch import nn

    from unityc.frontend import ImportFailure, ModelError, import_loaded
    from unityc.models.spec import LoadedModel, ModelSpec, load_model

    try:
        if isinstance(model, str):
            loaded = load_model(ModelSpec(model, seed=seed), weights=False)
            if example_inputs is not None:
                loaded.inputs = _inputs(loaded.module, example_inputs)
        elif isinstance(model, nn.Module):
            name = f"python:{type(model).__module__}.{type(model).__qualname__}"
            loaded = LoadedModel(model, _inputs(model, example_inputs), ModelSpec(name, seed=seed))
        else:
            raise PlanError(f"the model must be an nn.Module or a model name, got {type(model).__name__}")
        training = loaded.module.training
        loaded.module.train()
        try:
            return import_loaded(loaded)
        finally:
            loaded.module.train(training)
    except (ModelError, ImportFailure) as e:
        raise PlanError(f"cannot import the model: {_one_line(e)}") from None


def _inputs(module: nn.Module, given: Any) -> dict[str, torch.Tensor]:
    """The example inputs by forward argument name; PlanError if they are not tensors."""
    import torch

    from unityc.runtime.factory import forward_argument_names

    if given is None:
        raise PlanError("example_inputs are needed: the tensors of one training batch, by argument name")
    if isinstance(given, torch.Tensor):
        given = (given,)
    if not isinstance(given, Mapping):
        if not isinstance(given, Sequence):
            raise PlanError(
                f"example_inputs: expected a dict or a sequence of tensors, got {type(given).__name__}"
            )
        names = forward_argument_names(module, len(given), type(module).__name__)
        given = dict(zip(names, given, strict=True))
    for name, value in given.items():
        if not isinstance(value, torch.Tensor):
            raise PlanError(f"example input '{name}' is a {type(value).__name__}, not a tensor")
    return dict(given)


def _pass(strategy: str, options: dict[str, Any]) -> ModulePass:
    """The pass of `strategy` with `options` (PlanError naming an unknown one)."""
    passes = search_passes()
    if strategy != SEARCH and (strategy not in passes or strategy == "unity-search"):
        raise PlanError(f"unknown strategy '{strategy}' (known: {', '.join(strategies())})")
    cls = UnitySearchPass if strategy == SEARCH else passes[strategy]()
    if cls is UnitySearchPass:
        options = {"progress": False, **options}
    known = {f.name for f in dataclasses.fields(cls) if f.init and f.name != "name"}
    unknown = [k for k in options if k not in known]
    if unknown:
        raise PlanError(f"{strategy}: unknown option '{unknown[0]}' (options: {', '.join(sorted(known))})")
    try:
        return cls(**options)
    except (TypeError, ValueError) as e:
        raise PlanError(f"{strategy}: {e}") from None


def _text(module: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out).print_op(module)
    out.write("\n")
    return out.getvalue()


def _parse(source: str, name: str) -> ModuleOp:
    ctx = Context()
    ctx.register_dialect("pcg", lambda: PCG)
    ctx.register_dialect("parallel", lambda: PARALLEL)
    from xdsl.dialects.builtin import Builtin
    from xdsl.dialects.func import Func

    ctx.load_dialect(Builtin)
    ctx.load_dialect(Func)
    try:
        return parse_source(ctx, source, name)
    except DiagnosticException as e:
        raise PlanError(_one_line(e)) from None


def _accumulate(module: ModuleOp, steps: int) -> None:
    """The plan made to accumulate `steps` micro-batches per step (`unityc.accumulation`)."""
    fn = graph_function(module)
    attributes = dataclasses.replace(graph_plan_of(fn), accumulation=steps).written_to(fn.attributes)
    fn.attributes.clear()
    fn.attributes.update(attributes)


def _strategy_of(module: ModuleOp) -> str:
    return "plan"


def _planned(module: ModuleOp, strategy: str, report: str, optimizer: str = "sgd") -> Plan:
    """The Plan value of a plan module: its program made once here, so a plan that cannot run
    is refused now, not on every rank later."""
    from unityc.cost.estimate import estimate_module
    from unityc.machine import load_machine

    mlir = _text(module)
    machine = str(module.attributes.get("unityc.machine", "")).strip('"')
    if not machine:
        raise PlanError("the module records no machine (unityc.machine): is it a plan?")
    program = _program(module, mlir)
    rt_plan = program.PLAN
    try:
        estimate = estimate_module(module, load_machine(machine), optimizer=optimizer)
        seconds, peak, fits = estimate.iteration_s, estimate.peak_memory, estimate.fits
    except (ValueError, KeyError, NotImplementedError):  # runs all the same, but has no figures
        seconds, peak, fits = None, None, None
    degrees = {
        key: Held(layout.shard, layout.sum, layout.copy, rt_plan.zero.get(key, 0))
        for key, layout in rt_plan.weights.items()
    }
    pipeline = getattr(program, "PIPELINE", None)
    how = ""
    if pipeline is not None:
        how = f"{pipeline.schedule}, {pipeline.stages} stages, {pipeline.microbatches} micro-batches"
    summary = report or _summary(strategy, machine, seconds, peak, fits)
    return Plan(mlir, machine, rt_plan.world_size, strategy, seconds, peak, fits, degrees, how, summary)


def _priced(seconds: float | None, peak: float | None, fits: bool | None) -> str:
    """The cost model's figures of a plan, as the report and repr print them."""
    if seconds is None or peak is None:
        return "not priced by the cost model"
    return f"{seconds * 1e3:.3g} ms/iteration, peak {peak / 2**20:.1f} MiB{'' if fits else ' (does not fit)'}"


def _summary(
    strategy: str, machine: str, seconds: float | None, peak: float | None, fits: bool | None
) -> str:
    return f"{strategy} on {machine}: {_priced(seconds, peak, fits)}\n"


_PROGRAMS: dict[str, types.ModuleType] = {}
"""Programs made in this process, by plan text (a rank distributes the same plan more than once
in tests and notebooks)."""


def program_of(plan: Plan) -> types.ModuleType:
    """The plan's training program (what `unityc-opt plan.mlir -t torch` writes), as a module."""
    if plan.mlir not in _PROGRAMS:
        _program(_parse(plan.mlir, "<plan>"), plan.mlir)
    return _PROGRAMS[plan.mlir]


def _program(module: ModuleOp, mlir: str) -> types.ModuleType:
    from unityc.codegen import CodegenError, emit_program

    if mlir in _PROGRAMS:
        return _PROGRAMS[mlir]
    try:
        text = emit_program(module, None, "<plan>")
    except CodegenError as e:
        raise PlanError(f"the plan cannot run: {e}") from None
    program = types.ModuleType("unityc_plan_program")
    exec(compile(text, "<unityc plan program>", "exec"), program.__dict__)
    _PROGRAMS[mlir] = program
    return program


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
