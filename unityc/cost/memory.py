"""Memory per device and the optimizer's weight update.

Per device, at the end of forward (the peak of a training iteration without recomputation):

    total = weights + gradients + optimizer state + saved activations + communication buffers

* weights: every weight piece placed on the device; gradients: one per weight piece that gets
  a gradient; optimizer state: SGD (no momentum) keeps none, Adam keeps m and v (2x weights);
* saved activations: the tensors the backward of some op needs (`SAVES`): an op's operands
  (matmuls, norms, most ops), its result (relu, sigmoid, tanh, exp, sqrt, softmax: their
  derivative is a function of the result), or nothing (add, reshape, parallel ops, ...), counted
  on the devices holding their pieces, once per micro-batch; attention also keeps its internal
  q, k, v projections, attention probabilities and context;
* communication buffers: the largest single collective buffer the device takes part in.

Weight update (memory-bound): SGD reads w and g and writes w (3 passes, 2 FLOPs per element);
Adam reads w, g, m, v and writes w, m, v (7 passes, ~12 FLOPs per element).
"""

from __future__ import annotations

from dataclasses import dataclass

from unityc.cost.compute import Work

OPTIMIZERS = ("sgd", "adam")

STATE_PER_WEIGHT = {"sgd": 0, "adam": 2}
_UPDATE_PASSES = {"sgd": 3, "adam": 7}
_UPDATE_FLOPS = {"sgd": 2, "adam": 12}

SAVES_RESULT = ("pcg.relu", "pcg.sigmoid", "pcg.tanh", "pcg.exp", "pcg.sqrt", "pcg.softmax")
SAVES_NOTHING = (
    "pcg.add",
    "pcg.sub",
    "pcg.neg",
    "pcg.identity",
    "pcg.scalar_mul",
    "pcg.scalar_add",
    "pcg.dropout",  # its mask is not counted
    "pcg.cast",
    "pcg.reshape",
    "pcg.transpose",
    "pcg.concat",
    "pcg.split",
    "pcg.gather",
    "pcg.reduce",
)


def saves(kind: str) -> str:
    """What the backward of `kind` keeps from forward: "operands", "result" or "nothing"."""
    if kind.startswith("parallel.") or kind in SAVES_NOTHING:
        return "nothing"
    return "result" if kind in SAVES_RESULT else "operands"


def check_optimizer(optimizer: str) -> None:
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{optimizer}' (known: {', '.join(OPTIMIZERS)})")


def optimizer_state_bytes(optimizer: str, weight_bytes: float) -> float:
    check_optimizer(optimizer)
    return STATE_PER_WEIGHT[optimizer] * weight_bytes


def update_work(optimizer: str, numel: int, element_bytes: int) -> Work:
    """Work of updating `numel` weight elements in place."""
    check_optimizer(optimizer)
    return Work(_UPDATE_FLOPS[optimizer] * numel, _UPDATE_PASSES[optimizer] * numel * element_bytes)


def attention_saved_bytes(batch: int, sq: int, sk: int, eh: int, heads: int, element_bytes: int) -> int:
    """What one attention task keeps besides its operands: q, k, v projections, the attention
    probabilities and the context."""
    return (batch * (sq + 2 * sk) * eh + batch * heads * sq * sk + batch * sq * eh) * element_bytes


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes on one device, by part; `total` is their sum."""

    weights: float = 0
    gradients: float = 0
    optimizer: float = 0
    activations: float = 0
    buffers: float = 0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.buffers
