"""Machine models: device kinds, links, nodes, and the topology questions the cost model asks.

A machine is a list of nodes; a node is a list of sockets (or NVSwitch domains); a socket holds
devices. Devices are numbered globally node by node, socket by socket. Every value is in SI base
units: FLOP/s, bytes/s, bytes, seconds.

Links are priced per class, from the fastest to the slowest:

* `intra_socket`: between two devices of one socket or switch (NVLink, NVSwitch, shared memory);
* `cross_socket`: between devices of two sockets of one node (Summit's X-bus);
* `inter_node`: between two nodes; its bandwidth is the node's aggregate NIC bandwidth (both
  Summit EDR ports: 25 GB/s), since one ring or tree step between two nodes can use all of it.

All values are frozen and hashable, so the search can cache on them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from unityc.machine.errors import MachineSpecError

MAX_DEVICES = 65_536
"""The most devices a machine may have: the search, the cost model and the generated programs
enumerate devices (and each op's tasks, up to one per device), so a machine is refused before
anything proportional to its size is built (`check_size`)."""

DTYPES = ("f16", "bf16", "f32", "tf32", "f64")
"""Keys of a device kind's peak FLOP/s table; `tf32` is the tensor-core rate for f32 matmuls."""


@dataclass(frozen=True)
class DeviceKind:
    """A device model: peak rates, memory, and how close to them kernels get."""

    name: str
    flops: tuple[tuple[str, float], ...]
    """(dtype, peak FLOP/s); a dtype not listed runs at the `f32` rate."""
    memory_bandwidth: float
    memory: float
    compute_efficiency: float = 1.0
    memory_efficiency: float = 1.0
    kernel_latency: float = 0.0
    """Fixed cost of one kernel (launch, framework overhead), seconds."""
    vector_flops: float = 0.0
    """FLOP/s of element-wise and other non-matmul ops in f32, where they run far below the
    matmul rate (a CPU core: no blocking, one pass per op); 0: the `flops` table's rate."""
    cold_bandwidth: float = 0.0
    """Bytes/s at which a matmul-like kernel moves operands and results that are not in cache,
    on top of its compute (not overlapped): t = latency + FLOPs / rate + bytes / cold_bandwidth.
    A CPU core in a training step: a layer's weight was last touched a step ago and its saved
    activations a forward ago, so the products find them in memory, and a GEMM's packing stalls
    on them. 0: the roofline's max(compute, bytes / memory bandwidth) alone (GPUs)."""
    cache_bandwidth: float = 0.0
    """Bytes/s at which a kernel streams operands and results that fit in the last-level cache
    (a kernel moving at most `cache_bytes`): a CPU core's element-wise kernels and optimizer
    update on a model whose tensors sit in its L3 run at this rate, not at the DRAM stream rate
    `memory_bandwidth`; 0: `memory_bandwidth` for every kernel (GPUs)."""
    cache_bytes: float = 0.0
    """The most bytes a kernel moves and still streams at `cache_bandwidth`."""
    scatter_row_time: float = 0.0
    """Seconds per looked-up row in the backward of an embedding (the framework sorts the
    indices and adds each row's gradient into the table's one by one); 0: none beyond the
    roofline."""
    collective_bytes: tuple[tuple[str, float], ...] = ()
    """(pattern, factor): the bytes part of a collective of this pattern among devices of this
    kind takes `factor` times what the ring formula gives (`cost.communication`), where the
    kind's collective library does not run the pattern as a ring (gloo's all-gather and
    reduce-scatter on CPU processes); patterns not listed: 1."""
    comm_shares_core: bool = False
    """The collective library's threads run on the core this device computes on (a CPU process
    per core, no spare core for gloo's threads): a collective in flight keeps the device from
    computing, so its communication and its compute run one at a time, not overlapped as on a
    GPU's separate streams (`cost.schedule`). False: overlapped (GPUs)."""
    collective_handoff: float = 0.0
    """Seconds each collective among devices of this kind takes on top of its alpha-beta time
    for the operating system's hand-offs between a rank's training thread and the collective's
    threads sharing its core (`comm_shares_core`): under the default scheduler a woken thread
    waits for the running one's time slice, in every step of the collective and when the
    training thread resumes. 0: none (GPUs; a CPU run under SCHED_FIFO, where a woken thread
    gets the core at once)."""
    allow_tf32: bool = False
    """Whether f32 matmul-like ops run at the `tf32` rate (off by default, as in PyTorch)."""
    reserved: float = 0.0
    """Bytes the framework holds on the device whatever the plan (context, workspaces)."""

    def stream_bandwidth(self, nbytes: float) -> float:
        """Bytes/s a kernel moving `nbytes` streams at, before `memory_efficiency`: the cache's
        rate where they fit in it (`cache_bandwidth`, `cache_bytes`), else `memory_bandwidth`."""
        if self.cache_bandwidth > 0 and nbytes <= self.cache_bytes:
            return self.cache_bandwidth
        return self.memory_bandwidth

    def collective_factor(self, pattern: str) -> float:
        """How many times the ring formula's bytes time `pattern` takes (`collective_bytes`)."""
        return dict(self.collective_bytes).get(pattern, 1.0)

    def op_flops(self, dtype: str, matmul: bool) -> float:
        """The FLOP/s an op's kernels reach at peak: matmul-like ops the `flops` table's, others
        `vector_flops` where set (slower dtypes proportionally slower, none faster)."""
        if matmul or self.vector_flops <= 0:
            return self.peak_flops(dtype, matmul)
        table = dict(self.flops)
        return self.vector_flops * min(1.0, table.get(dtype, table["f32"]) / table["f32"])

    def peak_flops(self, dtype: str, matmul: bool = False) -> float:
        table = dict(self.flops)
        if dtype == "f32" and matmul and self.allow_tf32 and "tf32" in table:
            return table["tf32"]
        return table.get(dtype, table["f32"])

    def speed(self, dtype: str = "f32") -> float:
        """The FLOP/s its matmuls reach (peak x efficiency): how fast it is against other kinds."""
        return self.peak_flops(dtype, True) * self.compute_efficiency


@dataclass(frozen=True)
class Link:
    """A link class: bandwidth per direction (bytes/s) and latency (seconds)."""

    bandwidth: float
    latency: float


@dataclass(frozen=True)
class NodeSpec:
    """One node: device kind names grouped by socket, its links, its NIC."""

    sockets: tuple[tuple[str, ...], ...]
    intra_socket: Link
    cross_socket: Link
    inter_node: Link

    @property
    def num_devices(self) -> int:
        return sum(len(s) for s in self.sockets)


@dataclass(frozen=True)
class Device:
    """Where a global device sits."""

    index: int
    node: int
    socket: int
    local: int
    """Index within its node."""
    kind: DeviceKind


@dataclass(frozen=True)
class Machine:
    name: str
    kinds: tuple[DeviceKind, ...]
    nodes: tuple[NodeSpec, ...]
    description: str = ""
    _devices: tuple[Device, ...] = field(default=(), repr=False, compare=False)
    _first: tuple[int, ...] = field(default=(), repr=False, compare=False)
    _hash: int = field(default=0, repr=False, compare=False)
    _node_size: int | None = field(default=None, repr=False, compare=False)
    _node_runs: tuple[tuple[NodeSpec, int], ...] = field(default=(), repr=False, compare=False)

    def __hash__(self) -> int:  # cached: the cost model hashes the machine on every lookup
        return self._hash

    def __eq__(self, other: object) -> bool:
        """Equal fields; the nodes compared run by run (a machine of 8,192 nodes repeats one
        spec): the cost model's caches are keyed by the machine, and an equal machine built
        again (another `load_machine`) compared node by node took 9 ms a cache hit."""
        if self is other:
            return True
        if not isinstance(other, Machine):
            return NotImplemented
        return (
            self._hash == other._hash
            and (self.name, self.kinds, self.description) == (other.name, other.kinds, other.description)
            and self._node_runs == other._node_runs
        )

    def __post_init__(self) -> None:
        check_size(self.name, _count(self.nodes))
        object.__setattr__(self, "_hash", hash((self.name, self.kinds, self.nodes)))
        object.__setattr__(self, "_node_runs", _runs(self.nodes))
        kinds = {k.name: k for k in self.kinds}
        devices: list[Device] = []
        first: list[int] = []
        for n, node in enumerate(self.nodes):
            first.append(len(devices))
            local = 0
            for s, socket in enumerate(node.sockets):
                for name in socket:
                    if name not in kinds:
                        raise MachineSpecError(f"{self.name}: node {n} uses unknown device kind '{name}'")
                    devices.append(Device(len(devices), n, s, local, kinds[name]))
                    local += 1
        object.__setattr__(self, "_devices", tuple(devices))
        object.__setattr__(self, "_first", tuple(first))
        sizes = {node.num_devices for node in set(self.nodes)}
        object.__setattr__(self, "_node_size", sizes.pop() if len(sizes) == 1 else None)

    def with_memory(self, capacity: float) -> Machine:
        """The same machine with `capacity` bytes per device (a memory budget: `--memory-budget`)."""
        if not capacity > 0:
            raise ValueError(f"a memory budget must be positive, got {capacity} bytes")
        kinds = tuple(dataclasses.replace(k, memory=float(capacity)) for k in self.kinds)
        return Machine(self.name, kinds, self.nodes, self.description)

    # --- devices ---------------------------------------------------------------------------

    @property
    def num_devices(self) -> int:
        return len(self._devices)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    @property
    def node_size(self) -> int | None:
        """Devices per node where every node has as many (else None)."""
        return self._node_size

    def device(self, index: int) -> Device:
        if not 0 <= index < len(self._devices):
            raise ValueError(f"device {index} does not exist on {self.name} ({self.num_devices} devices)")
        return self._devices[index]

    @property
    def devices(self) -> tuple[Device, ...]:
        return self._devices

    def kind_of(self, index: int) -> DeviceKind:
        return self.device(index).kind

    def global_device(self, start: int, node_offset: int, local_offset: int) -> int:
        """The device `node_offset` nodes and `local_offset` devices after `start` (a machine
        view's placement): same position within the target node as `start` has in its own.
        Device offsets past the node's last device continue on the following nodes (devices
        are numbered node by node), so one task dimension may span nodes (48-way data
        parallelism on 8 nodes of 6)."""
        origin = self.device(start)
        node = origin.node + node_offset
        if node >= self.num_nodes:
            raise ValueError(
                f"a machine view reaches node {node} from device {start}, but {self.name} has "
                f"{self.num_nodes} node(s)"
            )
        index = self._first[node] + origin.local + local_offset
        if index >= self.num_devices:
            raise ValueError(
                f"a machine view reaches device {index} from device {start}, but {self.name} has "
                f"{self.num_devices} devices"
            )
        return index

    @property
    def shared_cores(self) -> frozenset[int]:
        """The devices whose kind runs communication on its compute core (`comm_shares_core`)."""
        return _shared_cores(self)

    def total_peak_flops(self, dtype: str, matmul: bool = False) -> float:
        return _total_peak_flops(self, dtype, matmul)

    # --- links -----------------------------------------------------------------------------

    def link(self, a: int, b: int) -> Link | None:
        """The link class between two devices; None for a device and itself."""
        if a == b:
            return None
        da, db = self.device(a), self.device(b)
        if da.node != db.node:
            na, nb = self.nodes[da.node].inter_node, self.nodes[db.node].inter_node
            return Link(min(na.bandwidth, nb.bandwidth), max(na.latency, nb.latency))
        node = self.nodes[da.node]
        return node.intra_socket if da.socket == db.socket else node.cross_socket

    def slowest_link(self, devices: Iterable[int]) -> Link | None:
        """The lowest bandwidth and highest latency among the link classes a collective over
        these devices uses (None when they are one device)."""
        if isinstance(devices, range) and devices.step > 0:  # a big group, priced once per range
            return _slowest_range(self, devices)
        return _slowest(self, tuple(sorted(set(devices))))

    def spans_nodes(self, devices: Sequence[int]) -> bool:
        return len({self.device(d).node for d in devices}) > 1

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for d in self._devices:
            counts[d.kind.name] = counts.get(d.kind.name, 0) + 1
        kinds = ", ".join(f"{n}x {k}" for k, n in counts.items())
        nodes = f"{self.num_nodes} node{'s' if self.num_nodes != 1 else ''}"
        return f"{self.name}: {nodes}, {self.num_devices} devices ({kinds})"


def check_size(name: str, devices: int) -> None:
    """Refuses a machine of more than `MAX_DEVICES` devices (before it is built)."""
    if devices > MAX_DEVICES:
        raise MachineSpecError(
            f"{name}: {devices:,} devices; at most {MAX_DEVICES:,} are supported (the search and "
            "the cost model enumerate devices and tasks)"
        )


def _runs(nodes: tuple[NodeSpec, ...]) -> tuple[tuple[NodeSpec, int], ...]:
    """The nodes as runs of one spec (spec, how many in a row)."""
    out: list[tuple[NodeSpec, int]] = []
    for node in nodes:
        if out and (out[-1][0] is node or out[-1][0] == node):
            out[-1] = (node, out[-1][1] + 1)
        else:
            out.append((node, 1))
    return tuple(out)


def _count(nodes: tuple[NodeSpec, ...]) -> int:
    """Devices over all nodes (nodes repeat one spec per group: counted per distinct spec)."""
    per: dict[NodeSpec, int] = {}
    for node in nodes:
        per[node] = per.get(node, 0) + 1
    return sum(node.num_devices * n for node, n in per.items())


@functools.lru_cache(maxsize=64)
def _total_peak_flops(machine: Machine, dtype: str, matmul: bool) -> float:
    return sum(d.kind.peak_flops(dtype, matmul) for d in machine.devices)


@functools.lru_cache(maxsize=64)
def _shared_cores(machine: Machine) -> frozenset[int]:
    return frozenset(d.index for d in machine.devices if d.kind.comm_shares_core)


@functools.lru_cache(maxsize=4096)
def _slowest_range(machine: Machine, devices: range) -> Link | None:
    return _slowest(machine, tuple(devices))


@functools.lru_cache(maxsize=65536)
def _slowest(machine: Machine, devices: tuple[int, ...]) -> Link | None:
    if len(devices) < 2:
        return None
    links: list[Link] = []
    by_node: dict[int, set[int]] = {}
    for d in devices:
        dev = machine.device(d)
        by_node.setdefault(dev.node, set()).add(dev.socket)
    sockets_used: dict[tuple[int, int], int] = {}
    for d in devices:
        dev = machine.device(d)
        sockets_used[dev.node, dev.socket] = sockets_used.get((dev.node, dev.socket), 0) + 1
    for (n, _), count in sockets_used.items():
        if count > 1:
            links.append(machine.nodes[n].intra_socket)
    for n, sockets in by_node.items():
        if len(sockets) > 1:
            links.append(machine.nodes[n].cross_socket)
    if len(by_node) > 1:
        links.extend(machine.nodes[n].inter_node for n in by_node)
    return Link(min(lk.bandwidth for lk in links), max(lk.latency for lk in links))
