#!/usr/bin/env python3
"""Write the network part of a fixture host root: what nic_info reads from /sys and /proc/sys/net.

    /sys/class/net/<if>/{mtu,operstate,speed,duplex,address,ifindex,type}
    /sys/class/net/<if>/device -> ../../../devices/pci0000:00/<bus_info>   (physical NICs only)
    /sys/devices/pci0000:00/<bus_info>/numa_node, .../driver -> ../../../bus/pci/drivers/<driver>
    /proc/sys/net/ipv4/{tcp_rmem,tcp_wmem,tcp_congestion_control,tcp_available_congestion_control,
                        tcp_allowed_congestion_control,tcp_mtu_probing,tcp_slow_start_after_idle}
    /proc/sys/net/core/{rmem_max,wmem_max,default_qdisc}
    /sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,link_layer}   (optional)

Only network paths, so it composes with tests/sim/host/mkroot.py (CPU, memory, ...) in the same root.
Values are written in the kernel's formats (tcp_rmem is tab-separated, IB state is "4: ACTIVE").

Library use (load with importlib, or put tests/sim/host on sys.path)::

    root = build_netroot(tmp / "h1", nics=[{"name": "ens1f0np0", "driver": "mlx5_core", "mtu": 9000,
                                            "speed": 200000, "numa_node": 1}],
                         tcp={"congestion_control": "bbr"}, infiniband=[{"device": "mlx5_0", "rate_gbps": 400}])

Command line::

    netroot.py PATH [--nics JSON] [--tcp JSON] [--infiniband JSON]

NIC keys: name (required); driver (default "mlx5_core"); mtu (1500); speed (Mb/s, 100000; None: no speed
file, -1: unknown); numa_node (0; None: no numa_node file); operstate ("up"); duplex ("full"); address
(derived from the name); bus_info (derived: 0000:<n>:00.0); physical (True; False: a virtual interface
with no device link, under /sys/devices/virtual/net).

``tcp`` keys override TCP_DEFAULTS (Linux stock values); a value of None leaves that file out (as inside a
network namespace, where default_qdisc is hidden). rmem/wmem may be given as [min, default, max] or
"min default max".

InfiniBand port keys: device (required), port (1), state ("ACTIVE"), phys_state ("LinkUp"), rate_gbps
(400), width ("4X"), link_layer ("InfiniBand"); counters ({name: value}: counters/<name>, none by default);
netdevs ([names]: gid_attrs/ndevs/0, 1, ... - a RoCE port's net devices, bond0 for a RoCE LAG).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

TCP_DEFAULTS = {
    "rmem": [4096, 131072, 6291456],
    "wmem": [4096, 16384, 4194304],
    "congestion_control": "cubic",
    "available_congestion_control": ["reno", "cubic"],
    "allowed_congestion_control": ["reno", "cubic"],
    "mtu_probing": 0,
    "slow_start_after_idle": 1,
    "rmem_max": 212992,
    "wmem_max": 212992,
    "default_qdisc": "fq_codel",
}

TCP_PATHS = {
    "rmem": "proc/sys/net/ipv4/tcp_rmem",
    "wmem": "proc/sys/net/ipv4/tcp_wmem",
    "congestion_control": "proc/sys/net/ipv4/tcp_congestion_control",
    "available_congestion_control": "proc/sys/net/ipv4/tcp_available_congestion_control",
    "allowed_congestion_control": "proc/sys/net/ipv4/tcp_allowed_congestion_control",
    "mtu_probing": "proc/sys/net/ipv4/tcp_mtu_probing",
    "slow_start_after_idle": "proc/sys/net/ipv4/tcp_slow_start_after_idle",
    "rmem_max": "proc/sys/net/core/rmem_max",
    "wmem_max": "proc/sys/net/core/wmem_max",
    "default_qdisc": "proc/sys/net/core/default_qdisc",
}

NIC_DEFAULTS = {
    "driver": "mlx5_core",
    "mtu": 1500,
    "speed": 100000,
    "numa_node": 0,
    "operstate": "up",
    "duplex": "full",
    "physical": True,
}

IB_STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4, "ACTIVE_DEFER": 5}
IB_PHYS_STATES = {"Sleep": 1, "Polling": 2, "Disabled": 3, "PortConfigurationTraining": 4, "LinkUp": 5,
                  "LinkErrorRecovery": 6, "Phy Test": 7}
IB_RATE_NAMES = {2.5: "SDR", 5: "DDR", 10: "QDR", 14: "FDR", 25: "EDR", 50: "HDR", 100: "NDR", 200: "XDR"}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(target, path)


def _mac(name: str) -> str:
    digest = hashlib.sha256(name.encode()).digest()
    return ":".join(f"{b:02x}" for b in (b"\x02" + digest[:5]))


def _words(value) -> str:
    return "\t".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)


def _write_nic(root: Path, index: int, spec: dict) -> None:
    nic = {**NIC_DEFAULTS, **spec}
    name = nic["name"]
    if not name or "/" in name or len(name) > 15:
        raise ValueError(f"bad interface name for a fixture: {name!r}")
    base = root / "sys/class/net" / name
    base.mkdir(parents=True, exist_ok=True)
    _write(base / "mtu", f"{nic['mtu']}\n")
    _write(base / "operstate", f"{nic['operstate']}\n")
    _write(base / "duplex", f"{nic['duplex']}\n")
    _write(base / "address", f"{nic.get('address') or _mac(name)}\n")
    _write(base / "ifindex", f"{index + 2}\n")
    _write(base / "type", "1\n")
    if nic["speed"] is not None:
        _write(base / "speed", f"{nic['speed']}\n")
    if not nic["physical"]:
        return
    bus_info = nic.get("bus_info") or f"0000:{0x10 + index:02x}:00.0"
    device = root / "sys/devices/pci0000:00" / bus_info
    device.mkdir(parents=True, exist_ok=True)
    if nic["numa_node"] is not None:
        _write(device / "numa_node", f"{nic['numa_node']}\n")
    if nic["driver"]:
        (root / "sys/bus/pci/drivers" / nic["driver"]).mkdir(parents=True, exist_ok=True)
        _link(device / "driver", f"../../../bus/pci/drivers/{nic['driver']}")
    _link(base / "device", f"../../../devices/pci0000:00/{bus_info}")


def _write_ib(root: Path, spec: dict) -> None:
    port = {"port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 400, "width": "4X",
            "link_layer": "InfiniBand", **spec}
    base = root / "sys/class/infiniband" / port["device"] / "ports" / str(port["port"])
    state = port["state"]
    _write(base / "state", f"{IB_STATES.get(state, 0)}: {state}\n")
    phys = port["phys_state"]
    _write(base / "phys_state", f"{IB_PHYS_STATES.get(phys, 0)}: {phys}\n")
    rate = port["rate_gbps"]
    width = int(str(port["width"]).rstrip("X") or 1)
    lane = rate / width if width else rate
    lane_name = IB_RATE_NAMES.get(int(lane) if float(lane).is_integer() else lane, "")
    width_text = f"{port['width']} {lane_name}" if lane_name else f"{port['width']}"
    rate_text = f"{rate:g} Gb/sec ({width_text})"
    _write(base / "rate", rate_text + "\n")
    _write(base / "link_layer", f"{port['link_layer']}\n")
    for name, value in (port.get("counters") or {}).items():
        _write(base / "counters" / name, f"{value}\n")
    for index, netdev in enumerate(port.get("netdevs") or []):
        _write(base / "gid_attrs" / "ndevs" / str(index), f"{netdev}\n")


def build_netroot(root, nics=None, tcp=None, infiniband=None) -> Path:
    """Write the NIC, TCP and InfiniBand files into ``root`` (created if needed); returns it as a Path.

    ``nics`` default: one eth0 (mlx5_core, MTU 1500, 100 Gb/s, NUMA node 0).
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for i, spec in enumerate(nics if nics is not None else [{"name": "eth0"}]):
        _write_nic(root, i, spec)
    values = {**TCP_DEFAULTS, **(tcp or {})}
    unknown = set(values) - set(TCP_PATHS)
    if unknown:
        raise ValueError(f"unknown tcp keys: {sorted(unknown)} (known: {sorted(TCP_PATHS)})")
    for key, rel in TCP_PATHS.items():
        path = root / rel
        if values[key] is None:
            if path.exists():
                path.unlink()
            continue
        value = values[key]
        if key in ("available_congestion_control", "allowed_congestion_control") and isinstance(value, (list, tuple)):
            text = " ".join(value)
        elif key in ("rmem", "wmem") and isinstance(value, str):
            text = "\t".join(value.split())
        else:
            text = _words(value)
        _write(path, text + "\n")
    for spec in infiniband or []:
        _write_ib(root, spec)
    return root


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root")
    parser.add_argument("--nics", type=json.loads, default=None, help="JSON list of NIC specs")
    parser.add_argument("--tcp", type=json.loads, default=None, help="JSON object of TCP overrides")
    parser.add_argument("--infiniband", type=json.loads, default=None, help="JSON list of IB port specs")
    args = parser.parse_args(argv)
    print(build_netroot(args.root, args.nics, args.tcp, args.infiniband))
    return 0


if __name__ == "__main__":
    sys.exit(main())
