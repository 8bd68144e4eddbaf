# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""NVIDIA PCI functions as sysfs lists them (/sys/bus/pci/devices/<domain:bus:dev.fn>/{vendor,class,device,driver}).

What the PCI bus shows does not depend on the NVIDIA driver: a GPU the driver failed to initialise at boot (it
never reached NVML, so NVML cannot call it "lost") is still a PCI function here. The classes follow the NVIDIA
kernel module's own device tables (kernel-open/nvidia/nv-pci-table.c in NVIDIA/open-gpu-kernel-modules): the GPU
driver (RM) claims NVIDIA functions of class 0x030000 (VGA) and 0x030200 (3D controller); nvidia.ko also claims
class 0x068000 (bridge, other), which is how NVSwitch chips appear (HGX/DGX baseboards). The GPUs' HDMI audio
functions (0x0403) and USB-C controllers (0x0c03) are neither.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")
NVSWITCH_CLASS = "0x0680"


def sysfs_address(bus_id):
    """NVML "00000000:18:00.0" (or "0000:18:00.0", any case) -> sysfs "0000:18:00.0"; None for no id."""
    if not bus_id:
        return None
    domain, _sep, rest = str(bus_id).strip().lower().partition(":")
    if not rest:
        return None
    if "." not in rest:  # "18:00" (the form the Xid lines use) -> function 0
        rest += ".0"
    return "%s:%s" % (domain[-4:].rjust(4, "0"), rest)


def _read(fs, path):
    return (fs.read(path) or "").strip().lower()


def scan(fs):
    """NVIDIA PCI functions: {available, error, gpus: [...], nvswitches: [...]}.

    Each function is {address, device (hex id), class, driver (bound kernel driver or None), virtual (an SR-IOV
    virtual function, vGPU)}. ``available`` is False when sysfs has no PCI device directory (then the lists are
    empty and mean nothing).
    """
    if not fs.exists(PCI_DEVICES):
        return {"available": False, "error": "%s not found" % PCI_DEVICES, "gpus": [], "nvswitches": []}
    gpus, switches = [], []
    for path in fs.glob(PCI_DEVICES + "/*"):
        if _read(fs, path + "/vendor") != NVIDIA_VENDOR:
            continue
        pci_class = _read(fs, path + "/class")
        kind = "gpu" if pci_class[:6] in GPU_CLASSES else "nvswitch" if pci_class[:6] == NVSWITCH_CLASS else None
        if kind is None:
            continue
        driver = None
        if fs.exists(path + "/driver"):
            driver = os.path.basename(fs.realpath(path + "/driver")) or None
        entry = {
            "address": os.path.basename(path).lower(),
            "device": _read(fs, path + "/device") or None,
            "class": pci_class or None,
            "driver": driver,
            "virtual": fs.exists(path + "/physfn"),
        }
        (gpus if kind == "gpu" else switches).append(entry)
    return {"available": True, "error": None, "gpus": gpus, "nvswitches": switches}
