"""The option group of every pass that prices a plan (`estimate`, `unity-search`, the baselines):
machine, cost model, optimizer and profile cache, parsed and checked once into one frozen value."""

from __future__ import annotations

from dataclasses import dataclass, field

from unityc.cost.memory import check_optimizer
from unityc.cost.modes import compute_model
from unityc.cost.profile import ProfileCache
from unityc.machine import Machine, load_machine


@dataclass(frozen=True)
class CostOptions:
    machine_name: str
    """As given: a preset (`summit:2`) or a `.toml` spec."""
    machine: Machine
    cost: str = "roofline"
    """`roofline`, or `profile` (op times measured by `tools/profile_ops.py`)."""
    optimizer: str = "sgd"
    profile_path: str = ""
    profile: ProfileCache | None = field(default=None, compare=False, hash=False)
    """The cache read from `profile_path` (it counts its hits, so it takes no part in equality)."""

    def __post_init__(self) -> None:
        check_optimizer(self.optimizer)
        compute_model(self.cost, self.profile)  # a known mode, and a profile where it needs one
        if bool(self.profile_path) != (self.profile is not None):
            raise ValueError("a profile cache comes with the path it was read from")

    @staticmethod
    def parse(machine: str, cost: str = "roofline", optimizer: str = "sgd", profile: str = "") -> CostOptions:
        """The options from their text (pass options); ValueError or MachineSpecError naming the
        one at fault, the machine first."""
        spec = load_machine(machine)
        cache = ProfileCache.load(profile) if profile else None
        return CostOptions(machine, spec, cost, optimizer, profile, cache)
