# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The long-haul links of a host: declared per site in the policy, or measured by timing TCP connects."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
import time


def resolve(policy, measure=None):
    """{"source": declared|measured|mixed|none, "site": ..., "peers": [{site, rtt_ms, bandwidth_gbps, source}]}.

    ``measure(peers) -> [{name, host, port, rtt_ms, error}]`` times TCP connects (measure_rtt, below); a measured
    link replaces a declared one to the same site.
    """
    site = policy.get("site")
    by_site = {}
    declared = ((policy.get("sites") or {}).get(site) or {}).get("links") or {} if site else {}
    for peer_site, link in sorted(declared.items()):
        by_site[peer_site] = {
            "site": peer_site,
            "rtt_ms": float(link["rtt_ms"]),
            "bandwidth_gbps": float(link["bandwidth_gbps"]),
            "source": "declared",
        }
    errors = []
    peers = policy.get("peers") or []
    if peers and measure is not None:
        wanted = [{"name": p["site"], "host": p["host"], "port": int(p.get("port", 22))} for p in peers]
        default_bw = policy["network"]["default_bandwidth_gbps"]
        for peer, timing in zip(peers, measure(wanted)):
            if timing.get("rtt_ms") is None:
                errors.append({"site": peer["site"], "host": peer["host"], "error": timing.get("error")})
                continue
            by_site[peer["site"]] = {
                "site": peer["site"],
                "rtt_ms": round(float(timing["rtt_ms"]), 2),
                "bandwidth_gbps": float(peer.get("bandwidth_gbps") or default_bw),
                "source": "measured",
                "host": peer["host"],
            }
    sources = {p["source"] for p in by_site.values()}
    source = "none" if not sources else sources.pop() if len(sources) == 1 else "mixed"
    return {"source": source, "site": site, "peers": [by_site[k] for k in sorted(by_site)], "errors": errors}


def classify(policy, resolved):
    """(long, sized, prefixes) as the network rules judge a host's links (rules.rtt_links, rules.long_haul_links).

    ``long``: links with rtt_ms >= network.long_link_rtt_ms (NET-TCP-002..004), each with the ``prefixes`` the
    policy declares for that peer (sites.SITE.links.PEER.prefixes); ``sized``: links with a bandwidth (NET-TCP-001);
    ``prefixes``: those of the long links, deduplicated, in order.
    """
    threshold = policy["network"]["long_link_rtt_ms"]
    declared = ((policy.get("sites") or {}).get(policy.get("site")) or {}).get("links") or {}
    usable = [dict(p) for p in (resolved or {}).get("peers") or [] if p.get("rtt_ms")]
    for peer in usable:
        peer["prefixes"] = list((declared.get(peer.get("site")) or {}).get("prefixes") or [])
    long_links = [p for p in usable if p["rtt_ms"] >= threshold]
    sized = [p for p in usable if p.get("bandwidth_gbps")]
    prefixes = []
    for peer in long_links:
        for prefix in peer["prefixes"]:
            if prefix not in prefixes:
                prefixes.append(prefix)
    return long_links, sized, prefixes


# --- measured links: TCP connect time to the peers ---------------------------------------------


def _median(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def _connect_error(exc):
    if isinstance(exc, socket.timeout):
        return "timed out"
    text = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
    return text


def measure_rtt(peers, timeout=3.0, attempts=3):
    """TCP connect time to each peer: [{name, host, port, rtt_ms, error}].

    The name is resolved once (resolution time is not counted), then ``attempts`` connects are timed;
    ``rtt_ms`` is the median of the successful ones (3 decimals). ``error`` says why ``rtt_ms`` is None
    (resolution failed, or every attempt failed, with the last error); it is None when a time was
    measured. A TCP handshake takes one round trip, so this is the path RTT plus accept latency.
    """
    results = []
    for peer in peers or []:
        host = peer.get("host")
        port = int(peer.get("port") or 22)
        entry = {"name": peer.get("name"), "host": host, "port": port, "rtt_ms": None, "error": None}
        results.append(entry)
        try:
            infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError, OSError) as exc:
            entry["error"] = "cannot resolve %s: %s" % (host, _connect_error(exc))
            continue
        family, socktype, proto, _canon, address = infos[0]
        times, last_error = [], None
        for _attempt in range(max(1, int(attempts))):
            sock = socket.socket(family, socktype, proto)
            sock.settimeout(timeout)
            start = time.monotonic()
            try:
                sock.connect(address)
                times.append((time.monotonic() - start) * 1000.0)
            except (OSError, socket.timeout) as exc:
                last_error = _connect_error(exc)
            finally:
                sock.close()
        if times:
            entry["rtt_ms"] = round(_median(times), 3)
        else:
            entry["error"] = "connect to %s port %d failed: %s" % (host, port, last_error)
    return results
