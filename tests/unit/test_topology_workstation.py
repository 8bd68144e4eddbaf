"""Issue 25 point 5, topology on real boxes: a single-NUMA workstation whose devices have no NUMA node in sysfs
(numa_node -1), and a GPU whose PCI device id is not in the reader's table (RTX 6000 Ada, 0x26b1).

The box is a Puget Rackstation Threadripper PRO WRX90 as recorded in public (tests/fixtures/topology/README.md
names the page): pcitree.py's ``threadripper_pro_wrx90`` builds its PCIe tree from the recorded ``lspci -tv``, and
the reader's matrix is compared with the recorded ``nvidia-smi topo -m``. Each test marked "old code: ..." failed
before this change."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import topology
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "topology"
NAME = "NVIDIA RTX 6000 Ada Generation"


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return simulators.pcitree().build(tmp_path_factory.mktemp("wrx90") / "root", "threadripper_pro_wrx90")


def nvml_gpus():
    """What gpu.read() gives there: NVML names the GPU; no NUMA node (nvmlDeviceGetNumaNodeId NotSupported, sysfs
    -1); the CPU affinity is every CPU."""
    return [
        {"index": i, "name": NAME, "pci_bus_id": f"00000000:{bus}:00.0", "pci_device_id": "0x26B110DE",
         "nvlink": None, "fabric": None, "numa_node": None, "cpu_affinity": "0-23"}
        for i, bus in enumerate(("C1", "C2"))
    ]  # fmt: skip


def published():
    lines = [x for x in (FIX / "threadripper-pro-wrx90-topo-m.txt").read_text().splitlines() if not x.startswith("#")]
    header = lines[0].split("\t")[1:]
    rename = {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    out = {}
    for line in lines[1:]:
        cells = line.split("\t")
        out[rename.get(cells[0], cells[0])] = {
            rename.get(col, col): cell.strip()
            for col, cell in zip(header, cells[1:], strict=False)
            if re.match(r"^(GPU|NIC)\d+$", col)
        }
    return out


def test_the_recorded_tree_has_no_numa_node_in_sysfs(root):
    assert (root / "sys/bus/pci/devices/0000:c1:00.0/numa_node").read_text() == "-1\n"
    assert (root / "sys/bus/pci/devices/0000:21:00.0/numa_node").read_text() == "-1\n"


def test_matrix_matches_the_recorded_nvidia_smi_topo(root):
    topo = topology.collect(HostFS(str(root)), nvml_gpus())
    expected = published()
    assert set(expected) == {"GPU0", "GPU1", "mlx5_0", "mlx5_1"}
    assert {row: topo["matrix"][row] for row in expected} == expected


def test_single_numa_node_is_every_devices_node(root):
    """old code: numa_node null and `numactl --physcpubind=0-23` where nvidia-smi topo -m says NUMA affinity 0."""
    topo = topology.collect(HostFS(str(root)), nvml_gpus())
    assert [g["numa_node"] for g in topo["gpus"]] == [0, 0]
    assert [n["numa_node"] for n in topo["nics"]] == [0, 0]
    assert [b["numactl"] for b in topo["bindings"]] == ["numactl --cpunodebind=0 --membind=0"] * 2
    assert topo["bindings"][0]["nics"] == ["mlx5_0", "mlx5_1"]


def test_gres_type_comes_from_the_name_nvml_gives(root):
    """old code: Type=rtx (the first word: RTX A6000, RTX 6000 Ada and RTX 4090 all the same type)."""
    topo = topology.collect(HostFS(str(root)), nvml_gpus())
    assert topo["gres"] == [
        "Name=gpu Type=rtx_6000_ada File=/dev/nvidia0 Cores=0-23",
        "Name=gpu Type=rtx_6000_ada File=/dev/nvidia1 Cores=0-23",
    ]


def test_without_nvml_the_drivers_model_names_the_type(root, tmp_path):
    """old code: no Type= at all (0x26b1 not in the device-id table, no name read)."""
    topo = topology.collect(HostFS(str(root)), [])
    assert [g["name"] for g in topo["gpus"]] == [NAME, NAME]
    assert topo["gres"][0] == "Name=gpu Type=rtx_6000_ada File=/dev/nvidia0 Cores=0-23"
    assert [g["numa_node"] for g in topo["gpus"]] == [0, 0]


def test_the_device_id_table_is_only_the_fallback(tmp_path):
    root = simulators.pcitree().build(tmp_path / "root", "threadripper_pro_wrx90")
    for bdf in ("0000:c1:00.0", "0000:c2:00.0"):
        (root / f"proc/driver/nvidia/gpus/{bdf}/information").write_text("Device Minor: \t 0\n")
    topo = topology.collect(HostFS(str(root)), [])
    assert topo["gpus"][0]["name"] is None and "Type=rtx_6000_ada" in topo["gres"][0]
    # neither a name nor a known device id: no Type, rather than a wrong one
    (root / "sys/bus/pci/devices/0000:c1:00.0/device").write_text("0x9999\n")
    assert topology.collect(HostFS(str(root)), [])["gres"][0].startswith("Name=gpu File=/dev/nvidia")


@pytest.mark.parametrize(
    ("name", "gres_type"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA A100 80GB PCIe", "a100"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx_6000_ada"),
        ("NVIDIA RTX A6000", "rtx_a6000"),
        ("NVIDIA GeForce RTX 4090", "rtx_4090"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA H100 NVL", "h100_nvl"),
        ("NVIDIA", None),
        (None, None),
    ],
)
def test_gres_type_normalisation(name, gres_type):
    assert topology.gres_type(name) == gres_type


def test_several_numa_nodes_keep_an_unknown_node_unknown(tmp_path):
    root = simulators.pcitree().build(tmp_path / "root", "l40s_pcie")
    (root / "sys/bus/pci/devices/0000:38:00.0/numa_node").write_text("-1\n")
    topo = topology.collect(HostFS(str(root)), [])
    assert topo["gpus"][0]["numa_node"] is None and topo["gpus"][2]["numa_node"] == 1
