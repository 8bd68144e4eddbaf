#!/usr/bin/env python3
"""Build the PCI and CPU part of a fixture host root the way Linux lays it out in sysfs, for the topology reader
(plugins/module_utils/topology.py, module gpufleet.tuning.gpu_topology).

What it writes under a root (nothing else; it may share the root with mkroot.py's files):

- ``/sys/devices/pci<domain>:<bus>/<root port>/<switch up>/<switch down>/.../<endpoint>/`` with ``vendor``,
  ``device``, ``class``, ``numa_node`` and ``local_cpulist`` in every directory (bridges too, as the kernel does);
  on Hyper-V the host bridge sits under ``/sys/devices/LNXSYSTM:00/.../VMBUS:00/<instance guid>/``;
- ``/sys/bus/pci/devices/<bdf>`` links to those directories;
- NICs: ``<endpoint>/net/<ifname>/`` (``speed``) linked from ``/sys/class/net/<ifname>``, RDMA devices
  ``<endpoint>/infiniband/<dev>/ports/1/{rate,link_layer}`` linked from ``/sys/class/infiniband/<dev>``;
- GPUs: ``/proc/driver/nvidia/gpus/<bdf>/information`` (``Device Minor``), as the NVIDIA driver does;
- CPUs: ``/sys/devices/system/node/node<N>/cpulist`` and ``/sys/devices/system/cpu/cpu<N>/topology/
  {thread_siblings_list,physical_package_id,core_id}`` (Intel numbering: CPU n = thread * cores + core).

Platforms (``PLATFORMS``), each a plain description that tests can read back (``platform(name)``):

- ``hgx_h100``: an 8-GPU HGX H100 server laid out as NVIDIA DGX H100 is (2 x 56-core Xeon, SMT): every GPU and
  its own ConnectX-7 (InfiniBand, NDR 400) behind one PCIe switch complex on a root port of their own (GPU two
  switch levels down, NIC one: GPU to its NIC is PXB), four per socket; a dual-port ConnectX-7 (Ethernet,
  storage) on a root port of each socket; the four NVSwitches behind a switch of socket 0. The categories match
  the published ``nvidia-smi topo -m`` of a DGX H100 (tests/fixtures/topology/README.md names the source). The GPU
  bus numbers are the simulated NVML profile's (tests/sim/nvml/profiles.py HGX_BUSES).
- ``hgx_h100_shared``: the same board as issue 17 describes it - two GPUs and one ConnectX-7 below each PCIe
  switch, two switches per socket, no NVSwitch on the PCI bus (an OEM chassis; no published output to compare).
- ``l40s_pcie``: a dual-socket 2U PCIe server with four L40S (2 x 32-core Xeon, SMT), each GPU on a root port of
  its own host bridge, a ConnectX-7 (Ethernet, 200 Gb/s) on a second root port of GPU1's and GPU3's host bridge
  (PHB to them, NODE to the other GPU of the socket, SYS across).
- ``threadripper_pro_wrx90``: a real single-socket workstation, recorded in public (Puget Rackstation Threadripper
  PRO WRX90: AMD Threadripper PRO 7965WX, 24 cores, no SMT, one NUMA node; two RTX 6000 Ada on root ports c0:01.1
  and c0:03.1 of one host bridge, a dual-port ConnectX-7 (Ethernet, ports down) on root port 20:01.1 of another;
  tests/fixtures/topology/README.md names the source). Every device's ``numa_node`` is -1 (the recorded
  ``lspci -vvv`` shows no "NUMA node" line, which lspci prints for any other value) and ``local_cpulist`` all CPUs.
- ``azure_nd_h100_v5``: a cloud VM shaped as Azure ND H100 v5 (96 vCPUs in 2 NUMA nodes, no SMT): eight GPUs and
  eight InfiniBand virtual functions, each alone on a Hyper-V VMBus PCI host bridge of its own domain, with no
  PCIe bridge above it (the flattened tree the guest sees); only ``numa_node`` tells where they are.

Library use::

    root = build(tmp / "h", "hgx_h100")
    spec = platform("hgx_h100")          # the description: gpus, nics, cpus
    nvml_overrides("l40s_pcie")          # gpu.N.pci_bus_id/numa_node/cpu_affinity for the simulated NVML state

Command line: ``pcitree.py ROOT --platform hgx_h100`` (``--list`` names the platforms).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import simulators  # noqa: E402  (tests/simulators.py: the simulators loaded once, under the names the tests share)

MELLANOX = "0x15b3"
NVIDIA = "0x10de"
INTEL = "0x8086"
CLASSES = {
    "gpu": "0x030200",
    "nvswitch": "0x068000",
    "nic": "0x020000",  # ConnectX in Ethernet mode
    "ib": "0x020700",  # ConnectX in InfiniBand mode
    "bridge": "0x060400",
}
DEVICE_IDS = {"h100": "0x2330", "l40s": "0x26b9", "nvswitch": "0x22a3", "cx7": "0x1021", "cx7vf": "0x101e",
              "rtx6000ada": "0x26b1", "a100": "0x20b2"}  # fmt: skip
# The driver's "Model:" (/proc/driver/nvidia/gpus/<bdf>/information) where it is not "NVIDIA <model in capitals>".
MODEL_NAMES = {"rtx6000ada": "NVIDIA RTX 6000 Ada Generation"}
IB_RATE = {400000: "400 Gb/sec (4X NDR)", 200000: "200 Gb/sec (4X HDR)"}


# ------------------------------------------------------------------ CPU layout


# "0-55,112-167": the kernel's list format, as mkroot.py writes it
cpulist = simulators.mkroot().cpulist


def cpus_of_node(cpu: dict[str, int], node: int) -> list[int]:
    """Logical CPUs of a socket (one NUMA node per socket), Intel numbering: thread t of core c of socket s is
    t * sockets * cores + s * cores + c."""
    sockets, cores, threads = cpu["sockets"], cpu["cores_per_socket"], cpu["threads_per_core"]
    return [t * sockets * cores + node * cores + c for t in range(threads) for c in range(cores)]


# ------------------------------------------------------------------ platform descriptions
#
# A device is {"bdf", "kind" (bridge, gpu, nic, nvswitch), "children": [...]} plus, for endpoints: gpu: "model",
# "index" (NVML index), "minor"; nic: "ifname", "rdma" (RDMA device or None), "link_layer" (InfiniBand/Ethernet),
# "speed_mbps". Every host bridge is {"name" (pci0000:17), "node", "parent" (path under /sys/devices or ""),
# "children"}.


def _bridge(bdf: str, *children: dict[str, Any]) -> dict[str, Any]:
    return {"bdf": bdf, "kind": "bridge", "children": list(children)}


def _gpu(bdf: str, index: int, model: str, minor: int | None = None) -> dict[str, Any]:
    return {"bdf": bdf, "kind": "gpu", "index": index, "model": model, "minor": index if minor is None else minor,
            "children": []}  # fmt: skip


def _nic(bdf: str, ifname: str, rdma: str | None, link_layer: str, speed_mbps: int, vf: bool = False):
    return {"bdf": bdf, "kind": "nic", "ifname": ifname, "rdma": rdma, "link_layer": link_layer,
            "speed_mbps": speed_mbps, "vf": vf, "children": []}  # fmt: skip


def _hgx_h100() -> dict[str, Any]:
    # (GPU bus, its NIC's RDMA name) in NVML order; the NIC numbering is DGX H100's (mlx5_0,3,4,5 / 6,9,10,11 are the
    # compute NICs, mlx5_1/2 and mlx5_7/8 the storage ports), the GPU buses the simulated profile's.
    pairs = [(0x18, 0), (0x2A, 3), (0x3A, 4), (0x5D, 5), (0x9A, 6), (0xAB, 9), (0xBA, 10), (0xDB, 11)]
    bridges = []
    for index, (bus, nic) in enumerate(pairs):
        hb = bus - 5
        # root port -> switch (up, two down ports) -> [second switch level -> GPU] and [ConnectX-7]
        tree = _bridge(
            f"0000:{hb:02x}:01.0",
            _bridge(
                f"0000:{hb + 1:02x}:00.0",
                _bridge(
                    f"0000:{hb + 2:02x}:00.0",
                    _bridge(
                        f"0000:{hb + 3:02x}:00.0",
                        _bridge(f"0000:{hb + 4:02x}:00.0", _gpu(f"0000:{bus:02x}:00.0", index, "h100")),
                    ),
                ),
                _bridge(
                    f"0000:{hb + 2:02x}:01.0",
                    _nic(f"0000:{bus + 1:02x}:00.0", f"ibp{bus + 1}s0", f"mlx5_{nic}", "InfiniBand", 400000),
                ),
            ),
        )
        bridges.append({"name": f"pci0000:{hb:02x}", "node": index // 4, "parent": "", "children": [tree]})
    # Storage: a dual-port ConnectX-7 (two functions) on a root port of each socket.
    for node, (hb, first) in enumerate(((0x40, 1), (0xC0, 7))):
        port = _bridge(
            f"0000:{hb:02x}:01.0",
            _nic(f"0000:{hb + 1:02x}:00.0", f"enp{hb + 1}s0f0np0", f"mlx5_{first}", "Ethernet", 400000),
            _nic(f"0000:{hb + 1:02x}:00.1", f"enp{hb + 1}s0f1np1", f"mlx5_{first + 1}", "Ethernet", 400000),
        )
        bridges.append({"name": f"pci0000:{hb:02x}", "node": node, "parent": "", "children": [port]})
    # The four NVSwitches behind a PCIe switch of socket 0 (nvidia.ko binds them, class 0x0680).
    downs = [
        _bridge(f"0000:04:{i:02x}.0", {"bdf": f"0000:{5 + i:02x}:00.0", "kind": "nvswitch", "children": []})
        for i in range(4)
    ]
    bridges.append(
        {
            "name": "pci0000:00",
            "node": 0,
            "parent": "",
            "children": [_bridge("0000:00:01.0", _bridge("0000:03:00.0", *downs))],
        }
    )
    return {
        "description": "HGX H100 8-GPU (DGX H100 layout)",
        "cpu": {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2},
        "host_bridges": bridges,
    }


def _hgx_h100_shared() -> dict[str, Any]:
    # Two GPUs and one ConnectX-7 below each PCIe switch, two switches per socket (the layout issue 17 names; OEM
    # HGX chassis with one HCA per two GPUs). Expected by construction, no published output: GPU pairs and their HCA
    # PIX, the other switch of the socket NODE, the other socket SYS.
    groups = [((0x18, 0x2A), 0), ((0x3A, 0x5D), 1), ((0x9A, 0xAB), 2), ((0xBA, 0xDB), 3)]
    bridges = []
    for n, ((a, b), nic) in enumerate(groups):
        hb = a - 3
        gpus = [_gpu(f"0000:{bus:02x}:00.0", 2 * n + k, "h100") for k, bus in enumerate((a, b))]
        nic_dev = _nic(f"0000:{b + 1:02x}:00.0", f"ibp{b + 1}s0", f"mlx5_{nic}", "InfiniBand", 400000)
        downs = [_bridge(f"0000:{hb + 2:02x}:{k:02x}.0", dev) for k, dev in enumerate([*gpus, nic_dev])]
        tree = _bridge(f"0000:{hb:02x}:01.0", _bridge(f"0000:{hb + 1:02x}:00.0", *downs))
        bridges.append({"name": f"pci0000:{hb:02x}", "node": n // 2, "parent": "", "children": [tree]})
    return {
        "description": "HGX H100 8-GPU, two GPUs and one HCA per PCIe switch",
        "cpu": {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2},
        "host_bridges": bridges,
    }


def _l40s_pcie() -> dict[str, Any]:
    gpus = [(0x37, 0x38, 0), (0x49, 0x4A, 1), (0xB7, 0xB8, 2), (0xC9, 0xCA, 3)]
    bridges = []
    for hb, bus, index in gpus:
        ports = [_bridge(f"0000:{hb:02x}:01.0", _gpu(f"0000:{bus:02x}:00.0", index, "l40s"))]
        if index in (1, 3):
            nic = index // 2
            ports.append(
                _bridge(
                    f"0000:{hb:02x}:03.0",
                    _nic(f"0000:{bus + 1:02x}:00.0", f"ens{3 + nic}f0np0", f"mlx5_{nic}", "Ethernet", 200000),
                )
            )
        bridges.append({"name": f"pci0000:{hb:02x}", "node": index // 2, "parent": "", "children": ports})
    return {
        "description": "dual-socket PCIe server, 4 x L40S",
        "cpu": {"sockets": 2, "cores_per_socket": 32, "threads_per_core": 2},
        "host_bridges": bridges,
    }


def _azure_nd_h100_v5() -> dict[str, Any]:
    vmbus = "LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00"
    bridges = []
    for i in range(8):
        dom = i + 1
        guid = f"00000{dom:03x}-0000-3130-3444-{dom:012x}"
        bridges.append(
            {
                "name": f"pci{dom:04x}:00",
                "node": i // 4,
                "parent": f"{vmbus}/{guid}",
                "children": [_gpu(f"{dom:04x}:00:00.0", i, "h100")],
            }  # fmt: skip
        )
    for i in range(8):
        dom = 0x101 + i
        guid = f"0000{dom:04x}-0001-3130-3444-{dom:012x}"
        bridges.append(
            {"name": f"pci{dom:04x}:00", "node": i // 4, "parent": f"{vmbus}/{guid}",
             "children": [_nic(f"{dom:04x}:00:00.0", f"ib{i}", f"mlx5_ib{i}", "InfiniBand", 400000, vf=True)]}
        )  # fmt: skip
    return {
        "description": "Azure ND H100 v5 style VM (flattened PCI tree)",
        "cpu": {"sockets": 2, "cores_per_socket": 48, "threads_per_core": 1},
        "host_bridges": bridges,
    }


def _threadripper_pro_wrx90() -> dict[str, Any]:
    # As recorded (lspci -tv, numactl --hardware, nvidia-smi topo -m): GPU0 c1:00.0 behind c0:01.1, GPU1 c2:00.0
    # behind c0:03.1 (PHB to each other), ConnectX-7 functions 21:00.0/21:00.1 (mlx5_0/mlx5_1, PIX to each other,
    # NODE to the GPUs) behind 20:01.1. No netdev names or link speeds were recorded (ports down): RDMA names only.
    gpus = _bridge("0000:c0:01.1", _gpu("0000:c1:00.0", 0, "rtx6000ada")), _bridge(
        "0000:c0:03.1", _gpu("0000:c2:00.0", 1, "rtx6000ada")
    )
    cx7 = _bridge(
        "0000:20:01.1",
        _nic("0000:21:00.0", None, "mlx5_0", "Ethernet", 0),
        _nic("0000:21:00.1", None, "mlx5_1", "Ethernet", 0),
    )
    return {
        "description": "Threadripper PRO WRX90 workstation, 2 x RTX 6000 Ada, ConnectX-7 (single NUMA node)",
        "cpu": {"sockets": 1, "cores_per_socket": 24, "threads_per_core": 1},
        "host_bridges": [
            {"name": "pci0000:20", "node": 0, "sysfs_node": -1, "parent": "", "children": [cx7]},
            {"name": "pci0000:c0", "node": 0, "sysfs_node": -1, "parent": "", "children": list(gpus)},
        ],
    }


def server(model: str, buses: list[str], nics: list[tuple[str, int, str]] = ()) -> dict[str, Any]:
    """A plain description (as ``platform`` and ``build`` take it) of a dual-socket server (2 x 56-core Xeon, SMT,
    as mkroot.py's default CPUs): GPU i at ``buses[i]`` ("0000:18:00.0", NVML order) two PCIe switch levels below a
    root port of a host bridge of its own, the first half of the GPUs on socket 0 (as the simulated NVML profiles
    place them); ``nics``: (name, NUMA node, bdf) Ethernet functions, each on a root port of a host bridge of its
    own, with no netdev or RDMA device written (the caller's network fixture, tests/sim/host/netroot.py, has them).
    The demo fleet (tests/sim/demo.py) is built on it."""
    bridges = []
    for index, bdf in enumerate(buses):
        bus = int(bdf.split(":")[1], 16)
        hb = bus - 4
        tree = _bridge(
            f"0000:{hb:02x}:01.0",
            _bridge(f"0000:{hb + 1:02x}:00.0", _bridge(f"0000:{hb + 2:02x}:00.0", _gpu(bdf, index, model))),
        )
        node = index * 2 // len(buses)
        bridges.append({"name": f"pci0000:{hb:02x}", "node": node, "parent": "", "children": [tree]})
    for _name, node, bdf in nics:
        hb = int(bdf.split(":")[1], 16) - 1
        port = _bridge(f"0000:{hb:02x}:01.0", _nic(bdf, None, None, "Ethernet", 0))
        bridges.append({"name": f"pci0000:{hb:02x}", "node": node, "parent": "", "children": [port]})
    return {
        "description": f"dual-socket server, {len(buses)} x {model}",
        "cpu": {"sockets": 2, "cores_per_socket": 56, "threads_per_core": 2},
        "host_bridges": bridges,
    }


PLATFORMS = {
    "hgx_h100": _hgx_h100,
    "hgx_h100_shared": _hgx_h100_shared,
    "l40s_pcie": _l40s_pcie,
    "azure_nd_h100_v5": _azure_nd_h100_v5,
    "threadripper_pro_wrx90": _threadripper_pro_wrx90,
}


def platform(name: str | dict[str, Any]) -> dict[str, Any]:
    """A fresh copy of a platform's description (``name``: a PLATFORMS name, or a description such as ``server``
    gives), plus flat lists: gpus and nics (each with its bdf, node and path - the bridges from the root port down,
    then itself)."""
    if isinstance(name, dict):
        spec = copy.deepcopy(name)
        name = spec["description"]
    elif name not in PLATFORMS:
        raise ValueError(f"unknown platform {name!r} (known: {', '.join(PLATFORMS)})")
    else:
        spec = copy.deepcopy(PLATFORMS[name]())
    spec["name"] = name
    gpus, nics = [], []

    def walk(dev, node, path):
        here = path + [dev["bdf"]]
        entry = {**{k: v for k, v in dev.items() if k != "children"}, "node": node, "path": here}
        if dev["kind"] == "gpu":
            gpus.append(entry)
        elif dev["kind"] == "nic":
            nics.append(entry)
        for child in dev["children"]:
            walk(child, node, here)

    for hb in spec["host_bridges"]:
        for dev in hb["children"]:
            walk(dev, hb["node"], [])
    spec["gpus"] = sorted(gpus, key=lambda g: g["index"])
    spec["nics"] = nics
    return spec


def nvml_overrides(name: str) -> dict[str, str]:
    """Simulated NVML state keys that put each GPU where the platform has it (bus id, NUMA node, local CPUs)."""
    spec = platform(name)
    out = {}
    for g in spec["gpus"]:
        dom, rest = g["bdf"].split(":", 1)
        out[f"gpu.{g['index']}.pci_bus_id"] = f"{int(dom, 16):08X}:{rest.upper()}"
        out[f"gpu.{g['index']}.numa_node"] = str(g["node"])
        out[f"gpu.{g['index']}.cpu_affinity"] = cpulist(cpus_of_node(spec["cpu"], g["node"]))
    return out


# ------------------------------------------------------------------ writing


class _Writer:
    def __init__(self, root: Path):
        self.root = root

    def __call__(self, path: str, text: str) -> None:
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def link(self, path: str, target: str) -> None:
        """``path`` -> ``target`` (an absolute host path), written as a relative link as sysfs has them."""
        p = self.root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        rel = os.path.relpath(target, os.path.dirname(path))
        if p.is_symlink() or p.exists():
            p.unlink()
        os.symlink(rel, p)


def _write_cpus(w: _Writer, cpu: dict[str, int]) -> dict[int, str]:
    sockets, cores, threads = cpu["sockets"], cpu["cores_per_socket"], cpu["threads_per_core"]
    total = sockets * cores * threads
    nodes = {}
    for node in range(sockets):
        nodes[node] = cpulist(cpus_of_node(cpu, node))
        w(f"/sys/devices/system/node/node{node}/cpulist", nodes[node] + "\n")
    w("/sys/devices/system/node/online", cpulist(range(sockets)) + "\n")
    w("/sys/devices/system/cpu/online", f"0-{total - 1}\n")
    for t in range(threads):
        for s in range(sockets):
            for c in range(cores):
                n = t * sockets * cores + s * cores + c
                siblings = [tt * sockets * cores + s * cores + c for tt in range(threads)]
                base = f"/sys/devices/system/cpu/cpu{n}/topology/"
                w(base + "thread_siblings_list", cpulist(siblings) + "\n")
                w(base + "physical_package_id", f"{s}\n")
                w(base + "core_id", f"{c}\n")
    return nodes


def _write_device(w: _Writer, dev: dict[str, Any], parent: str, node: int, local: str, depth: int = 0) -> None:
    here = f"{parent}/{dev['bdf']}"
    kind = dev["kind"]
    if kind == "gpu":
        vendor, device, cls = NVIDIA, DEVICE_IDS[dev["model"]], CLASSES["gpu"]
    elif kind == "nvswitch":
        vendor, device, cls = NVIDIA, DEVICE_IDS["nvswitch"], CLASSES["nvswitch"]
    elif kind == "nic":
        vendor, device = MELLANOX, DEVICE_IDS["cx7vf" if dev.get("vf") else "cx7"]
        cls = CLASSES["ib" if dev["link_layer"] == "InfiniBand" else "nic"]
    else:
        # root ports are the CPU's (Intel), switch ports a Broadcom PEX switch's (vendor 0x1000)
        vendor, device = (INTEL, "0x352a") if depth == 0 else ("0x1000", "0xc030")
        cls = CLASSES["bridge"]
    w(here + "/vendor", vendor + "\n")
    w(here + "/device", device + "\n")
    w(here + "/class", cls + "\n")
    w(here + "/numa_node", f"{node}\n")
    w(here + "/local_cpulist", local + "\n")
    w.link(f"/sys/bus/pci/devices/{dev['bdf']}", here)
    if kind == "gpu":
        w(
            f"/proc/driver/nvidia/gpus/{dev['bdf']}/information",
            f"Model: \t\t {MODEL_NAMES.get(dev['model'], 'NVIDIA ' + dev['model'].upper())}\nIRQ:   \t\t 0\n"
            f"Bus Location: \t {dev['bdf']}\n"
            f"Device Minor: \t {dev['minor']}\n",
        )
    if kind == "nic":
        if dev["ifname"]:
            w(here + f"/net/{dev['ifname']}/speed", f"{dev['speed_mbps']}\n")
            w(here + f"/net/{dev['ifname']}/operstate", "up\n")
            w.link(f"/sys/class/net/{dev['ifname']}", here + f"/net/{dev['ifname']}")
        if dev["rdma"]:
            port = here + f"/infiniband/{dev['rdma']}/ports/1/"
            if dev["speed_mbps"]:
                w(port + "rate", IB_RATE.get(dev["speed_mbps"], f"{dev['speed_mbps'] // 1000} Gb/sec") + "\n")
            w(port + "link_layer", dev["link_layer"] + "\n")
            w(port + "state", "4: ACTIVE\n")
            w.link(f"/sys/class/infiniband/{dev['rdma']}", here + f"/infiniband/{dev['rdma']}")
    for child in dev["children"]:
        _write_device(w, child, here, node, local, depth + 1)


def build(root: str | os.PathLike, name: str | dict[str, Any] = "hgx_h100") -> Path:
    """Write platform ``name``'s PCI tree, NICs, NUMA nodes and CPU topology under ``root`` (created if needed;
    files of other fixture builders there are kept). Returns the root."""
    spec = platform(name)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    w = _Writer(root)
    nodes = _write_cpus(w, spec["cpu"])
    cpu = spec["cpu"]
    every = cpulist(range(cpu["sockets"] * cpu["cores_per_socket"] * cpu["threads_per_core"]))
    for hb in spec["host_bridges"]:
        base = "/sys/devices/" + (hb["parent"] + "/" if hb["parent"] else "") + hb["name"]
        # "sysfs_node": -1 where the firmware gives no proximity (NUMA_NO_NODE): the kernel then shows every CPU as
        # the device's local CPUs.
        node = hb.get("sysfs_node", hb["node"])
        for dev in hb["children"]:
            _write_device(w, dev, base, node, nodes[hb["node"]] if node >= 0 else every)
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write a realistic sysfs PCI tree (and CPU topology) under ROOT.")
    ap.add_argument("root", nargs="?")
    ap.add_argument("--platform", default="hgx_h100", choices=sorted(PLATFORMS))
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        for name in PLATFORMS:
            print(f"{name:18} {platform(name)['description']}")
        return 0
    if not args.root:
        ap.error("ROOT is required")
    build(args.root, args.platform)
    return 0


if __name__ == "__main__":
    sys.exit(main())
