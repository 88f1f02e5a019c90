"""Machine specs: the TOML format, its errors, presets and topology."""

from __future__ import annotations

import dataclasses
import os

import pytest

from unityc.machine import Link, MachineSpecError, load_machine, load_spec_file, machine_from_dict

HERE = os.path.dirname(__file__)
TWO_NODES = os.path.join(HERE, "two_nodes.toml")
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "machines")


def test_two_node_spec() -> None:
    m = load_spec_file(TWO_NODES)
    assert m.name == "two-nodes"
    assert (m.num_nodes, m.num_devices) == (2, 4)
    kind = m.kind_of(3)
    assert kind.peak_flops("f32") == 1e12
    assert kind.peak_flops("f16") == 4e12
    assert kind.peak_flops("bf16") == 1e12  # not listed: the f32 rate
    assert kind.memory_bandwidth == 1e11
    assert kind.memory == 2**30
    assert [(d.node, d.local) for d in m.devices] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_links_and_slowest_link() -> None:
    m = load_spec_file(TWO_NODES)
    intra, inter = Link(100e9, 1e-6), Link(10e9, 5e-6)
    assert m.link(0, 0) is None
    assert m.link(0, 1) == intra
    assert m.link(1, 2) == inter
    assert m.slowest_link([0]) is None
    assert m.slowest_link([2, 3]) == intra
    assert m.slowest_link([0, 1, 2]) == inter


def test_global_device_follows_views() -> None:
    m = load_spec_file(TWO_NODES)
    assert m.global_device(0, 0, 1) == 1
    assert m.global_device(0, 1, 0) == 2
    assert m.global_device(1, 1, 0) == 3  # same position in the next node
    with pytest.raises(ValueError, match="node 2"):
        m.global_device(2, 1, 0)
    assert m.global_device(1, 0, 1) == 2  # past the node's last device: the next node's first
    with pytest.raises(ValueError, match="reaches device 4 from device 3"):
        m.global_device(3, 0, 1)


def test_summit_preset() -> None:
    m = load_machine("summit:2")
    assert (m.num_nodes, m.num_devices) == (2, 12)
    assert m.kind_of(0).name == "V100-SXM2-16GB"
    assert m.kind_of(0).peak_flops("f32") == pytest.approx(15.7e12)
    assert m.kind_of(0).peak_flops("f16") == pytest.approx(125e12)
    assert m.link(0, 2).bandwidth == 50e9  # NVLink2 within a socket
    assert m.link(0, 3).bandwidth == 32e9  # X-bus
    assert m.link(0, 6).bandwidth == 25e9  # two EDR ports
    assert m.slowest_link(range(12)).bandwidth == 25e9


@pytest.mark.parametrize(
    ("name", "devices", "bf16", "nic"),
    [("dgx-a100:2", 16, 312e12, 200e9), ("dgx-h100:1", 8, 989.5e12, None), ("cpu:2", 2, 1640e9, None)],
)
def test_other_presets(name: str, devices: int, bf16: float, nic: float | None) -> None:
    m = load_machine(name)
    assert m.num_devices == devices
    assert m.kind_of(0).peak_flops("bf16") == pytest.approx(bf16)
    if nic is not None:
        assert m.link(0, 8).bandwidth == nic


def test_cpu_preset_divides_memory() -> None:
    assert load_machine("cpu:4").kind_of(0).memory == pytest.approx(
        load_machine("cpu:1").kind_of(0).memory / 4
    )


def test_element_wise_ops_run_at_the_vector_rate() -> None:
    """`vector_gflops` is the rate of non-matmul ops (f64 proportionally slower, bf16 no faster);
    matmul-like ops and the peak table keep the `flops` rates. The cpu preset sets it."""
    kind = machine_from_dict(_with("kinds.g.vector_gflops", 6), "m.toml").kind_of(0)
    f32 = kind.peak_flops("f32")
    assert kind.op_flops("f32", False) == pytest.approx(6e9)
    assert kind.op_flops("f32", True) == kind.peak_flops("f32", True) == f32
    without = machine_from_dict(_with("kinds.g.memory_gib", 1), "m.toml").kind_of(0)
    assert without.op_flops("f32", False) == f32
    cpu = load_machine("cpu:2").kind_of(0)
    assert cpu.op_flops("f64", False) < cpu.op_flops("f32", False) == cpu.op_flops("bf16", False)
    assert cpu.op_flops("f32", False) < cpu.op_flops("f32", True)


def test_cold_bandwidth_and_scatter_rows() -> None:
    """`cold_bandwidth_gbs` and `scatter_row_ns` are read from a spec (0: off, as on GPUs); the
    cpu preset sets both, the GPU presets neither."""
    kind = machine_from_dict(_with("kinds.g.cold_bandwidth_gbs", 10), "m.toml").kind_of(0)
    assert kind.cold_bandwidth == pytest.approx(10e9) and kind.scatter_row_time == 0
    kind = machine_from_dict(_with("kinds.g.scatter_row_ns", 60), "m.toml").kind_of(0)
    assert kind.scatter_row_time == pytest.approx(60e-9) and kind.cold_bandwidth == 0
    data = _with("kinds.g.cache_bandwidth_gbs", 33)
    data["kinds"]["g"]["cache_mib"] = 192
    kind = machine_from_dict(data, "m.toml").kind_of(0)
    assert kind.cache_bandwidth == pytest.approx(33e9) and kind.cache_bytes == 192 * 2**20
    cpu = load_machine("cpu:2").kind_of(0)
    assert cpu.cold_bandwidth > 0 and cpu.scatter_row_time > 0 and cpu.cache_bandwidth > cpu.memory_bandwidth
    for name in ("summit:1", "dgx-a100:1", "dgx-h100:1"):
        gpu = load_machine(name).kind_of(0)
        assert gpu.cold_bandwidth == 0 and gpu.scatter_row_time == 0 and gpu.cache_bandwidth == 0


def test_comm_shares_core_and_handoff() -> None:
    """`comm_shares_core` and `collective_handoff_us` are read from a spec (off by default, as on
    GPUs); the cpu preset sets both."""
    data = _with("kinds.g.comm_shares_core", True)
    data["kinds"]["g"]["collective_handoff_us"] = 640
    kind = machine_from_dict(data, "m.toml").kind_of(0)
    assert kind.comm_shares_core and kind.collective_handoff == pytest.approx(640e-6)
    kind = machine_from_dict(_with("kinds.g.memory_gib", 16), "m.toml").kind_of(0)
    assert not kind.comm_shares_core and kind.collective_handoff == 0
    cpu = load_machine("cpu:2").kind_of(0)
    assert cpu.comm_shares_core and cpu.collective_handoff > 0


def test_mixed_example() -> None:
    m = load_machine(os.path.join(EXAMPLES, "mixed.toml"))
    assert m.num_devices == 14
    assert [m.kind_of(i).name for i in (0, 6, 9, 10)] == ["v100", "a100", "a100", "v100"]
    assert m.link(6, 13).bandwidth == 300e9  # the switch of node 1
    assert m.link(0, 1).bandwidth == 50e9
    assert m.kind_of(6).peak_flops("f32", matmul=True) == 156e12  # allow_tf32


BASE = {
    "kinds": {"g": {"flops_tflops": {"f32": 1.0}, "memory_bandwidth_gbs": 1, "memory_gib": 1}},
    "links": {"intra_socket": {"bandwidth_gbs": 1, "latency_us": 1}},
    "nodes": {"devices_per_socket": 2, "kind": "g"},
}


def _with(path: str, value: object) -> dict:
    import copy

    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    table = data
    for p in parents:
        table = table.setdefault(p, {})
    if value is None:
        del table[last]
    else:
        table[last] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "nodes.devices_per_socket",
            0,
            "m.toml: nodes.devices_per_socket: expected a positive integer, got 0",
        ),
        ("nodes.devices_per_socket", None, "m.toml: nodes.devices_per_socket: missing"),
        ("nodes.kind", "h", "m.toml: nodes.kind: unknown device kind 'h'"),
        ("nodes.sockets", "two", "m.toml: nodes.sockets: expected a positive integer, got 'two'"),
        ("nodes.count", 2, "m.toml: links.inter_node: missing"),
        ("kinds.g.memory_gib", -1, "m.toml: kinds.g.memory_gib: expected a positive number, got -1"),
        ("kinds.g.flops_tflops", {"f8": 1.0}, "m.toml: kinds.g.flops_tflops.f8: unknown dtype"),
        ("kinds.g.flops_tflops", {"f16": 1.0}, "m.toml: kinds.g.flops_tflops.f32: missing"),
        ("kinds.g.compute_efficiency", 1.5, "m.toml: kinds.g.compute_efficiency: expected a fraction"),
        ("kinds.g.vector_gflops", -1, "m.toml: kinds.g.vector_gflops: expected a non-negative number"),
        ("kinds.g.cold_bandwidth_gbs", -1, "m.toml: kinds.g.cold_bandwidth_gbs: expected a non-negative"),
        ("kinds.g.scatter_row_ns", "x", "m.toml: kinds.g.scatter_row_ns: expected a number"),
        ("kinds.g.comm_shares_core", 1, "m.toml: kinds.g.comm_shares_core: expected true or false"),
        (
            "kinds.g.collective_handoff_us",
            -1,
            "m.toml: kinds.g.collective_handoff_us: expected a non-negative",
        ),
        ("kinds.g.color", "red", "m.toml: kinds.g.color: unknown field"),
        ("links.intra_socket", None, "m.toml: links.intra_socket: missing"),
        ("links.intra_socket.latency_us", "fast", "m.toml: links.intra_socket.latency_us: expected a number"),
        ("nodes", [], "m.toml: nodes: expected a table or a non-empty array of tables"),
        ("kinds", {}, "m.toml: kinds: expected at least one device kind"),
    ],
)
def test_spec_errors_name_the_field(path: str, value: object, message: str) -> None:
    with pytest.raises(MachineSpecError) as info:
        machine_from_dict(_with(path, value), "m.toml")
    assert str(info.value).startswith(message)
    assert isinstance(info.value, ValueError)


def test_kinds_list_must_match_devices() -> None:
    data = _with("nodes.kind", None)
    data["nodes"]["kinds"] = ["g"]
    with pytest.raises(MachineSpecError, match=r"nodes.kinds: expected a list of 2 kind names"):
        machine_from_dict(data, "m.toml")


def test_file_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "broken.toml"
    bad.write_text("name = [")
    with pytest.raises(MachineSpecError, match=r"broken\.toml: not valid TOML"):
        load_machine(str(bad))
    with pytest.raises(MachineSpecError, match="no such machine spec file"):
        load_machine(str(tmp_path / "missing.toml"))
    with pytest.raises(MachineSpecError, match="unknown machine 'tpu:4'"):
        load_machine("tpu:4")
    with pytest.raises(MachineSpecError, match="positive integer, got 'x'"):
        load_machine("summit:x")


# --- refusals (issue 14) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("kinds.g.memory_gib", float("nan"), "m.toml: kinds.g.memory_gib: expected a finite number"),
        ("kinds.g.memory_gib", float("inf"), "m.toml: kinds.g.memory_gib: expected a finite number"),
        (
            "kinds.g.flops_tflops",
            {"f32": 1e308},
            "m.toml: kinds.g.flops_tflops.f32: expected a finite number",
        ),
        (
            "links.intra_socket.latency_us",
            float("nan"),
            "m.toml: links.intra_socket.latency_us: expected a finite",
        ),
        ("kinds.g.compute_efficiency", float("nan"), "m.toml: kinds.g.compute_efficiency: expected a finite"),
        ("nodes.count", 10**12, "m.toml: nodes: 2,000,000,000,000 devices; at most 65,536"),
        ("nodes.devices_per_socket", 2**63, "m.toml: nodes: 9,223,372,036,854,775,808 devices; at most"),
    ],
)
def test_non_finite_numbers_and_huge_machines_are_refused(path: str, value: object, message: str) -> None:
    with pytest.raises(MachineSpecError) as info:
        machine_from_dict(_with(path, value), "m.toml")
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("summit", "machine 'summit': give the number of nodes, e.g. 'summit:1'"),
        ("cpu", "machine 'cpu': give the number of processes, e.g. 'cpu:1'"),
        ("dgx-a100:125000", "dgx-a100:125000: 1,000,000 devices; at most 65,536 are supported"),
        ("cpu:1000000", "cpu:1000000: 1,000,000 devices; at most 65,536 are supported"),
    ],
)
def test_presets_without_a_count_or_too_big_are_refused(name: str, message: str) -> None:
    with pytest.raises(MachineSpecError) as info:
        load_machine(name)
    assert str(info.value).startswith(message)


def test_a_million_device_spec_file_is_refused_before_it_is_built(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = tmp_path / "million.toml"
    spec.write_text(
        "[kinds.g]\nflops_tflops = { f32 = 1.0 }\nmemory_bandwidth_gbs = 1\nmemory_gib = 1\n"
        "[links]\nintra_socket = { bandwidth_gbs = 1, latency_us = 1 }\n"
        "inter_node = { bandwidth_gbs = 1, latency_us = 1 }\n"
        "[nodes]\ncount = 125000\ndevices_per_socket = 8\nkind = 'g'\n"
    )
    with pytest.raises(MachineSpecError, match=r"million\.toml: nodes: 1,000,000 devices; at most 65,536"):
        load_machine(str(spec))


def test_unreadable_spec_files_name_the_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(MachineSpecError, match=f"{tmp_path}: is a directory"):
        load_machine(str(tmp_path))
    binary = tmp_path / "sub" / "binary.toml"
    binary.parent.mkdir()
    binary.write_bytes(b'name = "\xff"\n')
    with pytest.raises(MachineSpecError, match=r"sub/binary\.toml: not UTF-8"):
        load_machine(str(binary))
    broken = tmp_path / "sub" / "broken.toml"
    broken.write_text("name = [")
    with pytest.raises(MachineSpecError, match=r"sub/broken\.toml: not valid TOML"):
        load_machine(str(broken))


def test_total_peak_flops_counts_every_device() -> None:
    m = load_machine("summit:2")
    assert m.total_peak_flops("f32") == pytest.approx(12 * 15.7e12)


def test_machines_built_twice_are_equal_and_others_not() -> None:
    """Equality compares the nodes run by run (the cost model's caches key on the machine):
    the same fields, nothing less."""
    a, b = load_machine("dgx-a100:64"), load_machine("dgx-a100:64")
    assert a is not b and a == b and hash(a) == hash(b)
    assert a != load_machine("dgx-a100:63") and a != a.with_memory(8e9)
    mixed = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "machines", "hetero_v100_m4.toml")
    m = load_machine(mixed)
    assert m == load_machine(mixed)
    flipped = dataclasses.replace(m, nodes=tuple(reversed(m.nodes)))
    assert (flipped == m) == (flipped.nodes == m.nodes)
