"""The GPUDirect RDMA reader (plugins/module_utils/gpudirect.py) over fixture roots: the HGX H100 PCI tree of
tests/sim/host/pcitree.py (each GPU two switch levels below the switch of its ConnectX-7), with the files the reader
adds to it written here: bridges' configuration space, loaded modules, the driver's version file, IOMMU groups, DMI.

Configuration space is built from the PCI Express Base Specification's layout (rev. 6.0, 7.6.3 "PCI Express Extended
Capability Header": ID bits 15:0, version 19:16, next capability offset 31:20, the list starting at 0x100; 7.7.11
"ACS Extended Capability": ACS Capability register at +4, ACS Control register at +6, bits SV 0, TB 1, RR 2, CR 3,
UF 4, EC 5, DT 6), the offsets Linux names in include/uapi/linux/pci_regs.h (PCI_EXT_CAP_ID_ACS 0x0d, PCI_ACS_CAP 4,
PCI_ACS_CTRL 6). The ACS values are a Broadcom PEX switch downstream port's as lspci prints them: capability
SrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+ (0x005f); control with ACS on as the
kernel sets it when an IOMMU is on (SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+: 0x001d), and off (0x0000).
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpudirect, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from rule_facts import healthy

ACS_ON, ACS_OFF = 0x001D, 0x0000
OPEN_VERSION = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release Build  (dvs-builder@U16)\n"
PROPRIETARY_VERSION = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Thu May  9 15:38:23 UTC 2024\n"
MODULES = "nvidia_peermem 16384 0 - Live 0x0000000000000000\nnvidia 56819712 2 nvidia_peermem, Live 0x0\n"
CPUINFO_METAL = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme sse2 avx512f\n"
CPUINFO_VM = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme sse2 hypervisor avx512f\n"


def config_space(acs_control=None, size=4096):
    """A bridge's configuration space: an AER capability at 0x100, then (when ``acs_control`` is given) ACS at 0x148."""
    cfg = bytearray(4096)
    struct.pack_into("<HH", cfg, 0, 0x1000, 0xC030)  # vendor, device (Broadcom PEX switch port)
    struct.pack_into("<I", cfg, 0x100, 0x0001 | (2 << 16) | ((0x148 if acs_control is not None else 0) << 20))
    if acs_control is not None:
        struct.pack_into("<I", cfg, 0x148, 0x000D | (1 << 16))
        struct.pack_into("<HH", cfg, 0x14C, 0x005F, acs_control)
    return bytes(cfg[:size])


def write(root: Path, path: str, data):
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    (p.write_bytes if isinstance(data, bytes) else p.write_text)(data)


def nvml_gpus():
    return [
        {"index": g["index"], "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000" + g["bdf"].upper(),
         "pci_device_id": "0x233010DE", "nvlink": None, "fabric": None, "numa_node": g["node"], "cpu_affinity": None}
        for g in simulators.pcitree().platform("hgx_h100")["gpus"]
    ]  # fmt: skip


def bridges_of(root: Path):
    return sorted(p.name for p in (root / "sys/bus/pci/devices").iterdir() if (p / "class").read_text() == "0x060400\n")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """One HGX H100 tree for the module; each test rewrites the reader's files in it (host())."""
    return simulators.pcitree().build(tmp_path_factory.mktemp("gdr") / "hgx", "hgx_h100")


def host(root: Path, acs_on=(), peermem=True, flavour="open", kernel="5.15.0-105-generic", iommu="identity",
         cpuinfo=CPUINFO_METAL, dmi=("Supermicro", "SYS-821GE-TNHR"), config_size=4096):  # fmt: skip
    """The HGX H100 tree with the reader's other files (re)written; ACS on for the bridges in ``acs_on``."""
    for bdf in bridges_of(root):
        write(
            root, f"/sys/bus/pci/devices/{bdf}/config", config_space(ACS_ON if bdf in acs_on else ACS_OFF, config_size)
        )
    write(root, "/proc/modules", MODULES if peermem else "nvidia 56819712 0 - Live 0x0\n")
    shutil.rmtree(root / "sys/module", ignore_errors=True)
    if peermem:
        (root / "sys/module/nvidia_peermem").mkdir(parents=True)
    write(root, "/proc/driver/nvidia/version", OPEN_VERSION if flavour == "open" else PROPRIETARY_VERSION)
    write(root, "/proc/sys/kernel/osrelease", kernel + "\n")
    write(root, f"/lib/modules/{kernel}/modules.dep", "kernel/nvidia/nvidia-peermem.ko: kernel/nvidia/nvidia.ko\n")
    write(root, "/proc/cmdline", "BOOT_IMAGE=/vmlinuz ro intel_iommu=on" + (" iommu=pt" if iommu == "identity" else ""))
    write(root, "/proc/cpuinfo", cpuinfo)
    write(root, "/sys/class/dmi/id/sys_vendor", dmi[0] + "\n")
    write(root, "/sys/class/dmi/id/product_name", dmi[1] + "\n")
    shutil.rmtree(root / "sys/class/iommu", ignore_errors=True)
    shutil.rmtree(root / "sys/kernel/iommu_groups", ignore_errors=True)
    for n, dev in enumerate(sorted((root / "sys/bus/pci/devices").iterdir())):
        link = dev / "iommu_group"
        if link.is_symlink():
            link.unlink()
        if iommu:
            write(root, f"/sys/kernel/iommu_groups/{n}/type", iommu + "\n")
            link.symlink_to(root / f"sys/kernel/iommu_groups/{n}")
    if iommu:
        (root / "sys/class/iommu/dmar0").mkdir(parents=True)
    return root


def collect(root):
    return gpudirect.collect(HostFS(str(root)), nvml_gpus())


# ---------------------------------------------------------------- configuration space


def test_acs_control_read_from_the_extended_capability_list():
    on = gpudirect.acs_state(config_space(ACS_ON))
    assert on == {"readable": True, "present": True, "capability": "0x005f", "control": "0x001d",
                  "enabled": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"], "redirect": True}  # fmt: skip
    off = gpudirect.acs_state(config_space(ACS_OFF))
    assert off["present"] is True and off["redirect"] is False and off["enabled"] == []
    # Source validation alone does not send peer traffic up.
    assert gpudirect.acs_state(config_space(0x0001))["redirect"] is False
    egress = gpudirect.acs_state(config_space(0x0020))
    assert egress["redirect"] is True and egress["enabled"] == ["EgressCtrl"]


def test_no_acs_capability_and_unreadable_config_space_differ():
    none = gpudirect.acs_state(config_space(None))
    assert none["readable"] is True and none["present"] is False and none["redirect"] is False
    # What a reader without CAP_SYS_ADMIN gets: 64 bytes. Not "off".
    short = gpudirect.acs_state(config_space(ACS_ON, size=64))
    assert short["readable"] is False and short["redirect"] is None and short["present"] is None
    # Conventional PCI (256 bytes): no extended capabilities at all.
    assert gpudirect.acs_state(config_space(ACS_ON, size=256))["present"] is False


def test_a_looping_capability_list_ends():
    cfg = bytearray(config_space(None))
    struct.pack_into("<I", cfg, 0x100, 0x0001 | (1 << 16) | (0x100 << 20))  # next points at itself
    assert gpudirect.acs_state(bytes(cfg))["present"] is False


# ---------------------------------------------------------------- the host


def test_hgx_bridges_between_each_gpu_and_its_nic(base):
    # GPU0 (0000:18:00.0) below 14:00.0 -> 15:00.0 -> 16:00.0 -> 17:00.0; its mlx5_0 (19:00.0) below 14:00.0 -> 15:01.0.
    facts = collect(host(base, acs_on=("0000:15:01.0",)))
    assert facts["applies"] is True
    gpu0 = next(p for p in facts["acs"] if p["gpu"] == 0)
    assert gpu0["nic"] == "mlx5_0" and gpu0["nic_bus_id"] == "0000:19:00.0" and gpu0["category"] == "PXB"
    assert [b["bdf"] for b in gpu0["bridges"]] == ["0000:14:00.0", "0000:15:00.0", "0000:16:00.0", "0000:17:00.0",
                                                   "0000:15:01.0"]  # fmt: skip
    assert [b["bdf"] for b in gpu0["bridges"] if b["redirect"]] == ["0000:15:01.0"]
    assert len(facts["acs"]) == 8 and not [b for p in facts["acs"][1:] for b in p["bridges"] if b["redirect"]]


def test_peer_memory_loaded_or_dmabuf(base):
    facts = collect(host(base))
    pm = facts["peer_memory"]
    assert pm["loaded"] == ["nvidia_peermem"] and pm["installed"]["nvidia_peermem"] is True
    assert pm["dmabuf"]["available"] is True and pm["available"] is True


@pytest.mark.parametrize(
    "flavour, kernel, missing",
    [("proprietary", "5.15.0-105-generic", ["open_kernel_module"]), ("open", "5.4.0-150-generic", ["kernel_5_12"])],
)
def test_without_peermem_dmabuf_decides(base, flavour, kernel, missing):
    pm = collect(host(base, peermem=False, flavour=flavour, kernel=kernel))["peer_memory"]
    assert pm["loaded"] == [] and pm["dmabuf"]["missing"] == missing and pm["available"] is False


def test_iommu_mode_from_group_types(base):
    assert collect(host(base))["iommu"]["mode"] == "passthrough"
    translated = collect(host(base, iommu="DMA-FQ"))["iommu"]
    assert translated["mode"] == "translated" and translated["cmdline"] == {"intel_iommu": "on"}
    assert translated["groups"]["0000:18:00.0"] == "DMA-FQ"
    assert collect(host(base, iommu=None))["iommu"]["mode"] == "off"


def test_vm_detected_from_the_hypervisor_flag_and_dmi(base):
    vm = collect(host(base, cpuinfo=CPUINFO_VM, dmi=("Microsoft Corporation", "Virtual Machine")))
    assert vm["virtualization"]["virtual"] is True and vm["virtualization"]["cloud"] == "azure"
    metal = collect(host(base))["virtualization"]
    assert metal["virtual"] is False and metal["arch"] == "x86"


def test_no_rdma_device_means_nothing_applies(base):
    root = host(base)
    links = {link: link.readlink() for link in (root / "sys/class/infiniband").iterdir()}
    try:
        for link in links:
            link.unlink()
        facts = collect(root)
    finally:
        for link, target in links.items():
            link.symlink_to(target)
    assert facts["applies"] is False and "no RDMA device" in facts["reason"] and facts["peer_memory"] is None


# ---------------------------------------------------------------- read, then judged


def _judge(root):
    facts = healthy()
    facts["gpudirect"] = collect(root)
    policy = pol_mod.validate({}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate(facts, policy) if f["rule"].startswith("NET-GDR-")}


def test_rules_on_what_the_reader_read(base):
    good = _judge(host(base))
    assert {k: f["status"] for k, f in good.items()} == dict.fromkeys(("NET-GDR-001", "NET-GDR-002", "NET-GDR-003"),
                                                                      "pass")  # fmt: skip
    bad = _judge(host(base, acs_on=("0000:15:01.0",), peermem=False, flavour="proprietary",
                      iommu="DMA"))  # fmt: skip
    assert {k: f["status"] for k, f in bad.items()} == dict.fromkeys(bad, "fail")
    assert bad["NET-GDR-002"]["items"][0]["command"] == "setpci -s 0000:15:01.0 ECAP_ACS+0x6.w=0000"
    # Not root: 64 bytes of config space - ACS is not judged "off".
    unread = _judge(host(base, acs_on=("0000:15:01.0",), config_size=64))
    assert unread["NET-GDR-002"]["status"] == "skip"


def test_driver_version_from_nvml_where_the_module_file_does_not_say(base):
    root = host(base, peermem=False, kernel="5.15.0-105-generic")
    (root / "proc/driver/nvidia/version").unlink()
    fs = HostFS(str(root))
    unknown = gpudirect.peer_memory(fs)["dmabuf"]
    assert unknown["driver_515"] is None and unknown["available"] is None
    old = gpudirect.peer_memory(fs, driver_version="470.256.02")["dmabuf"]
    assert old["driver_515"] is False and "driver_515" in old["missing"] and old["available"] is False
    assert gpudirect.peer_memory(fs, driver_version="550.90.07")["dmabuf"]["driver_515"] is True
