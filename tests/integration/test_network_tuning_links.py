"""The links network_tuning's targets come from (remediation_targets, roles [network_tuning]; links_info folded in,
issue 27): measured links (a TCP connect timed from the host to the policy's peers, here a listener on loopback)
count like the audit counts them, and a bad policy fails with the key's path, not a traceback."""

from __future__ import annotations

import labkit
import pytest

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

TASKS = """
- name: Resolve
  gpufleet.tuning.remediation_targets:
    roles: [network_tuning]
    peer_timeout: 2
    sample_seconds: 0
  check_mode: true
"""
PLAY = labkit.play("Links", tasks=TASKS)


@pytest.fixture
def listener():
    with labkit.listener() as port:
        yield port


def _run(tmp_path, policy):
    inventory = labkit.write_inventory(
        tmp_path, {"h": labkit.local_host("{{ ansible_playbook_python }}", gpufleet_policy=policy)}
    )
    return run_playbook(str(labkit.write_play(tmp_path, PLAY)), str(inventory)).hosts["h"]


def test_measured_and_declared_links(tmp_path, listener):
    policy = {
        "site": "sg",
        "sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1, "prefixes": ["198.51.100.0/24"]}}}},
        "peers": [{"site": "lo", "host": "127.0.0.1", "port": listener, "bandwidth_gbps": 10}],
        "network": {"long_link_rtt_ms": 0.0},  # every link is long: the measured one too
    }
    res = _run(tmp_path, policy)
    assert res.status == "ok", res.message
    out = res.results["Resolve"]
    assert out["changed"] is False and out["links"]["source"] == "mixed"
    net = out["roles"]["network_tuning"]
    measured = next(p for p in net["long"] if p["site"] == "lo")
    assert measured["source"] == "measured" and measured["bandwidth_gbps"] == 10.0 and measured["prefixes"] == []
    assert [p["site"] for p in net["sized"]] == ["fra", "lo"]
    assert net["route_prefixes"] == ["198.51.100.0/24"] and out["policy"]["network"]["long_link_rtt_ms"] == 0.0
    # 4 x the largest BDP: the measured loopback link is fast (10 Gbit/s) but its RTT is tiny; fra's 180 ms wins.
    assert net["buffer_bytes"] == 90000000 and net["mtu_probing"] == 1 and net["slow_start_after_idle"] == 0


def test_bad_policy_names_the_key(tmp_path):
    res = _run(tmp_path, {"sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1, "prefixes": ["x"]}}}}})
    assert res.status == "failed"
    assert "policy.sites.sg.links.fra.prefixes[0]: 'x' is not a CIDR network" in res.message
