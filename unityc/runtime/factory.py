"""A model from the user's file: `path/to/file.py:factory`, where `factory(**settings)` returns
(nn.Module, example inputs). Torch only: the importer builds models with it, and so does a
generated program (its reference model for --check, the weights and the batch), without the
compiler.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn


class ModelError(ValueError):
    """The model cannot be found, built, or called with its example inputs."""


def literal(text: str) -> Any:
    """`8` -> 8, `[1, 2]` -> [1, 2], `0.1` -> 0.1; anything else stays a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


class TrainingModeWarning(UserWarning):
    """The model came in eval mode and is imported (and checked) in training mode."""


def say_if_not_training(module: nn.Module, model: str) -> None:
    """Warns if any submodule is in eval mode: unityc compiles training, so the model is switched
    to training mode (batch norm on batch statistics, dropout on), which changes what it computes."""
    evaluating: list[str] = []  # the outermost modules in eval mode
    for name, m in module.named_modules():
        if not m.training and not any(name.startswith(f"{outer}.") or not outer for outer in evaluating):
            evaluating.append(name)
    if not evaluating:
        return
    evaluating = [name or "the whole model" for name in evaluating]
    shown = ", ".join(evaluating[:5]) + (f" and {len(evaluating) - 5} more" if len(evaluating) > 5 else "")
    warnings.warn(
        f"{model} returned the model in eval mode ({shown}); unityc imports and checks it in training "
        "mode, the mode it trains in (batch norm on batch statistics, dropout on), so its outputs "
        "differ from the eval-mode model's; return it in training mode to silence this",
        TrainingModeWarning,
        stacklevel=3,
    )


def factory_file(model: str) -> tuple[Path, str] | None:
    """(file, factory name) of a `path/to/file.py:factory` model, else None."""
    path, sep, factory = model.rpartition(":")
    return (Path(path), factory) if sep and path.endswith(".py") else None


def absolute_model(model: str, base: Path | None = None) -> str:
    """`model` with a factory file's path made absolute (relative paths are taken from `base`,
    default the current directory), so the recorded spec rebuilds the model from any directory."""
    found = factory_file(model)
    if found is None or found[0].is_absolute():
        return model
    path, factory = found
    return f"{((base or Path.cwd()) / path).resolve()}:{factory}"


def load_function(path: Path, name: str) -> Any:
    """The function `name` of the Python file `path` (the file is imported afresh); ModelError
    if the file is missing, fails to import or has no such function."""
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    module_name = f"unityc_user_model_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ModelError(f"{path}: cannot be loaded as a Python module")
    user_module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = user_module
    try:
        loader_spec.loader.exec_module(user_module)
    except (Exception, SystemExit) as e:
        raise ModelError(f"{path}: failed to import: {type(e).__name__}: {e}") from None
    function = getattr(user_module, name, None)
    if not callable(function):
        raise ModelError(f"{path}: has no function '{name}'")
    return function


def build_from_file(
    model: str, overrides: tuple[tuple[str, str], ...], batch: int | None
) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """Calls the factory of `model` (`path/to/file.py:factory`) with the settings as keyword
    arguments (values read as Python literals) and `batch`; ModelError on any failure."""
    found = factory_file(model)
    if found is None:
        raise ModelError(f"'{model}' is not path/to/file.py:factory")
    path, factory_name = found
    factory = load_function(path, factory_name)
    kwargs: dict[str, Any] = {key: literal(text) for key, text in overrides}
    if batch is not None:
        kwargs["batch"] = batch
    try:
        built = factory(**kwargs)
    except (Exception, SystemExit) as e:
        raise ModelError(f"{path}:{factory_name}({_show(kwargs)}) failed: {type(e).__name__}: {e}") from None
    return _check_factory_result(built, f"{path}:{factory_name}")


def _show(kwargs: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


def _check_factory_result(built: Any, where: str) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], nn.Module)):
        raise ModelError(f"{where} must return (nn.Module, example inputs), got {type(built).__name__}")
    module, inputs = built
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, tuple | list):
        names = forward_argument_names(module, len(inputs), where)
        inputs = dict(zip(names, inputs, strict=True))
    if not isinstance(inputs, dict) or not all(isinstance(v, torch.Tensor) for v in inputs.values()):
        raise ModelError(f"{where}: example inputs must be tensors (a tuple or a dict by argument name)")
    return module, inputs


def forward_argument_names(module: nn.Module, count: int | None, where: str) -> list[str]:
    """The names of `forward`'s first `count` positional arguments (None: all of them)."""
    params = [
        p.name
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if count is None:
        return params
    if len(params) < count:
        raise ModelError(f"{where}: {count} example inputs, but forward takes only {len(params)}")
    return params[:count]
