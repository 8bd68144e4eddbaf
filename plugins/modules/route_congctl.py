#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: route_congctl
short_description: Per-route TCP congestion control to the long-haul peers' networks
version_added: "0.2.0"
description:
  - >-
    Gives the routes to O(prefixes) a congestion control (C(ip route replace PREFIX ... congctl bbr), per-route
    congestion control since Linux 4.0, kernel commit 81164413ad09 "net - tcp - add per route congestion control"),
    so connections to the long-haul peers use it while every other connection keeps the host's default
    (C(net.ipv4.tcp_congestion_control)). See ip-route(8), C(congctl).
  - A prefix that has a route of its own (same destination, main table) keeps its gateway, device, metric and source;
    a prefix reached through a wider route (usually the default route) gets a route of its own with the gateway and
    device C(ip route get) picks for it today, so the path does not change - only the congestion control does.
  - Changes only routes whose congestion control differs. Check mode reports the commands it would run.
  - With O(rollback_run_id), each route is recorded before it changes (kind C(route) - the route as C(ip -j route show
    exact) printed it, or its absence), so M(gpufleet.tuning.rollback) re-creates it as it was or deletes the route
    this module created. Metrics C(ip -j route) does not print as plain numbers (rtt, rttvar, rto_min) and C(lock)
    flags are not carried over by the replace.
  - Persistence (O(persist)) - the kernel forgets routes at reboot and when a network manager reconfigures the
    link, so the exact commands are written to a oneshot systemd unit (C(gpufleet-route-congctl.service), ordered
    after C(network-online.target)) that replays them at boot. A network manager that later flushes routes it does
    not own (systemd-networkd with C(ManageForeignRoutes=yes) on restart) removes them until the unit or this
    module runs again; declare them in the network manager instead where that matters. The unit is written, not
    enabled - enable it with M(ansible.builtin.systemd_service) (the network_tuning role does).
author:
  - gpufleet contributors (@gpufleet)
options:
  prefixes:
    description: Networks (CIDR, IPv4 or IPv6, host bits zero) whose routes get the congestion control.
    type: list
    elements: str
    required: true
  congestion_control:
    description:
      - Congestion control for those routes, as in C(net.ipv4.tcp_available_congestion_control) (e.g. C(bbr)).
      - The kernel must offer it; the module fails naming the ones it offers otherwise.
    type: str
    required: true
  persist:
    description: Write the commands to the boot unit.
    type: bool
    default: true
  unit_dir:
    description: Directory of the boot unit.
    type: path
    default: /etc/systemd/system
  available_path:
    description: File listing the available congestion controls (tests point it elsewhere).
    type: path
    default: /proc/sys/net/ipv4/tcp_available_congestion_control
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
"""

EXAMPLES = r"""
- name: BBR only towards the other regions; local traffic keeps cubic
  gpufleet.tuning.route_congctl:
    prefixes: [198.51.100.0/24, 2001:db8:100::/48]
    congestion_control: bbr
  become: true
"""

RETURN = r"""
routes:
  description: >-
    Per routed prefix, C(before) and C(after) congestion control (null - none set), the C(command), whether the
    prefix had a route of its own (C(own_route)) and whether it C(change)s.
  returned: always
  type: list
  elements: dict
commands:
  description: The C(ip route replace) commands run (or that would run in check mode).
  returned: always
  type: list
  elements: str
unrouted:
  description: Prefixes this host has no route to (left alone, with a warning), with the C(error).
  returned: always
  type: list
  elements: dict
unit:
  description: C(path) of the boot unit and whether it C(changed) (C(path) null when O(persist=false)).
  returned: always
  type: dict
"""

import ipaddress
import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import links, rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic

UNIT_NAME = "gpufleet-route-congctl.service"
_CC = re.compile(r"^[a-z][a-z0-9_]{0,15}$")


def replace_argv(prefix, route, congestion_control):
    """`ip route replace` arguments keeping the route's path (gateway, device, protocol, metric, source, metrics)."""
    return links.route_argv("replace", prefix, route, congestion_control)


def unit_text(ip_bin, argvs):
    lines = [
        "# Managed by gpufleet (gpufleet.tuning.route_congctl). Local changes will be overwritten.",
        "# Per-route congestion control to the long-haul peers (ip-route(8) congctl); the kernel forgets routes at",
        "# reboot, so this replays them once the network is up.",
        "[Unit]",
        "Description=gpufleet: per-route TCP congestion control to long-haul peers",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
    ]
    lines += ["ExecStart=%s %s" % (ip_bin, " ".join(argv)) for argv in argvs]
    lines += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            prefixes=dict(type="list", elements="str", required=True),
            congestion_control=dict(type="str", required=True),
            persist=dict(type="bool", default=True),
            unit_dir=dict(type="path", default="/etc/systemd/system"),
            available_path=dict(type="path", default="/proc/sys/net/ipv4/tcp_available_congestion_control"),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    rollback.check_params(module)
    p = module.params
    cc = p["congestion_control"]
    if not _CC.match(cc):
        module.fail_json(msg="congestion_control: %r is not a congestion control name (e.g. bbr, cubic)" % cc)
    networks = []
    for i, prefix in enumerate(p["prefixes"]):
        try:
            networks.append(ipaddress.ip_network(prefix))
        except ValueError as exc:
            module.fail_json(
                msg="prefixes[%d]: %r is not a CIDR network such as 198.51.100.0/24 or 2001:db8::/32 "
                "(%s)" % (i, prefix, exc)
            )
    if not networks:
        module.fail_json(msg="prefixes: give at least one network")
    try:
        with open(p["available_path"]) as f:
            available = f.read().split()
    except (IOError, OSError) as exc:
        module.fail_json(msg="available_path: cannot read %s: %s" % (p["available_path"], exc))
    if cc not in available:
        module.fail_json(
            msg="congestion_control: %s is not available in this kernel (available: %s; load tcp_%s)"
            % (cc, ", ".join(available), cc)
        )
    ip_bin = module.get_bin_path("ip", required=True)

    def ip_json(argv):
        rc, out, err = module.run_command([ip_bin, "-j"] + argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            return None, (err or out).strip()
        try:
            return json.loads(out or "[]"), None
        except ValueError as exc:
            return None, "unreadable output of ip -j %s: %s" % (" ".join(argv), exc)

    # Plan every prefix first: nothing changes unless every route could be read.
    routes, argvs, unrouted, records = [], [], [], []
    for net in networks:
        prefix = str(net)
        family = "-6" if net.version == 6 else "-4"
        exact, err = ip_json([family, "route", "show", "exact", prefix])
        if exact is None:
            module.fail_json(msg="prefixes: cannot read the route to %s: %s" % (prefix, err))
        if exact:
            route = exact[0]
        else:
            got, err = ip_json([family, "route", "get", str(net.network_address)])
            if not got:
                unrouted.append({"prefix": prefix, "error": err})
                continue
            route = dict(got[0])
            route.pop("prefsrc", None)  # the source the kernel picks; keep it unpinned
        before = links.route_congctl_of(route)
        argv = replace_argv(prefix, route, cc)
        argvs.append(argv)
        routes.append(
            {
                "prefix": prefix,
                "before": before,
                "after": cc,
                "command": " ".join([ip_bin] + argv),
                "own_route": bool(exact),
                "change": before != cc or not exact,
            }
        )
        # For rollback: the route as it was (re-created as is), or its absence and what this run creates for it
        # (deleted again).
        records.append(
            {
                "kind": "route",
                "family": "inet6" if net.version == 6 else "inet",
                "prefix": prefix,
                "route": exact[0] if exact else None,
                "created": None if exact else route,
            }
        )
    for item in unrouted:
        module.warn("prefixes: %s has no route on this host (%s): left alone" % (item["prefix"], item["error"]))

    commands = [r["command"] for r in routes if r["change"]]
    rollback.record_for(module, [rec for rec, r in zip(records, routes) if r["change"]])
    for entry, argv in zip(routes, argvs):
        if entry["change"] and not module.check_mode:
            rc, out, err = module.run_command([ip_bin] + argv)
            if rc != 0:
                module.fail_json(
                    msg="prefixes: %s failed: %s" % (entry["command"], (err or out).strip()),
                    routes=routes,
                    commands=commands,
                )

    unit = {"path": None, "changed": False}
    diff = [
        {
            "before": "".join("%s congctl %s\n" % (r["prefix"], r["before"]) for r in routes if r["change"]),
            "after": "".join("%s congctl %s\n" % (r["prefix"], r["after"]) for r in routes if r["change"]),
        }
    ]
    if p["persist"]:
        path = os.path.join(p["unit_dir"], UNIT_NAME)
        text = unit_text(ip_bin, argvs)
        try:
            with open(path) as f:
                old = f.read()
        except (IOError, OSError):
            old = None
        unit = {"path": path, "changed": old != text}
        diff.append({"before_header": path, "after_header": path, "before": old or "", "after": text})
        if unit["changed"] and not module.check_mode:
            rollback.record_for(module, [{"kind": "file", "path": path, "content": old}])
            write_atomic(path, text)
    module.exit_json(
        changed=bool(commands) or unit["changed"],
        routes=routes,
        commands=commands,
        unit=unit,
        unrouted=unrouted,
        diff=diff,
    )


if __name__ == "__main__":
    main()
