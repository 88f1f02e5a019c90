"""Stock torchvision models (torchvision 0.28.0, the release paired with torch 2.13.0), each
`name(batch=..., image=...) -> (module, {"images", "labels"})` for `unityc-import
tests/codegen/torchvision_models.py:name`: the architectures exactly as `torchvision.models`
builds them (default widths and depths, ImageNet head replaced by `classes` outputs), wrapped so
the forward returns the cross-entropy loss first.

torchvision's wheel on the package index is its CUDA build: its `_C` extension (detection ops
such as `nms`) does not load against torch's CPU build, and `import torchvision` then fails in
`torchvision._meta_registrations`, which registers meta kernels for those ops. The classification
models are plain Python over `torch.nn` and use none of them, so that one module is replaced by an
empty one before the import (`_import_torchvision`); nothing else of torchvision is touched. The
Makefile installs the wheel into `.venv/vision`, outside site-packages, because transformers
imports torchvision whenever it is importable and would fail the same way.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

CLASSES = 10
VISION = Path(sys.prefix) / "vision"
"""Where the Makefile installs torchvision (the virtual environment's `vision` folder)."""


def _import_torchvision() -> types.ModuleType:
    """`torchvision.models`, imported without the CUDA-only operator registrations."""
    name = "torchvision._meta_registrations"
    if "torchvision" not in sys.modules and name not in sys.modules:
        if not VISION.is_dir():
            raise ModuleNotFoundError(f"torchvision is not installed in {VISION} (run `make test` once)")
        sys.path.append(str(VISION))
        sys.modules[name] = types.ModuleType(name)
    import torchvision.models  # here, not at the top: only after the path and the shim above

    return torchvision.models


class Classifier(nn.Module):
    """A torchvision classifier trained with cross-entropy: forward(images, labels) -> (loss, logits)."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.net(images)
        return nn.functional.cross_entropy(logits, labels), logits


Made = tuple[nn.Module, dict[str, torch.Tensor]]


def _make(build: Callable[..., nn.Module], batch: int, image: int) -> Made:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(batch, 3, image, image, generator=generator)
    labels = torch.randint(0, CLASSES, (batch,), generator=generator)
    return Classifier(build(num_classes=CLASSES)), {"images": images, "labels": labels}


def mobilenet_v2(batch: int = 4, image: int = 32) -> Made:
    """Stock MobileNet-V2 (ReLU6 exports as `aten.hardtanh`)."""
    return _make(_import_torchvision().mobilenet_v2, batch, image)


def efficientnet_b0(batch: int = 4, image: int = 32) -> Made:
    """Stock EfficientNet-B0 (SiLU, squeeze-and-excitation, stochastic depth)."""
    return _make(_import_torchvision().efficientnet_b0, batch, image)


def convnext_tiny(batch: int = 4, image: int = 32) -> Made:
    """Stock ConvNeXt-T (channels-last LayerNorm, layer scale, stochastic depth)."""
    return _make(_import_torchvision().convnext_tiny, batch, image)


def densenet121(batch: int = 4, image: int = 32) -> Made:
    """Stock DenseNet-121 (dense connectivity: every layer reads every earlier layer of its block)."""
    return _make(_import_torchvision().densenet121, batch, image)


def resnet18(batch: int = 4, image: int = 32) -> Made:
    """Stock ResNet-18."""
    return _make(_import_torchvision().resnet18, batch, image)
