"""Role network_tuning sets the MTU NET-MTU-001 judges, per NIC, and resizes rings only where NET-RING-001 sees drops
(issue 13 §2). Real veth NICs in a network namespace, the role and the audit in one play (test_network_tuning_safety's
Host): the fix reads exactly the policy the audit judged."""

from __future__ import annotations

import subprocess

import pytest
from test_network_tuning_safety import Host, host_sysctls, netns, nic  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration


def test_declared_network_mtu_is_set_exactly_even_lower(tmp_path, netns):  # noqa: F811
    """A Google Cloud VPC at its default MTU 1460, declared for gv0 (a glob for the fleet, the exact name wins): the
    NIC at 1500 fails the audit (frames larger than the VPC carries) and the role lowers it to 1460. The old policy
    had no network.mtu (it rejected the key) and the old role only ever raised an MTU to network.min_mtu."""
    policy = {"network": {"interfaces": ["gv0"], "mtu": {"gv*": 8896, "gv0": 1460}}}
    host = Host(tmp_path, netns, {"gpufleet_policy": policy})
    host.run(audit_only=True)
    finding = host.findings["NET-MTU-001"]
    assert finding["status"] == "fail"
    assert "gv0 1500 is above the network's 1460 (network.mtu.gv0)" in finding["message"]
    host.run()
    assert nic(netns, "gv0")["mtu"] == 1460 and nic(netns, "mg0")["mtu"] == 1500
    assert host.invocations["gv0"]["mtu"] == 1460
    assert host.status("NET-MTU-001") == "pass"
    assert 'ATTR{mtu}="1460"' in (tmp_path / "udev/90-gpufleet-gv0.rules").read_text()
    overrides = host.res.results["Tell which role variables take the policy's place"]["ansible_facts"]
    assert overrides["network_tuning_policy_overrides"] == []
    assert host.run().changed == []


def test_nothing_declared_a_cloud_mtu_passes_and_is_left_alone(tmp_path, netns):  # noqa: F811
    """gv0 at 1460 (a gVNIC on GCP's default VPC), no MTU declared: the audit passes it (the old rule failed it
    against a global floor of 1500 and the old role raised it to 1500), and the role leaves the MTU alone."""
    subprocess.run(["ip", "-n", netns, "link", "set", "gv0", "mtu", "1460"], check=True)
    host = Host(tmp_path, netns, {"gpufleet_policy": {"network": {"interfaces": ["gv0"]}}})
    host.run()
    assert host.status("NET-MTU-001") == "pass"
    assert nic(netns, "gv0")["mtu"] == 1460
    assert host.invocations["gv0"]["mtu"] is None


def test_rings_only_where_the_audit_sees_drops(tmp_path, netns):  # noqa: F811
    """NET-RING-001 turned on: veth has no ring-overflow counter, so the audit does not flag it and no ring size
    reaches nic_settings (the old role passed {rx: max, tx: max} to every named NIC)."""
    host = Host(
        tmp_path,
        netns,
        {"gpufleet_policy": {"network": {"interfaces": ["gv0"]}}, "network_tuning_net_ring_001_enabled": True},
    )
    host.run()
    assert host.invocations["gv0"]["rings"] is None
    assert host.status("NET-RING-001") == "skip"
