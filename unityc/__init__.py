"""unityc: a Unity-style compiler for distributed DNN training, built on xDSL.

The Python API (`unityc/tools/api.py`; loaded on first use, so that `import unityc.runtime`
in a generated program stays torch-only):

* `unityc.plan(model, example_inputs, machine=..., optimizer=..., precision=..., strategy=...,
  **options)` imports a model and searches a parallel plan in this process: a frozen `Plan`
  (its report as `str(plan)`, `iteration_s`, `peak_memory`, `degrees`, `.save(path)` as MLIR);
* `unityc.load_plan(path)` reads a saved plan;
* `unityc.distribute(model, plan)`, on every rank after `init_process_group`: this rank's part
  of the model as an `nn.Module` that trains inside your own loop (`DistributedModel`);
* `unityc.strategies()`: the strategies `plan` takes; `unityc.PlanError`: what they raise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from unityc.runtime.module import DistributedModel
    from unityc.tools.api import Plan, PlanError, distribute, load_plan, plan, strategies

__all__ = ["DistributedModel", "Plan", "PlanError", "distribute", "load_plan", "plan", "strategies"]

_API = ("Plan", "PlanError", "distribute", "load_plan", "plan", "strategies")


def __getattr__(name: str) -> Any:
    if name in _API:
        import unityc.tools.api as api

        return getattr(api, name)
    if name == "DistributedModel":
        from unityc.runtime.module import DistributedModel

        return DistributedModel
    raise AttributeError(f"module 'unityc' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
