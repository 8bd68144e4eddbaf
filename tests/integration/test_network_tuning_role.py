"""Role network_tuning inside a network namespace with a veth "fabric NIC": TCP settings for a 180 ms / 1 Gbit/s
site link, MTU and offloads of the NIC the policy names, all from the policy, global keys reported as "set on the
host"; the audit then passes the network rules it owns; the second run changes nothing; the host's own settings
are untouched."""

from __future__ import annotations

from pathlib import Path

import labkit
import pytest

pytestmark = pytest.mark.integration
POLICY = {
    "site": "sg",
    "sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1}}}},
    "network": {"min_mtu": 9000, "interfaces": ["gv0"]},
}

AUDIT = """
- name: Audit
  gpufleet.tuning.audit:
    policy: "{{ gpufleet_policy }}"
    gather: [network]
"""
PLAY = labkit.play("Tune the network", roles=("network_tuning",), tasks=AUDIT, audit_only=True)


@pytest.fixture
def netns():
    with labkit.namespace("gpfr") as name:
        labkit.veth(name)
        for cmd in (
            ["sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=1"],  # per-namespace keys only
            ["sysctl", "-q", "-w", "net.ipv4.tcp_mtu_probing=0"],
            ["ethtool", "-K", "gv0", "gro", "off"],
        ):
            labkit.ns_exec(name, *cmd)
        yield name


def _tune(tmp_path, netns, policy):
    """Inventory and play of the namespace host ``ns`` with ``policy``; returns run(audit_only) -> (result, changed
    task names, failing rules)."""
    host = labkit.local_host(
        labkit.ns_python(tmp_path, netns),
        # The NIC and its MTU come from the policy (network.interfaces, network.min_mtu).
        gpufleet_policy=policy,
        network_tuning_sysctl_file=str(tmp_path / "etc/sysctl.d/61-gpufleet-network.conf"),
        network_tuning_persist_method="udev",
        network_tuning_udev_dir=str(tmp_path / "udev"),
        network_tuning_load_bbr=False,
    )
    inventory = labkit.write_inventory(tmp_path, {"ns": host})
    play = labkit.write_play(tmp_path, PLAY)

    def run(audit_only=False):
        result, changed = labkit.run(play, inventory, extravars={"audit_only": audit_only})
        res = result.hosts["ns"]
        assert res.status == "ok", res.message
        failing = sorted(f["rule"] for f in res.results["Audit"]["findings"] if f["status"] == "fail")
        return res, labkit.changed_tasks(changed), failing

    return run


def test_network_tuning_in_namespace(tmp_path, netns):
    host_before = {
        k: Path(f"/proc/sys/net/ipv4/{k}").read_text()
        for k in ("tcp_rmem", "tcp_wmem", "tcp_congestion_control", "tcp_mtu_probing")
    }
    run = _tune(tmp_path, netns, POLICY)

    _, _, before = run(audit_only=True)
    assert {"NET-MTU-001", "NET-OFFL-001", "NET-TCP-003", "NET-TCP-004"} <= set(before)

    res, changed, after = run()
    assert after == [], after
    assert "Long-haul TCP settings (NET-TCP-001, NET-TCP-002, NET-TCP-003, NET-TCP-004)" in changed
    rmem = labkit.ns_exec(netns, "cat", "/proc/sys/net/ipv4/tcp_rmem").split()
    assert rmem == ["4096", "131072", "90000000"]  # 4 x 180 ms x 1 Gbit/s
    sysctl_result = res.results["Long-haul TCP settings (NET-TCP-001, NET-TCP-002, NET-TCP-003, NET-TCP-004)"]
    assert "must be set on the host" in sysctl_result["not_settable"]["net.core.rmem_max"]
    assert 'ATTR{mtu}="9000"' in (tmp_path / "udev/90-gpufleet-gv0.rules").read_text()
    assert res.results["Tell which role variables take the policy's place"]["ansible_facts"] == {
        "network_tuning_policy_overrides": []
    }

    _, changed, _ = run()
    assert changed == []
    assert {k: Path(f"/proc/sys/net/ipv4/{k}").read_text() for k in host_before} == host_before


def test_rules_the_policy_turned_off_stay_out_of_the_files_written_whole(tmp_path, netns):
    """NET-TCP-004 and NET-OFFL-001 turned off: the audit skips them and the role leaves slow start after idle and
    GRO as the host has them, also in the sysctl.d file and the NIC's persistence file it writes for NET-TCP-003
    and NET-MTU-001 (before, a file written for one rule carried every enabled rule's value)."""
    off = {"rules": {"NET-TCP-004": {"enabled": False}, "NET-OFFL-001": {"enabled": False}}}
    run = _tune(tmp_path, netns, {**POLICY, **off})

    res, _, after = run()
    assert after == [], after
    findings = {f["rule"]: f["status"] for f in res.results["Audit"]["findings"]}
    assert findings["NET-TCP-004"] == "skip" and findings["NET-OFFL-001"] == "skip"
    assert findings["NET-TCP-003"] == "pass" and findings["NET-MTU-001"] == "pass"
    assert labkit.ns_exec(netns, "cat", "/proc/sys/net/ipv4/tcp_slow_start_after_idle").strip() == "1"
    text = (tmp_path / "etc/sysctl.d/61-gpufleet-network.conf").read_text()
    assert "net.ipv4.tcp_mtu_probing" in text and "slow_start" not in text, text
    assert "generic-receive-offload: off" in labkit.ns_exec(netns, "ethtool", "-k", "gv0")
    udev = (tmp_path / "udev/90-gpufleet-gv0.rules").read_text()
    assert 'ATTR{mtu}="9000"' in udev and "gro" not in udev, udev
