# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The uplink guard: does a NIC, or a device stacked on it (bond, bridge, VLAN...), carry a default route or
the address of the current SSH connection? nic_settings refuses to change such a NIC unless allow_uplink is set."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import os
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import routes


def parse_ip_addr_json(text):
    """{device: set of addresses} from ``ip -j addr show``."""
    try:
        links = json.loads(text or "[]")
    except ValueError:
        return {}
    out = {}
    for link in links if isinstance(links, list) else []:
        if not isinstance(link, dict) or not link.get("ifname"):
            continue
        addrs = out.setdefault(link["ifname"], set())
        for info in link.get("addr_info") or []:
            if isinstance(info, dict) and info.get("local"):
                addrs.add(_norm_ip(info["local"]))
    return out


def parse_if_inet6(text):
    """{device: set of IPv6 addresses} from /proc/net/if_inet6."""
    out = {}
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) >= 6 and len(f[0]) == 32:
            addr = ":".join(re.findall("....", f[0]))
            out.setdefault(f[5], set()).add(_norm_ip(addr))
    return out


def _norm_ip(text):
    text = (text or "").split("%", 1)[0].strip()
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return text
    mapped = getattr(addr, "ipv4_mapped", None)
    return str(mapped or addr)


def ssh_local_address(environ):
    """The server-side address of SSH_CONNECTION ("client port server port"), or None."""
    fields = (environ.get("SSH_CONNECTION") or "").split()
    return _norm_ip(fields[2]) if len(fields) >= 4 else None


def ancestor_ssh_connection(fs, pid, limit=64):
    """SSH_CONNECTION from the environment of the nearest ancestor of ``pid`` that has it: become (sudo, su)
    resets the environment, but the login shell sshd started above it keeps the variable."""
    seen = 0
    while pid and pid > 1 and seen < limit:
        seen += 1
        env = fs.read("/proc/%d/environ" % pid)
        if env:
            for item in env.split("\0"):
                if item.startswith("SSH_CONNECTION="):
                    return item.split("=", 1)[1]
        stat = fs.read("/proc/%d/stat" % pid) or ""
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'.
        rest = stat.rsplit(")", 1)[-1].split()
        pid = int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else 0
    return None


def uppers(fs, name, limit=16):
    """Devices stacked on ``name`` (bond, bridge, team, VLAN, macvlan...), nearest first, from the sysfs
    ``upper_*`` links and ``master``, recursively."""
    out, queue = [], [name]
    while queue and len(out) < limit:
        dev = queue.pop(0)
        base = "/sys/class/net/%s" % dev
        found = [p.rsplit("/", 1)[-1].replace("upper_", "", 1) for p in fs.glob(base + "/upper_*")]
        if fs.exists(base + "/master"):
            found.append(fs.realpath(base + "/master").rstrip("/").rsplit("/", 1)[-1])
        for upper in found:
            if upper and upper not in out and upper != name:
                out.append(upper)
                queue.append(upper)
    return out


def uplink_status(name, upper_devs, default_devs, addresses, local_address):
    """{"default_route", "connection", "via"}: whether ``name`` or a device stacked on it carries a default route
    or the local address of the current connection; ``via``: the upper device that does (None when the NIC
    itself does, or nothing does)."""
    status = {"default_route": False, "connection": False, "via": None}
    for dev in [name] + list(upper_devs):
        route = dev in default_devs
        conn = bool(local_address) and local_address in addresses.get(dev, set())
        if route or conn:
            if not (status["default_route"] or status["connection"]) and dev != name:
                status["via"] = dev
            status["default_route"] = status["default_route"] or route
            status["connection"] = status["connection"] or conn
    return status


def read_uplink(module, fs, name, run, ip_bin):
    """uplink_status for ``name``, plus why it could not be told (or None)."""
    default_devs = routes.parse_proc_route(fs.read("/proc/net/route"))
    default_devs |= routes.parse_proc_ipv6_route(fs.read("/proc/net/ipv6_route"))
    addresses, unknown = parse_if_inet6(fs.read("/proc/net/if_inet6")), None
    if ip_bin:
        # /proc/net/route shows the main table only; ip also lists policy-routing tables.
        for family in ("-4", "-6"):
            rc, out, _err = run([ip_bin, "-j", family, "route", "show", "table", "all"])
            if rc == 0:
                default_devs |= routes.parse_ip_route_json(out)
        rc, out, _err = run([ip_bin, "-j", "addr", "show"])
        if rc == 0:
            for dev, addrs in parse_ip_addr_json(out).items():
                addresses.setdefault(dev, set()).update(addrs)
    connection = os.environ.get("SSH_CONNECTION") or ancestor_ssh_connection(fs, os.getpid())
    local = ssh_local_address({"SSH_CONNECTION": connection or ""})
    if local and ":" not in local and not ip_bin:
        unknown = "the NIC's IPv4 addresses cannot be read without ip (iproute2)"
    status = uplink_status(name, uppers(fs, name), default_devs, addresses, local)
    if unknown and not status["connection"]:
        status["connection"] = None
    return status, local, unknown


def uplink_refusal(name, status, local, unknown):
    where = "%s (stacked on %s)" % (status["via"], name) if status["via"] else name
    reasons = []
    if status["default_route"]:
        reasons.append("%s carries a default route" % where)
    if status["connection"]:
        reasons.append("%s has the address of this connection (%s, from SSH_CONNECTION)" % (where, local))
    elif status["connection"] is None:
        reasons.append("it cannot be told whether %s carries this connection (%s): %s" % (name, local, unknown))
    return (
        "allow_uplink: %s is an uplink - %s; changing it can cut the host off, so nothing was changed. "
        "Set allow_uplink: true (the network_tuning role does so for NICs named in the policy's "
        "network.interfaces) to change it anyway." % (name, "; ".join(reasons))
    )
