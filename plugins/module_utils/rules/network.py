# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the network area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch

from ansible_collections.gpufleet.tuning.plugins.module_utils import links
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    RoleVar,
    host_fact,
    long_haul_links,
    network_fact,
    physical_up_nics,
    result,
    rtt_links,
    skip,
    version_tuple,
)


# --- MTU -------------------------------------------------------------------------------------------

# RFC 8200 section 5: every link that carries IPv6 must have an MTU of at least 1280; Linux removes the IPv6
# addresses of an interface whose MTU drops below it (net/ipv6/addrconf.c, NETDEV_CHANGEMTU). No cloud network
# or overlay runs below it (GCP's VPC minimum is 1300), so below 1280 is a mistake even where nothing is declared.
IPV6_MIN_MTU = 1280


def declared_mtu(net_pol, name):
    """(MTU, key) that ``network.mtu`` declares for the NIC ``name``: the exact name wins, else the longest
    matching glob (fnmatch; equal lengths: the first in sorted order). (None, None) when no key matches;
    (None, key) when the matching key is null (a host or group layer removing a broader declaration)."""
    table = net_pol.get("mtu") or {}
    if name in table:
        return table[name], name
    matching = sorted((k for k in table if k != name and fnmatch.fnmatchcase(name, k)), key=lambda k: (-len(k), k))
    if not matching:
        return None, None
    return table[matching[0]], matching[0]


def mtu_expectation(net_pol, name):
    """What NET-MTU-001 wants of the NIC ``name`` - the same answer for the audit and for network_tuning:

    - ``{"kind": "exact", "value": N, "source": "network.mtu.<key>"}``: the network's MTU is declared; the NIC
      must have exactly it (vendors: match the network's MTU - a smaller one wastes per-packet overhead, a larger
      one sends frames the network drops);
    - ``{"kind": "min", ...}``: ``network.min_mtu`` (a jumbo-frame fabric declared for the group or host), a floor;
    - ``{"kind": "floor", "value": 1280, ...}``: nothing declared; only below the IPv6 minimum is wrong, so a
      cloud's own MTU (GCP 1460, overlays 1450, AWS 9001) passes.
    """
    value, key = declared_mtu(net_pol, name)
    if value is not None:
        return {"kind": "exact", "value": int(value), "source": "network.mtu.%s" % key}
    if net_pol.get("min_mtu") is not None:
        return {"kind": "min", "value": int(net_pol["min_mtu"]), "source": "network.min_mtu"}
    return {"kind": "floor", "value": IPV6_MIN_MTU, "source": "IPv6 minimum MTU (RFC 8200), nothing declared"}


def _mtu_text(exp):
    return ("== %d" if exp["kind"] == "exact" else ">= %d") % exp["value"] + " (%s)" % exp["source"]


def check_mtu(facts, pol):
    nics = physical_up_nics(facts, pol)
    if nics is None:
        return skip("NIC facts not gathered")
    if not nics:
        return skip("no physical NIC is up")
    observed, expected, items, why = {}, {}, [], []
    for n in nics:
        mtu = n.get("mtu")
        observed[n["name"]] = mtu
        if mtu is None:
            continue
        exp = mtu_expectation(pol["network"], n["name"])
        expected[n["name"]] = _mtu_text(exp)
        if exp["kind"] == "exact" and mtu != exp["value"]:
            what = "above" if mtu > exp["value"] else "below"
            why.append("%s %d is %s the network's %d (%s)" % (n["name"], mtu, what, exp["value"], exp["source"]))
        elif exp["kind"] != "exact" and mtu < exp["value"]:
            if exp["kind"] == "min":
                why.append("%s %d is below the fabric's %d (%s)" % (n["name"], mtu, exp["value"], exp["source"]))
            else:
                why.append(
                    "%s %d is below the IPv6 minimum 1280: the kernel drops its IPv6 addresses; declare "
                    "the network's MTU in network.mtu if this is intended" % (n["name"], mtu)
                )
        else:
            continue
        items.append(
            {"nic": n["name"], "mtu": mtu, "expected": exp["value"], "kind": exp["kind"], "source": exp["source"]}
        )
    if not expected:
        return skip("no NIC reports its MTU")
    if items:
        return result("fail", observed, expected, "; ".join(why), items=items)
    declared = sorted(k for k, v in expected.items() if "network.mtu." in v or "network.min_mtu" in v)
    if declared:
        return result("pass", observed, expected, "MTU as declared on %s" % ", ".join(declared))
    return result("pass", observed, expected, "no MTU declared (network.mtu); none below the IPv6 minimum 1280")


# --- rings --------------------------------------------------------------------------------------------


def ring_drops(nic):
    """Evidence of receive-ring overflow on one NIC, from its two ``ethtool -S`` readings (nic_info ``drops``):

    ``{"status": "fail"|"warn"|"pass", "growing": {counter: delta}, "total": {counter: total},
    "allowance": {counter: delta}, "other": {counter: delta}, "interval_s": s}``, or None when the NIC has no
    ring-overflow counter (virtio_net, gve, veth, ...) or was not sampled.
    fail: a ring counter grew between the readings (drops now); warn: only a count since the driver loaded.
    The same function decides which NICs network_tuning may resize (NET-RING-001)."""
    drops = nic.get("drops")
    if not drops or not drops.get("ring"):
        return None
    ring = drops["ring"]
    growing = dict((c, v["delta"]) for c, v in ring.items() if (v.get("delta") or 0) > 0)
    total = dict((c, v["total"]) for c, v in ring.items() if (v.get("total") or 0) > 0)
    status = "fail" if growing else ("warn" if total else "pass")
    return {
        "status": status,
        "growing": growing,
        "total": total,
        "allowance": dict(
            (c, v["delta"]) for c, v in (drops.get("allowance") or {}).items() if (v.get("delta") or 0) > 0
        ),
        "other": dict((c, v["delta"]) for c, v in (drops.get("other") or {}).items() if (v.get("delta") or 0) > 0),
        "interval_s": drops.get("interval_s"),
    }


def _ring_size(nic):
    rings = nic.get("rings") or {}
    if rings.get("rx") is None:
        return ""
    size = "rx ring %s of %s" % (rings["rx"], rings.get("rx_max"))
    if rings.get("rx_max") is not None and rings["rx"] >= rings["rx_max"]:
        size += ", already the maximum: the CPU does not drain it fast enough (IRQ affinity, channels, coalescing)"
    return size


def check_rings(facts, pol):
    nics = physical_up_nics(facts, pol)
    if nics is None:
        return skip("NIC facts not gathered")
    observed, failing, warning, shaped, other = {}, [], [], [], []
    for n in nics:
        ev = ring_drops(n)
        if ev is None:
            continue
        observed[n["name"]] = {
            "driver": n.get("driver"),
            "rings": n.get("rings"),
            "ring_drops": ev["total"],
            "growing": ev["growing"],
            "interval_s": ev["interval_s"],
        }
        if ev["allowance"]:
            observed[n["name"]]["allowance_exceeded"] = ev["allowance"]
            shaped.append((n["name"], ", ".join("%s +%d" % kv for kv in sorted(ev["allowance"].items()))))
        if ev["other"]:
            observed[n["name"]]["other_drops"] = ev["other"]
            other.append("%s %s" % (n["name"], ", ".join("%s +%d" % kv for kv in sorted(ev["other"].items()))))
        rings = n.get("rings") or {}
        item = {"nic": n["name"], "rx": rings.get("rx"), "rx_max": rings.get("rx_max")}
        if ev["status"] == "fail":
            failing.append(dict(item, counters=ev["growing"], interval_s=ev["interval_s"]))
        elif ev["status"] == "warn":
            warning.append(dict(item, counters=ev["total"]))
    if not observed:
        return skip("no NIC reports a ring-overflow counter (ethtool -S; virtio_net, gve and veth have none)")
    expected = "no receive-ring drop counter growing between two ethtool -S readings"
    extra = ""
    if other:
        extra += "; other NIC drops (port buffer or PCIe, not the ring): %s" % "; ".join(other)
    if shaped:
        extra += "; the cloud shaped traffic over the instance's allowance (its limits, not rings): %s" % "; ".join(
            "%s %s" % pair for pair in shaped
        )
    if failing:
        detail = "; ".join(
            "%s %s in %s s (%s)"
            % (
                i["nic"],
                ", ".join("%s +%d" % kv for kv in sorted(i["counters"].items())),
                i["interval_s"],
                _ring_size(next(n for n in nics if n["name"] == i["nic"])),
            )
            for i in failing
        )
        return result("fail", observed, expected, "receive ring overflowing now: %s%s" % (detail, extra), items=failing)
    if warning:
        detail = "; ".join(
            "%s %s" % (i["nic"], ", ".join("%s %d" % kv for kv in sorted(i["counters"].items()))) for i in warning
        )
        return result(
            "warn",
            observed,
            expected,
            "ring drops since the driver loaded, none during the sample: %s%s" % (detail, extra),
            items=warning,
            severity="low",
        )
    if shaped:
        return result(
            "warn",
            observed,
            expected,
            "no ring drops%s" % extra,
            items=[{"nic": name, "allowance_exceeded": counters} for name, counters in shaped],
            severity="info",
        )
    return result("pass", observed, expected, "no receive-ring drops%s" % extra)


def check_offloads(facts, pol):
    nics = physical_up_nics(facts, pol)
    if nics is None:
        return skip("NIC facts not gathered")
    wanted = pol["network"]["offloads"]
    items, observed = [], {}
    for n in nics:
        offloads = n.get("offloads")
        if not offloads:
            continue
        fixed = set(n.get("offloads_fixed") or [])
        off = [f for f in wanted if offloads.get(f) is False and f not in fixed]
        observed[n["name"]] = {f: offloads.get(f) for f in wanted if f in offloads}
        if off:
            items.append({"nic": n["name"], "off": off})
    if not observed:
        return skip("no NIC reports offloads")
    if items:
        return result(
            "fail",
            observed,
            {f: True for f in wanted},
            "offloads off: %s" % "; ".join("%s: %s" % (i["nic"], ",".join(i["off"])) for i in items),
            items=items,
        )
    return result("pass", observed, {f: True for f in wanted}, "offloads are on")


# --- what network_tuning sets on the NICs the policy names (NET-MTU-001, NET-OFFL-001, NET-RING-001) ----------------

# NET-RING-001's fix: each ring at the maximum the driver reports (ethtool -G rx max tx max), unless
# network_tuning_rings says otherwise.
RING_TARGET = {"rx": "max", "tx": "max"}
RING_SIDES = ("rx", "tx")


def named_nics(facts, pol, given):
    """(named, present, absent): the NICs network_tuning may change - only those ``network.interfaces`` (or
    ``network_tuning_interfaces``, given as ``interfaces``) names; none when none is named - the NIC facts of the
    named ones this host has, and the names it lacks."""
    named = list(given.get("interfaces", pol["network"]["interfaces"]) or [])
    by_name = dict((n.get("name"), n) for n in network_fact(facts, "nics") or [])
    present = [by_name[name] for name in named if (by_name.get(name) or {}).get("present")]
    absent = [name for name in named if not (by_name.get(name) or {}).get("present")]
    return named, present, absent


def _nic_keys(facts, pol, given):
    named, present, absent = named_nics(facts, pol, given)
    return present, {"interfaces": named, "nics": [{"name": n["name"]} for n in present], "nics_absent": absent}


def mtu_target(nic, net_pol, explicit=None):
    """The MTU network_tuning sets on ``nic``: ``explicit`` (network_tuning_mtu) as given; else what NET-MTU-001
    judges (``mtu_expectation``): the network's declared MTU exactly (raised or lowered), or the fabric's
    ``network.min_mtu`` when the NIC is at or below it (never lowered); None - not ours to choose (nothing declared:
    the audit flags only an MTU below 1280, and only the operator knows the network's MTU)."""
    if explicit is not None:
        return int(explicit)
    exp = mtu_expectation(net_pol, nic["name"])
    if exp["kind"] == "exact":
        return exp["value"]
    current = nic.get("mtu")
    if exp["kind"] == "min" and (current is None or int(current) <= exp["value"]):
        return exp["value"]
    return None


def target_mtu(facts, pol, given):
    """NET-MTU-001's fix, per named NIC present: ``mtu`` {nic: MTU or None} and ``mtu_at_target`` {nic: MTU where the
    NIC already has it, else None} (a run whose tags leave the MTU out still passes it where it is at its target, so
    nic_settings' persistence file keeps it). Also ``interfaces`` (the named NICs), ``nics`` ([{name}] of those
    present) and ``nics_absent``."""
    present, out = _nic_keys(facts, pol, given)
    out["mtu"], out["mtu_at_target"] = {}, {}
    for nic in present:
        target = mtu_target(nic, pol["network"], given.get("mtu"))
        out["mtu"][nic["name"]] = target
        out["mtu_at_target"][nic["name"]] = target if target is not None and nic.get("mtu") == target else None
    return out


def offload_targets(nic, wanted, known_only=True):
    """{feature: on?} network_tuning sets on ``nic``: ``wanted``, less (``known_only``: the policy's list) the
    features the NIC lacks or its driver fixes - exactly what NET-OFFL-001 judges (``check_offloads``)."""
    current = nic.get("offloads") or {}
    fixed = set(nic.get("offloads_fixed") or [])
    out = {}
    for feature, value in (wanted or {}).items():
        if known_only and (feature not in current or feature in fixed):
            continue
        out[str(feature)] = bool(value)
    return out


def target_offloads(facts, pol, given):
    """NET-OFFL-001's fix, per named NIC present: ``offloads`` {nic: {feature: on?}} - the policy's
    ``network.offloads`` turned on where the NIC has them and can change them, or ``network_tuning_offloads`` (given
    as ``offloads``) as given - and ``offloads_at_target`` {nic: the part the NIC already has}."""
    present, out = _nic_keys(facts, pol, given)
    explicit = given.get("offloads")
    wanted = dict(explicit) if explicit is not None else dict((f, True) for f in pol["network"]["offloads"])
    out["offloads"], out["offloads_at_target"] = {}, {}
    for nic in present:
        target = offload_targets(nic, wanted, known_only=explicit is None)
        current = nic.get("offloads") or {}
        out["offloads"][nic["name"]] = target
        out["offloads_at_target"][nic["name"]] = dict((k, v) for k, v in target.items() if current.get(k) == v)
    return out


def ring_targets(wanted):
    """``wanted`` (network_tuning_rings; None - ``RING_TARGET``) checked: {side: "max" or a size}."""
    out = {}
    for side, value in (RING_TARGET if wanted is None else wanted).items():
        if side not in RING_SIDES:
            raise ValueError("network_tuning_rings.%s: unknown side (allowed: %s)" % (side, ", ".join(RING_SIDES)))
        out[side] = value
    return out


def target_rings(facts, pol, given):
    """NET-RING-001's fix, per named NIC present: ``rings`` {nic: {side: "max" or a size}}, ``rings_at_target``
    {nic: the sides already at their target} and ``ring_drops`` {nic: NET-RING-001 flags it} - receive-ring drop
    counters growing between the two readings, or counted since the driver loaded (``ring_drops``). The role resizes
    only a flagged NIC unless network_tuning_rings_only_with_drops is false."""
    present, out = _nic_keys(facts, pol, given)
    wanted = ring_targets(given.get("rings"))
    out["rings"], out["rings_at_target"], out["ring_drops"] = {}, {}, {}
    for nic in present:
        current = nic.get("rings") or {}
        kept = {}
        for side, value in wanted.items():
            want = current.get(side + "_max") if value == "max" else value
            if want is not None and current.get(side) is not None and int(current[side]) == int(want):
                kept[side] = value
        evidence = ring_drops(nic)
        out["rings"][nic["name"]] = dict(wanted)
        out["rings_at_target"][nic["name"]] = kept
        out["ring_drops"][nic["name"]] = evidence is not None and evidence["status"] != "pass"
    return out


# --- TCP buffers (NET-TCP-001) --------------------------------------------------------------------------------------

# The kernel's own default maximum of tcp_rmem (Documentation/networking/ip-sysctl.rst, tcp_rmem max: "Default: between
# 131072 and 6MB, depending on RAM size"; 6 MiB on any host with the memory of a GPU server).
KERNEL_TCP_RMEM_MAX = 6 * 1024 * 1024


def sized_links(facts):
    """The links NET-TCP-001 sizes buffers from: every link with an RTT and a bandwidth, long or not."""
    return [p for p in rtt_links(facts) if p.get("bandwidth_gbps")]


def _bdp_bytes(link, factor):
    return int(factor * link["rtt_ms"] / 1000.0 * link["bandwidth_gbps"] * 1e9 / 8)


def buffer_need(links_, factor, cap):
    """(bytes, link): ``factor`` x the largest bandwidth-delay product of ``links_``, at most ``cap``, and that link;
    (0, None) without a link. What NET-TCP-001 expects of tcp_rmem and tcp_wmem's maxima."""
    if not links_:
        return 0, None
    biggest = max(links_, key=lambda p: _bdp_bytes(p, factor))
    return min(_bdp_bytes(biggest, factor), cap), biggest


def _given_number(given, key, kind, default):
    """``given[key]`` (network_tuning_<key>) as ``kind``, else ``default``; ValueError naming the variable."""
    if key not in given:
        return default
    try:
        value = kind(given[key])
    except (TypeError, ValueError):
        value = None
    if value is None or value < 0:
        raise ValueError("network_tuning_%s: expected a number of 0 or more, got %r" % (key, given[key]))
    return value


def target_tcp_buffers(facts, pol, given):
    """NET-TCP-001's fix: ``buffer_bytes``, the maximum network_tuning writes into tcp_rmem, tcp_wmem, rmem_max and
    wmem_max (0: no link with a bandwidth, nothing to size), and ``sized``, the links it is sized from.

    The size is ``buffer_need`` - the audit's own expectation, with network_tuning_buffer_factor and _buffer_cap in
    the policy's place when set - raised to the kernel's default tcp_rmem maximum (``KERNEL_TCP_RMEM_MAX``, 6 MiB)
    when smaller: the role writes the whole triple, so sizing a short or slow link by its BDP alone would lower the
    ceiling every connection autotunes to below what the kernel gives by default (including connections to peers the
    policy does not declare). The floor is the fix's, not the audit's: NET-TCP-001 asks for the BDP (a stock
    tcp_wmem maximum of 4 MiB covering the BDP passes), and the floor never asks for less, so the fixed host passes.
    network_tuning_buffer_bytes (given as ``buffer_bytes``) is set as given, even without links."""
    links_ = sized_links(facts)
    if "buffer_bytes" in given:
        return {"buffer_bytes": _given_number(given, "buffer_bytes", int, None), "sized": links_}
    factor = _given_number(given, "buffer_factor", float, pol["network"]["buffer_factor"])
    cap = _given_number(given, "buffer_cap", int, pol["network"]["max_buffer_bytes"])
    need = buffer_need(links_, factor, cap)[0]
    return {"buffer_bytes": max(need, KERNEL_TCP_RMEM_MAX) if need else 0, "sized": links_}


def check_tcp_buffers(facts, pol):
    tcp = network_fact(facts, "tcp")
    links_ = sized_links(facts)
    if not links_:
        return skip("no long-haul links declared or measured for this host's site")
    if tcp is None or tcp.get("rmem") is None or tcp.get("wmem") is None:
        return skip("tcp_rmem/tcp_wmem not readable")
    needed, biggest = buffer_need(links_, pol["network"]["buffer_factor"], pol["network"]["max_buffer_bytes"])
    observed = {
        "tcp_rmem_max": tcp["rmem"][2],
        "tcp_wmem_max": tcp["wmem"][2],
        "link": {"site": biggest.get("site"), "rtt_ms": biggest["rtt_ms"], "bandwidth_gbps": biggest["bandwidth_gbps"]},
    }
    expected = {"tcp_rmem_max": ">= %d" % needed, "tcp_wmem_max": ">= %d" % needed}
    low = [k for k in ("tcp_rmem_max", "tcp_wmem_max") if observed[k] < needed]
    if low:
        return result(
            "fail",
            observed,
            expected,
            "%s below %s x bandwidth-delay product (%d bytes) of the %s ms link to %s"
            % (", ".join(low), pol["network"]["buffer_factor"], needed, biggest["rtt_ms"], biggest.get("site")),
        )
    return result("pass", observed, expected, "TCP buffers cover the bandwidth-delay product")


# --- congestion control, MTU probing, slow start after idle (NET-TCP-002..004: long links only) -------------------

# Before 4.13 BBR needs the fq qdisc for pacing; since 4.13 TCP paces by itself (kernel commit 218af599fa63 "tcp:
# internal implementation for pacing").
BBR_INTERNAL_PACING = (4, 13)
MTU_PROBING = 1  # NET-TCP-003: tcp_mtu_probing at least 1 (probe after an ICMP black hole is detected)
SLOW_START_AFTER_IDLE = 0  # NET-TCP-004: tcp_slow_start_after_idle off


def target_congestion_control(facts, pol, given):
    """NET-TCP-002's fix. ``long``: the long links (rtt_ms >= network.long_link_rtt_ms, each with its prefixes); the
    role changes congestion control, MTU probing and slow start only when there is one. ``congestion_control`` and
    ``congestion_control_scope`` (network_tuning_* in the policy's place when set); ``route_prefixes``: the long
    links' prefixes (scope routes); ``congestion_control_available``: the kernel offers it now
    (tcp_available_congestion_control); ``default_qdisc``: ``fq`` where BBR needs it for pacing (long links, a kernel
    before 4.13), else '' (net.core.default_qdisc is the owner's)."""
    long_links, _sized, prefixes = links.classify(pol, facts.get("links"))
    wanted = given.get("congestion_control", pol["network"]["congestion_control"])
    available = network_fact(facts, "tcp", "available_congestion_control") or []
    release = host_fact(facts, "kernel", "release")
    old_kernel = bool(release) and version_tuple(release)[:2] < BBR_INTERNAL_PACING
    return {
        "long": long_links,
        "route_prefixes": prefixes,
        "congestion_control": wanted,
        "congestion_control_scope": given.get("congestion_control_scope", pol["network"]["congestion_control_scope"]),
        "congestion_control_available": wanted in available,
        "default_qdisc": "fq" if long_links and wanted == "bbr" and old_kernel else "",
    }


def check_congestion_control(facts, pol):
    fix = target_congestion_control(facts, pol, {})
    long_links = fix["long"]
    if not long_links:
        return skip("no long links (>= %s ms)" % pol["network"]["long_link_rtt_ms"])
    tcp = network_fact(facts, "tcp")
    if tcp is None or tcp.get("congestion_control") is None:
        return skip("tcp_congestion_control not readable")
    wanted = pol["network"]["congestion_control"]
    current = tcp["congestion_control"]
    available = tcp.get("available_congestion_control") or []
    observed = {
        "congestion_control": current,
        "available": available,
        "longest_rtt_ms": max(p["rtt_ms"] for p in long_links),
    }
    scope = pol["network"].get("congestion_control_scope")
    if scope in ("routes", "follow"):
        return _check_route_congctl(facts, fix["route_prefixes"], observed, wanted, scope)
    if current == wanted:
        return result("pass", observed, wanted, "%s is in use" % wanted)
    if wanted in available:
        return result(
            "fail",
            observed,
            wanted,
            "%s on %s ms links: loss-based control collapses under loss; %s is available"
            % (current, observed["longest_rtt_ms"], wanted),
        )
    return result(
        "warn",
        observed,
        wanted,
        "%s on long links and the kernel does not offer %s (load tcp_%s)" % (current, wanted, wanted),
    )


def _check_route_congctl(facts, prefixes, observed, wanted, scope="routes"):
    """Scope routes: the routes to the long-haul peers' ``prefixes`` carry the congestion control (ip-route(8)
    congctl); scope follow: the route the kernel really uses for each (``ip route get``, through the policy rules).
    The host default is the owner's."""
    routes = network_fact(facts, "routes")
    observed = dict(observed, scope=scope, routes=routes)
    expected = {"congctl": wanted, "prefixes": prefixes}
    if not prefixes:
        return result(
            "fail",
            observed,
            expected,
            "congestion_control_scope is %s but no prefix is declared for the long links "
            "(sites.SITE.links.PEER.prefixes)" % scope,
        )
    if routes is None:
        return skip("routes not read")
    missing = [p for p in prefixes if routes.get(p) != wanted]
    if not missing:
        return result("pass", observed, expected, "%s on the routes to %s" % (wanted, ", ".join(prefixes)))
    status = "fail" if wanted in observed["available"] else "warn"
    why = "" if status == "fail" else " (the kernel does not offer it: load tcp_%s)" % wanted
    return result(status, observed, expected, "routes to %s do not use %s%s" % (", ".join(missing), wanted, why))


def _long_haul_tcp(facts, pol, key):
    """(the host's tcp_<key>, None) where it has long links, else (None, the skip result): not judged without long
    links or where the value is not readable."""
    if not long_haul_links(facts, pol):
        return None, skip("no long links (>= %s ms)" % pol["network"]["long_link_rtt_ms"])
    value = network_fact(facts, "tcp", key)
    if value is None:
        return None, skip("tcp_%s not readable" % key)
    return value, None


def check_mtu_probing(facts, pol):
    value, skipped = _long_haul_tcp(facts, pol, "mtu_probing")
    if skipped:
        return skipped
    status = "pass" if value >= MTU_PROBING else "fail"
    return result(status, value, ">= %d" % MTU_PROBING, "tcp_mtu_probing is %d" % value)


def check_slow_start_after_idle(facts, pol):
    value, skipped = _long_haul_tcp(facts, pol, "slow_start_after_idle")
    if skipped:
        return skipped
    status = "fail" if value != SLOW_START_AFTER_IDLE else "pass"
    return result(status, value, SLOW_START_AFTER_IDLE, "tcp_slow_start_after_idle is %d" % value)


def target_mtu_probing(facts, pol, given):
    """NET-TCP-003's fix: ``mtu_probing`` where a link is long (what the check judges), else None (left alone)."""
    return {"mtu_probing": MTU_PROBING if long_haul_links(facts, pol) else None}


def target_slow_start_after_idle(facts, pol, given):
    """NET-TCP-004's fix: ``slow_start_after_idle`` where a link is long (what the check judges), else None."""
    return {"slow_start_after_idle": SLOW_START_AFTER_IDLE if long_haul_links(facts, pol) else None}


# The NICs a network_tuning fix applies to (NET-MTU-001, NET-RING-001, NET-OFFL-001): the role's variable takes the
# place of network.interfaces.
INTERFACES_VAR = RoleVar("network_tuning_interfaces", "interfaces", "network.interfaces")

RULES = (
    Rule(
        "NET-MTU-001",
        "network",
        "medium",
        "MTU differs from the network's",
        "Each NIC should carry the MTU of the network it is on (the cloud's VPC, the overlay, the jumbo-frame "
        "fabric): a smaller one multiplies per-packet overhead, a larger one sends frames the network drops. "
        "Google Cloud's VPC default is 1460, AWS 9001 inside a VPC, VXLAN overlays 1450, so there is no one "
        "right number: the policy declares it per interface or glob (network.mtu) or as a fabric floor "
        "(network.min_mtu). With nothing declared only an MTU below 1280 is flagged: IPv6 needs at least 1280 "
        "on every link and Linux removes the IPv6 addresses of a smaller one.",
        check_mtu,
        role="network_tuning",
        target=target_mtu,
        role_vars=(
            RoleVar("network_tuning_mtu", "mtu", "network.mtu / network.min_mtu"),
            INTERFACES_VAR,
        ),
        policy_keys=("network.interfaces", "network.min_mtu", "network.mtu"),
        references=(sources.GCP_MTU, sources.AWS_MTU, sources.RFC8200_MTU, sources.ESNET_HOST_TUNING),
    ),
    Rule(
        "NET-RING-001",
        "network",
        "medium",
        "NIC receive ring overflowing",
        "A receive ring that runs out of descriptors drops packets before the kernel sees them, and every drop "
        "halves a long-haul TCP flow's window. The evidence is the driver's own counter (mlx5 rx_out_of_buffer, "
        "ice rx_dropped, ENA rx_drops, ixgbe rx_no_dma_resources, igb/e1000e rx_no_buffer_count) growing "
        "between two ethtool -S readings a second apart; a count left from earlier is a warning. A ring below "
        "its maximum is no finding by itself: mlx5, ice and ENA ship far below theirs. ENA's "
        "*_allowance_exceeded counters are the instance's limits, not rings, and are reported as information.",
        check_rings,
        role="network_tuning",
        target=target_rings,
        role_vars=(
            RoleVar("network_tuning_rings", "rings", "NET-RING-001: rx and tx at their maximum"),
            INTERFACES_VAR,
        ),
        policy_keys=("network.interfaces",),
        references=(sources.MLX5_COUNTERS, sources.ICE_DRIVER, sources.ENA_BEST_PRACTICES, sources.ETHTOOL),
    ),
    Rule(
        "NET-OFFL-001",
        "network",
        "medium",
        "NIC offloads turned off",
        "Without segmentation, receive and checksum offloads the CPU processes every packet, capping throughput "
        "and stealing cycles from data loading.",
        check_offloads,
        role="network_tuning",
        target=target_offloads,
        role_vars=(
            RoleVar("network_tuning_offloads", "offloads", "network.offloads"),
            INTERFACES_VAR,
        ),
        policy_keys=("network.interfaces", "network.offloads"),
        references=(sources.KERNEL_OFFLOADS, sources.KERNEL_CHECKSUM_OFFLOADS, sources.ETHTOOL),
    ),
    Rule(
        "NET-TCP-001",
        "network",
        "high",
        "TCP buffers below network.buffer_factor x the bandwidth-delay product",
        "A TCP flow can carry at most one window per round trip; on 150-250 ms links default buffers cap a "
        "stream at a few tens of Mbit/s whatever the link speed. The kernel advertises only about half of "
        "tcp_rmem as window and, under loss, out-of-order data holds part of it, so the buffer needs about "
        "4 bandwidth-delay products, network.buffer_factor's default (2x: 350 Mbit/s, 4x: 545 Mbit/s on 180 ms, "
        "1 Gbit/s, 0.1 % loss).",
        check_tcp_buffers,
        role="network_tuning",
        target=target_tcp_buffers,
        role_vars=(
            RoleVar("network_tuning_buffer_factor", "buffer_factor", "network.buffer_factor"),
            RoleVar("network_tuning_buffer_cap", "buffer_cap", "network.max_buffer_bytes"),
            RoleVar(
                "network_tuning_buffer_bytes",
                "buffer_bytes",
                "network.buffer_factor x bandwidth-delay product (site, sites, peers)",
            ),
        ),
        policy_keys=(
            "network.buffer_factor",
            "network.default_bandwidth_gbps",
            "network.max_buffer_bytes",
            "peers",
            "site",
            "sites",
        ),
        references=(sources.KERNEL_IP_SYSCTL, sources.ESNET_HOST_TUNING, sources.BENCH_WAN),
    ),
    Rule(
        "NET-TCP-002",
        "network",
        "high",
        "Congestion control is not BBR on long links",
        "Loss-based congestion control (cubic) collapses on long lossy paths: 0.1 % loss at 180 ms cuts it to a "
        "few percent of the link; BBR keeps the pipe full. BBR can be harsh on shallow shared bottlenecks, so "
        "policy can limit it to long inter-site links.",
        check_congestion_control,
        role="network_tuning",
        target=target_congestion_control,
        role_vars=(
            RoleVar("network_tuning_congestion_control", "congestion_control", "network.congestion_control"),
            RoleVar(
                "network_tuning_congestion_control_scope",
                "congestion_control_scope",
                "network.congestion_control_scope",
            ),
        ),
        policy_keys=(
            "network.congestion_control",
            "network.congestion_control_scope",
            "network.long_link_rtt_ms",
            "peers",
            "site",
            "sites",
        ),
        references=(sources.KERNEL_IP_SYSCTL, sources.BBR_PAPER, sources.IP_ROUTE, sources.BENCH_WAN),
    ),
    Rule(
        "NET-TCP-003",
        "network",
        "low",
        "TCP MTU probing off",
        "Paths across providers often black-hole large packets; MTU probing lets TCP recover instead of stalling.",
        check_mtu_probing,
        role="network_tuning",
        target=target_mtu_probing,
        policy_keys=("network.long_link_rtt_ms", "peers", "site", "sites"),
        references=(sources.KERNEL_IP_SYSCTL, sources.RFC4821),
    ),
    Rule(
        "NET-TCP-004",
        "network",
        "medium",
        "TCP slow start after idle on long links",
        "Restarting slow start after every idle period throws away the window a long-haul transfer built, so "
        "bursty checkpoint and dataset transfers never reach full speed.",
        check_slow_start_after_idle,
        role="network_tuning",
        target=target_slow_start_after_idle,
        policy_keys=("network.long_link_rtt_ms", "peers", "site", "sites"),
        references=(sources.KERNEL_IP_SYSCTL, sources.RFC5681_IDLE),
    ),
)
