# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Routes: which devices carry a default route (/proc/net/route, /proc/net/ipv6_route, ``ip -j route``), a
route's congestion control, and the ``ip route`` arguments that re-create a route as ``ip -j route`` shows it (one
builder for route_congctl and rollback)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

# Route types that do not send traffic out of a device (rtnetlink(7) RTN_*).
_NOT_FORWARDING = ("unreachable", "blackhole", "prohibit", "throw")
RTF_UP, RTF_REJECT = 0x0001, 0x0200


def parse_proc_route(text):
    """Devices with an IPv4 default route in /proc/net/route (main table): destination and mask 00000000."""
    devs = set()
    for line in (text or "").splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[1] == "00000000" and f[7] == "00000000":
            try:
                flags = int(f[3], 16)
            except ValueError:
                continue
            if flags & RTF_UP and not flags & RTF_REJECT:
                devs.add(f[0])
    return devs


def parse_proc_ipv6_route(text):
    """Devices with an IPv6 default route (::/0) in /proc/net/ipv6_route (every table). Reject routes (the
    kernel's "unreachable ::/0 dev lo") do not count."""
    devs = set()
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) >= 10 and f[0] == "0" * 32 and f[1] == "00":
            try:
                flags = int(f[8], 16)
            except ValueError:
                continue
            if flags & RTF_UP and not flags & RTF_REJECT and f[9] != "lo":
                devs.add(f[9])
    return devs


def parse_ip_route_json(text):
    """Devices with a default route in ``ip -j route show table all`` output (policy-routing tables too)."""
    try:
        routes = json.loads(text or "[]")
    except ValueError:
        return set()
    devs = set()
    for route in routes if isinstance(routes, list) else []:
        if not isinstance(route, dict) or route.get("dst") not in ("default", "0.0.0.0/0", "::/0"):
            continue
        if route.get("type") in _NOT_FORWARDING:
            continue
        for hop in [route] + list(route.get("nexthops") or []):
            if isinstance(hop, dict) and hop.get("dev") and hop.get("dev") != "lo":
                devs.add(hop["dev"])
    return devs


def route_congctl_of(route):
    """The congestion control of a route from `ip -j route` (iproute2 prints it as congestion or congctl), or None."""
    for metric in route.get("metrics") or []:
        if isinstance(metric, dict):
            for key in ("congestion", "congctl"):
                if metric.get(key):
                    return str(metric[key]).split()[-1]  # "lock bbr" -> "bbr"
    return None


# Route metrics (ip-route(8) "OPTIONS") as `ip -j route` prints them (iproute2 ip/iproute.c print_rta_metrics), in
# its order, and how `ip route` takes each back. Counts are plain numbers; rtt, rttvar and rto_min are printed in
# JSON as whole milliseconds (rtt and rttvar already divided from the kernel's 1/8 and 1/4 ms units), and `ip route`
# reads a bare number as the kernel's raw units, so they go back with "ms" (ip-route(8): "rtt TIME").
# Congestion control is passed on its own (congctl). quickack and fastopen_no_cookie take no lock.
COUNT_METRICS = ("mtu", "window", "ssthresh", "cwnd", "advmss", "reordering", "hoplimit", "initcwnd", "initrwnd")
TIME_METRICS = ("rtt", "rttvar", "rto_min")
FLAG_METRICS = ("quickack", "fastopen_no_cookie")
ROUTE_METRICS = COUNT_METRICS + TIME_METRICS + FLAG_METRICS
# The kernel locks rto_min whenever it is set (iproute2 sets the lock bit for it; `rto_min lock` is refused).
_NO_LOCK = ("rto_min",) + FLAG_METRICS
# `ip route show` (text) prints "NAME lock VALUE" for a locked metric; JSON has no lock flag at all
# (print_rta_metrics prints "lock" only outside the JSON context). congctl is "congestion" in JSON.
_TEXT_METRIC = dict((name, name) for name in ROUTE_METRICS)
_TEXT_METRIC["congctl"] = "congestion"


def parse_metric_locks(text):
    """`ip route show` text -> one sorted list of locked metric names (JSON spelling) per route, in ip's order.
    A route is a line that does not start with white space (a multipath route's nexthops continue it)."""
    out = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        if line[:1].isspace():
            continue
        words = line.split()
        out.append(
            sorted(
                set(_TEXT_METRIC[w] for w, nxt in zip(words, words[1:] + [""]) if w in _TEXT_METRIC and nxt == "lock")
            )
        )
    return out


def _metric_value(name, value):
    if name in TIME_METRICS:
        return "%dms" % value
    return str(value)


def route_metrics_argv(route):
    """The ``ip route`` arguments for the metrics of a route as `ip -j route` shows it, with the lock flags
    show_exact(locks=True) added under "locks": ``mtu lock 1400 rtt 30ms features ecn``."""
    locks = set(route.get("locks") or [])
    argv = []
    for item in route.get("metrics") or []:
        if not isinstance(item, dict):
            continue
        for name in ROUTE_METRICS:
            value = item.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                lock = ["lock"] if name in locks and name not in _NO_LOCK else []
                argv += [name] + lock + [_metric_value(name, value)]
        if "ecn" in item:
            argv += ["features", "ecn"]
    return argv


def route_argv(verb, prefix, route, congestion_control=None, metrics=True):
    """`ip route VERB PREFIX ...` arguments for a route as `ip -j route` shows it: gateway, device, protocol, scope,
    metric, source and (with ``metrics``) its metrics with their lock flags, then ``congctl`` when given (locked
    when the route's was). One builder for route_congctl (replace, keeping the route's path) and rollback (replace
    as it was, or del what a run created)."""
    argv = ["route", verb, prefix]
    if route.get("gateway"):
        argv += ["via", route["gateway"]]
    if route.get("dev"):
        argv += ["dev", route["dev"]]
    if route.get("protocol"):
        argv += ["proto", str(route["protocol"])]
    if route.get("scope") and route["scope"] != "global":
        argv += ["scope", str(route["scope"])]
    if route.get("metric") is not None:
        argv += ["metric", str(route["metric"])]
    if route.get("prefsrc"):
        argv += ["src", route["prefsrc"]]
    if metrics:
        argv += route_metrics_argv(route)
    if congestion_control:
        lock = ["lock"] if metrics and "congestion" in (route.get("locks") or []) else []
        argv += ["congctl"] + lock + [congestion_control]
    return argv


def ip_family(prefix):
    """The ``ip`` family option for a prefix: -6 for an IPv6 network, -4 otherwise."""
    return "-6" if ":" in prefix else "-4"


def ip_json(run, argv, ip="ip"):
    """``ip -j ARGV`` run through ``run(argv) -> (rc, stdout, stderr)`` (programs.runner), parsed.

    Returns (routes, None), routes a list of route dicts (empty when there is none), or (None, why) when ip fails
    or prints something that is not a JSON list of routes. The one error shape of every ``ip -j route`` read.
    """
    argv = list(argv)
    rc, out, err = run([ip, "-j"] + argv)
    if rc != 0:
        return None, (err or out).strip() or "ip -j %s: exit status %s" % (" ".join(argv), rc)
    try:
        shown = json.loads(out or "[]")
    except ValueError as exc:
        return None, "unreadable output of ip -j %s: %s" % (" ".join(argv), exc)
    if not isinstance(shown, list) or not all(isinstance(route, dict) for route in shown):
        return None, "unreadable output of ip -j %s: not a list of routes" % " ".join(argv)
    return shown, None


def show_exact(run, prefix, ip="ip", locks=False):
    """The main table's own routes to ``prefix`` (``ip -j route show exact PREFIX``): (routes, None) or
    (None, why), as ip_json. An empty list: no route of its own (its connections follow a wider route).

    With ``locks``, each route also gets "locks": its locked metrics, read from the text ``ip route show exact``
    (JSON does not print them); when that cannot be read route by route, the routes come back without "locks"."""
    argv = [ip_family(prefix), "route", "show", "exact", prefix]
    shown, why = ip_json(run, argv, ip)
    if shown and locks:
        rc, out, _err = run([ip] + argv)
        per_route = parse_metric_locks(out) if rc == 0 else []
        if len(per_route) == len(shown):
            shown = [dict(route, locks=locked) for route, locked in zip(shown, per_route)]
    return shown, why


def read_route_get_congctl(run, prefixes):
    """{prefix: congestion control of the route the kernel really uses for it, or None}: ``ip -j route get`` of the
    prefix's first address, through every policy rule and table (scope follow's table of its own included).

    ``run(argv) -> (rc, stdout, stderr)``. A prefix the kernel has no route for, or whose lookup fails, maps to None.
    """
    out = {}
    for prefix in prefixes or []:
        address = prefix.split("/", 1)[0]
        got, _why = ip_json(run, [ip_family(prefix), "route", "get", address])
        out[prefix] = route_congctl_of(got[0]) if got else None
    return out


def read_route_congctl(run, prefixes):
    """{prefix: congestion control of the main table's own route to it, or None} (show_exact).

    ``run(argv) -> (rc, stdout, stderr)``. A prefix without a route of its own, or whose route cannot be read, maps
    to None (its connections follow a wider route, which has no per-route congestion control for it).
    """
    out = {}
    for prefix in prefixes or []:
        shown, _why = show_exact(run, prefix)
        out[prefix] = route_congctl_of(shown[0]) if shown else None
    return out
