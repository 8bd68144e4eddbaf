"""GPU presence and the driver stack through the real audit module, unmodified pynvml and the simulated library.

Each inventory host is a simulated server: a state file for the simulated libnvidia-ml.so.1 (tests/sim/nvml) and a
fixture root built by mkroot (/proc/driver/nvidia/version, libnvidia-ml.so.<version>, NVIDIA PCI functions in
/sys/bus/pci/devices, nvidia-fabricmanager, kern.log). Covers issue 13: SW-KMOD-001 when nvmlInit itself fails with
NVML_ERROR_LIB_RM_VERSION_MISMATCH, SW-CUDA-001 minor/major gaps, SW-FM-001 only on NVSwitch hosts, HOST-HLT-003
(SXid) and GPU-HLT-003 (expected count, GPUs on the PCI bus that NVML does not list).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import labkit
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = pytest.mark.integration
mkroot, profiles = demo.mkroot, demo.profiles

PLAYBOOK = labkit.audit_play("Audit GPU presence and the driver stack", gather=["gpu", "host"])

SXID_FATAL = mkroot.sxid_line(20034, fatal=True, pci="0000:05:00.0")

# host -> (profile, gpus in NVML, driver, NVML overrides, mkroot overrides, policy, CUDA toolkits, PCI GPUs)
HOSTS = {
    # HGX H100: 8 GPUs and 4 NVSwitches, fabric manager at the driver's version and running.
    "hgx_ok": ("h100", 8, "550", [], {"fabricmanager": "550.90.07", "fabricmanager_running": True}, {}, [], 8),
    # The driver was upgraded to 550 without a reboot: the 535 module stays loaded and nvmlInit fails.
    "kmod_mismatch": (
        "h100",
        8,
        "550",
        ["error.nvmlInitWithFlags=LibRmVersionMismatch"],
        {"nvidia_kernel_module": "535.183.01", "fabricmanager": "550.90.07", "fabricmanager_running": True},
        {"health": {"expected_gpu_count": 8}},
        [],
        8,
    ),
    # NVSwitch host whose fabric manager is stopped, with a fatal SXid in the log.
    "hgx_fm_stopped": (
        "h100",
        8,
        "550",
        [],
        {"fabricmanager": "550.90.07", "fabricmanager_running": False, "kern_log_extra": [SXID_FATAL]},
        {},
        [],
        8,
    ),
    # A PCIe L40S box with a stale fabric manager left installed: info only.
    "l40s_fm_stale": ("l40s", 4, "570", [], {"fabricmanager": "550.90.07", "nvswitches": 0}, {}, [], 4),
    # 8 GPUs on the PCI bus, the driver brought up 7.
    "gpu_missing": (
        "h100",
        7,
        "550",
        [],
        {"fabricmanager": "550.90.07", "fabricmanager_running": True},
        {"health": {"expected_gpu_count": 8}},
        [],
        8,
    ),
    # Driver 535 (CUDA 12.2) with a 12.4 toolkit: minor-version compatibility; and a 13.0 toolkit: major gap.
    "cuda_minor": ("a100", 2, "535", [], {"nvswitches": 0}, {}, ["12.4.1"], 2),
    "cuda_major": ("a100", 2, "550", [], {"nvswitches": 0}, {}, ["13.0.1"], 2),
}



@pytest.fixture(scope="module")
def results(sim_lib, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("presence")
    hosts = {}
    for name, (profile, gpus, driver, nvml_over, host_over, policy, toolkits, on_bus) in HOSTS.items():
        host_dir = tmp / name
        host_dir.mkdir()
        # The PCI bus shows every GPU the board has; NVML lists only those the driver brought up.
        full = profiles.build_state(profile, gpus=on_bus, driver=driver, overrides=[], seed=name)
        state = profiles.build_state(profile, gpus=gpus, driver=driver, overrides=nvml_over, seed=name)
        profiles.write_state(host_dir / "nvml.state", state)
        host_over = dict(host_over)
        switches = host_over.pop("nvswitches", 4)
        settings = {
            "hostname": name,
            "nvidia_kernel_module": state["driver_version"],
            "nvidia_kernel_module_open": True,
            "nvidia_library_version": state["driver_version"],
            "nvidia_pci": mkroot.nvidia_gpus([labkit.sysfs_bus(full, i) for i in range(on_bus)])
            + (mkroot.nvswitches(switches) if switches else []),
            **host_over,
        }
        root = mkroot.build_root(host_dir / "root", settings)
        for version in toolkits:
            d = root / f"usr/local/cuda-{version.rsplit('.', 1)[0]}"
            d.mkdir(parents=True)
            (d / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": version}}))
        hosts[name] = labkit.audit_root_host(sim_lib, root, host_dir / "nvml.state", test_policy=policy)
    return labkit.run_hosts(tmp, PLAYBOOK, hosts)


def test_healthy_hgx_passes_the_presence_and_stack_rules(results):
    findings, facts = labkit.findings_of(results, "hgx_ok")
    for rule in ("SW-KMOD-001", "SW-FM-001", "GPU-HLT-003", "HOST-HLT-003", "SW-CUDA-001"):
        assert findings[rule]["status"] in ("pass", "skip"), (rule, findings[rule])
    assert findings["SW-FM-001"]["status"] == "pass" and findings["GPU-HLT-003"]["status"] == "pass"
    driver = facts["gpu"]["driver"]
    assert driver["kernel_module_flavour"] == "open" and driver["library_version"] == driver["version"]
    assert len(facts["gpu"]["pci"]["nvswitches"]) == 4 and len(facts["gpu"]["pci"]["gpus"]) == 8


def test_nvml_version_mismatch_is_a_kmod_finding_naming_both_versions(results):
    # Fails on the old code: NVML unavailable -> driver.version None -> SW-KMOD-001 skipped.
    findings, facts = labkit.findings_of(results, "kmod_mismatch")
    assert facts["gpu"]["nvml"]["available"] is False
    assert facts["gpu"]["nvml"]["error_code"] == "LibRmVersionMismatch"
    kmod = findings["SW-KMOD-001"]
    assert kmod["status"] == "fail" and kmod["severity"] == "critical"
    assert "535.183.01" in kmod["message"] and "550.90.07" in kmod["message"]
    # One cause, one finding (issue 25): the GPUs on the bus cannot be judged while NVML does not start.
    hlt = findings["GPU-HLT-003"]
    assert hlt["status"] == "skip" and "SW-KMOD-001" in hlt["message"] and hlt["observed"]["pci"] == 8, hlt


def test_nvswitch_host_with_stopped_fabric_manager_and_fatal_sxid(results):
    findings, _facts = labkit.findings_of(results, "hgx_fm_stopped")
    assert findings["SW-FM-001"]["status"] == "fail" and findings["SW-FM-001"]["severity"] == "critical"
    assert "not running" in findings["SW-FM-001"]["message"]
    sxid = findings["HOST-HLT-003"]
    assert sxid["status"] == "fail" and sxid["severity"] == "critical"
    assert [i["code"] for i in sxid["items"]] == [20034]


def test_stale_fabric_manager_on_a_pcie_box_is_info_only(results):
    # Fails on the old code: SW-FM-001 failed critical on any installed fabric manager of another version.
    findings, _facts = labkit.findings_of(results, "l40s_fm_stale")
    assert findings["SW-FM-001"]["status"] == "warn" and findings["SW-FM-001"]["severity"] == "info"


def test_gpu_on_the_bus_but_not_in_nvml(results):
    findings, facts = labkit.findings_of(results, "gpu_missing")
    finding = findings["GPU-HLT-003"]
    assert finding["status"] == "fail" and finding["severity"] == "critical"
    assert finding["observed"]["nvml"] == 7 and finding["observed"]["pci"] == 8
    assert len(finding["observed"]["not_in_nvml"]) == 1
    # NVML never listed it, so it is not "lost".
    assert findings["GPU-HLT-002"]["status"] == "pass"


def test_cuda_minor_gap_warns_and_major_gap_fails(results):
    # Fails on the old code: the 12.4 toolkit on driver 535 (CUDA 12.2) failed at high severity.
    minor, _ = labkit.findings_of(results, "cuda_minor")
    assert minor["SW-CUDA-001"]["status"] == "warn" and minor["SW-CUDA-001"]["severity"] == "low"
    assert "PTX" in minor["SW-CUDA-001"]["message"]
    major, _ = labkit.findings_of(results, "cuda_major")
    assert major["SW-CUDA-001"]["status"] == "fail" and major["SW-CUDA-001"]["severity"] == "high"
