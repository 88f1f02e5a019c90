"""The error a bad machine spec raises."""

from __future__ import annotations


class MachineSpecError(ValueError):
    """A machine spec or preset name that cannot be used; the message names the file and the
    field path (`m.toml: nodes.devices_per_socket: expected a positive integer, got 0`).

    A ValueError, so `unityc-opt` reports it as `error: ...` with exit status 1."""
