"""The topology reader (plugins/module_utils/topology.py) over sysfs trees from tests/sim/host/pcitree.py.

The HGX H100 matrix is checked against a published `nvidia-smi topo -m` of a DGX H100
(https://github.com/vllm-project/vllm/issues/13855, transcribed in tests/fixtures/topology/dgx-h100-topo-m.txt).
The GPU lists stand for what gpu.read() returns (the fields the reader uses); the integration test reads them
through the simulated NVML instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import topology
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "topology"
NAMES = {"h100": "NVIDIA H100 80GB HBM3", "l40s": "NVIDIA L40S"}


def pcitree():
    return simulators.pcitree()


def nvml_gpus(name: str, fabric: bool = True) -> list[dict]:
    """gpu.read()'s GPUs for a platform: NVML bus id form, NVLink 18/18 and a completed fabric on H100."""
    out = []
    for g in pcitree().platform(name)["gpus"]:
        dom, rest = g["bdf"].split(":", 1)
        h100 = g["model"] == "h100"
        out.append(
            {
                "index": g["index"],
                "name": NAMES[g["model"]],
                "pci_bus_id": f"{int(dom, 16):08X}:{rest.upper()}",
                "pci_device_id": "0x233010DE" if h100 else "0x26B910DE",
                "nvlink": {"up": 18, "total": 18, "down": []} if h100 else None,
                "fabric": {"state": "completed"} if h100 and fabric else None,
                "numa_node": g["node"],
                "cpu_affinity": None,
            }
        )
    return out


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("topology")
    return {name: pcitree().build(base / name, name) for name in pcitree().PLATFORMS}


def collect(root, gpus):
    return topology.collect(HostFS(str(root)), gpus)


def published():
    """{row: {column: category}} of the DGX H100 paste, NICn renamed mlx5_n."""
    lines = [line for line in (FIX / "dgx-h100-topo-m.txt").read_text().splitlines() if not line.startswith("#")]
    header = lines[0].split("\t")[1:]
    rename = {f"NIC{i}": f"mlx5_{i}" for i in range(12)}
    out = {}
    for line in lines[1:]:
        cells = line.split("\t")
        row = rename.get(cells[0], cells[0])
        pairs = zip(header, cells[1:], strict=False)  # the NIC0 row has no CPU/NUMA affinity cells
        out[row] = {rename.get(col, col): cell for col, cell in pairs if col.startswith(("GPU", "NIC"))}
    return out


def test_hgx_matrix_matches_published_dgx_h100(roots):
    topo = collect(roots["hgx_h100"], nvml_gpus("hgx_h100"))
    expected = published()
    assert set(expected) == {f"GPU{i}" for i in range(8)} | {"mlx5_0"}
    problems = [
        f"{row}/{col}: published {cat}, got {topo['matrix'][row][col]}"
        for row, cells in expected.items()
        for col, cat in cells.items()
        if topo["matrix"][row][col] != cat
    ]
    assert not problems, "\n".join(problems)
    assert topo["flat"] is False and topo["flat_reason"] is None


def test_hgx_bindings(roots):
    topo = collect(roots["hgx_h100"], nvml_gpus("hgx_h100"))
    # Each GPU's own HCA first: DGX H100's NCCL_IB_HCA order.
    assert [b["nic"] for b in topo["bindings"]] == [f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)]
    first = topo["bindings"][0]
    assert first["nics"][:6] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"]
    assert first["numactl"] == "numactl --cpunodebind=0 --membind=0"
    assert first["taskset"] == "taskset -c 0-55,112-167"
    assert topo["bindings"][5]["numactl"] == "numactl --cpunodebind=1 --membind=1"
    assert topo["gres"][0] == "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55 Links=-1,18,18,18,18,18,18,18"
    assert topo["gres"][7] == "Name=gpu Type=h100 File=/dev/nvidia7 Cores=56-111 Links=18,18,18,18,18,18,18,-1"
    gpu0 = topo["gpus"][0]
    assert gpu0["cores"] == "0-55" and gpu0["siblings"] == "112-167" and gpu0["local_cpus"] == "0-55,112-167"
    assert gpu0["path"][0] == "0000:13:01.0" and gpu0["path"][-1] == "0000:18:00.0" and len(gpu0["path"]) == 6
    assert gpu0["nvlink"] == {"links": 18, "peers": {str(i): 18 for i in range(1, 8)}, "via_nvswitch": True}
    assert topo["numa_nodes"] == {"0": {"cpus": "0-55,112-167"}, "1": {"cpus": "56-111,168-223"}}
    nic0 = next(n for n in topo["nics"] if n["device"] == "mlx5_0")
    assert nic0 == {
        "name": "ibp25s0",
        "device": "mlx5_0",
        "kind": "infiniband",
        "bus_id": "0000:19:00.0",
        "numa_node": 0,
        "speed_mbps": 400000,
        "path": ["0000:13:01.0", "0000:14:00.0", "0000:15:01.0", "0000:19:00.0"],
    }
    assert next(n for n in topo["nics"] if n["device"] == "mlx5_1")["kind"] == "ethernet"


def test_l40s_pcie_server(roots):
    topo = collect(roots["l40s_pcie"], nvml_gpus("l40s_pcie"))
    m = topo["matrix"]
    assert [m["GPU0"][c] for c in ("GPU1", "GPU2", "GPU3", "mlx5_0", "mlx5_1")] == ["NODE", "SYS", "SYS", "NODE", "SYS"]
    assert [m["GPU1"][c] for c in ("mlx5_0", "mlx5_1")] == ["PHB", "SYS"]
    assert [m["GPU3"][c] for c in ("GPU2", "mlx5_0", "mlx5_1")] == ["NODE", "SYS", "PHB"]
    assert [b["nic"] for b in topo["bindings"]] == ["mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1"]
    # No NVLink: no Links= (gres.conf: only where links exist).
    assert topo["gres"] == [
        "Name=gpu Type=l40s File=/dev/nvidia0 Cores=0-31",
        "Name=gpu Type=l40s File=/dev/nvidia1 Cores=0-31",
        "Name=gpu Type=l40s File=/dev/nvidia2 Cores=32-63",
        "Name=gpu Type=l40s File=/dev/nvidia3 Cores=32-63",
    ]
    assert topo["gpus"][2]["siblings"] == "96-127"
    assert all(g["nvlink"] == {"links": 0, "peers": {}, "via_nvswitch": False} for g in topo["gpus"])


def test_azure_flat_tree_falls_back_to_numa(roots):
    topo = collect(roots["azure_nd_h100_v5"], nvml_gpus("azure_nd_h100_v5"))
    assert topo["flat"] is True and "VMBus" in topo["flat_reason"]
    cells = {c for row in topo["matrix"].values() for c in row.values()}
    assert cells == {"X", "NV18", "NODE", "SYS"}
    assert topo["matrix"]["GPU0"]["mlx5_ib3"] == "NODE" and topo["matrix"]["GPU0"]["mlx5_ib4"] == "SYS"
    # All HCAs of a node are equally near: the GPUs of a node spread over them.
    assert [b["nic"] for b in topo["bindings"]] == [f"mlx5_ib{i}" for i in range(8)]
    assert topo["bindings"][1]["nics"][:4] == ["mlx5_ib1", "mlx5_ib2", "mlx5_ib3", "mlx5_ib0"]
    assert topo["gpus"][0]["path"] == ["0001:00:00.0"] and topo["gpus"][0]["siblings"] == ""
    assert topo["gres"][4].startswith("Name=gpu Type=h100 File=/dev/nvidia4 Cores=48-95 Links=")


def test_virtual_root_complex_is_flat(tmp_path):
    """GPUs straight on a virtual root bus (no bridge above them), as some clouds show them."""
    root = tmp_path / "vm"
    for bus in ("04", "05"):
        d = root / f"sys/devices/pci0000:00/0000:00:{bus}.0"
        d.mkdir(parents=True)
        for name, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x2330"), ("numa_node", "-1")):
            (d / name).write_text(value + "\n")
        (root / "sys/bus/pci/devices").mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../devices/pci0000:00/0000:00:{bus}.0", root / f"sys/bus/pci/devices/0000:00:{bus}.0")
    topo = collect(root, [])
    assert topo["flat"] is True and "virtual root complex" in topo["flat_reason"]
    # No NUMA information and no node directories: one node, so NODE rather than SYS.
    assert topo["matrix"]["GPU0"]["GPU1"] == "NODE"
    assert topo["bindings"][0]["numactl"] is None and topo["bindings"][0]["taskset"] is None


def test_without_nvml_gpus_come_from_the_pci_bus(roots):
    topo = collect(roots["hgx_h100"], [])
    assert topo["available"] is True
    assert [g["bus_id"] for g in topo["gpus"]] == [g["bdf"] for g in pcitree().platform("hgx_h100")["gpus"]]
    assert topo["gres"][0] == "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55"  # no NVLink known: no Links
    assert topo["matrix"]["GPU0"]["GPU1"] == "NODE" and topo["matrix"]["GPU0"]["GPU4"] == "SYS"
    assert topo["bindings"][0]["nic"] == "mlx5_0"


def test_host_without_gpus(tmp_path):
    root = tmp_path / "plain"
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    (root / "sys/devices/system/node/node0").mkdir(parents=True)
    (root / "sys/devices/system/node/node0/cpulist").write_text("0-3\n")
    topo = collect(root, [])
    assert topo["available"] is True and topo["error"] is None
    assert (topo["gpus"], topo["nics"], topo["matrix"], topo["bindings"], topo["gres"]) == ([], [], {}, [], [])
    assert topo["numa_nodes"] == {"0": {"cpus": "0-3"}}


def test_no_sysfs(tmp_path):
    topo = collect(tmp_path, [])
    assert topo["available"] is False and "/sys/bus/pci/devices" in topo["error"]


def test_slurm_cores_are_logical_core_indexes(tmp_path):
    """SMT siblings numbered next to each other (CPU 2n and 2n+1 share a core, as on many AMD hosts): the GPU's
    CPUs 4-7 are cores 2 and 3 for Slurm (gres.conf(5): logical core index, Core L# of lstopo), not 4,6."""
    root = tmp_path / "amd"
    for cpu in range(8):
        topo_dir = root / f"sys/devices/system/cpu/cpu{cpu}/topology"
        topo_dir.mkdir(parents=True)
        first = cpu - cpu % 2
        (topo_dir / "thread_siblings_list").write_text(f"{first}-{first + 1}\n")
        (topo_dir / "physical_package_id").write_text("0\n")
    d = root / "sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0"
    d.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x26b9"), ("numa_node", "0")):
        (d / name).write_text(value + "\n")
    (d / "local_cpulist").write_text("4-7\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:40/0000:40:01.0/0000:41:00.0", root / "sys/bus/pci/devices/0000:41:00.0")
    info = root / "proc/driver/nvidia/gpus/0000:41:00.0"
    info.mkdir(parents=True)
    info.joinpath("information").write_text("Model: \t\t NVIDIA L40S\nDevice Minor: \t 3\n")
    topo = collect(root, [])
    assert topo["gpus"][0]["cores"] == "4,6" and topo["gpus"][0]["siblings"] == "5,7"
    # The driver's device minor names the /dev node, not the index.
    assert topo["gres"] == ["Name=gpu Type=l40s File=/dev/nvidia3 Cores=2-3"]


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (["r", "u", "d1", "x"], ["r", "u", "d2", "y"], "PIX"),  # two downstream ports of one switch
        (["r", "u", "d1", "x.0"], ["r", "u", "d1", "x.1"], "PIX"),  # two functions of one device
        (["r", "u", "d1", "u2", "d3", "x"], ["r", "u", "d2", "y"], "PXB"),  # two switch levels
        (["r1", "x"], ["r2", "y"], "PHB"),  # two root ports of one host bridge
    ],
)
def test_pcie_category(a, b, expected):
    def dev(path):
        return {"host_bridge": "pci0000:10", "path": path, "numa_node": 0}

    assert topology.pcie_category(dev(a), dev(b)) == expected
    other = {"host_bridge": "pci0000:90", "path": b, "numa_node": 1}
    assert topology.pcie_category(dev(a), other) == "SYS"
    assert topology.pcie_category(dev(a), {**other, "numa_node": 0}) == "NODE"


def test_gres_type_from_names():
    assert topology._gpu_type("NVIDIA A100-SXM4-80GB", None) == "a100"
    assert topology._gpu_type("NVIDIA H100 80GB HBM3", None) == "h100"
    assert topology._gpu_type("NVIDIA L40S", None) == "l40s"
    assert topology._gpu_type(None, "0x20b2") == "a100"
    assert topology._gpu_type(None, "0xffff") is None


def test_direct_nvlink_pairs_from_the_remote_ends(roots):
    """H100 NVL style: GPUs bridged in pairs (12 links each, far ends are the partner GPU), no NVSwitch."""
    gpus = nvml_gpus("l40s_pcie")
    bdfs = [g["pci_bus_id"] for g in gpus]
    for g in gpus:
        partner = bdfs[g["index"] ^ 1]
        g["nvlink"] = {"up": 12, "total": 12, "down": [], "remote": {str(link): partner for link in range(12)}}
    topo = collect(roots["l40s_pcie"], gpus)
    m = topo["matrix"]
    assert (m["GPU0"]["GPU1"], m["GPU2"]["GPU3"], m["GPU0"]["GPU2"], m["GPU1"]["GPU3"]) == (
        "NV12",
        "NV12",
        "SYS",
        "SYS",
    )
    assert topo["gpus"][0]["nvlink"] == {"links": 12, "peers": {"1": 12}, "via_nvswitch": False}
    assert topo["gres"][0].endswith("Links=-1,12,0,0") and topo["gres"][3].endswith("Links=0,0,12,-1")


def test_remote_ends_on_nvswitches_count_links_per_gpu(roots):
    """Far ends on the NVSwitches (0000:05..08:00.0 on the HGX tree): the links that reach a switch count, and a
    GPU with links down reaches every peer over fewer."""
    gpus = nvml_gpus("hgx_h100", fabric=False)
    switches = [f"0000:{5 + i:02x}:00.0" for i in range(4)]
    for g in gpus:
        up = 14 if g["index"] == 2 else 18
        g["nvlink"] = {"up": up, "total": 18, "remote": {str(link): switches[link % 4] for link in range(up)}}
    topo = collect(roots["hgx_h100"], gpus)
    assert topo["matrix"]["GPU0"]["GPU1"] == "NV18" and topo["matrix"]["GPU0"]["GPU2"] == "NV14"
    assert topo["matrix"]["GPU2"]["GPU7"] == "NV14" and topo["gpus"][2]["nvlink"]["via_nvswitch"] is True


def test_hgx_with_one_hca_per_two_gpus(roots):
    """The layout issue 17 names (two GPUs and one HCA per PCIe switch, two switches per socket); NVLink from the
    GPUs' fabric state (no NVSwitch on this tree's PCI bus)."""
    topo = collect(roots["hgx_h100_shared"], nvml_gpus("hgx_h100_shared"))
    m = topo["matrix"]
    assert [m["GPU0"][c] for c in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")] == ["PIX", "NODE", "SYS", "SYS"]
    assert [m["GPU1"][c] for c in ("mlx5_0", "mlx5_1")] == ["PIX", "NODE"]
    assert m["GPU0"]["GPU1"] == "NV18"
    assert [b["nic"] for b in topo["bindings"]] == [
        "mlx5_0",
        "mlx5_0",
        "mlx5_1",
        "mlx5_1",
        "mlx5_2",
        "mlx5_2",
        "mlx5_3",
        "mlx5_3",
    ]
    gpus = nvml_gpus("hgx_h100_shared")
    for g in gpus:
        g["nvlink"] = None
    assert collect(roots["hgx_h100_shared"], gpus)["matrix"]["GPU0"]["GPU1"] == "PIX"


def test_onboard_nic_on_the_root_bus_does_not_make_a_host_flat(roots, tmp_path):
    """A NIC on the root bus (an integrated endpoint, 00:1f.6 on many Intel boards) next to GPUs behind root ports:
    not a flattened tree. Without GPUs nothing is judged flat."""
    import shutil

    root = tmp_path / "onboard"
    shutil.copytree(roots["l40s_pcie"], root, symlinks=True)
    d = root / "sys/devices/pci0000:00/0000:00:1f.6"
    (d / "net/eno1").mkdir(parents=True)
    (d / "numa_node").write_text("0\n")
    os.symlink("../../../devices/pci0000:00/0000:00:1f.6", root / "sys/bus/pci/devices/0000:00:1f.6")
    os.symlink("../../devices/pci0000:00/0000:00:1f.6/net/eno1", root / "sys/class/net/eno1")
    topo = collect(root, nvml_gpus("l40s_pcie"))
    assert topo["flat"] is False and topo["matrix"]["GPU0"]["eno1"] == "NODE"
    assert collect(root, [])["flat"] is False  # the GPUs from the PCI bus: still behind root ports
    for bdf in ("0000:38:00.0", "0000:4a:00.0", "0000:b8:00.0", "0000:ca:00.0"):
        (root / "sys/bus/pci/devices" / bdf).unlink()
    assert collect(root, [])["flat"] is False and collect(root, [])["gpus"] == []


def test_hgx_b200_links_ride_the_nvswitches_behind_the_baseboard_bridge(roots, tmp_path):
    """HGX B200: the NVSwitches are no PCI functions of the host; the baseboard's ConnectX-7 bridge carries their
    management functions (VPD SMDL=SW_MNG). GPUs with their links up but no far ends and no fabric state from NVML
    (a binding that cannot read them) still reach each other over the switches, as on an HGX H100 whose NVSwitches
    are on the bus; without the bridge they stay unpaired."""
    import shutil

    root = tmp_path / "b200"
    shutil.copytree(roots["hgx_h100_shared"], root, symlinks=True)
    gpus = nvml_gpus("hgx_h100_shared", fabric=False)
    assert collect(root, gpus)["matrix"]["GPU0"]["GPU1"] == "PIX"  # no switch known: links cannot be paired
    for dev in simulators.mkroot().nvswitch_bridge():
        base = root / "sys" / "devices" / "pci0000:00" / dev["address"]
        base.mkdir(parents=True)
        (base / "vendor").write_text("0x15b3\n")
        (base / "class").write_text("0x020700\n")
        (base / "device").write_text(dev["device"] + "\n")
        (base / "vpd").write_bytes(bytes.fromhex(dev["vpd"]))
        os.symlink(
            f"../../../devices/pci0000:00/{dev['address']}", root / "sys" / "bus" / "pci" / "devices" / dev["address"]
        )
    topo = collect(root, gpus)
    assert topo["matrix"]["GPU0"]["GPU1"] == "NV18"
    assert topo["gpus"][0]["nvlink"]["via_nvswitch"] is True
