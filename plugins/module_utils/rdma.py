# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""RDMA ports (InfiniBand and RoCE) from /sys/class/infiniband: state, rate, link layer, netdevs, and the port error
counters read twice, one sample window apart (the rules NET-RDMA-001..003 judge them).

The files, per the kernel's Documentation/ABI/stable/sysfs-class-infiniband:

    /sys/class/infiniband/<dev>/{hca_type,board_id,fw_ver}
    /sys/class/infiniband/<dev>/device/net/<netdev>             the PCI function's netdevs (IPoIB or Ethernet)
    /sys/class/infiniband/<dev>/ports/<n>/state                 "4: ACTIVE" (DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER)
    /sys/class/infiniband/<dev>/ports/<n>/phys_state            "5: LinkUp" (Sleep, Polling, Disabled, ...)
    /sys/class/infiniband/<dev>/ports/<n>/rate                  "400 Gb/sec (4X NDR)": active width x active speed
    /sys/class/infiniband/<dev>/ports/<n>/link_layer            InfiniBand | Ethernet (RoCE)
    /sys/class/infiniband/<dev>/ports/<n>/counters/<name>       the IBTA PortCounters attribute (PMA)
    /sys/class/infiniband/<dev>/ports/<n>/hw_counters/<name>    the driver's own counters (optional)
    /sys/class/infiniband/<dev>/ports/<n>/gid_attrs/ndevs/<i>   RoCE: the netdev of GID <i> (bond0 on a RoCE LAG)

PortCounters' error fields are narrow and saturate instead of wrapping (IBTA: a counter stops at all ones until it
is reset); drivers/infiniband/core/sysfs.c gives each file its width: symbol_error 16 bits, link_error_recovery and
link_downed 8, port_rcv_errors 16, local_link_integrity_errors and excessive_buffer_overrun_errors 4. A counter at
its maximum (or at 0xFFFFFFFF, a 32-bit counter of an old HCA) cannot show new errors: it is reported ``saturated``
and never judged as rising. A file that says "N/A (no PMA)" is reported unreadable.

``start(fs)`` takes the first reading, ``finish(fs, first, sample_seconds)`` waits out what is left of the window
and reads the counters again; ``collect`` does both. Nothing here raises on a file's content.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import time

CLASS_DIR = "/sys/class/infiniband"

# The error counters read twice, with their width in bits (drivers/infiniband/core/sysfs.c, PORT_PMA_ATTR). The
# first six are judged (NET-RDMA-003); the others are reported.
ERROR_COUNTERS = (
    ("link_downed", 8),
    ("symbol_error", 16),
    ("link_error_recovery", 8),
    ("port_rcv_errors", 16),
    ("local_link_integrity_errors", 4),
    ("excessive_buffer_overrun_errors", 4),
    ("port_rcv_remote_physical_errors", 16),
    ("port_xmit_discards", 16),
    ("VL15_dropped", 16),
)
JUDGED = tuple(name for name, _bits in ERROR_COUNTERS[:6])
# The driver's counters (hw_counters, mlx5) worth having next to the port's: receive-queue drops, transport retries
# and sequence errors. Reported where non-zero, not judged.
HW_COUNTERS = (
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "implied_nak_seq_err",
    "req_cqe_error",
    "resp_cqe_error",
    "roce_adp_retrans",
    "roce_slow_restart",
)
SATURATED_32 = 0xFFFFFFFF

_CODE_RE = re.compile(r"^\s*(\d+)\s*:\s*(.*?)\s*$")
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec(?:\s*\(\s*(\d+)X\s*([A-Za-z0-9]*)\s*\))?")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_MAX_TEXT = 64


def _text(value):
    """A one-line value of at most 64 printable ASCII characters (a file's content is not trusted), or None."""
    if value is None:
        return None
    line = value.strip().split("\n", 1)[0].strip()
    line = "".join(ch if " " <= ch <= "~" else "?" for ch in line)[:_MAX_TEXT]
    return line or None


def parse_state(text):
    """ "4: ACTIVE" -> (4, "ACTIVE"); "ACTIVE" -> (None, "ACTIVE"); (None, None) when empty."""
    value = _text(text)
    if value is None:
        return None, None
    match = _CODE_RE.match(value)
    if match:
        return int(match.group(1)), match.group(2) or None
    return None, value


def parse_rate(text):
    """ "400 Gb/sec (4X NDR)" -> (400.0, "4X", "NDR"); (None, None, None) when unparsable."""
    match = _RATE_RE.match(_text(text) or "")
    if not match:
        return None, None, None
    width = "%sX" % match.group(2) if match.group(2) else None
    return float(match.group(1)), width, match.group(3) or None


def parse_counter(text):
    """(value, why): the counter's value, or None and why it is not one ("N/A (no PMA)", missing, ...)."""
    value = _text(text)
    if value is None:
        return None, "missing or unreadable"
    if value.isdigit():
        return int(value), None
    return None, "not a number: %r" % value


def saturated(name, value, bits=None):
    """True when ``value`` is the largest the counter can hold: it stopped counting (IBTA PortCounters saturate)."""
    if value is None:
        return False
    widths = dict(ERROR_COUNTERS)
    width = bits or widths.get(name)
    if width and value >= (1 << width) - 1:
        return True
    return value == SATURATED_32


def _names(fs, pattern):
    """The base names of the paths ``pattern`` matches that are plain, short names (no odd characters)."""
    out = []
    for path in fs.glob(pattern):
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if _NAME_RE.match(name):
            out.append(name)
    return out


def _netdev_up(fs, name):
    """Whether the netdev is administratively up (IFF_UP in /sys/class/net/<name>/flags), None when unknown."""
    flags = _text(fs.read("/sys/class/net/%s/flags" % name))
    try:
        return bool(int(flags, 16) & 0x1) if flags else None
    except ValueError:
        return None


def _read_counters(fs, base):
    """{name: value or None} of the error counters, and {name: why} for those that are not numbers."""
    values, unreadable = {}, {}
    for name, _bits in ERROR_COUNTERS:
        value, why = parse_counter(fs.read("%s/counters/%s" % (base, name), limit=256))
        if why == "missing or unreadable" and not fs.exists("%s/counters/%s" % (base, name)):
            continue
        values[name] = value
        if why:
            unreadable[name] = why
    return values, unreadable


def _read_hw_counters(fs, base):
    values = {}
    for name in HW_COUNTERS:
        value, _why = parse_counter(fs.read("%s/hw_counters/%s" % (base, name), limit=256))
        if value is not None:
            values[name] = value
    return values


def _read_port(fs, device, port, device_netdevs):
    base = "%s/%s/ports/%s" % (CLASS_DIR, device, port)
    state_code, state = parse_state(fs.read(base + "/state", limit=256))
    phys_code, phys_state = parse_state(fs.read(base + "/phys_state", limit=256))
    rate_text = _text(fs.read(base + "/rate", limit=256))
    rate, width, speed = parse_rate(rate_text)
    link_layer = _text(fs.read(base + "/link_layer", limit=256))
    netdevs = []
    if (link_layer or "").lower() == "ethernet":
        # RoCE: the netdevs the port's GIDs belong to (bond0 for a RoCE LAG, a VLAN device for a tagged network).
        for path in fs.glob(base + "/gid_attrs/ndevs/*"):
            name = _text(fs.read(path, limit=256))
            if name and _NAME_RE.match(name) and name not in netdevs:
                netdevs.append(name)
    for name in device_netdevs:
        if name not in netdevs:
            netdevs.append(name)
    counters, unreadable = _read_counters(fs, base)
    out = {
        "name": "%s/%s" % (device, port),
        "device": device,
        "port": int(port),
        "state": state,
        "state_code": state_code,
        "phys_state": phys_state,
        "phys_state_code": phys_code,
        "rate": rate_text,
        "rate_gbps": rate,
        "width": width,
        "speed": speed,
        "link_layer": link_layer,
        "netdevs": netdevs,
        "netdev_up": None,
        "counters": counters,
        "deltas": None,
        "saturated": sorted(name for name, value in counters.items() if saturated(name, value)),
        "reset": [],
        "unreadable": unreadable,
        "hw_counters": _read_hw_counters(fs, base),
        "hw_deltas": None,
    }
    if (link_layer or "").lower() == "ethernet" and netdevs:
        # The first netdev is the one RoCE runs over (the GID table's, else the function's own).
        out["netdev_up"] = _netdev_up(fs, netdevs[0])
    return out


def port_states(fs):
    """The ports' states and rates alone (no counters): [{device, port, state, phys_state, rate_gbps, link_layer}],
    sorted; [] without /sys/class/infiniband. nic.collect's ``infiniband`` fact (the memlock rule's "are there RDMA
    devices", the watch's baseline of ports) comes from here, so the tree is parsed one way."""
    ports = []
    for device in _names(fs, CLASS_DIR + "/*"):
        for port in _names(fs, "%s/%s/ports/*" % (CLASS_DIR, device)):
            if not port.isdigit():
                continue
            base = "%s/%s/ports/%s" % (CLASS_DIR, device, port)
            ports.append({
                "device": device,
                "port": int(port),
                "state": parse_state(fs.read(base + "/state", limit=256))[1],
                "phys_state": parse_state(fs.read(base + "/phys_state", limit=256))[1],
                "rate_gbps": parse_rate(fs.read(base + "/rate", limit=256))[0],
                "link_layer": _text(fs.read(base + "/link_layer", limit=256)),
            })
    ports.sort(key=lambda p: (p["device"], p["port"]))
    return ports


def start(fs, clock=time.monotonic):
    """The first reading: {"available", "reason", "ports", "started"} (``started`` on ``clock``)."""
    if not fs.exists(CLASS_DIR):
        return {"available": False, "reason": "no RDMA devices (%s absent)" % CLASS_DIR, "ports": [],
                "started": clock()}
    ports = []
    for device in _names(fs, CLASS_DIR + "/*"):
        info = dict((key, _text(fs.read("%s/%s/%s" % (CLASS_DIR, device, key), limit=256)))
                    for key in ("hca_type", "board_id", "fw_ver"))
        device_netdevs = _names(fs, "%s/%s/device/net/*" % (CLASS_DIR, device))
        for port in _names(fs, "%s/%s/ports/*" % (CLASS_DIR, device)):
            if port.isdigit():
                entry = _read_port(fs, device, port, device_netdevs)
                entry.update(info)
                ports.append(entry)
    ports.sort(key=lambda p: (p["device"], p["port"]))
    reason = None if ports else "no RDMA ports under %s" % CLASS_DIR
    return {"available": True, "reason": reason, "ports": ports, "started": clock()}


def _deltas(first, second, reset):
    """{name: growth} of the counters read twice; a counter lower the second time was cleared inside the window
    (perfquery -R, a driver reload): named in ``reset``, no growth known."""
    out = {}
    for name, before in first.items():
        after = second.get(name)
        if before is None or after is None:
            continue
        if after < before:
            reset.append(name)
        else:
            out[name] = after - before
    return out


def finish(fs, first, sample_seconds=1.0, sleep=time.sleep, clock=time.monotonic):
    """The ``rdma`` fact: ``first`` (``start``'s reading) with the counters read again once ``sample_seconds`` have
    passed since it (waiting only for what is left). ``sample_seconds`` 0 or None: one reading, no deltas.

    Per port: ``counters`` {name: value or None} (the second reading), ``deltas`` {name: growth} of those that grew
    ({}: none did; None: read once), ``saturated`` and ``reset`` [names], ``unreadable`` {name: why};
    ``hw_counters`` and ``hw_deltas`` only where non-zero."""
    out = {"available": first["available"], "reason": first["reason"], "interval_s": None,
           "ports": first["ports"]}
    if first["ports"] and sample_seconds:
        left = first["started"] + sample_seconds - clock()
        if left > 0:
            sleep(left)
        out["interval_s"] = round(clock() - first["started"], 3)
        for port in first["ports"]:
            base = "%s/%s/ports/%s" % (CLASS_DIR, port["device"], port["port"])
            second, _unreadable = _read_counters(fs, base)
            port["deltas"] = dict((k, v) for k, v in _deltas(port["counters"], second, port["reset"]).items() if v)
            port["counters"] = dict((name, second.get(name)) for name in port["counters"])
            port["saturated"] = sorted(name for name, value in port["counters"].items() if saturated(name, value))
            hw = _read_hw_counters(fs, base)
            port["hw_deltas"] = dict((k, v) for k, v in _deltas(port["hw_counters"], hw, []).items() if v)
            port["hw_counters"] = hw
    for port in first["ports"]:
        # The driver's counters only where they count something: the report stays small.
        port["hw_counters"] = dict((k, v) for k, v in port["hw_counters"].items() if v)
    return out


def collect(fs, sample_seconds=1.0, sleep=time.sleep, clock=time.monotonic):
    """Both readings, ``sample_seconds`` apart."""
    return finish(fs, start(fs, clock=clock), sample_seconds, sleep=sleep, clock=clock)
