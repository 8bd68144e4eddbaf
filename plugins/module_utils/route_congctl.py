# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The route_congctl module's work: validate, plan (every prefix's route read first, nothing changed unless all of
them could be read), apply (outside check mode, each prior route recorded for rollback first) and diff.

The kernel forgets routes at reboot: a systemd unit replays the ``ip route replace`` commands once the network is up.

RouteFollow is the route_follow module's work (scope follow): gpufleet's own table and rules, kept in line with the
main table by route_follow.py running as a service.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import os
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import programs, rollback, route_follow, routes
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import read_text, write_atomic

UNIT_NAME = "gpufleet-route-congctl.service"
_CC = re.compile(r"^[a-z][a-z0-9_]{0,15}$")


def replace_argv(prefix, route, congestion_control):
    """`ip route replace` arguments keeping the route's path (gateway, device, protocol, metric, source, metrics)."""
    return routes.route_argv("replace", prefix, route, congestion_control)


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


# The options route_congctl and route_follow share, checked by validate() (documented by the doc fragment
# gpufleet.tuning.route_congctl).
ARGUMENT_SPEC = dict(
    prefixes=dict(type="list", elements="str", required=True),
    congestion_control=dict(type="str", required=True),
    unit_dir=dict(type="path", default="/etc/systemd/system"),
    available_path=dict(type="path", default="/proc/sys/net/ipv4/tcp_available_congestion_control"),
)


def validate(module):
    """The prefixes as networks; fails naming the field when one is not a network or the algorithm is unknown."""
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
    return networks


class RouteCongctl:
    """plan() reads every route, apply() replaces them and writes the unit (never in check mode), diff() and
    result() report."""

    def __init__(self, module, networks, ip_bin):
        self.module = module
        self.networks = networks
        self.ip_bin = ip_bin
        self.run = programs.runner(module)
        self.cc = module.params["congestion_control"]
        self.routes, self.argvs, self.unrouted, self.records = [], [], [], []
        self.unit = {"path": None, "changed": False}
        self.unit_old = self.unit_new = None

    def plan(self):
        # Plan every prefix first: nothing changes unless every route could be read.
        for net in self.networks:
            self._plan_route(net)
        for item in self.unrouted:
            self.module.warn(
                "prefixes: %s has no route on this host (%s): left alone" % (item["prefix"], item["error"])
            )
        if self.module.params["persist"]:
            path = os.path.join(self.module.params["unit_dir"], UNIT_NAME)
            self.unit_new = unit_text(self.ip_bin, self.argvs)
            self.unit_old = read_text(path)
            self.unit = {"path": path, "changed": self.unit_old != self.unit_new}

    def _plan_route(self, net):
        prefix = str(net)
        exact, err = routes.show_exact(self.run, prefix, self.ip_bin, locks=True)
        if exact is None:
            self.module.fail_json(msg="prefixes: cannot read the route to %s: %s" % (prefix, err))
        if exact:
            route = exact[0]
        else:
            get = [routes.ip_family(prefix), "route", "get", str(net.network_address)]
            got, err = routes.ip_json(self.run, get, self.ip_bin)
            if not got:
                self.unrouted.append({"prefix": prefix, "error": err})
                return
            route = dict(got[0])
            route.pop("prefsrc", None)  # the source the kernel picks; keep it unpinned
        before = routes.route_congctl_of(route)
        argv = replace_argv(prefix, route, self.cc)
        self.argvs.append(argv)
        self.routes.append(
            {
                "prefix": prefix,
                "before": before,
                "after": self.cc,
                "command": " ".join([self.ip_bin] + argv),
                "own_route": bool(exact),
                "change": before != self.cc or not exact,
            }
        )
        # For rollback: the route as it was (re-created as is), or its absence and what this run creates for it
        # (deleted again).
        self.records.append(
            {
                "kind": "route",
                "family": "inet6" if net.version == 6 else "inet",
                "prefix": prefix,
                "route": exact[0] if exact else None,
                "created": None if exact else route,
            }
        )

    def commands(self):
        return [r["command"] for r in self.routes if r["change"]]

    def apply(self):
        if self.module.check_mode:
            return
        rollback.record_for(self.module, [rec for rec, r in zip(self.records, self.routes) if r["change"]])
        for entry, argv in zip(self.routes, self.argvs):
            if entry["change"]:
                rc, out, err = self.module.run_command([self.ip_bin] + argv)
                if rc != 0:
                    self.module.fail_json(
                        msg="prefixes: %s failed: %s" % (entry["command"], (err or out).strip()),
                        routes=self.routes,
                        commands=self.commands(),
                    )
        if self.unit["changed"]:
            rollback.record_for(self.module, [{"kind": "file", "path": self.unit["path"], "content": self.unit_old}])
            write_atomic(self.unit["path"], self.unit_new)

    def diff(self):
        changes = [r for r in self.routes if r["change"]]
        diff = [
            {
                "before": "".join("%s congctl %s\n" % (r["prefix"], r["before"]) for r in changes),
                "after": "".join("%s congctl %s\n" % (r["prefix"], r["after"]) for r in changes),
            }
        ]
        if self.unit["path"]:
            path = self.unit["path"]
            before = self.unit_old or ""
            diff.append({"before_header": path, "after_header": path, "before": before, "after": self.unit_new})
        return diff

    def result(self):
        commands = self.commands()
        return dict(
            changed=bool(commands) or self.unit["changed"],
            routes=self.routes,
            commands=commands,
            unit=self.unit,
            unrouted=self.unrouted,
            diff=self.diff(),
        )


def follow_unit_text(python, lib_dir, config_path):
    prog = "%s %s" % (python, os.path.join(lib_dir, "route_follow.py"))
    return (
        "\n".join(
            [
                "# Managed by gpufleet (gpufleet.tuning.route_follow). Local changes will be overwritten.",
                "# Congestion control to the long-haul peers that follows the routing table: a table of its own",
                "# mirrors the main table's routes to the peers' prefixes with congctl, re-derived on each change.",
                "[Unit]",
                "Description=gpufleet: per-destination TCP congestion control following the routing table",
                "After=network.target",
                "",
                "[Service]",
                "Type=simple",
                "ExecStart=%s watch %s" % (prog, config_path),
                "ExecStopPost=%s clear %s" % (prog, config_path),
                "Restart=always",
                "RestartSec=5",
                "",
                "[Install]",
                "WantedBy=multi-user.target",
            ]
        )
        + "\n"
    )


class RouteFollow:
    """plan() reads the main table, gpufleet's table and rules; apply() brings them in line and writes the config
    and the unit (never in check mode, prior state recorded for rollback first); result() reports."""

    def __init__(self, module, networks, ip_bin):
        p = module.params
        self.module, self.ip_bin = module, ip_bin
        self.follower = route_follow.Follower(
            programs.runner(module), networks, p["congestion_control"], p["table"], p["priority"], ip_bin
        )
        config = {"prefixes": [str(n) for n in networks], "congestion_control": p["congestion_control"],
                  "table": p["table"], "priority": p["priority"], "ip": ip_bin}  # fmt: skip
        self.files = [
            (p["config_path"], json.dumps(config, indent=2, sort_keys=True) + "\n"),
            (os.path.join(p["unit_dir"], route_follow.UNIT_NAME),
             follow_unit_text(p["python"], p["lib_dir"], p["config_path"])),
        ]  # fmt: skip
        self.old = [read_text(path) for path, _text in self.files]
        self.actions, self.unrouted = [], []

    def plan(self):
        try:
            self.actions, self.unrouted = self.follower.plan()
        except RuntimeError as exc:
            self.module.fail_json(msg="prefixes: cannot read the routes: %s" % exc)
        for prefix in self.unrouted:
            self.module.warn("prefixes: %s has no route in the main table: its connections keep the default" % prefix)

    def commands(self):
        return [" ".join([self.ip_bin] + argv) for argv in self.actions]

    def apply(self):
        if self.module.check_mode:
            return
        if self.actions:
            rollback.record_for(
                self.module,
                [{"kind": "route_table", "table": self.follower.table, "unit": route_follow.UNIT_NAME}],
            )
        changed_files = [(f, old) for f, old in zip(self.files, self.old) if old != f[1]]
        rollback.record_for(self.module, [{"kind": "file", "path": f[0], "content": old} for f, old in changed_files])
        for argv, command in zip(self.actions, self.commands()):
            rc, out, err = self.module.run_command([self.ip_bin] + argv, environ_update={"LC_ALL": "C"})
            if rc != 0:
                self.module.fail_json(msg="prefixes: %s failed: %s" % (command, (err or out).strip()))
        for (path, text), _old in changed_files:
            write_atomic(path, text)

    def result(self):
        changed_files = [path for (path, text), old in zip(self.files, self.old) if old != text]
        diff = [{"before": "", "after": "".join(c + "\n" for c in self.commands())}] if self.actions else []
        diff += [
            {"before_header": path, "after_header": path, "before": old or "", "after": text}
            for (path, text), old in zip(self.files, self.old)
            if old != text
        ]
        return dict(
            changed=bool(self.actions or changed_files),
            commands=self.commands(),
            unrouted=self.unrouted,
            table=self.follower.table,
            files=changed_files,
            unit={"path": self.files[1][0], "changed": self.files[1][0] in changed_files},
            diff=diff,
        )
