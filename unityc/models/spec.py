"""Which model to import: a zoo name, a `file.py:factory`, or a HuggingFace config (`hf:bert`).

A `ModelSpec` says how to rebuild the model (it is recorded in the imported module, so later
stages can rebuild the reference model with the same seed); `load_model` builds it, with
parameters on the meta device when only shapes are needed, so paper-scale models never
materialize their weights. Buffers stay real: the importer folds them into constants.
`build_reference` is what a generated program hands the runtime to rebuild its reference model.
Torch only when imported (a program runs where xDSL is not installed): the spec's attribute
form imports xDSL when used.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from unityc.runtime.factory import (
    ModelError,
    TrainingModeWarning,
    absolute_model,
    build_from_file,
    factory_file,
    literal,
    say_if_not_training,
)

if TYPE_CHECKING:
    from xdsl.dialects.builtin import DictionaryAttr

__all__ = [
    "LoadedModel",
    "ModelError",
    "ModelSpec",
    "TrainingModeWarning",
    "absolute_model",
    "config_with_overrides",
    "factory_file",
    "literal",
    "load_model",
    "parse_overrides",
]


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
        from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, StringAttr, i64
        from xdsl.ir import Attribute

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
        from xdsl.dialects.builtin import BytesAttr, DictionaryAttr, IntegerAttr, StringAttr

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


class _EmptyOnMeta(torch.overrides.TorchFunctionMode):
    """`torch.empty` without a device (how Hugging Face makes a parameter,
    `nn.Parameter(torch.empty(...))`) on the meta device: a paper-scale parameter is never
    allocated, not even briefly (DeepSeek-V3's experts are 30 GB a layer in float32, more than
    a machine without overcommit hands out). `made` keeps the tensors so made, so that one
    registered as a buffer is made real again (buffers stay real)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: dict[int, weakref.ref[torch.Tensor]] = {}

    def made_here(self, t: torch.Tensor) -> bool:
        ref = self.made.get(id(t))
        return ref is not None and ref() is t

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.empty and kwargs.get("device") in (None, "cpu", torch.device("cpu")):
            t = func(*args, **{**kwargs, "device": "meta"})
            self.made[id(t)] = weakref.ref(t)
            return t
        return func(*args, **kwargs)


@contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Registers every new parameter on the meta device (buffers stay real), so that building a
    paper-scale model costs no memory and no initialization time."""
    register = nn.Module.register_parameter
    register_buffer = nn.Module.register_buffer
    mode = _EmptyOnMeta()

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        p = module._parameters.get(name)
        if p is not None and p.device.type != "meta":
            module._parameters[name] = type(p)(p.to("meta"), requires_grad=p.requires_grad)

    def register_real(
        module: nn.Module, name: str, tensor: torch.Tensor | None, persistent: bool = True
    ) -> None:
        if tensor is not None and mode.made_here(tensor):  # a torch.empty buffer, filled after
            tensor = torch.empty(tensor.shape, dtype=tensor.dtype)
        register_buffer(module, name, tensor, persistent)

    nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign, assignment]
    nn.Module.register_buffer = register_real  # type: ignore[method-assign, assignment]
    try:
        with mode:
            yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]
        nn.Module.register_buffer = register_buffer  # type: ignore[method-assign]


def load_model(spec: ModelSpec, weights: bool = True) -> LoadedModel:
    """Builds the model of `spec` (seeded); `weights=False` puts parameters on the meta device."""
    torch.manual_seed(spec.seed)
    generator = torch.Generator().manual_seed(spec.seed)
    context = parameters_on_meta() if not weights else contextlib.nullcontext()
    with context:
        if spec.model.startswith("hf:"):
            from unityc.models.huggingface import build_hf

            module, inputs = build_hf(spec, generator)
        elif factory_file(spec.model) is not None:
            module, inputs = build_from_file(spec.model, spec.overrides, spec.batch)
        else:
            module, inputs = _build_from_zoo(spec, generator)
    say_if_not_training(module, spec.model)
    module.train()
    return LoadedModel(module, inputs, replace(spec, model=absolute_model(spec.model)))


class Recorded(Protocol):
    """The spec as a generated program's plan records it (`unityc.runtime.plan.Model`)."""

    name: str
    config: str
    batch: int | None
    overrides: tuple[tuple[str, str], ...]
    seed: int


def build_reference(model: Recorded) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """The reference model a plan records, seeded and in training mode, and its example inputs:
    the builder a generated program hands `unityc.runtime.main` (ModelError if it cannot)."""
    loaded = load_model(ModelSpec(model.name, model.config, model.batch, tuple(model.overrides), model.seed))
    return loaded.module, loaded.inputs


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
