# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the network area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import links
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    _links,
    _long_links,
    _net,
    _physical_up_nics,
    result,
    skip,
)


def check_mtu(facts, pol):
    nics = _physical_up_nics(facts, pol)
    if nics is None:
        return skip("NIC facts not gathered")
    if not nics:
        return skip("no physical NIC is up")
    minimum = pol["network"]["min_mtu"]
    low = [{"nic": n["name"], "mtu": n.get("mtu")} for n in nics if n.get("mtu") is not None and n["mtu"] < minimum]
    observed = {n["name"]: n.get("mtu") for n in nics}
    if low:
        return result(
            "fail", observed, ">= %d" % minimum, "MTU below %d on %s" % (minimum, [i["nic"] for i in low]), items=low
        )
    return result("pass", observed, ">= %d" % minimum, "MTU is at least %d" % minimum)


def check_rings(facts, pol):
    nics = _physical_up_nics(facts, pol)
    if nics is None:
        return skip("NIC facts not gathered")
    frac = pol["network"]["ring_min_fraction"]
    items, observed = [], {}
    for n in nics:
        rings = n.get("rings") or {}
        if rings.get("rx_max") is None and rings.get("tx_max") is None:
            continue
        observed[n["name"]] = rings
        for side in ("rx", "tx"):
            cur, mx = rings.get(side), rings.get(side + "_max")
            if cur is not None and mx and cur < mx * frac:
                items.append({"nic": n["name"], "ring": side, "current": cur, "max": mx})
    if not observed:
        return skip("no NIC reports ring sizes")
    expected = ">= %d%% of the hardware maximum" % int(frac * 100)
    if items:
        return result(
            "fail",
            observed,
            expected,
            "small NIC rings drop packets in bursts: %s"
            % ", ".join("%s %s %d/%d" % (i["nic"], i["ring"], i["current"], i["max"]) for i in items),
            items=items,
        )
    return result("pass", observed, expected, "NIC rings are sized near their maximum")


def check_offloads(facts, pol):
    nics = _physical_up_nics(facts, pol)
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


def _bdp_bytes(link, pol):
    return int(pol["network"]["buffer_factor"] * link["rtt_ms"] / 1000.0 * link["bandwidth_gbps"] * 1e9 / 8)


def check_tcp_buffers(facts, pol):
    tcp = _net(facts, "tcp")
    links = [p for p in _links(facts) if p.get("bandwidth_gbps")]
    if not links:
        return skip("no long-haul links declared or measured for this host's site")
    if tcp is None or tcp.get("rmem") is None or tcp.get("wmem") is None:
        return skip("tcp_rmem/tcp_wmem not readable")
    biggest = max(links, key=lambda p: _bdp_bytes(p, pol))
    needed = min(_bdp_bytes(biggest, pol), pol["network"]["max_buffer_bytes"])
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


def check_congestion_control(facts, pol):
    long_links = _long_links(facts, pol)
    if not long_links:
        return skip("no long links (>= %s ms)" % pol["network"]["long_link_rtt_ms"])
    tcp = _net(facts, "tcp")
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
    if pol["network"].get("congestion_control_scope") == "routes":
        return _check_route_congctl(facts, pol, observed, wanted)
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


def _check_route_congctl(facts, pol, observed, wanted):
    """Scope routes: the routes to the long-haul peers' prefixes carry the congestion control (ip-route(8) congctl);
    the host default is the owner's."""
    prefixes = links.classify(pol, facts.get("links"))[2]
    routes = _net(facts, "routes")
    observed = dict(observed, scope="routes", routes=routes)
    expected = {"congctl": wanted, "prefixes": prefixes}
    if not prefixes:
        return result(
            "fail",
            observed,
            expected,
            "congestion_control_scope is routes but no prefix is declared for the long links "
            "(sites.SITE.links.PEER.prefixes)",
        )
    if routes is None:
        return skip("routes not read")
    missing = [p for p in prefixes if routes.get(p) != wanted]
    if not missing:
        return result("pass", observed, expected, "%s on the routes to %s" % (wanted, ", ".join(prefixes)))
    status = "fail" if wanted in observed["available"] else "warn"
    why = "" if status == "fail" else " (the kernel does not offer it: load tcp_%s)" % wanted
    return result(status, observed, expected, "routes to %s do not use %s%s" % (", ".join(missing), wanted, why))


def check_mtu_probing(facts, pol):
    if not _long_links(facts, pol):
        return skip("no long links (>= %s ms)" % pol["network"]["long_link_rtt_ms"])
    value = _net(facts, "tcp", "mtu_probing")
    if value is None:
        return skip("tcp_mtu_probing not readable")
    status = "pass" if value >= 1 else "fail"
    return result(status, value, ">= 1", "tcp_mtu_probing is %d" % value)


def check_slow_start_after_idle(facts, pol):
    if not _long_links(facts, pol):
        return skip("no long links (>= %s ms)" % pol["network"]["long_link_rtt_ms"])
    value = _net(facts, "tcp", "slow_start_after_idle")
    if value is None:
        return skip("tcp_slow_start_after_idle not readable")
    status = "fail" if value else "pass"
    return result(status, value, 0, "tcp_slow_start_after_idle is %d" % value)


RULES = (
    Rule(
        "NET-MTU-001",
        "network",
        "medium",
        "MTU below policy",
        "A small MTU multiplies per-packet overhead; fabrics built for jumbo frames lose throughput and CPU.",
        check_mtu,
        role="network_tuning",
        references=(sources.AWS_MTU, sources.GCP_MTU, sources.ESNET_HOST_TUNING),
    ),
    Rule(
        "NET-RING-001",
        "network",
        "medium",
        "NIC rings far below their maximum",
        "Small receive and transmit rings overflow during bursts, and every drop halves a long-haul TCP flow's window.",
        check_rings,
        role="network_tuning",
        references=(sources.ETHTOOL,),
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
        references=(sources.KERNEL_OFFLOADS, sources.KERNEL_CHECKSUM_OFFLOADS, sources.ETHTOOL),
    ),
    Rule(
        "NET-TCP-001",
        "network",
        "high",
        "TCP buffers below 4x the bandwidth-delay product",
        "A TCP flow can carry at most one window per round trip; on 150-250 ms links default buffers cap a "
        "stream at a few tens of Mbit/s whatever the link speed. The kernel advertises only about half of "
        "tcp_rmem as window and, under loss, out-of-order data holds part of it, so the buffer needs about "
        "4 bandwidth-delay products (2x: 350 Mbit/s, 4x: 545 Mbit/s on 180 ms, 1 Gbit/s, 0.1 % loss).",
        check_tcp_buffers,
        role="network_tuning",
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
        references=(sources.KERNEL_IP_SYSCTL, sources.RFC5681_IDLE),
    ),
)
