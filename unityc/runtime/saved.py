"""What a forward pass saves for its backward, measured: a `saved_tensors_hooks` counter over
unique storages (a tensor and its views count once), excluding given tensors (parameters,
inputs) and their views."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType

import torch


def _key(t: torch.Tensor) -> tuple[str, int]:
    storage = t.untyped_storage()
    return str(t.device), storage.data_ptr()


class SavedBytes:
    """Context manager: `bytes` is the total size of the distinct storages that autograd saved
    inside it, `sizes` their sizes by storage, storages of `exclude` and tensors `skip` says
    are not counted."""

    def __init__(
        self, exclude: Iterable[torch.Tensor] = (), skip: Callable[[torch.Tensor], bool] | None = None
    ) -> None:
        self._exclude = {_key(t) for t in exclude if t is not None}
        self._skip = skip
        self.sizes: dict[tuple[str, int], int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
            return t
        key = _key(t)
        if key not in self._exclude and not (self._skip is not None and self._skip(t)):
            self.sizes[key] = max(self.sizes.get(key, 0), t.untyped_storage().nbytes())
        return t

    @property
    def bytes(self) -> int:
        return sum(self.sizes.values())

    def __enter__(self) -> SavedBytes:
        self._hooks.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._hooks.__exit__(kind, error, trace)
