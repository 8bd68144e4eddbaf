# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The long-haul links of a host: declared per site in the policy, or measured by timing TCP connects."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def resolve(policy, measure=None):
    """{"source": declared|measured|mixed|none, "site": ..., "peers": [{site, rtt_ms, bandwidth_gbps, source}]}.

    ``measure(peers) -> [{name, host, port, rtt_ms, error}]`` times TCP connects (nic.measure_rtt); a measured
    link replaces a declared one to the same site.
    """
    site = policy.get("site")
    by_site = {}
    declared = ((policy.get("sites") or {}).get(site) or {}).get("links") or {} if site else {}
    for peer_site, link in sorted(declared.items()):
        by_site[peer_site] = {"site": peer_site, "rtt_ms": float(link["rtt_ms"]),
                              "bandwidth_gbps": float(link["bandwidth_gbps"]), "source": "declared"}
    errors = []
    peers = policy.get("peers") or []
    if peers and measure is not None:
        wanted = [{"name": p["site"], "host": p["host"], "port": int(p.get("port", 22))} for p in peers]
        default_bw = policy["network"]["default_bandwidth_gbps"]
        for peer, timing in zip(peers, measure(wanted)):
            if timing.get("rtt_ms") is None:
                errors.append({"site": peer["site"], "host": peer["host"], "error": timing.get("error")})
                continue
            by_site[peer["site"]] = {"site": peer["site"], "rtt_ms": round(float(timing["rtt_ms"]), 2),
                                     "bandwidth_gbps": float(peer.get("bandwidth_gbps") or default_bw),
                                     "source": "measured", "host": peer["host"]}
    sources = {p["source"] for p in by_site.values()}
    source = "none" if not sources else sources.pop() if len(sources) == 1 else "mixed"
    return {"source": source, "site": site, "peers": [by_site[k] for k in sorted(by_site)], "errors": errors}
