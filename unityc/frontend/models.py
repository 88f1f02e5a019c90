"""Which model to import: a zoo name, a `file.py:factory`, or a HuggingFace config (`hf:bert`).

A `ModelSpec` says how to rebuild the model (it is recorded in the imported module, so later
stages can rebuild the reference model with the same seed); `load_model` builds it, with
parameters on the meta device when only shapes are needed, so paper-scale models never
materialize their weights. Buffers stay real: the importer folds them into constants.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from xdsl.dialects.builtin import BytesAttr, DictionaryAttr, IntegerAttr, StringAttr, i64
from xdsl.ir import Attribute


class ModelError(ValueError):
    """The model cannot be found, built, or called with its example inputs."""


@dataclass(frozen=True)
class ModelSpec:
    model: str
    """Zoo name, `path/to/file.py:factory`, `hf:bert` or `hf:<transformers config class>`."""
    config: str = "small"
    batch: int | None = None
    overrides: tuple[tuple[str, str], ...] = ()
    seed: int = 0

    ATTRIBUTE = "unityc.model"

    def to_attr(self) -> DictionaryAttr:
        entries: dict[str, Attribute] = {
            "model": StringAttr(self.model),
            "config": StringAttr(self.config),
            "seed": IntegerAttr(self.seed, i64),
        }
        if self.batch is not None:
            entries["batch"] = IntegerAttr(self.batch, i64)
        if self.overrides:
            entries["overrides"] = DictionaryAttr({k: StringAttr(v) for k, v in self.overrides})
        return DictionaryAttr(entries)

    @staticmethod
    def from_attr(attr: DictionaryAttr) -> ModelSpec:
        """The spec recorded as `unityc.model`; ModelError naming the entry that is malformed."""
        data = attr.data

        def text(key: str) -> str:
            value = data.get(key)
            if isinstance(value, StringAttr):
                return value.data
            if isinstance(value, BytesAttr):  # how xDSL reads back a string with non-ASCII text
                with contextlib.suppress(UnicodeDecodeError):
                    return value.data.decode()
            raise ModelError(f"{ModelSpec.ATTRIBUTE}: '{key}' must be a string, got {value}")

        def number(key: str) -> int | None:
            value = data.get(key)
            if value is None:
                return None
            if not isinstance(value, IntegerAttr):
                raise ModelError(f"{ModelSpec.ATTRIBUTE}: '{key}' must be an integer, got {value}")
            return value.value.data

        overrides = data.get("overrides", DictionaryAttr({}))
        if not isinstance(overrides, DictionaryAttr):
            raise ModelError(f"{ModelSpec.ATTRIBUTE}: 'overrides' must be a dictionary, got {overrides}")
        pairs = tuple((k, v.data) for k, v in overrides.data.items() if isinstance(v, StringAttr))
        return ModelSpec(text("model"), text("config"), number("batch"), pairs, number("seed") or 0)


@dataclass
class LoadedModel:
    module: nn.Module
    inputs: dict[str, torch.Tensor]
    spec: ModelSpec


def parse_overrides(items: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ModelError(f"'{item}' is not a key=value override")
        pairs.append((key, value))
    return tuple(pairs)


def literal(text: str) -> Any:
    """`8` -> 8, `[1, 2]` -> [1, 2], `0.1` -> 0.1; anything else stays a string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Registers every new parameter on the meta device (buffers stay real), so that building a
    paper-scale model costs no memory and no initialization time."""
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        p = module._parameters.get(name)
        if p is not None and p.device.type != "meta":
            module._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def load_model(spec: ModelSpec, weights: bool = True) -> LoadedModel:
    """Builds the model of `spec` (seeded); `weights=False` puts parameters on the meta device."""
    torch.manual_seed(spec.seed)
    generator = torch.Generator().manual_seed(spec.seed)
    context = parameters_on_meta() if not weights else contextlib.nullcontext()
    with context:
        if spec.model.startswith("hf:"):
            from unityc.frontend.huggingface import build_hf

            module, inputs = build_hf(spec, generator)
        elif factory_file(spec.model) is not None:
            module, inputs = _build_from_file(spec)
        else:
            module, inputs = _build_from_zoo(spec, generator)
    _say_if_not_training(module, spec.model)
    module.train()
    return LoadedModel(module, inputs, replace(spec, model=absolute_model(spec.model)))


class TrainingModeWarning(UserWarning):
    """The model came in eval mode and is imported (and checked) in training mode."""


def _say_if_not_training(module: nn.Module, model: str) -> None:
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


def config_with_overrides(
    defaults: Mapping[str, Any], overrides: tuple[tuple[str, str], ...], what: str
) -> dict[str, Any]:
    config = dict(defaults)
    for key, text in overrides:
        if key not in config:
            known = ", ".join(sorted(config))
            raise ModelError(f"{what} has no setting '{key}' (settings: {known})")
        value = literal(text)
        default = config[key]
        if isinstance(default, float) and isinstance(value, int):
            value = float(value)
        if type(value) is not type(default):
            raise ModelError(
                f"{what} setting '{key}' expects {type(default).__name__} like {default!r}, got '{text}'"
            )
        config[key] = value
    return config


def _build_from_zoo(spec: ModelSpec, generator: torch.Generator) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    from unityc.models import zoo

    models = zoo()
    if spec.model not in models:
        raise ModelError(
            f"unknown model '{spec.model}': expected a zoo name ({', '.join(models)}), "
            "path/to/file.py:factory, or hf:<name>"
        )
    entry = models[spec.model]
    if spec.config not in entry.configs:
        raise ModelError(f"model '{spec.model}' has no config '{spec.config}' ({', '.join(entry.configs)})")
    config = config_with_overrides(entry.configs[spec.config], spec.overrides, f"model '{spec.model}'")
    batch = spec.batch or entry.batch[spec.config]
    return entry.build(config), entry.inputs(config, batch, generator)


def _build_from_file(spec: ModelSpec) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    found = factory_file(spec.model)
    assert found is not None
    path, factory_name = found
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
    factory = getattr(user_module, factory_name, None)
    if not callable(factory):
        raise ModelError(f"{path}: has no function '{factory_name}'")
    kwargs = {key: literal(text) for key, text in spec.overrides}
    if spec.batch is not None:
        kwargs["batch"] = spec.batch
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
        names = _forward_argument_names(module, len(inputs), where)
        inputs = dict(zip(names, inputs, strict=True))
    if not isinstance(inputs, dict) or not all(isinstance(v, torch.Tensor) for v in inputs.values()):
        raise ModelError(f"{where}: example inputs must be tensors (a tuple or a dict by argument name)")
    return module, inputs


def _forward_argument_names(module: nn.Module, count: int, where: str) -> list[str]:
    import inspect

    params = [
        p.name
        for p in inspect.signature(module.forward).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if len(params) < count:
        raise ModelError(f"{where}: {count} example inputs, but forward takes only {len(params)}")
    return params[:count]
