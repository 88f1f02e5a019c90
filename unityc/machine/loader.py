"""Machine spec files (TOML) and the `load_machine` entry point.

```toml
name = "two-nodes"                     # optional; defaults to the file name

[kinds.gpu]                            # one table per device kind
flops_tflops = { f32 = 15.7, f16 = 125.0 }   # peak per dtype (f16, bf16, f32, tf32, f64)
memory_bandwidth_gbs = 900             # GB/s (1e9 bytes/s)
memory_gib = 16                        # capacity, GiB
compute_efficiency = 0.7               # optional: fraction of peak FLOP/s kernels reach (1.0)
memory_efficiency = 0.8                # optional: fraction of peak bandwidth (1.0)
kernel_latency_us = 5                  # optional: fixed cost of one kernel (0)
vector_gflops = 6                      # optional: f32 rate of non-matmul ops (the f32 peak)
cold_bandwidth_gbs = 10                # optional: matmul operands from memory, not overlapped (0: none)
cache_bandwidth_gbs = 33               # optional: kernels moving at most cache_mib stream at this (0: none)
cache_mib = 192                        # optional: the last-level cache a kernel's bytes must fit (0)
scatter_row_ns = 60                    # optional: per row of an embedding's backward (0)
comm_shares_core = false               # optional: collectives run on the compute core (no overlap)
collective_handoff_us = 640            # optional: added to every collective (0)
allow_tf32 = false                     # optional: f32 matmuls at the tf32 rate

[links]                                # bandwidth per direction, GB/s; latency, microseconds
intra_socket = { bandwidth_gbs = 50, latency_us = 2 }
cross_socket = { bandwidth_gbs = 32, latency_us = 4 }   # optional: defaults to intra_socket
inter_node = { bandwidth_gbs = 25, latency_us = 6 }     # per node (all NIC ports together)

[nodes]                                # or [[nodes]], one table per group of alike nodes
count = 2                              # optional (1)
sockets = 2                            # optional (1): sockets or switch domains per node
devices_per_socket = 3
kind = "gpu"                           # or kinds = [...], one per device of the node
links = { intra_socket = { bandwidth_gbs = 300, latency_us = 2 } }   # optional overrides
```

Every error is a `MachineSpecError` naming the file and the field path.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from typing import Any

from unityc.machine.errors import MachineSpecError
from unityc.machine.spec import DTYPES, DeviceKind, Link, Machine, NodeSpec, check_size

GB = 1e9
GIB = 2**30
MIB = 2**20
TFLOPS = 1e12


def us(microseconds: float) -> float:
    """Seconds (divided, not multiplied by 1e-6, so 5 us is exactly 5e-06)."""
    return microseconds / 1e6


LINK_CLASSES = ("intra_socket", "cross_socket", "inter_node")

MAX_NUMBER = 1e12
"""The largest number a spec field may hold (in its unit: TFLOP/s, GB/s, GiB, microseconds):
far above any real machine, low enough that converting to base units stays finite."""


def load_machine(name: str) -> Machine:
    """A preset (`summit:2`, `dgx-a100:1`, `dgx-h100:4`, `cpu:2`) or a path to a TOML spec."""
    from unityc.machine.presets import PRESETS, preset

    if name.endswith(".toml") or os.sep in name or os.path.exists(name):
        return load_spec_file(name)
    if name.split(":", 1)[0] in PRESETS:
        return preset(name)
    known = ", ".join(f"{p}:N" for p in PRESETS)
    raise MachineSpecError(f"unknown machine '{name}': expected a preset ({known}) or a .toml spec file")


def load_spec_file(path: str) -> Machine:
    """A machine from a TOML spec; every error names `path` as given (relative paths are read
    from the current directory)."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise MachineSpecError(f"{path}: no such machine spec file") from None
    except IsADirectoryError:
        raise MachineSpecError(f"{path}: is a directory, not a machine spec file") from None
    except OSError as e:
        raise MachineSpecError(f"{path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise MachineSpecError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise MachineSpecError(f"{path}: not valid TOML: {e}") from None
    default = os.path.splitext(os.path.basename(path))[0]
    return machine_from_dict(data, path, default)


def machine_from_dict(
    data: Mapping[str, Any], source: str = "<spec>", default_name: str = "machine"
) -> Machine:
    """Build and check a machine from parsed TOML."""
    r = _Reader(source)
    r.only(data, "", ("name", "description", "kinds", "links", "nodes"))
    name = r.string(data, "name", default_name)
    description = r.string(data, "description", "")
    kinds_table = r.table(data, "kinds")
    if not kinds_table:
        raise r.error("kinds", "expected at least one device kind table ([kinds.NAME])")
    kinds = tuple(r.kind(k, v, f"kinds.{k}") for k, v in kinds_table.items())
    links = r.links(r.table(data, "links"), "links", None)
    nodes_value = data.get("nodes")
    if nodes_value is None:
        raise r.error("nodes", "missing (a [nodes] table or [[nodes]] array)")
    if isinstance(nodes_value, dict):
        groups = [("nodes", nodes_value)]
    elif isinstance(nodes_value, list) and nodes_value and all(isinstance(g, dict) for g in nodes_value):
        groups = [(f"nodes[{i}]", g) for i, g in enumerate(nodes_value)]
    else:
        raise r.error("nodes", f"expected a table or a non-empty array of tables, got {nodes_value!r}")
    nodes: list[NodeSpec] = []
    kind_names = {k.name for k in kinds}
    devices = 0
    for path, group in groups:
        devices += r.group_devices(group, path)
        check_size(f"{source}: {path}", devices)
        nodes.extend(r.node_group(group, path, links, kind_names))
    if len(nodes) > 1 and "inter_node" not in links:
        raise r.error("links.inter_node", "missing: the machine has more than one node")
    try:
        return Machine(name, kinds, tuple(nodes), description)
    except MachineSpecError as e:
        raise MachineSpecError(f"{source}: {e}") from None


class _Reader:
    """Typed field access that names the file and field path in every error."""

    def __init__(self, source: str):
        self.source = source

    def error(self, path: str, msg: str) -> MachineSpecError:
        return MachineSpecError(f"{self.source}: {path}: {msg}")

    def only(self, table: Mapping[str, Any], path: str, allowed: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                where = f"{path}.{key}" if path else key
                raise self.error(where, f"unknown field (expected one of: {', '.join(allowed)})")

    def table(self, data: Mapping[str, Any], key: str, path: str = "") -> dict[str, Any]:
        value = data.get(key, {})
        if not isinstance(value, dict):
            raise self.error(f"{path}{key}", f"expected a table, got {value!r}")
        return value

    def string(self, data: Mapping[str, Any], key: str, default: str, path: str = "") -> str:
        value = data.get(key, default)
        if not isinstance(value, str):
            raise self.error(f"{path}{key}", f"expected a string, got {value!r}")
        return value

    def number(self, data: Mapping[str, Any], key: str, path: str, default: float | None = None,
               positive: bool = True, at_most_one: bool = False) -> float:  # fmt: skip
        if key not in data:
            if default is None:
                raise self.error(f"{path}.{key}", "missing")
            return default
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.error(f"{path}.{key}", f"expected a number, got {value!r}")
        if not math.isfinite(value) or abs(value) > MAX_NUMBER:
            raise self.error(
                f"{path}.{key}", f"expected a finite number of at most {MAX_NUMBER:g}, got {value!r}"
            )
        if positive and value <= 0:
            raise self.error(f"{path}.{key}", f"expected a positive number, got {value!r}")
        if not positive and value < 0:
            raise self.error(f"{path}.{key}", f"expected a non-negative number, got {value!r}")
        if at_most_one and value > 1:
            raise self.error(f"{path}.{key}", f"expected a fraction in (0, 1], got {value!r}")
        return float(value)

    def count(self, data: Mapping[str, Any], key: str, path: str, default: int | None = None) -> int:
        if key not in data:
            if default is None:
                raise self.error(f"{path}.{key}", "missing")
            return default
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(f"{path}.{key}", f"expected a positive integer, got {value!r}")
        return value

    def kind(self, name: str, table: Any, path: str) -> DeviceKind:
        if not isinstance(table, dict):
            raise self.error(path, f"expected a table, got {table!r}")
        self.only(
            table,
            path,
            (
                "flops_tflops",
                "memory_bandwidth_gbs",
                "memory_gib",
                "compute_efficiency",
                "memory_efficiency",
                "kernel_latency_us",
                "vector_gflops",
                "cold_bandwidth_gbs",
                "cache_bandwidth_gbs",
                "cache_mib",
                "scatter_row_ns",
                "comm_shares_core",
                "collective_handoff_us",
                "allow_tf32",
            ),
        )
        flops_table = table.get("flops_tflops")
        if not isinstance(flops_table, dict) or not flops_table:
            raise self.error(
                f"{path}.flops_tflops", f"expected a table of dtype = TFLOP/s, got {flops_table!r}"
            )
        flops: list[tuple[str, float]] = []
        for dtype in flops_table:
            if dtype not in DTYPES:
                raise self.error(
                    f"{path}.flops_tflops.{dtype}", f"unknown dtype (expected one of: {', '.join(DTYPES)})"
                )
            flops.append((dtype, self.number(flops_table, dtype, f"{path}.flops_tflops") * TFLOPS))
        if "f32" not in flops_table:
            raise self.error(f"{path}.flops_tflops.f32", "missing (the rate of dtypes not listed)")
        allow_tf32, shares = (table.get(key, False) for key in ("allow_tf32", "comm_shares_core"))
        for key, flag in (("allow_tf32", allow_tf32), ("comm_shares_core", shares)):
            if not isinstance(flag, bool):
                raise self.error(f"{path}.{key}", f"expected true or false, got {flag!r}")
        return DeviceKind(
            name=name,
            flops=tuple(flops),
            memory_bandwidth=self.number(table, "memory_bandwidth_gbs", path) * GB,
            memory=self.number(table, "memory_gib", path) * GIB,
            compute_efficiency=self.number(table, "compute_efficiency", path, 1.0, at_most_one=True),
            memory_efficiency=self.number(table, "memory_efficiency", path, 1.0, at_most_one=True),
            kernel_latency=us(self.number(table, "kernel_latency_us", path, 0.0, positive=False)),
            vector_flops=self.number(table, "vector_gflops", path, 0.0, positive=False) * 1e9,
            cold_bandwidth=self.number(table, "cold_bandwidth_gbs", path, 0.0, positive=False) * GB,
            cache_bandwidth=self.number(table, "cache_bandwidth_gbs", path, 0.0, positive=False) * GB,
            cache_bytes=self.number(table, "cache_mib", path, 0.0, positive=False) * MIB,
            scatter_row_time=self.number(table, "scatter_row_ns", path, 0.0, positive=False) * 1e-9,
            comm_shares_core=shares,
            collective_handoff=us(self.number(table, "collective_handoff_us", path, 0.0, positive=False)),
            allow_tf32=allow_tf32,
        )

    def link(self, table: Any, path: str) -> Link:
        if not isinstance(table, dict):
            raise self.error(
                path, f"expected a table {{ bandwidth_gbs = ..., latency_us = ... }}, got {table!r}"
            )
        self.only(table, path, ("bandwidth_gbs", "latency_us"))
        return Link(
            self.number(table, "bandwidth_gbs", path) * GB,
            us(self.number(table, "latency_us", path, positive=False)),
        )

    def links(self, table: dict[str, Any], path: str, base: dict[str, Link] | None) -> dict[str, Link]:
        self.only(table, path, LINK_CLASSES)
        links = dict(base or {})
        for key in LINK_CLASSES:
            if key in table:
                links[key] = self.link(table[key], f"{path}.{key}")
        if base is None and "intra_socket" not in links:
            raise self.error(f"{path}.intra_socket", "missing")
        links.setdefault("cross_socket", links["intra_socket"])
        return links

    def group_devices(self, group: dict[str, Any], path: str) -> int:
        """How many devices a node group has (checked before the group is built)."""
        return (
            self.count(group, "count", path, 1)
            * self.count(group, "sockets", path, 1)
            * self.count(group, "devices_per_socket", path)
        )

    def node_group(
        self, group: dict[str, Any], path: str, links: dict[str, Link], kind_names: set[str]
    ) -> list[NodeSpec]:
        self.only(group, path, ("count", "sockets", "devices_per_socket", "kind", "kinds", "links"))
        count = self.count(group, "count", path, 1)
        sockets = self.count(group, "sockets", path, 1)
        per_socket = self.count(group, "devices_per_socket", path)
        per_node = sockets * per_socket
        if ("kind" in group) == ("kinds" in group):
            raise self.error(
                f"{path}.kind", "give exactly one of 'kind' (all devices) or 'kinds' (one per device)"
            )
        if "kind" in group:
            names = [self.string(group, "kind", "", f"{path}.")] * per_node
            where = [f"{path}.kind"] * per_node
        else:
            names = group["kinds"]
            if (
                not isinstance(names, list)
                or len(names) != per_node
                or not all(isinstance(n, str) for n in names)
            ):
                raise self.error(
                    f"{path}.kinds",
                    f"expected a list of {per_node} kind names (sockets x devices_per_socket)",
                )
            where = [f"{path}.kinds[{i}]" for i in range(per_node)]
        for n, w in zip(names, where, strict=True):
            if n not in kind_names:
                raise self.error(w, f"unknown device kind '{n}' (defined: {', '.join(sorted(kind_names))})")
        own = self.links(self.table(group, "links", f"{path}."), f"{path}.links", links)
        inter = own.get("inter_node", Link(float("inf"), 0.0))  # single-node machines never use it
        socket_names = tuple(tuple(names[s * per_socket : (s + 1) * per_socket]) for s in range(sockets))
        node = NodeSpec(socket_names, own["intra_socket"], own["cross_socket"], inter)
        return [node] * count
