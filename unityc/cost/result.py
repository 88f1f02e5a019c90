"""What an estimate returns: an `Estimate` of one training iteration, with a row per op
(`OpRow`) and per device (`DeviceRow`; priced by roles, one per role). `estimate.py` and
`staged.py` build it, `report.py` prints it, the search compares plans by it."""

from __future__ import annotations

from dataclasses import dataclass

from unityc.cost.memory import DeviceMemory
from unityc.cost.pipeline import PipelineRun
from unityc.cost.roles import Roles
from unityc.machine.spec import Machine


@dataclass(frozen=True)
class OpRow:
    """One op of the report; times are per iteration on the op's busiest device."""

    name: str
    kind: str
    label: str
    devices: tuple[int, ...]
    fwd_compute_s: float = 0
    bwd_compute_s: float = 0
    fwd_comm_s: float = 0
    bwd_comm_s: float = 0
    pattern: str = ""
    """Its communication pattern (gradient all-reduce for a weight), if any."""
    collectives: int = 0
    comm_bytes: float = 0
    """Bytes of one of its collectives."""
    flops: float = 0
    memory: float = 0
    """Bytes it holds, over all devices: weight + gradient + optimizer state, or saved activations."""
    num_devices: int = 0
    """Devices it runs on where `devices` lists only the representatives of their roles (priced
    by roles, `cost/roles.py`); 0: as many as `devices`."""

    @property
    def device_count(self) -> int:
        return self.num_devices or len(self.devices)


@dataclass(frozen=True)
class DeviceRow:
    device: int
    kind: str
    compute_s: float
    comm_s: float
    busy_s: float
    memory: DeviceMemory
    capacity: float
    count: int = 1
    """The devices this row stands for: priced by roles, every device of `device`'s role."""


@dataclass(frozen=True)
class Estimate:
    machine: Machine
    cost: str
    optimizer: str
    rows: tuple[OpRow, ...]
    devices: tuple[DeviceRow, ...]
    iteration_s: float
    """When the last thing of the iteration ends (forward, backward, gradient sync, update)."""
    forward_s: float
    """When the last forward step ends."""
    backward_s: float
    """When the last backward step ends (the updates may run on after it)."""
    plan_flops: float
    """FLOPs the plan's tasks perform, forward and backward."""
    model_flops: float
    """The model's training FLOPs on logical shapes (forward, backward, optimizer)."""
    roofline_s: float
    """model_flops at the peak FLOP/s of every device of the machine: a lower bound."""
    notes: tuple[str, ...]
    pipeline: PipelineRun | None = None
    """A pipelined plan's simulated schedule (`cost/pipeline.py`), else None."""
    buckets: int = 0
    """Gradient buckets of weights held in copies, all-reduced during the backward."""
    sync_after_s: float = 0.0
    """How long their communication runs on after the backward ends (what of it counts)."""
    roles: Roles | None = None
    """Priced by roles (`cost/roles.py`): `devices` has one row per role, its representative."""

    @property
    def devices_used(self) -> int:
        """Devices that run or hold anything (each row counts the devices of its role)."""
        return sum(d.count for d in self.devices)

    @property
    def busiest(self) -> DeviceRow:
        return max(self.devices, key=lambda d: (d.busy_s, -d.device))

    @property
    def update_s(self) -> float:
        return self.iteration_s - self.backward_s

    @property
    def roofline_ratio(self) -> float:
        return self.iteration_s / self.roofline_s if self.roofline_s > 0 else float("inf")

    @property
    def peak_memory(self) -> float:
        """The largest per-device memory of the plan."""
        return max((d.memory.total for d in self.devices), default=0.0)

    @property
    def fits(self) -> bool:
        """Whether every device holds what the plan puts on it."""
        return all(d.memory.total <= d.capacity for d in self.devices)

    def device(self, index: int) -> DeviceRow:
        """The row of device `index` (of its role's representative, priced by roles)."""
        rep = self.roles.rep_of(index) if self.roles is not None else index
        return next(d for d in self.devices if d.device == rep)


__all__ = ["DeviceRow", "Estimate", "OpRow"]
