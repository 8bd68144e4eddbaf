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

From the fifth NVLink generation on (HGX B200/B100 and later) the NVSwitches are no longer NVIDIA PCI functions: the
fabric manager and the NVLink subnet manager (NVLSM) reach them through a ConnectX-7 bridge on the GPU baseboard.
Each of its ports gives the host a full PF and a limited PF (LPF) of vendor 0x15b3 (Mellanox), and the LPF's VPD
carries the vendor-specific field SMDL with the value SW_MNG (NVIDIA fabric manager user guide, "Systems Using Fourth
Generation NVSwitches"; the package's nvidia-fabricmanager-start.sh looks for the same field). Those LPFs are listed
as ``nvswitch_bridges``. The PCI core creates the ``vpd`` file whatever driver is bound (mlx5_ib and ib_umad need
not be loaded), but only root can read it: a Mellanox function whose VPD could not be read is listed in
``vpd_unreadable``, so that "no bridge" and "could not tell" stay apart.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")
NVSWITCH_CLASS = "0x0680"
MELLANOX_VENDOR = "0x15b3"
# The VPD field of the bridge functions the fabric manager and NVLSM manage NVSwitches through.
SW_MNG_MARK = "SW_MNG"
# PCI VPD is at most 32 KiB (PCI local bus specification, VPD address register: 15 bits).
VPD_LIMIT = 32768


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


def _driver(fs, path):
    if fs.exists(path + "/driver"):
        return os.path.basename(fs.realpath(path + "/driver")) or None
    return None


def _bridge(fs, path):
    """A Mellanox function: ("bridge", entry) for an NVSwitch management LPF, ("unreadable", address) when its VPD
    exists but cannot be read, else None."""
    if not fs.exists(path + "/vpd"):
        return None
    vpd = fs.read(path + "/vpd", limit=VPD_LIMIT)
    address = os.path.basename(path).lower()
    if vpd is None:
        return "unreadable", address
    if SW_MNG_MARK not in vpd:
        return None
    return "bridge", {"address": address, "device": _read(fs, path + "/device") or None, "driver": _driver(fs, path)}


def scan(fs):
    """NVIDIA PCI functions: {available, error, gpus: [...], nvswitches: [...], nvswitch_bridges: [...],
    vpd_unreadable: [...]}.

    Each GPU or NVSwitch is {address, device (hex id), class, driver (bound kernel driver or None), virtual (an
    SR-IOV virtual function, vGPU)}; each bridge (an LPF of the baseboard's ConnectX bridge, HGX B200 and later) is
    {address, device, driver}; ``vpd_unreadable`` lists the Mellanox functions whose VPD could not be read (not
    root). ``available`` is False when sysfs has no PCI device directory (then the lists are empty and mean
    nothing).
    """
    if not fs.exists(PCI_DEVICES):
        return {"available": False, "error": "%s not found" % PCI_DEVICES, "gpus": [], "nvswitches": [],
                "nvswitch_bridges": [], "vpd_unreadable": []}
    gpus, switches, bridges, unreadable = [], [], [], []
    for path in fs.glob(PCI_DEVICES + "/*"):
        vendor = _read(fs, path + "/vendor")
        if vendor == MELLANOX_VENDOR:
            found = _bridge(fs, path)
            if found:
                (bridges if found[0] == "bridge" else unreadable).append(found[1])
            continue
        if vendor != NVIDIA_VENDOR:
            continue
        pci_class = _read(fs, path + "/class")
        kind = "gpu" if pci_class[:6] in GPU_CLASSES else "nvswitch" if pci_class[:6] == NVSWITCH_CLASS else None
        if kind is None:
            continue
        driver = _driver(fs, path)
        entry = {
            "address": os.path.basename(path).lower(),
            "device": _read(fs, path + "/device") or None,
            "class": pci_class or None,
            "driver": driver,
            "virtual": fs.exists(path + "/physfn"),
        }
        (gpus if kind == "gpu" else switches).append(entry)
    return {"available": True, "error": None, "gpus": gpus, "nvswitches": switches, "nvswitch_bridges": bridges,
            "vpd_unreadable": unreadable}
