"""Machine models: specs (TOML), presets, topology. See `spec.py` for the model and
`loader.py` for the file format."""

from unityc.machine.errors import MachineSpecError
from unityc.machine.loader import load_machine, load_spec_file, machine_from_dict
from unityc.machine.spec import Device, DeviceKind, Link, Machine, NodeSpec

__all__ = [
    "Device",
    "DeviceKind",
    "Link",
    "Machine",
    "MachineSpecError",
    "NodeSpec",
    "load_machine",
    "load_spec_file",
    "machine_from_dict",
]
