# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What GPUDirect RDMA needs of a host that has NVIDIA GPUs and RDMA devices: a peer-memory path, PCIe Access
Control Services off between each GPU and its nearest RDMA NIC, and the IOMMU off or in passthrough.

Read from /proc and /sys through HostFS (a fixture root works); nothing is changed, no program is run.

- Peer memory. The NIC reaches GPU memory either through the ``nvidia_peermem`` kernel module (shipped with the
  driver since R470; ``nv_peer_mem`` on older stacks; both need MLNX_OFED/DOCA-OFED's ib_core) or through the
  kernel's DMA-BUF. NVIDIA's GPU Operator documentation lists what DMA-BUF needs: the open GPU kernel modules, CUDA
  11.7 or later (driver R515 or later), a Turing or later GPU (which the open modules need anyway) and Linux 5.12
  or later; NCCL (2.13 and later, NCCL_DMABUF_ENABLE=1 by default) uses it on its own where the GPU reports
  CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED. Loaded modules come from /sys/module/<name> and /proc/modules; whether the
  module is installed for the running kernel from /lib/modules/<release>/modules.dep.
- ACS. Read from each bridge's PCI configuration space (/sys/bus/pci/devices/<bdf>/config): the extended
  capability list starts at 0x100, each header is ``id[15:0] version[19:16] next[31:20]``; ACS is id 0x000D, its
  Control register is at cap + 6 (PCI Express Base Specification, "ACS Extended Capability"; Linux
  include/uapi/linux/pci_regs.h PCI_EXT_CAP_ID_ACS, PCI_ACS_CTRL). Request Redirect, Completion Redirect and P2P
  Egress Control send peer traffic up to the root complex (NCCL troubleshooting, "PCI Access Control Services").
  Without CAP_SYS_ADMIN the kernel returns only the first 64 bytes of config space: "not readable", never "off".
  The bridges judged are those between a GPU and its nearest RDMA NIC where both sit below a common bridge
  (a PCIe switch); where their paths meet only in the root complex, no switch port lies between them.
- IOMMU. /sys/class/iommu (the IOMMUs the kernel uses), /proc/cmdline (intel_iommu=, amd_iommu=, iommu=,
  iommu.passthrough=), and the default domain type of each GPU's and RDMA NIC's IOMMU group
  (/sys/kernel/iommu_groups/<n>/type: ``identity`` is passthrough, ``DMA`` and ``DMA-FQ`` translate).
- Virtual machines (the ``hypervisor`` CPU flag, or a hypervisor's DMI vendor/product): the hypervisor owns ACS
  and the IOMMU of the physical host; only the peer-memory path is the guest's to judge.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import struct

from ansible_collections.gpufleet.tuning.plugins.module_utils import pci, software, topology

INFINIBAND = "/sys/class/infiniband"
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
# DMA-BUF (NVIDIA GPU Operator, GPUDirect RDMA prerequisites): open kernel modules, CUDA >= 11.7 (R515), Linux >= 5.12.
DMABUF_MIN_KERNEL = (5, 12)
DMABUF_MIN_DRIVER_BRANCH = 515

# PCI configuration space (PCI Express Base Specification; Linux pci_regs.h).
CONFIG_EXT_START = 0x100
CONFIG_FULL = 4096
EXT_CAP_ACS = 0x000D
ACS_CAP_OFFSET = 4
ACS_CTRL_OFFSET = 6
ACS_BITS = (
    (0x0001, "SrcValid"),  # source validation
    (0x0002, "TransBlk"),  # translation blocking
    (0x0004, "ReqRedir"),  # P2P request redirect
    (0x0008, "CmpltRedir"),  # P2P completion redirect
    (0x0010, "UpstreamFwd"),  # upstream forwarding
    (0x0020, "EgressCtrl"),  # P2P egress control
    (0x0040, "DirectTrans"),  # direct translated P2P
)
# The bits that send peer-to-peer traffic up to the root complex: ACS "on" for GPUDirect.
ACS_REDIRECT = 0x0004 | 0x0008 | 0x0020

# Hypervisors as DMI names them (/sys/class/dmi/id/sys_vendor, product_name), lower case.
VM_PRODUCTS = ("virtual machine", "kvm", "qemu", "vmware", "virtualbox", "hvm domu", "google compute engine",
               "openstack nova", "cloud hypervisor")  # fmt: skip
CLOUDS = (("microsoft corporation", "azure"), ("amazon ec2", "aws"), ("google", "gcp"))


def _text(fs, path):
    text = fs.read(path)
    return None if text is None else text.strip()


def rdma_devices(fs):
    """[{device, address}] for each entry of /sys/class/infiniband (InfiniBand, RoCE, EFA); address is the PCI
    function (None when the device has none, rxe/siw on a netdev)."""
    out = []
    for path in fs.glob(INFINIBAND + "/*"):
        # <dev>/device links to the PCI function; the class link itself resolves below it (.../<bdf>/infiniband/<dev>)
        where = fs.realpath(path + "/device") if fs.exists(path + "/device") else fs.realpath(path)
        found = [p.lower() for p in where.split("/") if _BDF.match(p.lower())]
        out.append({"device": os.path.basename(path), "address": found[-1] if found else None})
    return out


def loaded_modules(fs):
    """Names of the loaded kernel modules (/proc/modules), or None when it cannot be read."""
    text = fs.read("/proc/modules")
    if text is None:
        return None
    return set(line.split()[0] for line in text.splitlines() if line.strip())


def _installed(fs, release, names):
    """{name: True/False} from modules.dep of the running kernel (dashes and underscores are one), None unknown."""
    text = fs.read("/lib/modules/%s/modules.dep" % release, limit=16 * 1024 * 1024) if release else None
    if text is None:
        return dict((n, None) for n in names)
    files = set(os.path.basename(line.split(":", 1)[0]).split(".ko")[0].replace("-", "_")
                for line in text.splitlines() if ":" in line)  # fmt: skip
    return dict((n, n in files) for n in names)


def _kernel_tuple(release):
    m = re.match(r"^(\d+)\.(\d+)", release or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def peer_memory(fs, driver_version=None):
    """{loaded: [names], installed: {name: bool|None}, dmabuf: {...}, available: bool|None}. The driver's version
    comes from the kernel module (/proc/driver/nvidia/version), else ``driver_version`` (NVML's, from the audit)."""
    modules = loaded_modules(fs)
    loaded = [n for n in PEERMEM_MODULES if fs.exists("/sys/module/" + n) or (modules is not None and n in modules)]
    release = _text(fs, "/proc/sys/kernel/osrelease")
    kmod = software.kernel_module(fs)
    version = kmod.get("version") or driver_version
    branch = int(version.split(".")[0]) if version and version.split(".")[0].isdigit() else None
    kernel = _kernel_tuple(release)
    checks = {
        "open_kernel_module": None if kmod.get("flavour") is None else kmod["flavour"] == "open",
        "kernel_5_12": None if kernel is None else kernel >= DMABUF_MIN_KERNEL,
        "driver_515": None if branch is None else branch >= DMABUF_MIN_DRIVER_BRANCH,
    }
    missing = [k for k, v in checks.items() if v is False]
    dmabuf = dict(
        checks,
        kernel=release,
        driver=version,
        flavour=kmod.get("flavour"),
        available=False if missing else (True if all(checks.values()) else None),
        missing=missing,
    )
    available = True if loaded or dmabuf["available"] else (None if dmabuf["available"] is None else False)
    return {"loaded": loaded, "installed": _installed(fs, release, PEERMEM_MODULES), "dmabuf": dmabuf,
            "available": available, "modules_readable": modules is not None}  # fmt: skip


def read_config(fs, bdf):
    """The configuration space bytes of a PCI function (None when it cannot be opened)."""
    try:
        with open(fs.path("%s/%s/config" % (pci.PCI_DEVICES, bdf)), "rb") as f:
            return f.read(CONFIG_FULL)
    except (IOError, OSError):
        return None


def acs_state(config):
    """{readable, present, capability, control, enabled: [flag names], redirect: bool|None} from config bytes."""
    out = {"readable": False, "present": None, "capability": None, "control": None, "enabled": [], "redirect": None}
    if config is None or len(config) < CONFIG_EXT_START:
        return out  # without CAP_SYS_ADMIN the kernel returns 64 bytes (128 for CardBus): not "off"
    out["readable"] = True  # 256 bytes: conventional PCI, no extended capabilities (no ACS)
    offset, seen = CONFIG_EXT_START, set()
    while offset and offset not in seen and offset + 8 <= len(config):
        seen.add(offset)
        header = struct.unpack_from("<I", config, offset)[0]
        if header in (0, 0xFFFFFFFF):
            break
        if header & 0xFFFF == EXT_CAP_ACS:
            cap, ctrl = struct.unpack_from("<HH", config, offset + ACS_CAP_OFFSET)
            out.update(
                present=True,
                capability="0x%04x" % cap,
                control="0x%04x" % ctrl,
                enabled=[name for bit, name in ACS_BITS if ctrl & bit],
                redirect=bool(ctrl & ACS_REDIRECT),
            )
            return out
        offset = (header >> 20) & 0xFFC
    out["present"] = False
    out["redirect"] = False
    return out


def _between(gpu_path, nic_path):
    """The bridges between two PCI functions (root port first), or [] where the paths share no bridge."""
    k = 0
    while k < min(len(gpu_path), len(nic_path)) and gpu_path[k] == nic_path[k]:
        k += 1
    if k == 0:
        return []
    out = []
    for bdf in gpu_path[k - 1 : -1] + nic_path[k:-1]:
        if bdf not in out:
            out.append(bdf)
    return out


def acs_paths(fs, topo, rdma):
    """Per GPU: {gpu, bus_id, nic, nic_bus_id, category, bridges: [{bdf, ...acs_state}]} for the nearest RDMA NIC."""
    by_device = dict((d["device"], d) for d in rdma)
    nics = dict(((n.get("device") or n.get("name")), n) for n in topo.get("nics") or [] if n.get("device") in by_device)
    gpus = dict((g["index"], g) for g in topo.get("gpus") or [])
    out, cache = [], {}
    for binding in topo.get("bindings") or []:
        gpu = gpus.get(binding.get("gpu"))
        nearest = [label for label in binding.get("nics") or [] if label in nics]
        if gpu is None or not nearest:
            continue
        nic = nics[nearest[0]]
        bridges = []
        for bdf in _between(gpu.get("path") or [], nic.get("path") or []):
            if bdf not in cache:
                cache[bdf] = acs_state(read_config(fs, bdf))
            bridges.append(dict(cache[bdf], bdf=bdf))
        row = topo.get("matrix", {}).get("GPU%s" % gpu["index"], {})
        out.append({"gpu": gpu["index"], "bus_id": gpu.get("bus_id"), "nic": nearest[0],
                    "nic_bus_id": nic.get("bus_id"), "category": row.get(nearest[0]), "bridges": bridges})  # fmt: skip
    return out


def _cmdline_iommu(cmdline):
    keys = ("intel_iommu", "amd_iommu", "iommu", "iommu.passthrough", "iommu.strict")
    out = {}
    for token in (cmdline or "").split():
        key, sep, value = token.partition("=")
        if sep and key in keys:
            out[key] = value
    return out


def iommu(fs, addresses):
    """{units: [names], cmdline: {key: value}, groups: {bdf: type}, mode: off|passthrough|translated|None}."""
    units = [os.path.basename(p) for p in fs.glob("/sys/class/iommu/*")]
    groups = {}
    for bdf in addresses:
        link = "%s/%s/iommu_group" % (pci.PCI_DEVICES, bdf)
        if fs.exists(link):
            group = os.path.basename(fs.realpath(link))
            groups[bdf] = _text(fs, "/sys/kernel/iommu_groups/%s/type" % group)
    if not units and not groups:
        mode = "off"
    elif groups and any(t in ("DMA", "DMA-FQ") for t in groups.values()):
        mode = "translated"
    elif groups and all(t == "identity" for t in groups.values()):
        mode = "passthrough"
    else:
        mode = None  # IOMMUs present but no group type to read
    return {"units": units, "cmdline": _cmdline_iommu(_text(fs, "/proc/cmdline")), "groups": groups, "mode": mode}


def virtualization(fs):
    """{virtual, reason, cloud, vendor, product} from the CPU flags and DMI."""
    cpuinfo = fs.read("/proc/cpuinfo") or ""
    flags = re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.M)
    vendor = _text(fs, "/sys/class/dmi/id/sys_vendor")
    product = _text(fs, "/sys/class/dmi/id/product_name")
    names = " ".join(x for x in (vendor, product) if x).lower()
    cloud = next((c for key, c in CLOUDS if key in (vendor or "").lower()), None)
    reason = None
    if flags and "hypervisor" in flags.group(1).split():
        reason = "the CPU reports the hypervisor flag"
    elif any(p in names for p in VM_PRODUCTS):
        reason = "DMI names a hypervisor (%s)" % names
    arch = "arm64" if re.search(r"^CPU implementer", cpuinfo, re.M) else ("x86" if flags else None)
    cpu_vendor = re.search(r"^vendor_id\s*:\s*(\S+)", cpuinfo, re.M)
    return {
        "virtual": reason is not None,
        "reason": reason,
        "cloud": cloud,
        "vendor": vendor,
        "product": product,
        "arch": arch,
        "cpu_vendor": cpu_vendor.group(1) if cpu_vendor else None,
    }


def collect(fs, gpus=None, topo=None, driver_version=None):
    """The GPUDirect facts: {applies, reason, rdma_devices, gpus, peer_memory, acs, iommu, virtualization}.

    ``applies`` is False (and the rest is not read) where the host has no NVIDIA GPU or no RDMA device.
    ``topo``: topology.collect's answer when the caller has it (the audit), else it is read here from ``gpus``;
    ``driver_version``: the driver version NVML reported, where the kernel module's file does not say it.
    """
    rdma = rdma_devices(fs)
    if topo is None:
        topo = topology.collect(fs, gpus or [])
    gpu_list = (topo.get("gpus") or []) if topo.get("available") else []
    out = {"applies": False, "reason": None, "rdma_devices": rdma, "gpus": len(gpu_list), "peer_memory": None,
           "acs": None, "iommu": None, "virtualization": None}  # fmt: skip
    if not topo.get("available"):
        out["reason"] = "the PCI topology could not be read: %s" % topo.get("error")
        return out
    if not gpu_list:
        out["reason"] = "no NVIDIA GPU on the PCI bus"
        return out
    if not rdma:
        out["reason"] = "no RDMA device in %s" % INFINIBAND
        return out
    out["applies"] = True
    out["virtualization"] = virtualization(fs)
    out["peer_memory"] = peer_memory(fs, driver_version)
    out["acs"] = acs_paths(fs, topo, rdma)
    addresses = [g["bus_id"] for g in gpu_list if g.get("bus_id")] + [d["address"] for d in rdma if d["address"]]
    out["iommu"] = iommu(fs, addresses)
    return out
