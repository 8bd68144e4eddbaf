"""Blackwell and Grace platforms (issue 25 §8): which fabric services a host needs, and the rules that judge them.

* HGX B200: its NVSwitches are no NVIDIA PCI functions of class 0x0680 but sit behind the baseboard's ConnectX-7
  bridge (limited PFs whose VPD carries SMDL=SW_MNG, NVIDIA fabric manager user guide); fabric manager needs NVLSM
  there. Before issue 25, SW-FM-001 passed such a host with fabric manager stopped ("no NVSwitch on the PCI bus")
  and GPU-FAB-001 only warned about a fabric that never completes.
* GB200 NVL72 compute trays: IMEX (SW-IMEX-001) instead of a local fabric manager.
* H100 PCIe, GH200 and single-GPU hosts: never asked for fabric manager or IMEX (gpud's users report exactly these
  false alarms).

Readers over fixture roots built by tests/sim/host/mkroot.py; rules over rule_facts' healthy host, changed one thing
at a time.
"""

from __future__ import annotations

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvlink_platform, pci, rules, software
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from rule_facts import gb200_tray, healthy, hgx_b200

mkroot = simulators.mkroot()

B200_BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]


def _fs(tmp_path, **overrides):
    small = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1}  # the CPUs do not matter here
    return HostFS(str(mkroot.build_root(tmp_path / "root", {**small, **overrides})))


def _evaluate(facts, overrides=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate(facts, policy)}


# ----------------------------------------------------------------------------------------------------- readers


def test_pci_scan_finds_the_nvswitch_management_functions_of_the_bridge(tmp_path):
    fs = _fs(
        tmp_path,
        nvidia_pci=mkroot.nvidia_gpus([f"0000:{b}:00.0" for b in B200_BUSES], device="0x2901"),
        # The bridge, plus an ordinary ConnectX-7 NIC whose VPD has no SW_MNG field.
        mellanox_pci=mkroot.nvswitch_bridge("c1")
        + [{"address": "0000:1a:00.0", "device": "0x1021", "driver": "mlx5_core",
            "vpd": mkroot.vpd("ConnectX-7 NIC", [("PN", "MCX75310AAS-NEAT")]).hex()}],
    )
    found = pci.scan(fs)
    assert [b["address"] for b in found["nvswitch_bridges"]] == ["0000:c1:00.1", "0000:c1:00.3"]
    assert found["nvswitch_bridges"][0] == {"address": "0000:c1:00.1", "device": "0x1021", "driver": "mlx5_core"}
    assert found["nvswitches"] == [] and len(found["gpus"]) == 8 and found["vpd_unreadable"] == []


def test_pci_scan_says_when_a_vpd_could_not_be_read(tmp_path):
    # A non-root reader cannot open sysfs vpd files (mode 0600); the fixture puts a directory there to fail the read.
    bridge = [dict(d, vpd="unreadable") for d in mkroot.nvswitch_bridge("c1")]
    found = pci.scan(_fs(tmp_path, mellanox_pci=bridge))
    assert found["nvswitch_bridges"] == []
    assert found["vpd_unreadable"] == ["0000:c1:00.0", "0000:c1:00.1", "0000:c1:00.2", "0000:c1:00.3"]


def test_nvlsm_imex_addresses_and_uptime(tmp_path):
    fs = _fs(
        tmp_path,
        nvlsm=True,
        nvlsm_running=True,
        imex={"running": True, "nodes": "# rack 7\n10.114.0.1\n10.114.0.7\n\nnode-03\n"},
        local_addresses=["127.0.0.1", "10.114.0.7"],
        uptime_s=1234.5,
    )
    assert software.nvlsm(fs) == {"installed": True, "running": True}
    imex = software.imex(fs)
    assert imex["installed"] is True and imex["running"] is True and imex["nodes_file_present"] is True
    assert imex["nodes"] == ["10.114.0.1", "10.114.0.7"] and imex["invalid"] == ["node-03"]
    assert imex["local_addresses"] == ["10.114.0.7", "127.0.0.1"]
    assert software.uptime_seconds(fs) == 1234.5


def test_imex_node_file_from_the_config_and_nothing_installed(tmp_path):
    fs = _fs(
        tmp_path,
        imex={"running": False, "config": "IMEX_NODE_CONFIG_FILE=/etc/imex/nodes.txt\nBIND_INTERFACE_IP=10.0.0.9\n",
              "nodes": "10.0.0.9\n", "nodes_path": "/etc/imex/nodes.txt"},
    )
    imex = software.imex(fs)
    assert imex["nodes_file"] == "/etc/imex/nodes.txt" and imex["nodes"] == ["10.0.0.9"]
    assert imex["bind_ip"] == "10.0.0.9" and imex["running"] is False
    bare = software.imex(_fs(tmp_path / "bare"))
    assert bare["installed"] is False and bare["nodes_file_present"] is False and bare["local_addresses"] is None
    assert software.nvlsm(_fs(tmp_path / "bare2")) == {"installed": False, "running": False}


# ----------------------------------------------------------------------------------------------------- platform


def _h100_pcie(f):
    for g in f["gpu"]["gpus"]:
        g.update(name="NVIDIA H100 PCIe", fabric=None)
        g["unsupported"] = {"fabric": "NotSupported"}
    for p in f["gpu"]["pci"]["gpus"]:
        p["device"] = "0x2331"
    f["gpu"]["pci"]["nvswitches"] = []
    return f


def _gh200(f):
    f["gpu"]["gpus"] = f["gpu"]["gpus"][:1]
    f["gpu"]["gpu_count"] = 1
    g = f["gpu"]["gpus"][0]
    g.update(name="NVIDIA GH200 480GB", fabric=None)
    g["unsupported"] = {"fabric": "NotSupported"}
    f["gpu"]["pci"]["gpus"] = [dict(f["gpu"]["pci"]["gpus"][0], device="0x2342")]
    f["gpu"]["pci"]["nvswitches"] = []
    return f


def _single_gpu(f):
    f["gpu"]["gpus"] = f["gpu"]["gpus"][:1]
    f["gpu"]["gpus"][0].update(fabric=None)
    f["gpu"]["gpu_count"] = 1
    f["gpu"]["pci"]["gpus"] = f["gpu"]["pci"]["gpus"][:1]
    f["gpu"]["pci"]["nvswitches"] = []
    return f


@pytest.mark.parametrize(
    "shape, kind",
    [
        (lambda f: f, "nvswitch"),
        (hgx_b200, "nvlink5_hgx"),
        (gb200_tray, "multinode"),
        (_h100_pcie, "none"),
        (_gh200, "none"),
        (_single_gpu, "none"),
    ],
)
def test_platform_kinds(shape, kind):
    assert nvlink_platform.classify(shape(healthy()))["kind"] == kind


def test_gb200_is_not_matched_as_a_b200_nor_gh200_as_h200():
    assert nvlink_platform._gpu_models({"gpu": {"gpus": [{"name": "NVIDIA GB200"}]}},
                                        nvlink_platform.BLACKWELL_HGX_IDS, nvlink_platform._BLACKWELL_HGX_NAME) == []
    grace = nvlink_platform._gpu_models({"gpu": {"gpus": [{"name": "NVIDIA GH200 480GB"}]}},
                                        nvlink_platform.GRACE_SUPERCHIP_IDS, nvlink_platform._GRACE_NAME)
    assert grace == ["GH200"]


def test_b200_ids_count_only_when_the_bridge_vpd_is_unreadable():
    facts = hgx_b200(healthy())
    facts["gpu"]["pci"]["nvswitch_bridges"] = []
    # A VM given 8 B200s without the bridge (shared NVSwitch model: fabric manager runs in the service VM).
    assert nvlink_platform.classify(facts)["kind"] == "none"
    facts["gpu"]["pci"]["vpd_unreadable"] = ["0000:c1:00.0"]
    assert nvlink_platform.classify(facts)["kind"] == "nvlink5_hgx"


# ----------------------------------------------------------------------------------------------------- SW-FM-001


def _b200_fm_stopped(f):
    hgx_b200(f)
    f["gpu"]["driver"].update(fabricmanager_running=False, nvlsm_running=False)
    for g in f["gpu"]["gpus"]:
        g["fabric"].update(state="in_progress", status=None)
    f["gpu"]["uptime_s"] = 3600.0
    return f


def test_hgx_b200_with_fabric_manager_stopped_fails_fm_and_fabric():
    # Fails on the old code: SW-FM-001 passed ("no NVSwitch on the PCI bus") and GPU-FAB-001 warned at medium.
    findings = _evaluate(_b200_fm_stopped(healthy()))
    fm = findings["SW-FM-001"]
    assert fm["status"] == "fail" and fm["severity"] == "critical", fm
    assert "nv-fabricmanager is not running" in fm["message"] and "nvlsm is not running" in fm["message"]
    assert "SW_MNG" in fm["message"] and fm["observed"]["platform"] == "nvlink5_hgx"
    fab = findings["GPU-FAB-001"]
    assert fab["status"] == "fail" and fab["severity"] == "high", fab
    assert "3600 s after boot" in fab["message"] and "cudaErrorSystemNotReady" in fab["message"]
    assert [i["gpu"] for i in fab["items"]] == list(range(8))


def test_hgx_b200_without_nvlsm_fails():
    facts = hgx_b200(healthy())
    facts["gpu"]["driver"].update(nvlsm_installed=False, nvlsm_running=False)
    finding = _evaluate(facts)["SW-FM-001"]
    assert finding["status"] == "fail" and "NVLSM (package nvlsm)" in finding["message"]


def test_healthy_hgx_b200_passes():
    findings = _evaluate(hgx_b200(healthy()))
    assert findings["SW-FM-001"]["status"] == "pass" and "with NVLSM" in findings["SW-FM-001"]["message"]
    assert findings["GPU-FAB-001"]["status"] == "pass" and findings["SW-IMEX-001"]["status"] == "pass"


@pytest.mark.parametrize("shape", [_h100_pcie, _gh200, _single_gpu, gb200_tray])
def test_no_fabric_manager_asked_of_h100_pcie_gh200_single_gpu_or_gb200_trays(shape):
    facts = shape(healthy())
    facts["gpu"]["driver"].update(fabricmanager_version=None, fabricmanager_running=False,
                                  nvlsm_installed=False, nvlsm_running=False)
    findings = _evaluate(facts)
    assert findings["SW-FM-001"]["status"] == "pass", findings["SW-FM-001"]
    assert findings["GPU-FAB-001"]["status"] in ("pass", "skip")
    assert findings["SW-IMEX-001"]["status"] == "pass"


# ----------------------------------------------------------------------------------------------------- GPU-FAB-001


@pytest.mark.parametrize(
    "uptime, fm_running, status, severity",
    [
        (45.0, False, "warn", "medium"),  # just booted: training is normal
        (None, False, "warn", "medium"),  # uptime unknown: no claim beyond the warning
        (3600.0, True, "warn", "medium"),  # past the grace, but fabric manager runs: its log says more
        (3600.0, False, "fail", "high"),  # past the grace, nothing trains it: it never completes
    ],
)
def test_fabric_in_progress_after_the_boot_grace(uptime, fm_running, status, severity):
    facts = healthy()  # HGX H100: NVSwitches on the PCI bus
    facts["gpu"]["driver"]["fabricmanager_running"] = fm_running
    facts["gpu"]["gpus"][2]["fabric"].update(state="in_progress", status=None)
    facts["gpu"]["uptime_s"] = uptime
    finding = _evaluate(facts)["GPU-FAB-001"]
    assert (finding["status"], finding["severity"]) == (status, severity), finding


def test_the_boot_grace_is_a_policy_key():
    facts = _b200_fm_stopped(healthy())
    assert _evaluate(facts, {"health": {"fabric_boot_grace_s": 7200}})["GPU-FAB-001"]["status"] == "warn"


def test_a_gb200_tray_in_training_past_the_grace_is_not_blamed_on_a_local_fabric_manager():
    facts = gb200_tray(healthy())
    facts["gpu"]["gpus"][0]["fabric"].update(state="in_progress", status=None)
    facts["gpu"]["uptime_s"] = 3600.0
    finding = _evaluate(facts)["GPU-FAB-001"]
    assert finding["status"] == "warn" and finding["severity"] == "medium"


# ----------------------------------------------------------------------------------------------------- SW-IMEX-001


def _imex(f, **values):
    f["gpu"]["driver"]["imex"].update(values)
    return f


@pytest.mark.parametrize(
    "change, words",
    [
        ({"running": False}, "nvidia-imex is not running"),
        ({"installed": False, "running": False}, "nvidia-imex is not installed"),
        ({"nodes_file_present": False, "nodes": []}, "node list /etc/nvidia-imex/nodes_config.cfg is missing"),
        ({"nodes": []}, "is empty"),
        ({"invalid": ["gb200-tray-03"]}, "not IP addresses: ['gb200-tray-03']"),
        ({"nodes": ["10.114.0.1", "10.114.0.7", "10.114.0.1"]}, "lists ['10.114.0.1'] more than once"),
        ({"local_addresses": ["10.200.0.7"]}, "does not list this host"),
        ({"bind_ip": "10.114.0.99"}, "BIND_INTERFACE_IP 10.114.0.99"),
    ],
)
def test_imex_on_a_gb200_tray(change, words):
    # Fails on the old code: no rule checked IMEX at all.
    finding = _evaluate(_imex(gb200_tray(healthy()), **change))["SW-IMEX-001"]
    assert finding["status"] == "fail" and finding["severity"] == "high", finding
    assert words in finding["message"]


def test_imex_passes_on_a_sound_tray_and_when_addresses_are_unknown():
    assert _evaluate(gb200_tray(healthy()))["SW-IMEX-001"]["status"] == "pass"
    finding = _evaluate(_imex(gb200_tray(healthy()), local_addresses=None))["SW-IMEX-001"]
    assert finding["status"] == "pass" and finding["observed"]["this_host_listed"] is None


def test_gh200_nvl32_trays_need_imex_and_a_single_gh200_does_not():
    facts = _gh200(healthy())
    assert _evaluate(facts)["SW-IMEX-001"]["status"] == "pass"
    # In an NVLink switch domain (GH200 NVL32) the GPU reports a fabric: a multi-node tray.
    facts["gpu"]["gpus"][0]["fabric"] = {"state": "completed", "status": "Success", "health_mask": "0x00000000",
                                         "health_problems": []}
    finding = _evaluate(facts)["SW-IMEX-001"]
    assert finding["status"] == "fail" and "nvidia-imex is not installed" in finding["message"]
    assert _evaluate(facts)["SW-FM-001"]["status"] == "pass"


def test_imex_started_per_job():
    # NVIDIA Mission Control recommends starting IMEX per Slurm job: an idle tray runs none.
    per_job = {"software": {"imex_per_job": True}}
    idle = _imex(gb200_tray(healthy()), running=False)
    assert _evaluate(idle)["SW-IMEX-001"]["status"] == "fail"
    assert _evaluate(idle, per_job)["SW-IMEX-001"]["status"] == "pass"
    # A per-job daemon in a container (Kubernetes DRA driver): nothing of IMEX on the host but the process.
    containerised = _imex(gb200_tray(healthy()), installed=False, nodes_file_present=False, nodes=[])
    assert _evaluate(containerised, per_job)["SW-IMEX-001"]["status"] == "pass"
    # A running per-job daemon's node list is still judged.
    finding = _evaluate(_imex(gb200_tray(healthy()), local_addresses=["10.200.0.7"]), per_job)["SW-IMEX-001"]
    assert finding["status"] == "fail" and "does not list this host" in finding["message"]


def test_fabric_services_run_from_a_container():
    # The GPU operator's driver container runs nv-fabricmanager and nvlsm: running processes, no host package.
    facts = hgx_b200(healthy())
    facts["gpu"]["driver"].update(fabricmanager_version=None, fabricmanager_running=True, nvlsm_installed=False,
                                  nvlsm_running=True)
    finding = _evaluate(facts)["SW-FM-001"]
    assert finding["status"] == "pass" and "version is not known" in finding["message"], finding
    facts["gpu"]["driver"]["nvlsm_running"] = False
    assert "NVLSM (package nvlsm)" in _evaluate(facts)["SW-FM-001"]["message"]


def test_a_grace_tray_whose_gpu_name_is_not_in_the_tables():
    # A newer Grace superchip: unknown name and PCI id, Blackwell GPUs in an NVLink fabric beside a Neoverse V2.
    facts = gb200_tray(healthy())
    for g in facts["gpu"]["gpus"]:
        g["name"] = "NVIDIA GB900"
    for p in facts["gpu"]["pci"]["gpus"]:
        p["device"] = "0x3fff"
    assert nvlink_platform.classify(facts)["kind"] == "none"  # an x86 host: not a Grace tray
    facts["host"]["cpu"]["model"] = "ARM Neoverse-V2"
    platform = nvlink_platform.classify(facts)
    assert platform["kind"] == "multinode" and "Grace-blackwell" in platform["evidence"]
