"""`gpufleet links` on the controller (src/gpufleet/commands/links.py): which host pairs it measures, from the
inventory's sites and the policy's declared links, and what it reads back from the two ends' link_measure results."""

from __future__ import annotations

import io

from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import measured

from gpufleet.commands import links
from gpufleet.runner import HostResult, RunResult

MIB = 1024 * 1024
SITES = {
    "sg": {"links": {"eu": {"rtt_ms": 180, "bandwidth_gbps": 1}, "us": {"rtt_ms": 170, "bandwidth_gbps": 10}}},
    "eu": {"links": {"sg": {"rtt_ms": 180, "bandwidth_gbps": 1}}},
}


def _host(site: str, address: str, **network) -> dict:
    pol = {"site": site, "sites": SITES, **({"network": network} if network else {})}
    return {"policy": policy.validate(pol, known_rules=rules.BY_ID), "address": address}


def test_one_pair_per_declared_site_pair_first_host_of_each_site():
    hosts = {
        "eu2": _host("eu", "10.0.2.2"),
        "sg1": _host("sg", "10.0.1.1", link_streams=8),
        "eu1": _host("eu", "10.0.2.1"),
        "sg2": _host("sg", "10.0.1.2"),
    }
    pairs = links.plan(hosts)
    # eu declares sg too: measured once, from eu (the first site in sorted order), eu2 first in inventory order
    assert [(p["site"], p["peer_site"], p["sender"], p.get("receiver")) for p in pairs] == [
        ("eu", "sg", "eu2", "sg1"),
        ("sg", "us", "sg1", None),
    ]
    assert pairs[0]["address"] == "10.0.1.1" and pairs[0]["declared_gbps"] == 1.0 and pairs[0]["streams"] == 4
    assert pairs[1]["error"] == "no host of site us in the inventory" and pairs[1]["streams"] == 8
    assert links.plan(hosts, streams=2)[0]["streams"] == 2


def test_hosts_without_a_site_or_links_give_no_pair():
    hosts = {"a": {"policy": policy.validate({}, known_rules=rules.BY_ID), "address": "a"}}
    assert links.plan(hosts) == []


def _results(server_tcp: dict, client: dict) -> RunResult:
    eu, sg = HostResult("eu1"), HostResult("sg1")
    eu.record("Start", links.MEASURE_ACTION, {"state": "server", "pid": 42, "tcp": server_tcp})
    eu.record("Stop", links.MEASURE_ACTION, {"state": "stop", "pid": 42, "stopped": True, "tcp": server_tcp})
    sg.record("Measure", links.MEASURE_ACTION, client)
    return RunResult(rc=0, status="successful", hosts={"eu1": eu, "sg1": sg})


PAIR = {
    "site": "sg",
    "peer_site": "eu",
    "sender": "sg1",
    "receiver": "eu1",
    "address": "10.0.2.1",
    "declared_gbps": 1.0,
    "declared_rtt_ms": 180.0,
    "streams": 4,
}


def test_the_measurement_takes_the_senders_wmem_and_the_receivers_rmem():
    client = {
        "state": "client",
        "tcp": {"rmem": [4096, 131072, 6 * MIB], "wmem": [4096, 16384, 4 * MIB], "congestion_control": "bbr"},
        "runs": [
            {"requested_streams": 1, "mbps": 141.0, "min_rtt_ms": 180.9, "congestion_control": "bbr", "retransmits": 0},
            {"requested_streams": 4, "mbps": 400.0, "min_rtt_ms": 180.4, "congestion_control": "bbr", "retransmits": 9},
        ],
    }
    server_tcp = {"rmem": [4096, 131072, 32 * MIB], "wmem": [4096, 16384, 4 * MIB], "congestion_control": "bbr"}
    m, problems = links.from_results(PAIR, _results(server_tcp, client))
    assert problems == [] and m.get("error") is None
    assert (m["sender_wmem_max"], m["receiver_rmem_max"]) == (4 * MIB, 32 * MIB)
    assert (m["single_mbps"], m["multi_mbps"], m["rtt_ms"]) == (141.0, 400.0, 180.4)
    judged = measured.assess(m, policy.validate({}, known_rules=rules.BY_ID))
    assert judged["window_bytes"] == 4 * MIB and judged["verdict"] == "host-limited (buffers)"
    out = io.StringIO()
    links.print_link(judged, out)
    text = out.getvalue()
    assert "sg -> eu: sg1 -> eu1 at 10.0.2.1" in text and "host-limited (buffers)" in text
    assert "1 stream 141 Mbit/s, 4 streams 400 Mbit/s" in text


def test_a_failed_end_is_a_problem_and_the_link_not_measured():
    eu = HostResult("eu1", status="failed", message="iperf3 is not installed on this host")
    eu.record("Start", links.MEASURE_ACTION, {"failed": True, "msg": "iperf3 is not installed on this host"})
    sg = HostResult("sg1")
    m, problems = links.from_results(PAIR, RunResult(rc=2, status="failed", hosts={"eu1": eu, "sg1": sg}))
    assert problems == ["eu1: failed: iperf3 is not installed on this host"]
    assert "iperf3 is not installed" in m["error"]
    assert measured.assess(m, policy.validate({}, known_rules=rules.BY_ID))["verdict"] == "not measured"
