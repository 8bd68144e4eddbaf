# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Where each GPU sits: NUMA node, local CPUs, PCIe path, nearest NICs, NVLink peers, and bindings built from them.

Read from sysfs (through HostFS, so a fixture root works) and from the GPU list gpu.read() returns; no nvidia-smi.

PCIe distances use the categories of ``nvidia-smi topo -m`` (its legend; NVML's nvmlGpuTopologyLevel_t has the same
levels: SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM):

- ``PIX``  at most a single PCIe bridge (both below one PCIe switch, or functions of one device);
- ``PXB``  several PCIe bridges, without the host bridge (switches below one root port);
- ``PHB``  through a PCIe host bridge (different root ports of one host bridge);
- ``NODE`` across host bridges within a NUMA node;
- ``SYS``  across the SMP interconnect between NUMA nodes (QPI/UPI, xGMI);
- ``NV#``  a bonded set of # NVLinks (GPU to GPU).

The path of a PCI function is the chain of bus/device/function directories in its sysfs path, root port first:
``/sys/devices/pci0000:13/0000:13:01.0/0000:14:00.0/.../0000:18:00.0``. A switch shows as an upstream port followed
by downstream ports, so in that chain the bridges at odd positions (1, 3, ...) are switch upstream ports.

A virtual machine often sees a flattened tree (Azure ND: every device alone under a Hyper-V VMBus host bridge; other
clouds: devices straight on a virtual root bus). Then PCIe distances mean nothing; ``flat`` says so and the
categories fall back to the NUMA node (NODE/SYS).

Bindings: Slurm gres.conf(5) (``Name=gpu Type=... File=/dev/nvidiaN Cores=... Links=...``; Cores are Slurm's
logical core indexes - core 0 is the first core of the first socket, as ``lstopo -l`` numbers them (Core L#), not
CPU ids; Links one number per GPU in File order, -1 for itself, 0 for no link), ``numactl --cpunodebind=N
--membind=N`` (numactl(8)) and ``taskset -c`` per GPU, and the NICs nearest first (for NCCL_IB_HCA or a rank-to-NIC
map).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders, pci

CATEGORIES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,8}:[0-9a-f]{2}$")
# GPU model -> gres Type from the PCI device id: the fallback when neither NVML nor the driver names the GPU.
DEVICE_TYPES = {"0x2330": "h100", "0x2331": "h100", "0x2335": "h200", "0x20b2": "a100", "0x20b5": "a100",
                "0x20f1": "a100", "0x26b9": "l40s", "0x26b5": "l40", "0x26b1": "rtx_6000_ada"}  # fmt: skip
# Words of a GPU's name that are the maker or a product line, not the model (left out of the gres Type)...
_BRANDS = ("nvidia", "tesla", "geforce", "quadro")
# ...and words from which on a name gives memory size or form factor (80GB, SXM4, PCIe, HBM3): the Type stops there.
_VARIANT = re.compile(r"^(\d+gb|sxm\d*|pcie|hbm\w*)$")


def _natural(text):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text or "")]


def _int(text):
    text = (text or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


def _cpus(text):
    try:
        return decoders.parse_cpulist(text) or []
    except ValueError:
        return []


class _Reader:
    def __init__(self, fs):
        self.fs = fs
        self._siblings = {}

    def read(self, path):
        text = self.fs.read(path)
        return None if text is None else text.strip()

    def device(self, bdf):
        """{bdf, host_bridge, path, numa_node, local_cpus, vmbus} of a PCI function, from its sysfs directory."""
        real = self.fs.realpath("%s/%s" % (pci.PCI_DEVICES, bdf))
        parts = [p for p in real.split("/") if p]
        path = [p.lower() for p in parts if _BDF.match(p.lower())]
        bridges = [p for p in parts if _HOST_BRIDGE.match(p.lower())]
        base = "%s/%s" % (pci.PCI_DEVICES, bdf)
        node = _int(self.read(base + "/numa_node"))
        return {
            "bdf": bdf,
            "host_bridge": bridges[-1].lower() if bridges else None,
            "path": path or [bdf],
            "numa_node": node if node is not None and node >= 0 else None,
            "local_cpus": self.read(base + "/local_cpulist"),
            "vmbus": any(p.upper().startswith("VMBUS") for p in parts),
            "found": self.fs.exists(base),
        }

    def numa_nodes(self):
        out = {}
        for path in self.fs.glob("/sys/devices/system/node/node[0-9]*"):
            name = os.path.basename(path)[4:]
            if name.isdigit():
                out[name] = {"cpus": self.read(path + "/cpulist") or ""}
        return dict(sorted(out.items(), key=lambda kv: int(kv[0])))

    def cores(self):
        """{cpu: (package, first thread of its core)} for every CPU with a topology directory."""
        out = {}
        for path in self.fs.glob("/sys/devices/system/cpu/cpu[0-9]*"):
            name = os.path.basename(path)[3:]
            if not name.isdigit():
                continue
            siblings = _cpus(self.read(path + "/topology/thread_siblings_list"))
            package = _int(self.read(path + "/topology/physical_package_id"))
            out[int(name)] = (package if package is not None else 0, min(siblings) if siblings else int(name))
        return out


def _switches(path, start, stop):
    """Switch upstream ports (odd positions) among path[start:stop]."""
    return sum(1 for i in range(max(start, 1), stop) if i % 2 == 1)


def pcie_category(a, b, flat=False, single_node=False):
    """nvidia-smi's category between two devices (as _Reader.device gives them)."""
    if flat or not a["host_bridge"] or a["host_bridge"] != b["host_bridge"]:
        na, nb = a["numa_node"], b["numa_node"]
        if single_node and na is None and nb is None:
            return "NODE"
        return "NODE" if na is not None and na == nb else "SYS"
    pa, pb = a["path"], b["path"]
    k = 0
    while k < min(len(pa), len(pb)) and pa[k] == pb[k]:
        k += 1
    if k == 0:
        return "PHB"
    # The switch where the two paths part (the common bridge is an upstream port), then every switch below it on
    # either side, the endpoints themselves excluded.
    count = 1 if (k - 1) % 2 == 1 else 0
    count += _switches(pa, k, len(pa) - 1) + _switches(pb, k, len(pb) - 1)
    return "PIX" if count <= 1 else "PXB"


def gres_type(name):
    """A Slurm gres Type from the GPU's name as NVML (or the driver) gives it: lower case, the maker and product
    line left out, the words up to the memory size or form factor joined with '_' ("NVIDIA H100 80GB HBM3" -> h100,
    "NVIDIA A100-SXM4-80GB" -> a100, "NVIDIA RTX 6000 Ada Generation" -> rtx_6000_ada, "NVIDIA GeForce RTX 4090" ->
    rtx_4090); None when nothing is left. Slurm compares Type strings as given (gres.conf(5)), so every node with the
    same model gets the same string."""
    words = [w for w in re.split(r"[\s_-]+", (name or "").strip().lower()) if w]
    while words and words[0] in _BRANDS:
        words.pop(0)
    model = []
    for word in words:
        if _VARIANT.match(word):
            break
        if word != "generation":
            model.append(re.sub(r"[^a-z0-9.]", "", word))
    return "_".join(w for w in model if w) or None


def _gpu_type(name, device_id):
    return gres_type(name) or DEVICE_TYPES.get((device_id or "").lower())


def _driver_model(fs, bdf):
    """The GPU's name as the driver gives it ("Model:" in /proc/driver/nvidia/gpus/<bdf>/information)."""
    m = re.search(r"^Model:\s*(.+?)\s*$", fs.read("/proc/driver/nvidia/gpus/%s/information" % bdf) or "", re.M)
    return m.group(1) if m else None


def _gpus_from(fs, gpus):
    """[{index, bus_id, name, type, nvlink, fabric, numa_node, cpu_affinity}] from gpu.read()'s list, or from the
    PCI bus when NVML gave none."""
    out = []
    for g in gpus or []:
        bdf = pci.sysfs_address(g.get("pci_bus_id"))
        if not bdf:
            continue
        device_id = g.get("pci_device_id")
        if device_id and len(device_id) == 10:  # NVML's combined 0xDDDDVVVV
            device_id = "0x" + device_id[2:6].lower()
        out.append({"index": g.get("index"), "bdf": bdf, "name": g.get("name"),
                    "type": _gpu_type(g.get("name"), device_id), "nvlink": g.get("nvlink"),
                    "fabric": g.get("fabric"), "numa_node": g.get("numa_node"),
                    "cpu_affinity": g.get("cpu_affinity")})  # fmt: skip
    if out:
        return out, "nvml"
    scanned = pci.scan(fs)
    for i, g in enumerate(sorted(scanned["gpus"], key=lambda d: d["address"])):
        name = _driver_model(fs, g["address"])
        out.append({"index": i, "bdf": g["address"], "name": name, "type": _gpu_type(name, g["device"]),
                    "nvlink": None, "fabric": None, "numa_node": None, "cpu_affinity": None})  # fmt: skip
    return out, "pci"


def _nics(reader):
    """PCI network functions: netdevs (/sys/class/net) and RDMA devices (/sys/class/infiniband), one per function."""
    fs = reader.fs
    by_bdf = {}
    for path in fs.glob("/sys/class/net/*"):
        name = os.path.basename(path)
        real = fs.realpath(path)
        parts = [p.lower() for p in real.split("/") if _BDF.match(p.lower())]
        if not parts:
            continue  # lo, veth, bridges: no PCI function
        entry = by_bdf.setdefault(parts[-1], {"name": None, "device": None})
        entry["name"] = entry["name"] or name
        entry["speed"] = _int(reader.read(path + "/speed"))
    for path in fs.glob("/sys/class/infiniband/*"):
        dev = os.path.basename(path)
        parts = [p.lower() for p in fs.realpath(path).split("/") if _BDF.match(p.lower())]
        if not parts:
            continue
        entry = by_bdf.setdefault(parts[-1], {"name": None, "device": None})
        entry["device"] = dev
        entry["link_layer"] = reader.read(path + "/ports/1/link_layer")
        rate = re.match(r"\s*(\d+)\s*Gb/sec", reader.read(path + "/ports/1/rate") or "")
        entry["rate"] = int(rate.group(1)) * 1000 if rate else None
    nics = []
    for bdf, e in by_bdf.items():
        dev = reader.device(bdf)
        kind = "infiniband" if (e.get("link_layer") or "").lower() == "infiniband" else "ethernet"
        speed = e.get("speed")
        speed = speed if speed is not None and speed > 0 else e.get("rate")
        nics.append({"name": e["name"] or e["device"], "device": e["device"], "kind": kind, "bus_id": bdf,
                     "numa_node": dev["numa_node"], "speed_mbps": speed, "path": dev["path"], "_dev": dev})  # fmt: skip
    return sorted(nics, key=lambda n: _natural(n["device"] or n["name"]))


def _rank_nics(nics, row, rank):
    """NICs nearest first. NICs equally near (the same category) are taken in name order, rotated by the GPU's rank
    among the GPUs of its NUMA node, so that GPUs that are all equally near several NICs (a flattened VM: Azure ND
    H100 v5 has eight HCAs for eight GPUs, NODE to each other on a node) spread over them instead of all taking
    the first."""
    out = []
    for category in CATEGORIES:
        group = sorted((n for n in nics if row[_label(n)] == category), key=lambda n: _natural(_label(n)))
        if group:
            shift = rank % len(group)
            out += group[shift:] + group[:shift]
    return out


def _label(nic):
    return nic["device"] or nic["name"]


def _minor(fs, bdf, index):
    """/dev/nvidiaN's N: the driver's 'Device Minor' for the GPU; the NVML index when the driver does not say."""
    text = fs.read("/proc/driver/nvidia/gpus/%s/information" % bdf) or ""
    m = re.search(r"Device Minor:\s*(\d+)", text)
    return int(m.group(1)) if m else index


def _nvlink_peers(gpus, has_nvswitch):
    """{index: ({peer index (str): links}, via_nvswitch)}.

    Where NVML names the far end of each link (nvmlDeviceGetNvLinkRemotePciInfo, gpu_info's ``nvlink.remote``), a
    link to another GPU's bus id is a direct link to it and any other far end is an NVSwitch. Without the far ends,
    a GPU with links up on an NVSwitch system (NVSwitches on the PCI bus, or a GPU fabric state: Hopper and later)
    has them all on the switches. GPUs on the switches reach each other over as many links as the weaker of the
    two has there, which is what nvidia-smi shows (NV18 between two H100 SXM5); direct links add to that. Direct
    links without far ends cannot be paired: peers stay empty."""
    by_bdf = {g["bdf"]: g for g in gpus}
    direct, switched = {}, {}
    for g in gpus:
        nvlink = g["nvlink"] or {}
        up = nvlink.get("up") or 0
        remote = nvlink.get("remote")
        peers, on_switch = {}, 0
        if remote:
            for bus in remote.values():
                peer = by_bdf.get(pci.sysfs_address(bus))
                if peer is None:
                    on_switch += 1
                elif peer is not g:
                    key = str(peer["index"])
                    peers[key] = peers.get(key, 0) + 1
        elif up and (has_nvswitch or g.get("fabric")):
            on_switch = up
        direct[g["index"]], switched[g["index"]] = peers, on_switch
    out = {}
    for g in gpus:
        peers = dict(direct[g["index"]])
        mine = switched[g["index"]]
        if mine:
            for o in gpus:
                theirs = switched[o["index"]]
                if o is not g and theirs:
                    key = str(o["index"])
                    peers[key] = peers.get(key, 0) + min(mine, theirs)
        out[g["index"]] = (peers, mine > 0)
    return out


def collect(fs, gpus, run=None):
    """The topology facts (see the module's RETURN). ``gpus``: gpu.read()'s list (may be empty: then the GPUs
    come from the PCI bus). ``run`` is accepted for callers that pass a command runner; nothing here needs one."""
    del run
    result = {"available": False, "error": None, "flat": False, "flat_reason": None, "numa_nodes": {},
              "gpus": [], "nics": [], "matrix": {}, "bindings": [], "gres": []}  # fmt: skip
    if not fs.exists(pci.PCI_DEVICES):
        result["error"] = "%s not found" % pci.PCI_DEVICES
        return result
    reader = _Reader(fs)
    result["available"] = True
    result["numa_nodes"] = reader.numa_nodes()
    single_node = len(result["numa_nodes"]) <= 1
    # One NUMA node: every device is on it, also where the firmware gives a device no proximity (numa_node -1, as
    # nvidia-smi topo -m then still shows NUMA affinity 0).
    only_node = int(next(iter(result["numa_nodes"]))) if len(result["numa_nodes"]) == 1 else None
    node_cpus = {int(k): v["cpus"] for k, v in result["numa_nodes"].items()}
    cores = reader.cores()
    logical = {}  # first thread of a core -> Slurm's logical core index
    for i, first in enumerate(sorted(set(cores.values()))):
        logical[first[1]] = i

    found, _source = _gpus_from(fs, gpus)
    devs = {g["index"]: reader.device(g["bdf"]) for g in found}
    nics = _nics(reader)
    for nic in nics:
        if nic["numa_node"] is None:
            nic["numa_node"] = nic["_dev"]["numa_node"] = only_node

    # Flattened: no GPU has a PCIe bridge above it (or the GPUs hang off a Hyper-V VMBus). Judged on the GPUs alone:
    # a bare-metal host may have an onboard NIC on the root bus (an integrated endpoint), and without GPUs there is
    # nothing to place.
    known = [d for d in devs.values() if d["found"]]
    if known and all(d["vmbus"] for d in known):
        result["flat"] = True
        result["flat_reason"] = ("PCI devices sit on Hyper-V VMBus host bridges (pass-through); the PCIe tree is "
                                 "hidden, categories are NUMA only (NODE/SYS)")  # fmt: skip
    elif known and all(len(d["path"]) <= 1 for d in known):
        result["flat"] = True
        result["flat_reason"] = ("no PCIe bridge above any GPU (a virtual root complex); the PCIe tree is "
                                 "hidden, categories are NUMA only (NODE/SYS)")  # fmt: skip
    flat = result["flat"]

    # NVSwitches on the PCI bus (HGX A100/H100), or the NVSwitch-management functions of an HGX B200/B100
    # baseboard's bridge (its NVSwitches are not PCI functions of the host).
    scan = pci.scan(fs)
    peers = _nvlink_peers(found, bool(scan["nvswitches"] or scan["nvswitch_bridges"]))
    for g in found:
        dev = devs[g["index"]]
        node = dev["numa_node"] if dev["numa_node"] is not None else g["numa_node"]
        node = node if node is not None else only_node
        dev["numa_node"] = node
        local = dev["local_cpus"] or g["cpu_affinity"] or node_cpus.get(node) or ""
        cpus = _cpus(local)
        firsts = [c for c in cpus if cores.get(c, (0, c))[1] == c]
        g["_cpus"], g["_firsts"] = cpus, firsts
        links, via = peers[g["index"]]
        result["gpus"].append({
            "index": g["index"], "bus_id": g["bdf"], "name": g["name"], "numa_node": node,
            "local_cpus": decoders.cpus_to_cpulist(cpus),
            "cores": decoders.cpus_to_cpulist(firsts),
            "siblings": decoders.cpus_to_cpulist(sorted(set(cpus) - set(firsts))),
            "path": dev["path"],
            "nvlink": {"links": (g["nvlink"] or {}).get("up") or 0, "peers": links, "via_nvswitch": via},
        })  # fmt: skip
    result["nics"] = [{k: v for k, v in n.items() if k != "_dev"} for n in nics]

    # The matrix: GPU rows and NIC rows, each over GPUs then NICs.
    names = [("GPU%d" % g["index"], devs[g["index"]], g) for g in found] + [(_label(n), n["_dev"], None) for n in nics]
    for row, rdev, rgpu in names:
        cells = {}
        for col, cdev, cgpu in names:
            if col == row:
                cells[col] = "X"
            elif rgpu is not None and cgpu is not None and peers[rgpu["index"]][0].get(str(cgpu["index"])):
                cells[col] = "NV%d" % peers[rgpu["index"]][0][str(cgpu["index"])]
            else:
                cells[col] = pcie_category(rdev, cdev, flat, single_node)
        result["matrix"][row] = cells

    # Bindings and gres lines, in GPU index order.
    with_links = any(peers[g["index"]][0] for g in found)
    rank_on_node, seen = {}, {}
    for g in found:
        node = devs[g["index"]]["numa_node"]
        rank_on_node[g["index"]] = seen.get(node, 0)
        seen[node] = seen.get(node, 0) + 1
    for g in found:
        dev = devs[g["index"]]
        node = dev["numa_node"]
        row = result["matrix"]["GPU%d" % g["index"]]
        ranked = _rank_nics(nics, row, rank_on_node[g["index"]])
        cpulist = decoders.cpus_to_cpulist(g["_cpus"])
        result["bindings"].append({
            "gpu": g["index"],
            "cpus": cpulist,
            "numactl": ("numactl --cpunodebind=%d --membind=%d" % (node, node)) if node is not None
            else ("numactl --physcpubind=%s" % cpulist if cpulist else None),
            "taskset": "taskset -c %s" % cpulist if cpulist else None,
            "nics": [_label(n) for n in ranked],
            "nic": _label(ranked[0]) if ranked else None,
        })  # fmt: skip
        line = "Name=gpu"
        if g["type"]:
            line += " Type=%s" % g["type"]
        line += " File=/dev/nvidia%d" % _minor(fs, g["bdf"], g["index"])
        slurm_cores = sorted(logical[c] for c in g["_firsts"] if c in logical)
        if slurm_cores:
            line += " Cores=%s" % decoders.cpus_to_cpulist(slurm_cores)
        if with_links:
            links = peers[g["index"]][0]
            line += " Links=%s" % ",".join(
                "-1" if o["index"] == g["index"] else str(links.get(str(o["index"]), 0)) for o in found
            )
        result["gres"].append(line)
    return result
