"""gpu_topology through real Ansible (ansible-runner), unmodified pynvml and the simulated libnvidia-ml.so.1, over
sysfs trees from tests/sim/host/pcitree.py.

One playbook run covers every host: each inventory host is a simulated server with its own NVML state file and
its own fixture root (per-host `environment:` and module options), so the module runs as on a real host.
"""

from __future__ import annotations

import sys
from pathlib import Path

import labkit
import pytest
import simulators

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "topology"
TASK = "Read the topology"

# host: (platform, NVML profile, GPU count, extra NVML overrides); profile None: no NVML state (driver not loaded).
HOSTS = {
    "hgx": ("hgx_h100", "h100", 8, []),
    "l40s": ("l40s_pcie", "l40s", 4, []),
    "azure": ("azure_nd_h100_v5", "h100", 8, []),
    "hgx_nodriver": ("hgx_h100", None, 0, []),
    # One GPU with two NVLinks down: NV16 to every peer, and peers see it at 16 too.
    "hgx_links_down": ("hgx_h100", "h100", 8, ["gpu.3.nvlink_down=0,1"]),
    # GPUs bridged in pairs (H100 NVL style: 12 links each to the partner, no NVSwitch, no fabric) on the PCIe tree
    # of the L40S server: the far ends come from NVML (nvmlDeviceGetNvLinkRemotePciInfo_v2).
    "pairs": (
        "l40s_pcie",
        "h100",
        4,
        ["gpu.*.nvlink_count=12", "gpu.*.fabric_state="]
        + [
            f"gpu.{i}.nvlink_remote=" + ",".join([f"00000000:{bus}:00.0"] * 12)
            for i, bus in enumerate(("4A", "38", "CA", "B8"))
        ],
    ),
    # A single-NUMA workstation as recorded in public (tests/fixtures/topology/README.md): two RTX 6000 Ada (device id
    # 0x26b1, not in the reader's table), NVML without a NUMA node for them, sysfs numa_node -1.
    "workstation": (
        "threadripper_pro_wrx90",
        "l40s",
        2,
        ["gpu.*.name=NVIDIA RTX 6000 Ada Generation", "gpu.*.pci_device_id=0x26B110DE", "gpu.*.numa_node="],
    ),
}


def pcitree():
    return simulators.pcitree()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, profiles, sim_lib):
    tmp = tmp_path_factory.mktemp("gpu_topology")
    hosts = {}
    for name, (platform, profile, count, extra) in HOSTS.items():
        root = pcitree().build(tmp / name / "root", platform)
        state = tmp / name / "nvml.state"
        if profile:
            overrides = {**pcitree().nvml_overrides(platform), **dict(x.split("=", 1) for x in extra)}
            profiles.write_state(state, profiles.build_state(profile, gpus=count, driver="550", overrides=overrides))
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "sim_lib_dir": str(sim_lib.parent),
            "sim_state": str(state),
            "topology_root": str(root),
        }
    hosts["bad_root"] = {**hosts["hgx"], "topology_root": str(tmp / "missing")}
    inventory = labkit.write_inventory(tmp, hosts)
    task = {
        "name": TASK,
        "gpufleet.tuning.gpu_topology": {"root": "{{ topology_root }}"},
        "check_mode": "{{ inventory_hostname == 'l40s' }}",
    }
    environment = {"LD_LIBRARY_PATH": "{{ sim_lib_dir }}", "FAKE_NVML_STATE": "{{ sim_state }}"}
    playbook = labkit.write_play(
        tmp, labkit.play("gpu_topology against simulated hosts", tasks=[task], environment=environment)
    )
    result = run_playbook(str(playbook), str(inventory), forks=4)
    assert set(result.hosts) == set(hosts)
    return result.hosts


def _ok(fleet, name):
    host = fleet[name]
    assert host.status == "ok", f"{name}: {host.status}: {host.message}"
    res = host.results[TASK]
    assert res["changed"] is False
    return res


def _published():
    lines = [line for line in (FIX / "dgx-h100-topo-m.txt").read_text().splitlines() if not line.startswith("#")]
    header = lines[0].split("\t")[1:]
    out = {}
    for line in lines[1:]:
        cells = line.split("\t")
        row = cells[0].replace("NIC", "mlx5_")
        out[row] = {
            c.replace("NIC", "mlx5_"): v for c, v in zip(header, cells[1:], strict=False) if c[:3] in ("GPU", "NIC")
        }
    return out


def test_hgx_through_nvml_matches_published_dgx_h100(fleet):
    """NVLink from the simulated NVML (18 links up, fabric completed, NVSwitches on the PCI bus) and the PCIe tree
    from sysfs give the published DGX H100 `nvidia-smi topo -m` (vllm-project/vllm#13855)."""
    res = _ok(fleet, "hgx")
    assert res["nvml"]["available"] is True and res["nvml"]["source"] == "pynvml"
    topo = res["topology"]
    wrong = [
        f"{row}/{col}: {cat} != {topo['matrix'][row][col]}"
        for row, cells in _published().items()
        for col, cat in cells.items()
        if topo["matrix"][row][col] != cat
    ]
    assert not wrong, "\n".join(wrong)
    assert topo["gres"][0] == "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55 Links=-1,18,18,18,18,18,18,18"
    assert [b["nic"] for b in topo["bindings"]] == [f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)]
    assert topo["gpus"][4]["numa_node"] == 1 and topo["gpus"][4]["cores"] == "56-111"


def test_links_down_lower_the_nvlink_count(fleet):
    topo = _ok(fleet, "hgx_links_down")["topology"]
    assert topo["matrix"]["GPU3"]["GPU0"] == "NV16" and topo["matrix"]["GPU0"]["GPU3"] == "NV16"
    assert topo["matrix"]["GPU0"]["GPU1"] == "NV18"
    assert topo["gres"][3].endswith("Links=16,16,16,-1,16,16,16,16")


def test_l40s_in_check_mode(fleet):
    topo = _ok(fleet, "l40s")["topology"]
    assert topo["gres"][2] == "Name=gpu Type=l40s File=/dev/nvidia2 Cores=32-63"
    assert topo["matrix"]["GPU1"]["mlx5_0"] == "PHB" and topo["matrix"]["GPU0"]["mlx5_0"] == "NODE"
    assert not any(g["nvlink"]["peers"] for g in topo["gpus"])


def test_azure_vm_is_flat_with_nvlink_from_the_fabric(fleet):
    """No NVSwitch on the VM's PCI bus, but each GPU reports a completed fabric: still NV18."""
    topo = _ok(fleet, "azure")["topology"]
    assert topo["flat"] is True and "VMBus" in topo["flat_reason"]
    assert topo["matrix"]["GPU0"]["GPU7"] == "NV18"
    assert topo["matrix"]["GPU0"]["mlx5_ib0"] == "NODE" and topo["matrix"]["GPU0"]["mlx5_ib7"] == "SYS"
    assert [b["nic"] for b in topo["bindings"]] == [f"mlx5_ib{i}" for i in range(8)]


def test_without_nvml_the_pci_bus_still_answers(fleet):
    res = _ok(fleet, "hgx_nodriver")
    assert res["nvml"]["available"] is False
    topo = res["topology"]
    assert topo["available"] is True and len(topo["gpus"]) == 8
    assert topo["gres"][0] == "Name=gpu Type=h100 File=/dev/nvidia0 Cores=0-55"
    assert topo["matrix"]["GPU0"]["mlx5_0"] == "PXB"


def test_nvlink_pairs_from_the_remote_ends(fleet):
    topo = _ok(fleet, "pairs")["topology"]
    m = topo["matrix"]
    assert (m["GPU0"]["GPU1"], m["GPU3"]["GPU2"], m["GPU1"]["GPU2"]) == ("NV12", "NV12", "SYS")
    assert topo["gres"][1] == "Name=gpu Type=h100 File=/dev/nvidia1 Cores=0-31 Links=12,-1,0,0"
    assert topo["gpus"][0]["nvlink"]["via_nvswitch"] is False


def test_bad_root_names_the_option(fleet):
    host = fleet["bad_root"]
    assert host.status == "failed"
    assert "root: not a directory" in host.results[TASK]["msg"]


def test_single_numa_workstation_through_nvml(fleet):
    """Issue 25: NUMA node 0 where sysfs has -1 on a single-node host (nvidia-smi topo -m: NUMA affinity 0), and the
    gres Type from the name NVML gives. old code: numa_node null, numactl --physcpubind, Type=rtx."""
    res = _ok(fleet, "workstation")
    topo = res["topology"]
    assert [(g["name"], g["numa_node"]) for g in topo["gpus"]] == [("NVIDIA RTX 6000 Ada Generation", 0)] * 2
    assert topo["bindings"][1]["numactl"] == "numactl --cpunodebind=0 --membind=0"
    assert topo["gres"][1] == "Name=gpu Type=rtx_6000_ada File=/dev/nvidia1 Cores=0-23"
    assert topo["matrix"]["GPU0"] == {"GPU0": "X", "GPU1": "PHB", "mlx5_0": "NODE", "mlx5_1": "NODE"}
