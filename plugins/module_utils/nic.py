# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Network state of a host: NICs (sysfs + ethtool), the TCP stack (/proc/sys/net), InfiniBand ports.

``collect(fs, run, interfaces, ethtool)`` returns the ``network`` fact of the nic_info module. Every
/proc and /sys read goes through ``HostFS``; ethtool runs through ``ethtool.Ethtool`` (module_utils/ethtool.py:
running ethtool, JSON or text, and its parsers), with ``run(argv) -> (rc, stdout, stderr)`` and an argument
list, never a shell string, and only for interface names that passed ``ifname.interface_name_error``.

``sample_drops`` reads the ring-drop counters of ``ethtool -S`` twice, one wait for all NICs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

from ansible_collections.gpufleet.tuning.plugins.module_utils.ethtool import (
    DROP_COUNTERS,
    DROP_KINDS,
    SECTIONS,
    Ethtool,
    drop_counters,
)
from ansible_collections.gpufleet.tuning.plugins.module_utils import rdma
from ansible_collections.gpufleet.tuning.plugins.module_utils.ifname import check_interface_name, interface_name_error

# --- ethtool -S: drop counters, read twice -----------------------------------------------------


def sample_drops(nics, runner, interval, sleep=time.sleep, clock=time.monotonic):
    """Read ``ethtool -S`` of each NIC whose driver has drop counters, wait ``interval`` seconds once (not per
    NIC), read again, and set ``nic["drops"]``::

        {"interval_s": 1.002, "ring": {"rx_out_of_buffer": {"total": 5120, "delta": 0}}, "other": {...},
         "allowance": {...}}

    ``total`` is the second reading (since the driver loaded), ``delta`` its growth between the readings
    (None with ``interval`` 0, or when the counter went backwards: reset). A NIC that is not sampled keeps
    ``drops`` None with the reason under ``unsupported["drops"]``.
    """
    first = {}
    for nic in nics:
        if not nic.get("present"):
            continue
        if runner is None:
            nic["unsupported"]["drops"] = nic["unsupported"].get("rings") or "ethtool not available"
            continue
        driver = nic.get("driver")
        if driver not in DROP_COUNTERS:
            nic["unsupported"]["drops"] = (
                "driver %s has no ethtool -S counter of ring overflow" % driver if driver else "driver unknown"
            )
            continue
        stats, reason = runner.statistics(nic["name"])
        if reason is not None:
            nic["unsupported"]["drops"] = reason
            continue
        first[nic["name"]] = drop_counters(driver, stats)
    if not first:
        return
    start = clock()
    second = {}
    if interval and interval > 0:
        sleep(interval)
        for nic in nics:
            if nic["name"] in first:
                stats, reason = runner.statistics(nic["name"])
                if reason is not None:
                    nic["unsupported"]["drops"] = "second sample: %s" % reason
                else:
                    second[nic["name"]] = drop_counters(nic["driver"], stats)
    elapsed = round(clock() - start, 3) if second else None
    for nic in nics:
        before = first.get(nic["name"])
        if before is None:
            continue
        after = second.get(nic["name"])
        drops = {"interval_s": elapsed if after is not None else None}
        for kind in DROP_KINDS:
            drops[kind] = {}
            for name, value in before[kind].items():
                if after is None or name not in after[kind]:
                    drops[kind][name] = {"total": value, "delta": None}
                    continue
                later = after[kind][name]
                drops[kind][name] = {"total": later, "delta": later - value if later >= value else None}
        nic["drops"] = drops
        nic["sources"]["drops"] = "ethtool-text"


# --- sysfs -------------------------------------------------------------------------------------

NET = "/sys/class/net"


def list_interfaces(fs):
    """Names under /sys/class/net, sorted (entries that are not valid interface names are skipped)."""
    names = []
    for path in fs.glob(NET + "/*"):
        name = path.rsplit("/", 1)[-1]
        if interface_name_error(name) is None and fs.exists("%s/%s/" % (NET, name)):
            names.append(name)
    return sorted(names)


def is_physical(fs, name):
    """A NIC backed by a device (PCI function, virtio device, ...): has a ``device`` link and is not
    lo, a bridge or a veth."""
    base = "%s/%s" % (NET, name)
    if name == "lo" or fs.exists(base + "/bridge"):
        return False
    if not fs.exists(base + "/device"):
        return False
    return _sysfs_driver(fs, name) != "veth"


def _sysfs_driver(fs, name):
    link = fs.realpath("%s/%s/device/driver" % (NET, name))
    if not fs.exists("%s/%s/device/driver" % (NET, name)):
        return None
    return link.rstrip("/").rsplit("/", 1)[-1] or None


def _sysfs_bus_info(fs, name):
    if not fs.exists("%s/%s/device" % (NET, name)):
        return None
    target = fs.realpath("%s/%s/device" % (NET, name)).rstrip("/").rsplit("/", 1)[-1]
    return target if re.match(r"^[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$", target) else None


def _read_sys(fs, path, unsupported, key):
    text = fs.read(path)
    if text is None:
        unsupported[key] = ("unreadable: %s" % path) if fs.exists(path) else ("not present: %s" % path)
        return None
    return text.strip()


def _sys_int(fs, path, unsupported, key, unknown=None):
    text = _read_sys(fs, path, unsupported, key)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        unsupported[key] = "unexpected value %r in %s" % (text[:40], path)
        return None
    if unknown is not None and value == unknown:
        unsupported[key] = "kernel reports %d (unknown) in %s" % (value, path)
        return None
    return value


def _empty_nic(name):
    return {
        "name": name,
        "present": False,
        "driver": None,
        "driver_version": None,
        "firmware_version": None,
        "bus_info": None,
        "speed_mbps": None,
        "duplex": None,
        "mtu": None,
        "operstate": None,
        "numa_node": None,
        "physical": False,
        "rings": None,
        "offloads": None,
        "offloads_fixed": [],
        "coalescing": None,
        "channels": None,
        "drops": None,
        "source": None,
        "sources": {},
        "unsupported": {},
    }


def read_nic(fs, name, ethtool=None, ethtool_missing=None):
    """One entry of ``network.nics``. ``ethtool`` is an Ethtool runner, or None with ``ethtool_missing``
    saying why."""
    check_interface_name(name)
    nic = _empty_nic(name)
    unsupported = nic["unsupported"]
    base = "%s/%s" % (NET, name)
    if not fs.exists(base + "/"):
        unsupported["present"] = "no such interface: %s" % base
        return nic
    nic["present"] = True
    nic["physical"] = is_physical(fs, name)

    speed = _sys_int(fs, base + "/speed", unsupported, "speed_mbps", unknown=-1)
    if speed is not None and speed < 0:
        unsupported["speed_mbps"] = "kernel reports %d in %s/speed" % (speed, base)
        speed = None
    nic["speed_mbps"] = speed
    duplex = _read_sys(fs, base + "/duplex", unsupported, "duplex")
    if duplex == "unknown":
        unsupported["duplex"] = "kernel reports unknown in %s/duplex" % base
        duplex = None
    nic["duplex"] = duplex or None
    nic["mtu"] = _sys_int(fs, base + "/mtu", unsupported, "mtu")
    nic["operstate"] = _read_sys(fs, base + "/operstate", unsupported, "operstate") or None
    if fs.exists(base + "/device"):
        nic["numa_node"] = _sys_int(fs, base + "/device/numa_node", unsupported, "numa_node", unknown=-1)
    else:
        unsupported["numa_node"] = "no device link (virtual interface)"

    if ethtool is None:
        reason = "ethtool not available: %s" % (ethtool_missing or "not found")
        for section, _option, _text, _json in SECTIONS:
            unsupported[section] = reason
        nic["driver"] = _sysfs_driver(fs, name)
        nic["bus_info"] = _sysfs_bus_info(fs, name)
        if nic["driver"] is not None:
            unsupported["driver"] = reason + "; driver name from %s/device/driver" % base
        return nic

    for section, option, text_parser, json_parser in SECTIONS:
        value, source, reason = ethtool.query(option, name, text_parser, json_parser)
        if reason is not None:
            unsupported[section] = reason
            continue
        nic["sources"][section] = source
        if section == "driver":
            nic.update(value)
            if not value.get("firmware_version"):
                unsupported["firmware_version"] = "ethtool -i reports no firmware version"
        elif section == "offloads":
            nic["offloads"], nic["offloads_fixed"] = value
        else:
            nic[section] = value
    if "driver" in unsupported:
        nic["driver"] = _sysfs_driver(fs, name)
        nic["bus_info"] = _sysfs_bus_info(fs, name)
    if nic["sources"]:
        nic["source"] = "ethtool-json" if "ethtool-json" in nic["sources"].values() else "ethtool-text"
    return nic


# --- /proc/sys/net -----------------------------------------------------------------------------

TCP_FILES = (
    ("rmem", "/proc/sys/net/ipv4/tcp_rmem", "triple"),
    ("wmem", "/proc/sys/net/ipv4/tcp_wmem", "triple"),
    ("rmem_max", "/proc/sys/net/core/rmem_max", "int"),
    ("wmem_max", "/proc/sys/net/core/wmem_max", "int"),
    ("congestion_control", "/proc/sys/net/ipv4/tcp_congestion_control", "str"),
    ("available_congestion_control", "/proc/sys/net/ipv4/tcp_available_congestion_control", "list"),
    ("allowed_congestion_control", "/proc/sys/net/ipv4/tcp_allowed_congestion_control", "list"),
    ("default_qdisc", "/proc/sys/net/core/default_qdisc", "str"),
    ("mtu_probing", "/proc/sys/net/ipv4/tcp_mtu_probing", "int"),
    ("slow_start_after_idle", "/proc/sys/net/ipv4/tcp_slow_start_after_idle", "int"),
)


def read_tcp(fs):
    """``network.tcp``: each sysctl, None (lists: []) with the reason in ``unsupported`` when it cannot
    be read (inside a network namespace some are hidden, e.g. default_qdisc)."""
    tcp = {"unsupported": {}}
    for key, path, kind in TCP_FILES:
        text = fs.read(path)
        empty = [] if kind == "list" else None
        if text is None:
            tcp[key] = empty
            tcp["unsupported"][key] = ("unreadable: %s" % path) if fs.exists(path) else ("not present: %s" % path)
            continue
        words = text.split()
        try:
            if kind == "triple":
                if len(words) != 3:
                    raise ValueError
                value = [int(w) for w in words]
            elif kind == "int":
                if len(words) != 1:
                    raise ValueError
                value = int(words[0])
            elif kind == "list":
                value = words
            else:
                value = words[0] if len(words) == 1 else None
                if value is None:
                    raise ValueError
        except ValueError:
            tcp[key] = empty
            tcp["unsupported"][key] = "unexpected value %r in %s" % (text.strip()[:60], path)
            continue
        tcp[key] = value
    return tcp


# --- everything --------------------------------------------------------------------------------


def collect(fs, run, interfaces=None, ethtool="ethtool", ethtool_missing=None, stats_interval=1.0, sleep=time.sleep):
    """The ``network`` fact.

    ``interfaces``: names to report (a missing one is reported with present=false); None: every
    physical NIC. ``ethtool``: the binary to run, or None (``ethtool_missing`` says why) to report NICs
    from sysfs alone. ``stats_interval``: seconds between the two ``ethtool -S`` readings of the drop
    counters (one wait for all NICs; 0: one reading, no growth; None: not read). Raises
    InvalidInterfaceName before running anything if a name is not acceptable.
    """
    if interfaces is None:
        names = [n for n in list_interfaces(fs) if is_physical(fs, n)]
    else:
        names = []
        for name in interfaces:
            check_interface_name(name)
            if name not in names:
                names.append(name)
    runner = Ethtool(run, ethtool) if ethtool else None
    nics = [read_nic(fs, name, runner, ethtool_missing) for name in names]
    if stats_interval is not None:
        sample_drops(nics, runner, stats_interval, sleep=sleep)
    return {"nics": nics, "tcp": read_tcp(fs), "infiniband": rdma.port_states(fs), "peers": []}
