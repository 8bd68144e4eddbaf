# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Congestion control to the long-haul peers that follows the routing table (network.congestion_control_scope:
follow).

The peers' prefixes get a policy rule (``ip rule add to PREFIX lookup TABLE pref PRIORITY``, just before the main
table's rule) into a table of gpufleet's own. That table holds, for each prefix, a copy of the main table's route
the kernel would use for it (the longest covering route, ECMP nexthops and nexthop objects included, and any more
specific route inside the prefix) with ``congctl`` added. Nothing in the main table is touched: the copies are
re-derived from it whenever it changes (``watch``: ``ip monitor route rule``, and every few minutes), so a new
gateway, a failover or an ECMP change reaches the peers' connections at once; ``clear`` (the unit's ExecStopPost and
rollback) removes the rules and empties the table, and the peers' traffic goes back to the main table.

This file is also the program the role installs on the host (beside routes.py, no Ansible needed there):

    python3 route_follow.py sync|watch|clear|show CONFIG.json

CONFIG: {"prefixes": [CIDR, ...], "congestion_control": "bbr", "table": 7250, "priority": 32765}.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import select
import signal
import subprocess  # nosec B404  # ip only, argv lists, no shell (the program on the host)
import sys
import time

try:
    from ansible_collections.gpufleet.tuning.plugins.module_utils import routes
except ImportError:  # installed on the host beside routes.py, without the collection
    import routes  # type: ignore[no-redef]

UNIT_NAME = "gpufleet-route-follow.service"
TABLE = 7250  # gpufleet's own routing table (ip-route(8) TABLE_ID); any id the host does not use
PRIORITY = 32765  # the rule's priority: after the owner's policy rules, just before `lookup main` (32766)
PROTO = "250"  # the protocol of gpufleet's rules and routes (unassigned in /etc/iproute2/rt_protos)
SOURCE_TABLE = "main"
RESYNC_SECONDS = 300  # a sync even without a route event (e.g. events lost while the monitor restarted)
_NOT_FORWARDING = ("unreachable", "blackhole", "prohibit", "throw", "local", "broadcast", "anycast", "multicast")
_HOP_FLAGS = ("onlink",)


def family(prefix):
    return routes.ip_family(prefix)


def dst_len(dst, fam):
    """The prefix length of an ``ip -j route`` dst: "default" -> 0, an address alone -> 32 or 128."""
    if dst == "default":
        return 0
    if "/" in dst:
        return int(dst.split("/", 1)[1])
    return 128 if fam == "-6" else 32


def norm_dst(dst, fam):
    if dst == "default":
        return "::/0" if fam == "-6" else "0.0.0.0/0"
    return dst if "/" in dst else "%s/%d" % (dst, dst_len(dst, fam))


def _forwarding(route):
    return route.get("type", "unicast") not in _NOT_FORWARDING and (route.get("dev") != "lo" or route.get("nexthops"))


def _via(hop):
    via = hop.get("via")
    if isinstance(via, dict) and via.get("host"):  # an IPv6 route via an IPv4 gateway: "via inet 192.0.2.1"
        return ["via", str(via.get("family") or "inet"), via["host"]]
    return ["via", hop["gateway"]] if hop.get("gateway") else []


def _hop_argv(hop):
    argv = _via(hop)
    if hop.get("dev"):
        argv += ["dev", hop["dev"]]
    argv += [f for f in (hop.get("flags") or []) if f in _HOP_FLAGS]
    return argv


def mirror_argv(dst, route, table, congestion_control):
    """``ip route replace DST table TABLE ...`` copying a route's path (gateway(s), device, nexthop object, scope,
    source, metrics) with ``congctl`` added; no protocol or metric of the copied route (a table of our own holds
    one route per destination)."""
    argv = ["route", "replace", dst, "table", str(table), "proto", PROTO]
    if route.get("scope") and route["scope"] != "global":
        argv += ["scope", str(route["scope"])]
    if route.get("prefsrc"):
        argv += ["src", route["prefsrc"]]
    argv += routes.route_metrics_argv(dict(route, locks=[])) + ["congctl", congestion_control]
    if route.get("nhid") is not None:
        return argv + ["nhid", str(route["nhid"])]
    if route.get("nexthops"):  # ip takes the nexthops last
        for hop in route["nexthops"]:
            argv += ["nexthop"] + _hop_argv(hop) + (["weight", str(hop["weight"])] if hop.get("weight") else [])
        return argv
    return argv + _hop_argv(route)


def underlying(prefix, matching, inside):
    """{destination: route} the kernel's main-table lookup uses for ``prefix``: the longest forwarding route
    covering it (``ip route show match PREFIX``; lowest metric first), placed at the prefix itself, and the more
    specific forwarding routes inside it (``ip route show root PREFIX``) at their own destinations. Empty when the
    main table has no route for it."""
    fam = family(prefix)
    plen = dst_len(prefix, fam)

    def best(candidates):
        ordered = sorted(candidates, key=lambda r: (-dst_len(r.get("dst", ""), fam), r.get("metric") or 0))
        return ordered[0] if ordered else None

    out = {}
    cover = best([r for r in matching if _forwarding(r) and dst_len(r.get("dst", ""), fam) <= plen])
    if cover is not None:
        out[prefix] = cover
    specific = {}
    for r in inside:
        if _forwarding(r) and dst_len(r.get("dst", ""), fam) > plen:
            specific.setdefault(norm_dst(r["dst"], fam), []).append(r)
    for dst, candidates in specific.items():
        out[dst] = best(candidates)
    return out


class Follower:
    """Reads the main table and gpufleet's table and rules through ``run(argv) -> (rc, out, err)`` (argv without
    the ``ip`` binary) and says what brings gpufleet's table in line: plan() -> [argv, ...]."""

    def __init__(self, run, prefixes, congestion_control, table=TABLE, priority=PRIORITY, ip="ip"):
        self.run, self.ip = run, ip
        self.prefixes = [str(p) for p in prefixes]
        self.cc, self.table, self.priority = congestion_control, int(table), int(priority)

    def _json(self, argv):
        shown, why = routes.ip_json(self.run, argv, self.ip)
        if shown is None:
            raise RuntimeError(why)
        return shown

    def families(self):
        return sorted(set(family(p) for p in self.prefixes) | {"-4"})

    def desired(self):
        """({destination: mirror argv}, {prefix: None}), the routes (with their family) and rules wanted now."""
        wanted, unrouted = {}, []
        for prefix in self.prefixes:
            fam = family(prefix)
            matching = self._json([fam, "route", "show", "table", SOURCE_TABLE, "match", prefix])
            inside = self._json([fam, "route", "show", "table", SOURCE_TABLE, "root", prefix])
            found = underlying(prefix, matching, inside)
            if not found:
                unrouted.append(prefix)
            for dst, route in found.items():
                wanted[(fam, dst)] = mirror_argv(dst, route, self.table, self.cc)
        return wanted, unrouted

    def current(self):
        """({(family, destination): argv as mirror_argv would write it}, [(family, prefix, rule priority)])."""
        have, rules = {}, []
        for fam in ("-4", "-6"):
            if fam == "-6" and not os.path.exists("/proc/net/if_inet6") and "-6" not in self.families():
                continue  # IPv6 disabled: nothing of ours can be there
            # `show table all`, filtered: `show table ID` fails while the kernel has no such table yet.
            for route in self._json([fam, "route", "show", "table", "all"]):
                if str(route.get("table")) != str(self.table):
                    continue
                cc = routes.route_congctl_of(route) or ""
                have[(fam, norm_dst(route.get("dst", ""), fam))] = mirror_argv(
                    norm_dst(route.get("dst", ""), fam), route, self.table, cc
                )
            for rule in self._json([fam, "rule", "show"]):
                if str(rule.get("table")) == str(self.table):
                    dst = rule.get("dst", "all")
                    if dst != "all" and rule.get("dstlen") is not None:
                        dst = "%s/%s" % (dst, rule["dstlen"])
                    rules.append((fam, dst, rule.get("priority")))
        return have, rules

    def plan(self):
        """(actions, unrouted): the ``ip`` argvs (without the binary) that bring the rules and the table in line,
        rules first (a rule to an empty table falls through to main), stale routes deleted last."""
        wanted, unrouted = self.desired()
        have, rules = self.current()
        actions = []
        for prefix in self.prefixes:
            fam = family(prefix)
            if (fam, prefix, self.priority) not in rules:
                actions.append([fam, "rule", "add", "to", prefix, "lookup", str(self.table),
                                "pref", str(self.priority), "proto", PROTO])  # fmt: skip
        for fam, dst, prio in rules:
            if dst not in self.prefixes or prio != self.priority:
                actions.append(_rule_del(fam, dst, prio, self.table))
        for key in sorted(wanted):
            if have.get(key) != wanted[key]:
                actions.append([key[0]] + wanted[key])
        for fam, dst in sorted(have):
            if (fam, dst) not in wanted:
                actions.append([fam, "route", "del", dst, "table", str(self.table)])
        return actions, unrouted

    def clear_plan(self):
        """The ``ip`` argvs that remove every rule into the table and every route in it."""
        have, rules = self.current()
        actions = [_rule_del(fam, dst, prio, self.table) for fam, dst, prio in rules]
        return actions + [[fam, "route", "del", dst, "table", str(self.table)] for fam, dst in sorted(have)]

    def routes_now(self):
        """[{destination, family, route argv}] of the table as it is."""
        have, _rules = self.current()
        return [{"family": fam, "dst": dst, "route": " ".join(argv[2:])} for (fam, dst), argv in sorted(have.items())]


def _rule_del(fam, dst, prio, table):
    argv = [fam, "rule", "del"]
    if dst != "all":
        argv += ["to", dst]
    if prio is not None:
        argv += ["pref", str(prio)]
    return argv + ["lookup", str(table)]


# The program on the host ------------------------------------------------------------------------------------------


def _runner(argv):
    proc = subprocess.Popen(  # nosec B603  # argv list: ip and its arguments from the config
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, LC_ALL="C")
    )
    out, err = proc.communicate()
    return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _apply(actions, ip, log):
    failed = 0
    for argv in actions:
        rc, out, err = _runner([ip] + argv)
        why = "" if rc == 0 else ": " + err.strip()
        log("%s: %s%s" % ("ok" if rc == 0 else "FAILED", " ".join(["ip"] + argv), why))
        failed += rc != 0
    return failed


def load_config(path):
    with open(path) as f:
        cfg = json.load(f)
    return Follower(
        _runner,
        cfg["prefixes"],
        cfg["congestion_control"],
        cfg.get("table", TABLE),
        cfg.get("priority", PRIORITY),
        cfg.get("ip", "ip"),
    )


def sync_once(follower, log, said=None):
    """Apply the plan; the number of ip commands that failed. ``said``: prefixes already reported unrouted."""
    actions, unrouted = follower.plan()
    for prefix in unrouted:
        if said is None or prefix not in said:
            log("no route to %s in the main table: its connections use the host default" % prefix)
    if said is not None:
        said.clear()
        said.update(unrouted)
    return _apply(actions, follower.ip, log)


def watch(follower, log, resync=RESYNC_SECONDS):
    """Sync, then again after every burst of route or rule events (and every ``resync`` seconds); returns when
    ``ip monitor`` ends (systemd restarts the unit)."""
    argv = [follower.ip, "monitor", "route", "rule"]
    monitor = subprocess.Popen(argv, stdout=subprocess.PIPE)  # nosec B603  # argv list: ip monitor, no shell
    fd = monitor.stdout.fileno()
    said = set()
    try:
        while True:
            try:
                sync_once(follower, log, said)
            except RuntimeError as exc:  # a read failed: try again at the next event
                log("cannot read the routes: %s" % exc)
            ready = select.select([fd], [], [], resync)[0]
            if ready and not os.read(fd, 65536):
                return 1
            deadline = time.time() + 0.2  # one sync for a burst (a failover changes several routes)
            while select.select([fd], [], [], max(0.0, deadline - time.time()))[0]:
                if not os.read(fd, 65536):
                    return 1
    finally:
        monitor.terminate()
        monitor.wait()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("sync", "watch", "clear", "show"):
        sys.stderr.write("usage: route_follow.py sync|watch|clear|show CONFIG.json\n")
        return 2

    def log(msg):
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    follower = load_config(argv[1])
    if argv[0] == "watch":
        signal.signal(signal.SIGTERM, _stop)
        return watch(follower, log)
    if argv[0] == "show":
        sys.stdout.write(json.dumps(follower.routes_now(), indent=2) + "\n")
        return 0
    if argv[0] == "sync":
        return 1 if sync_once(follower, log) else 0
    return 1 if _apply(follower.clear_plan(), follower.ip, log) else 0


def _stop(_signum, _frame):
    raise SystemExit(0)  # stops `ip monitor` too (the finally in watch)


if __name__ == "__main__":
    raise SystemExit(main())
