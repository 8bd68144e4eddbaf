# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the network area for GPUDirect RDMA's host prerequisites (facts: ``gpudirect``, module_utils/gpudirect.py):
a peer-memory path, PCIe ACS off on the bridges between each GPU and its nearest RDMA NIC, and the IOMMU off or in
passthrough. They judge only hosts with NVIDIA GPUs and RDMA devices; on a virtual machine the hypervisor owns ACS and
the IOMMU (the cloud documents GPUDirect RDMA for its VMs), so only the peer-memory path is judged there."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import Rule, result, skip

DMABUF_NEEDS = {
    "open_kernel_module": "the open GPU kernel modules",
    "kernel_5_12": "Linux 5.12 or later",
    "driver_515": "driver R515 or later (CUDA 11.7)",
}
CLOUD_DOCS = {"azure": sources.AZURE_INFINIBAND[1], "aws": sources.AWS_EFA_NCCL[1]}


def _gpudirect(facts, physical=None):
    """(facts["gpudirect"], None) where the rules apply, else (None, the skip result). ``physical``: what of the
    physical host the check judges (ACS, the IOMMU): on a virtual machine the hypervisor owns it, so the check skips."""
    gd = facts.get("gpudirect")
    if gd is None:
        return None, skip("GPUDirect facts not gathered (the audit reads them with the GPU facts)")
    if not gd.get("applies"):
        return None, skip(gd.get("reason") or "no GPUDirect facts")
    vm = _vm_skip(gd, physical) if physical else None
    if vm:
        return None, vm
    return gd, None


def _vm_skip(gd, what):
    vm = gd.get("virtualization") or {}
    if not vm.get("virtual"):
        return None
    where = CLOUD_DOCS.get(vm.get("cloud"))
    return skip(
        "virtual machine (%s): the hypervisor owns %s of the physical host; the cloud documents GPUDirect RDMA for "
        "its VMs%s, and only the peer-memory path (NET-GDR-001) is the guest's"
        % (vm.get("reason"), what, " (%s)" % where if where else "")
    )


# --- NET-GDR-001 peer memory -------------------------------------------------------------------------


def check_peer_memory(facts, pol):
    gd, skipped = _gpudirect(facts)
    if skipped:
        return skipped
    pm = gd.get("peer_memory") or {}
    dmabuf = pm.get("dmabuf") or {}
    observed = {"loaded": pm.get("loaded") or [], "installed": pm.get("installed"), "dmabuf": dmabuf}
    expected = "nvidia_peermem loaded, or DMA-BUF (open GPU kernel modules, driver R515 or later, Linux 5.12 or later)"
    if pm.get("loaded"):
        return result("pass", observed, expected, "%s loaded" % ", ".join(pm["loaded"]))
    if dmabuf.get("available"):
        return result(
            "pass",
            observed,
            expected,
            "DMA-BUF: open kernel module %s on Linux %s; NCCL registers GPU memory through it (NCCL_DMABUF_ENABLE, "
            "on by default), no peer-memory module needed" % (dmabuf.get("driver"), dmabuf.get("kernel")),
        )
    if pm.get("available") is None:
        unknown = [DMABUF_NEEDS[k] for k in DMABUF_NEEDS if dmabuf.get(k) is None]
        return result(
            "warn",
            observed,
            expected,
            "nvidia_peermem is not loaded and whether DMA-BUF can serve could not be read (%s)" % ", ".join(unknown),
        )
    installed = (pm.get("installed") or {}).get("nvidia_peermem")
    lacking = [DMABUF_NEEDS[k] for k in dmabuf.get("missing") or []]
    return result(
        "fail",
        observed,
        expected,
        "no peer-memory path for %d RDMA device(s): nvidia_peermem is not loaded%s and DMA-BUF lacks %s; the NIC "
        "cannot reach GPU memory and NCCL stages every transfer through host memory. Load it now with `modprobe "
        "nvidia-peermem` (it needs MLNX_OFED's or DOCA-OFED's ib_core) and at every boot with the gpu_runtime role "
        "(gpu_runtime_peermem_enabled: true writes /etc/modules-load.d/gpufleet-peermem.conf), or move to DMA-BUF "
        "(the open kernel modules, driver R515 or later, Linux 5.12 or later)"
        % (
            len(gd.get("rdma_devices") or []),
            " (not installed for this kernel)" if installed is False else "",
            ", ".join(lacking) or "what it needs",
        ),
        items=[{"module": "nvidia_peermem", "installed": installed, "dmabuf_lacks": lacking}],
    )


# --- NET-GDR-002 ACS ---------------------------------------------------------------------------------


def check_acs(facts, pol):
    gd, skipped = _gpudirect(facts, physical="PCIe Access Control Services")
    if skipped:
        return skipped
    paths = gd.get("acs") or []
    judged = [p for p in paths if p.get("bridges")]
    if not judged:
        return skip("no GPU shares a PCIe switch with an RDMA NIC (they meet in the root complex): no bridge to judge")
    on, unreadable, observed = {}, set(), {}
    for p in judged:
        for b in p["bridges"]:
            observed[b["bdf"]] = b.get("control") if b.get("readable") else "not readable"
            if not b.get("readable"):
                unreadable.add(b["bdf"])
            elif b.get("redirect"):
                entry = on.setdefault(b["bdf"], {"bridge": b["bdf"], "control": b["control"], "enabled": b["enabled"],
                                                 "between": []})  # fmt: skip
                entry["between"].append("GPU%s-%s" % (p["gpu"], p["nic"]))
    expected = "ACS Control without ReqRedir, CmpltRedir or EgressCtrl on every bridge between a GPU and its RDMA NIC"
    if on:
        items = []
        for bdf in sorted(on):
            item = dict(on[bdf], command="setpci -s %s ECAP_ACS+0x6.w=0000" % bdf)
            items.append(item)
        return result(
            "fail",
            observed,
            expected,
            "ACS redirects peer traffic on %d bridge(s) (%s): GPU-NIC traffic goes up to the root complex, slower or "
            "hanging (NCCL). Turn ACS off in the BIOS (an 'ACS' or 'PCIe ACS control' option; VT-d/IOMMU off also "
            "leaves it off), or at every boot with `setpci -s <bridge> ECAP_ACS+0x6.w=0000` per bridge (lost at "
            "reboot), or with the kernel command line pci=disable_acs_redir=%s (/etc/default/grub, then update-grub "
            "or grub2-mkconfig, and reboot)" % (len(on), ", ".join(sorted(on)), ";".join(sorted(on))),
            items=items,
        )
    if unreadable:
        return skip(
            "the configuration space of %d bridge(s) could not be read (%s): Linux gives a reader without "
            "CAP_SYS_ADMIN only its first 64 bytes; run the audit as root"
            % (len(unreadable), ", ".join(sorted(unreadable)))
        )
    return result(
        "pass", observed, expected, "ACS redirect off on the %d bridge(s) between GPUs and RDMA NICs" % len(observed)
    )


# --- NET-GDR-003 IOMMU -------------------------------------------------------------------------------


def _passthrough_param(gd):
    vm = gd.get("virtualization") or {}
    return "iommu.passthrough=1" if vm.get("arch") == "arm64" else "iommu=pt"


def check_iommu(facts, pol):
    gd, skipped = _gpudirect(facts, physical="the IOMMU")
    if skipped:
        return skipped
    io = gd.get("iommu") or {}
    mode = io.get("mode")
    observed = {"mode": mode, "cmdline": io.get("cmdline") or {}, "groups": io.get("groups") or {}}
    expected = "IOMMU off, or passthrough (identity domains) for the GPUs and RDMA NICs"
    if mode == "off":
        return result("pass", observed, expected, "no IOMMU in use")
    if mode == "passthrough":
        return result("pass", observed, expected, "the GPUs' and RDMA NICs' IOMMU groups are identity (passthrough)")
    if mode is None:
        return skip("IOMMUs %s are in use but no GPU or RDMA NIC IOMMU group type could be read" % io.get("units"))
    translated = sorted(bdf for bdf, t in (io.get("groups") or {}).items() if t in ("DMA", "DMA-FQ"))
    param = _passthrough_param(gd)
    return result(
        "fail",
        observed,
        expected,
        "the IOMMU translates DMA for %d GPU/RDMA function(s) (%s): every GPUDirect transfer pays an IOMMU lookup. "
        "Add %s to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub (Debian, Ubuntu) or grub2-mkconfig -o "
        "/boot/grub2/grub.cfg (RHEL; or grubby --update-kernel=ALL --args=%s) and reboot; or turn the IOMMU off "
        "(intel_iommu=off, amd_iommu=off, or VT-d/AMD-Vi in the BIOS) where nothing needs it (VFIO, SR-IOV for VMs)"
        % (len(translated), ", ".join(translated), param, param),
        items=[{"function": bdf, "domain": io["groups"][bdf], "param": param} for bdf in translated],
    )


MANUAL_PEERMEM = (
    "Load nvidia_peermem (modprobe nvidia-peermem; needs MLNX_OFED or DOCA-OFED) and keep it loaded at boot: opt in "
    "with gpu_runtime_peermem_enabled: true (the gpu_runtime role loads it and writes "
    "/etc/modules-load.d/gpufleet-peermem.conf, recorded for rollback); or use DMA-BUF: the open GPU kernel modules, "
    "driver R515 or later, Linux 5.12 or later"
)
MANUAL_ACS = (
    "BIOS: disable PCIe ACS on the listed bridges (or VT-d/IOMMU, which leaves ACS off); per boot: setpci -s <bridge> "
    "ECAP_ACS+0x6.w=0000 (lost at reboot); persistent: kernel command line pci=disable_acs_redir=<bdf>;<bdf>"
)
MANUAL_IOMMU = (
    "Kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then update-grub or grub2-mkconfig, reboot): "
    "iommu=pt (arm64: iommu.passthrough=1), or intel_iommu=off / amd_iommu=off where no VM or VFIO needs the IOMMU"
)

RULES = (
    Rule(
        "NET-GDR-001",
        "network",
        "high",
        "GPUDirect RDMA has a peer-memory path (nvidia_peermem loaded, or DMA-BUF)",
        "Without nvidia_peermem or the kernel's DMA-BUF the RDMA NIC cannot read or write GPU memory: NCCL and MPI "
        "stage every inter-node transfer through host memory, which costs bandwidth and CPU. The driver ships "
        "nvidia_peermem but does not load it at boot; DMA-BUF needs the open kernel modules on Linux 5.12 or later.",
        check_peer_memory,
        manual=MANUAL_PEERMEM,
        references=(
            sources.NCCL_GPU_TO_NIC,
            sources.NVIDIA_PEERMEM,
            sources.GPU_OPERATOR_RDMA,
            sources.NCCL_DMABUF_ENABLE,
            sources.AZURE_INFINIBAND,
            sources.AWS_EFA_NCCL,
        ),  # fmt: skip
    ),
    Rule(
        "NET-GDR-002",
        "network",
        "high",
        "PCIe ACS redirect off on the bridges between each GPU and its nearest RDMA NIC (bare metal)",
        "With Access Control Services redirect on, a PCIe switch sends peer-to-peer traffic between a GPU and the NIC "
        "below it up to the root complex: GPUDirect RDMA gets much slower or hangs (NCCL troubleshooting). The "
        "bridges' ACS Control register is read from PCI configuration space; on a VM the hypervisor owns it.",
        check_acs,
        manual=MANUAL_ACS,
        references=(sources.NCCL_ACS, sources.KERNEL_PARAMETERS, sources.GPUDIRECT_RDMA),
    ),
    Rule(
        "NET-GDR-003",
        "network",
        "medium",
        "IOMMU off or in passthrough for the GPUs and RDMA NICs (bare metal)",
        "An IOMMU that translates DMA (domain type DMA or DMA-FQ) puts a lookup on every GPUDirect transfer and, with "
        "the kernel enabling ACS for isolation, sends peer traffic through the root complex (NCCL troubleshooting: IO "
        "virtualization). Passthrough (iommu=pt) keeps the IOMMU for VFIO while the host's own devices map 1:1.",
        check_iommu,
        manual=MANUAL_IOMMU,
        references=(sources.NCCL_ACS, sources.KERNEL_PARAMETERS, sources.KERNEL_IOMMU_GROUPS),
    ),
)
