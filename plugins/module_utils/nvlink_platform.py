# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Which NVLink fabric a host belongs to, and so which fabric services it must run: pure, from gpu_info's facts.

* ``nvswitch``: NVSwitches are NVIDIA PCI functions of class 0x0680 (HGX/DGX A100, H100, H200): nvidia-fabricmanager
  runs on the host (fabric manager user guide).
* ``nvlink5_hgx``: an HGX B200/B100 baseboard (fifth-generation NVLink; the fabric manager user guide's "systems using
  fourth generation NVSwitches"): the NVSwitches hang behind the baseboard's ConnectX-7 bridge, whose limited PFs
  carry SMDL=SW_MNG in their VPD (pci.py). Fabric manager runs together with NVLSM, the NVLink subnet manager;
  without NVLSM fabric manager exits (NV_WARN_NOTHING_TO_DO), the GPUs' fabric stays "in progress" and CUDA returns
  cudaErrorSystemNotReady. Recognised by those bridge functions; by the GPUs' PCI device ids (B200, B100) only when
  the host's Mellanox VPDs could not be read (an audit without root), since a virtual machine given B200s without the
  bridge (shared NVSwitch virtualization: fabric manager runs in the service VM) must not be asked for it.
* ``multinode``: a Grace compute tray of a multi-node NVLink domain (GB200/GB300 NVL72, GH200 NVL32; recognised by
  the GPUs' names or PCI ids, else by Hopper/Blackwell GPUs beside an Arm Neoverse V2, the Grace CPU): its GPUs
  report an NVLink fabric, but the NVSwitches sit in the rack's NVLink switch trays, managed there (NMX). The tray
  runs IMEX, the service that maps GPU memory between the domain's nodes (MNNVL user guide; IMEX user guide). A
  Grace superchip whose GPUs report no fabric (GH200 on its own, GB200 NVL4) is a single node: ``none``.
* ``none``: PCIe cards, a single GPU, GH200: no fabric service is needed (gpud's users report false fabric manager
  alarms on exactly H100 PCIe, GH200 and single-GPU hosts).

``None`` (not a dict) when the PCI bus was not read and nothing else tells.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# PCI device ids (vendor 0x10de), from the PCI ID repository (pci.ids, github.com/pciutils/pciids): HGX
# baseboard Blackwell GPUs (GB100/GB102: B200, HGX B200 168GB, B100, "TS4 / B100") and the Grace superchips' GPUs
# (GB100 "HGX GB200"; GH100 "GH200 120GB / 480GB", "GH200 144G HBM3e").
BLACKWELL_HGX_IDS = {0x2901: "B200", 0x2909: "B200", 0x29BC: "B100", 0x2920: "B100"}
GRACE_SUPERCHIP_IDS = {0x2941: "GB200", 0x2342: "GH200", 0x2348: "GH200"}
# NVML names: "NVIDIA B200", "NVIDIA GB200", "NVIDIA GH200 480GB". A whole token: "GH200" contains "H200", "GB200"
# contains "B200" (gpud matched GH200 as an H200, leptonai/gpud#1206).
_BLACKWELL_HGX_NAME = re.compile(r"(?<![A-Z0-9])(B200|B100|B300)(?![0-9])")
_GRACE_NAME = re.compile(r"(?<![A-Z0-9])(GB200|GB300|GH200)(?![0-9])")


def _device_id(text):
    """"0x2901" (sysfs), "0x290110DE" (NVML's pci_device_id, device in the high half) -> 0x2901, else None."""
    try:
        value = int(str(text), 16)
    except (TypeError, ValueError):
        return None
    return value >> 16 if value > 0xFFFF else value


def _gpu_models(facts, ids, names):
    """Model names of the host's GPUs found in ``ids`` (PCI bus) or matching ``names`` (NVML), one per GPU."""
    gpu = facts.get("gpu") or {}
    by_name = [m.group(1) for m in (names.search(str(g.get("name") or "").upper()) for g in gpu.get("gpus") or [])
               if m]
    by_id = [ids[i] for i in (_device_id(p.get("device")) for p in (gpu.get("pci") or {}).get("gpus") or [])
             if i in ids]
    return by_name if len(by_name) >= len(by_id) else by_id


def _grace_by_architecture(facts):
    """Hopper or Blackwell GPUs beside an NVIDIA Grace CPU (Arm Neoverse V2, host_info's cpu.model): a Grace superchip
    whose GPU name and PCI id are not in the tables (a newer part), as "Grace-<architecture>" per GPU."""
    model = str(((facts.get("host") or {}).get("cpu") or {}).get("model") or "")
    if "Neoverse-V2" not in model:
        return []
    return ["Grace-%s" % g["architecture"] for g in (facts.get("gpu") or {}).get("gpus") or []
            if g.get("architecture") in ("hopper", "blackwell")]


def classify(facts):
    """{kind, evidence, fabricmanager_needed, nvlsm_needed, imex_needed} (see the module's docstring), or None."""
    gpu = facts.get("gpu") or {}
    pci = gpu.get("pci") or {}
    read = bool(pci.get("available"))
    switches = pci.get("nvswitches") or []
    bridges = pci.get("nvswitch_bridges") or []
    fabric_gpus = [g for g in gpu.get("gpus") or [] if g.get("fabric")]
    grace = _gpu_models(facts, GRACE_SUPERCHIP_IDS, _GRACE_NAME) or _grace_by_architecture(facts)
    hgx = _gpu_models(facts, BLACKWELL_HGX_IDS, _BLACKWELL_HGX_NAME)
    if switches:
        kind, evidence = "nvswitch", "%d NVSwitch(es) on the PCI bus (class 0x0680)" % len(switches)
    elif bridges:
        kind, evidence = "nvlink5_hgx", "%d NVSwitch management function(s) of the baseboard's ConnectX bridge " \
            "(VPD SMDL=SW_MNG): %s" % (len(bridges), ", ".join(b["address"] for b in bridges))
    elif grace and fabric_gpus:
        kind, evidence = "multinode", "%s GPU(s) in an NVLink fabric (%d reporting a fabric state)" % (
            "/".join(sorted(set(grace))), len(fabric_gpus))
    elif len(hgx) >= 2 and pci.get("vpd_unreadable"):
        kind, evidence = "nvlink5_hgx", "%d %s GPUs (HGX baseboard parts; the bridge functions' VPD could not be " \
            "read: %s)" % (len(hgx), "/".join(sorted(set(hgx))), ", ".join(pci["vpd_unreadable"]))
    elif grace and not gpu.get("gpus"):
        return None  # Grace superchip GPUs on the bus, none read through NVML: one node or a domain, unknown
    elif read or gpu.get("gpus"):
        kind, evidence = "none", "no NVSwitch or NVSwitch bridge on the PCI bus"
        if grace:
            evidence = "%s without an NVLink fabric (a single node)" % "/".join(sorted(set(grace)))
    else:
        return None
    return {
        "kind": kind,
        "evidence": evidence,
        "fabricmanager_needed": kind in ("nvswitch", "nvlink5_hgx"),
        "nvlsm_needed": kind == "nvlink5_hgx",
        "imex_needed": kind == "multinode",
    }
