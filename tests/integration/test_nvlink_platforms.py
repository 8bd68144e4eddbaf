"""Blackwell and Grace platforms (issue 25 §8) through the real audit module, unmodified pynvml and the simulated
NVML library, over fixture roots built by tests/sim/host/mkroot.py.

* An HGX B200 shaped as NVIDIA documents it (fabric manager user guide): 8 B200 (PCI 0x2901), no NVSwitch PCI
  functions, the baseboard's ConnectX-7 bridge whose limited PFs carry SMDL=SW_MNG in their VPD, fabric manager and
  NVLSM installed but stopped, every GPU's fabric "in progress" an hour after boot. Before issue 25: SW-FM-001
  passed ("no NVSwitch on the PCI bus") and GPU-FAB-001 warned at medium.
* A GB200 NVL72 compute tray (4 GB200, PCI 0x2941, fabric completed) with nvidia-imex installed but not running.
* H100 PCIe, GH200 and single-GPU hosts without any fabric manager: no fabric manager or IMEX finding.
"""

from __future__ import annotations

import sys
from pathlib import Path

import labkit
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = pytest.mark.integration
mkroot, profiles = demo.mkroot, demo.profiles

PLAYBOOK = labkit.audit_play("Audit Blackwell and Grace platforms", gather=["gpu", "host"])

B200 = {"gpu.*.name": "NVIDIA B200", "gpu.*.pci_device_id": "0x290110DE", "gpu.*.architecture": "10"}
GB200 = {"gpu.*.name": "NVIDIA GB200", "gpu.*.pci_device_id": "0x294110DE", "gpu.*.architecture": "10"}
NO_FABRIC = {"gpu.*.fabric_state": None, "gpu.*.fabric_status": None, "gpu.*.fabric_health_mask": None}
TRAY_NODES = "".join(f"10.114.0.{n}\n" for n in range(1, 19))


def _hgx_b200(nvml: dict, running: bool) -> tuple:
    """An HGX B200 (8 GPUs, the baseboard's NVSwitch bridge) with fabric manager and NVLSM installed, ``running`` or
    stopped, an hour after boot."""
    fabric = {"fabricmanager": "550.90.07", "fabricmanager_running": running, "nvlsm": True, "nvlsm_running": running}
    return "h100", 8, nvml, "0x2901", {"mellanox_pci": mkroot.nvswitch_bridge("c1"), **fabric, "uptime_s": 3600}


def _gb200_tray(imex_running: bool) -> tuple:
    """A GB200 NVL72 compute tray (4 GPUs, Grace) with nvidia-imex installed, ``imex_running`` or not."""
    imex = {"running": imex_running, "nodes": TRAY_NODES}
    return "h100", 4, GB200, "0x2941", {**mkroot.grace_hopper(), "imex": imex,
                                        "local_addresses": ["127.0.0.1", "10.114.0.7"], "uptime_s": 3600}


# host -> (profile, GPUs, NVML overrides, PCI device id, mkroot overrides)
HOSTS = {
    # NVML_GPU_FABRIC_STATE_IN_PROGRESS
    "b200_fm_stopped": _hgx_b200({**B200, "gpu.*.fabric_state": "2"}, running=False),
    "b200_ok": _hgx_b200(B200, running=True),
    "gb200_no_imex": _gb200_tray(imex_running=False),
    "gb200_ok": _gb200_tray(imex_running=True),
    "h100_pcie": ("h100", 2, {"gpu.*.name": "NVIDIA H100 PCIe", "gpu.*.pci_device_id": "0x233110DE", **NO_FABRIC},
                  "0x2331", {}),
    "gh200": ("h100", 1, {"gpu.*.name": "NVIDIA GH200 480GB", "gpu.*.pci_device_id": "0x234210DE", **NO_FABRIC},
              "0x2342", mkroot.grace_hopper()),
    "single_l40s": ("l40s", 1, {}, "0x26b9", {}),
}



@pytest.fixture(scope="module")
def results(sim_lib, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nvlink_platforms")
    hosts = {}
    for name, (profile, gpus, nvml_over, device, host_over) in HOSTS.items():
        host_dir = tmp / name
        host_dir.mkdir()
        state = profiles.build_state(profile, gpus=gpus, driver="550", overrides=nvml_over, seed=name)
        profiles.write_state(host_dir / "nvml.state", state)
        settings = {
            "hostname": name,
            "nvidia_kernel_module": state["driver_version"],
            "nvidia_kernel_module_open": True,
            "nvidia_library_version": state["driver_version"],
            "nvidia_pci": mkroot.nvidia_gpus([labkit.sysfs_bus(state, i) for i in range(gpus)], device=device),
            **host_over,
        }
        root = mkroot.build_root(host_dir / "root", settings)
        hosts[name] = labkit.audit_root_host(sim_lib, root, host_dir / "nvml.state")
    return labkit.run_hosts(tmp, PLAYBOOK, hosts)


def test_hgx_b200_with_fabric_manager_stopped(results):
    # Fails on the old code: SW-FM-001 passed and GPU-FAB-001 warned at medium.
    findings, facts = labkit.findings_of(results, "b200_fm_stopped")
    pci = facts["gpu"]["pci"]
    assert pci["nvswitches"] == [] and [b["address"] for b in pci["nvswitch_bridges"]] == ["0000:c1:00.1",
                                                                                           "0000:c1:00.3"]
    assert facts["gpu"]["uptime_s"] == 3600.0 and facts["gpu"]["driver"]["nvlsm_installed"] is True
    fm = findings["SW-FM-001"]
    assert fm["status"] == "fail" and fm["severity"] == "critical", fm
    assert "nv-fabricmanager is not running" in fm["message"] and "nvlsm is not running" in fm["message"]
    fab = findings["GPU-FAB-001"]
    assert fab["status"] == "fail" and fab["severity"] == "high", fab
    assert "cudaErrorSystemNotReady" in fab["message"] and len(fab["items"]) == 8


def test_healthy_hgx_b200(results):
    findings, _facts = labkit.findings_of(results, "b200_ok")
    assert findings["SW-FM-001"]["status"] == "pass" and "with NVLSM" in findings["SW-FM-001"]["message"]
    assert findings["GPU-FAB-001"]["status"] == "pass" and findings["SW-IMEX-001"]["status"] == "pass"


def test_gb200_tray_without_imex_running(results):
    # Fails on the old code: no rule checked IMEX.
    findings, facts = labkit.findings_of(results, "gb200_no_imex")
    imex = findings["SW-IMEX-001"]
    assert imex["status"] == "fail" and imex["severity"] == "high", imex
    assert "nvidia-imex is not running" in imex["message"]
    assert facts["gpu"]["driver"]["imex"]["nodes"][6] == "10.114.0.7"
    assert findings["SW-FM-001"]["status"] == "pass" and "switch trays" in findings["SW-FM-001"]["message"]


def test_gb200_tray_with_imex(results):
    findings, _facts = labkit.findings_of(results, "gb200_ok")
    assert findings["SW-IMEX-001"]["status"] == "pass", findings["SW-IMEX-001"]
    assert findings["SW-IMEX-001"]["observed"]["this_host_listed"] == ["10.114.0.7"]


@pytest.mark.parametrize("name", ["h100_pcie", "gh200", "single_l40s"])
def test_no_fabric_service_asked_of_h100_pcie_gh200_or_a_single_gpu(results, name):
    findings, facts = labkit.findings_of(results, name)
    assert facts["gpu"]["driver"]["fabricmanager_version"] is None
    for rule in ("SW-FM-001", "SW-IMEX-001"):
        assert findings[rule]["status"] == "pass", (rule, findings[rule])
    assert findings["GPU-FAB-001"]["status"] in ("pass", "skip")
