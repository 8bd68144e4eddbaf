"""Blackwell and Grace platforms (issue 25 §8): which fabric services a host needs (module_utils/nvlink_platform.py)
and the readers it rests on (pci.scan, software.nvlsm/imex/uptime_seconds).

* HGX B200: its NVSwitches are no NVIDIA PCI functions of class 0x0680 but sit behind the baseboard's ConnectX-7
  bridge (limited PFs whose VPD carries SMDL=SW_MNG, NVIDIA fabric manager user guide); fabric manager needs NVLSM
  there.
* GB200 NVL72 compute trays: IMEX instead of a local fabric manager.
* H100 PCIe, GH200 and single-GPU hosts: neither.

Readers over fixture roots built by tests/sim/host/mkroot.py; platforms over rule_facts' healthy host and its shapes.
The rules that judge these platforms (SW-FM-001, SW-IMEX-001, GPU-FAB-001) are tested in test_rules_software.py and
test_rules_health.py.
"""

from __future__ import annotations

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvlink_platform, pci, software
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from rule_facts import gb200_tray, gh200, h100_pcie, healthy, hgx_b200, single_gpu

mkroot = simulators.mkroot()

B200_BUSES = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]


def _fs(tmp_path, **overrides):
    small = {"sockets": 1, "cores_per_socket": 2, "threads_per_core": 1}  # the CPUs do not matter here
    return HostFS(str(mkroot.build_root(tmp_path / "root", {**small, **overrides})))


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


@pytest.mark.parametrize(
    "shape, kind",
    [
        (lambda f: f, "nvswitch"),
        (hgx_b200, "nvlink5_hgx"),
        (gb200_tray, "multinode"),
        (h100_pcie, "none"),
        (gh200, "none"),
        (single_gpu, "none"),
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
