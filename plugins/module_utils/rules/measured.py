# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules on measured links (NET-LINK-*): what a declared long-haul link delivers, measured with iperf3.

They read ``facts["link_measurements"]``: one entry per declared site pair this host sent over, as ``gpufleet links``
builds it from M(gpufleet.tuning.link_measure)'s two ends (``assess`` below adds the bandwidth-delay limit and the
verdict). An audit does not measure: there they skip, saying how to measure.

The window of one TCP stream is at most the sender's tcp_wmem maximum and the receiver's tcp_rmem maximum (the
kernel's autotuning stops there), so one stream carries at most window / RTT: ``bdp_limit_mbps``. When that limit,
times the streams, is below the declared bandwidth, the host's buffers are the limit (NET-TCP-001's business); when
it is above and the link still delivers far less, the host's congestion control (loss-based on a long path,
NET-TCP-002's business) or else the path itself - the provider's rate, a policer, a lossy or congested segment - is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import Rule, result, skip

NOT_MEASURED = "no link measured: run gpufleet links"
VERDICTS = ("ok", "host-limited (buffers)", "host-limited (congestion control)", "path-limited", "not measured")


def window_bytes(sender_wmem_max, receiver_rmem_max):
    """The largest window a stream can reach: the smaller of the two maxima that are known (None: neither)."""
    known = [v for v in (sender_wmem_max, receiver_rmem_max) if v]
    return min(known) if known else None


def bdp_limit_mbps(window, rtt_ms, streams=1):
    """Mbit/s that ``streams`` streams of ``window`` bytes carry at most over ``rtt_ms`` (bandwidth <= window/RTT)."""
    if not window or not rtt_ms:
        return None
    return round(streams * window * 8 / (rtt_ms / 1000.0) / 1e6, 1)


def assess(measure, pol):
    """``measure`` (declared_gbps, rtt_ms, single_mbps, multi_mbps, streams, sender_wmem_max, receiver_rmem_max,
    congestion_control, error) with ``window_bytes``, ``bdp_limit_mbps`` (one stream), ``bdp_limit_multi_mbps``,
    ``verdict`` (one of VERDICTS) and ``why`` added. Pure: the CLI's table and NET-LINK-001 judge alike."""
    out = dict(measure)
    net = pol["network"]
    declared = measure.get("declared_gbps")
    rtt = measure.get("rtt_ms")
    speeds = [v for v in (measure.get("single_mbps"), measure.get("multi_mbps")) if v is not None]
    window = window_bytes(measure.get("sender_wmem_max"), measure.get("receiver_rmem_max"))
    streams = int(measure.get("streams") or 1)
    out.update(
        window_bytes=window,
        bdp_limit_mbps=bdp_limit_mbps(window, rtt, 1),
        bdp_limit_multi_mbps=bdp_limit_mbps(window, rtt, streams),
    )
    if measure.get("error") or not speeds or not rtt or not declared:
        out.update(verdict="not measured", why=measure.get("error") or "no throughput, RTT or declared bandwidth")
        return out
    declared_mbps = declared * 1000.0
    best = max(speeds)
    floor = declared_mbps * net["link_min_pct"] / 100.0
    limit = out["bdp_limit_multi_mbps"]
    cc, wanted = measure.get("congestion_control"), net["congestion_control"]
    if best >= floor:
        verdict = "ok"
        why = "%.0f of %.0f Mbit/s declared (at least %s %%)" % (best, declared_mbps, net["link_min_pct"])
    elif limit is None:
        verdict, why = "not measured", "the hosts' TCP buffers (tcp_wmem, tcp_rmem) could not be read"
    elif limit < declared_mbps:
        verdict, why = "host-limited (buffers)", (
            "the window (%s bytes: sender tcp_wmem / receiver tcp_rmem max) allows %.0f Mbit/s over %.1f ms with %d "
            "streams, below the %.0f declared" % (window, limit, rtt, streams, declared_mbps))
    elif rtt >= net["long_link_rtt_ms"] and cc and cc != wanted:
        verdict, why = "host-limited (congestion control)", (
            "%.0f of %.0f Mbit/s declared with the sender's %s on a %.1f ms path; the buffers allow %.0f Mbit/s (%s "
            "wanted: network.congestion_control)" % (best, declared_mbps, cc, rtt, limit, wanted))
    else:
        verdict, why = "path-limited", (
            "%.0f of %.0f Mbit/s declared (under %s %%) while the hosts' buffers allow %.0f Mbit/s over %.1f ms "
            "and the sender runs %s: the path or the provider limits it"
            % (best, declared_mbps, net["link_min_pct"], limit, rtt, cc or "?"))
    out.update(verdict=verdict, why=why)
    return out


def check_measured_link(facts, pol):
    measures = facts.get("link_measurements")
    if not measures:
        return skip(NOT_MEASURED)
    judged = [assess(m, pol) for m in measures]
    measured = [m for m in judged if m["verdict"] != "not measured"]
    if not measured:
        return skip("no link could be measured: %s" % "; ".join(m["why"] for m in judged))
    keys = ("peer_site", "declared_gbps", "rtt_ms", "single_mbps", "multi_mbps", "bdp_limit_multi_mbps",
            "congestion_control", "verdict")
    observed = [dict((k, m.get(k)) for k in keys) for m in measured]
    expected = ">= %s %% of the declared bandwidth where the hosts' TCP settings allow it" % (
        pol["network"]["link_min_pct"])
    bad = [m for m in measured if m["verdict"] == "path-limited"]
    if bad:
        items = ["%s: %s" % (m.get("peer_site"), m["why"]) for m in bad]
        return result("fail", observed, expected, "; ".join(items), items=items)
    host = [m for m in measured if m["verdict"].startswith("host-limited")]
    if host:
        return result("pass", observed, expected, "the path is not shown to limit it; the host does (%s): see "
                      "NET-TCP-001/002" % ", ".join("%s %s" % (m.get("peer_site"), m["verdict"]) for m in host))
    return result("pass", observed, expected, "every measured link delivers its declared bandwidth")


RULES = (
    Rule(
        "NET-LINK-001",
        "network",
        "medium",
        "Long-haul link delivers far below its declared bandwidth, not because of the hosts",
        "A link declared at a bandwidth (sites.SITE.links.PEER.bandwidth_gbps) that, measured with iperf3 between "
        "one host of each site, delivers less than network.link_min_pct of it while the hosts' buffers allow it "
        "(window / RTT above the declared rate) and the sender already runs the wanted congestion control is "
        "limited by the path or the provider - its committed rate, a policer, a lossy or congested segment - "
        "and no host tuning will fix it. Buffers too small or loss-based congestion control on a long path are "
        "the host's (NET-TCP-001, NET-TCP-002), not this finding.",
        check_measured_link,
        manual="Take the measurement (gpufleet links --json) to the network's owner or provider: committed rate, "
        "policers, loss on a segment (iperf3's retransmits); or correct the declared bandwidth "
        "(sites.SITE.links.PEER.bandwidth_gbps).",
        policy_keys=("network.congestion_control", "network.link_min_pct", "network.long_link_rtt_ms"),
        references=(sources.RFC6349_TCP_THROUGHPUT, sources.ESNET_HOST_TUNING, sources.BENCH_WAN),
    ),
)
