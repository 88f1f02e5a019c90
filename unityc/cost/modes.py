"""Cost modes: which model prices one op's task (`roofline`: its FLOPs and bytes on the
device's peaks, `compute.op_cost`; `profile`: measured times from a cache where it has them)."""

from __future__ import annotations

from unityc.cost.compute import SOURCES, OpCost, op_cost
from unityc.cost.pricing import ComputeModel
from unityc.cost.profile import ProfileCache, op_key, profiled_cost

COST_MODES = ("roofline", "profile")


def roofline_model() -> ComputeModel:
    return op_cost


def profile_model(cache: ProfileCache) -> ComputeModel:
    """Measured times where the cache has them, the roofline elsewhere (counted in the cache)."""

    def model(kind, attrs, operands, results, device, needs_grad) -> OpCost:  # type: ignore[no-untyped-def]
        if kind in SOURCES:  # nothing to measure
            return op_cost(kind, attrs, operands, results, device, needs_grad)
        measured = cache.lookup(device.name, op_key(kind, attrs, operands, results))
        if measured is None:
            return op_cost(kind, attrs, operands, results, device, needs_grad)
        return profiled_cost(measured, kind, attrs, operands, results, needs_grad)

    return model


def compute_model(cost: str, profile: ProfileCache | None) -> ComputeModel:
    """The compute model a cost mode names (checks the mode and that a profile is given)."""
    if cost not in COST_MODES:
        raise ValueError(f"unknown cost model '{cost}' (known: {', '.join(COST_MODES)})")
    if cost == "profile" and profile is None:
        raise ValueError('cost="profile" needs a profile cache file (profile="cache.json")')
    return profile_model(profile) if cost == "profile" and profile is not None else roofline_model()


__all__ = ["COST_MODES", "compute_model", "profile_model", "roofline_model"]
