"""Role network_tuning inside a network namespace with a veth "fabric NIC": TCP settings for a 180 ms / 1 Gbit/s
site link, MTU and offloads of the NIC the policy names, all from the policy, global keys reported as "set on the
host"; the audit then passes the network rules it owns; the second run changes nothing; the host's own settings
are untouched."""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration
POLICY = {
    "site": "sg",
    "sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1}}}},
    "network": {"min_mtu": 9000, "interfaces": ["gv0"]},
}

PLAY = """
- name: Tune the network
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.tuning.network_tuning
      when: not (audit_only | default(false))
  tasks:
    - name: Audit
      gpufleet.tuning.audit:
        policy: "{{ gpufleet_policy }}"
        gather: [network]
"""


@pytest.fixture
def netns(tmp_path):
    if not shutil.which("ip") or not shutil.which("ethtool"):
        pytest.skip("iproute2 and ethtool are needed (make test installs them)")
    name = "gpfr-" + uuid.uuid4().hex[:8]
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("ip netns add is not permitted here")
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "gv0", "type", "veth", "peer", "name", "gv1"], check=True)
        subprocess.run(["ip", "-n", name, "link", "set", "gv0", "up"], check=True)
        subprocess.run(["ip", "-n", name, "link", "set", "gv1", "up"], check=True)
        for cmd in (
            ["sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=1"],  # per-namespace keys only
            ["sysctl", "-q", "-w", "net.ipv4.tcp_mtu_probing=0"],
            ["ethtool", "-K", "gv0", "gro", "off"],
        ):
            subprocess.run(["ip", "netns", "exec", name, *cmd], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def test_network_tuning_in_namespace(tmp_path, netns):
    host_before = {
        k: Path(f"/proc/sys/net/ipv4/{k}").read_text()
        for k in ("tcp_rmem", "tcp_wmem", "tcp_congestion_control", "tcp_mtu_probing")
    }
    wrapper = tmp_path / "python-in-ns"
    wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {netns} {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    inv = {
        "all": {
            "hosts": {
                "ns": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": str(wrapper),
                    # The NIC and its MTU come from the policy (network.interfaces, network.min_mtu).
                    "gpufleet_policy": POLICY,
                    "network_tuning_sysctl_file": str(tmp_path / "etc/sysctl.d/61-gpufleet-network.conf"),
                    "network_tuning_persist_method": "udev",
                    "network_tuning_udev_dir": str(tmp_path / "udev"),
                    "network_tuning_load_bbr": False,
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(PLAY)

    def run(audit_only=False):
        events = []
        res = run_playbook(
            str(tmp_path / "play.yml"),
            str(tmp_path / "hosts.yml"),
            extravars={"audit_only": audit_only},
            on_event=events.append,
        ).hosts["ns"]
        assert res.status == "ok", res.message
        changed = sorted(
            {
                e["event_data"]["task"]
                for e in events
                if e.get("event") == "runner_on_ok" and (e["event_data"].get("res") or {}).get("changed")
            }
        )
        failing = sorted(f["rule"] for f in res.results["Audit"]["findings"] if f["status"] == "fail")
        return res, changed, failing

    _, _, before = run(audit_only=True)
    assert {"NET-MTU-001", "NET-OFFL-001", "NET-TCP-003", "NET-TCP-004"} <= set(before)

    res, changed, after = run()
    assert after == [], after
    assert "Long-haul TCP settings (NET-TCP-001, NET-TCP-002, NET-TCP-003, NET-TCP-004)" in changed
    rmem = subprocess.run(
        ["ip", "netns", "exec", netns, "cat", "/proc/sys/net/ipv4/tcp_rmem"], capture_output=True, text=True
    ).stdout.split()
    assert rmem == ["4096", "131072", "90000000"]  # 4 x 180 ms x 1 Gbit/s
    sysctl_result = res.results["Long-haul TCP settings (NET-TCP-001, NET-TCP-002, NET-TCP-003, NET-TCP-004)"]
    assert "must be set on the host" in sysctl_result["not_settable"]["net.core.rmem_max"]
    assert 'ATTR{mtu}="9000"' in (tmp_path / "udev/60-gpufleet-gv0.rules").read_text()
    assert res.results["Tell which role variables take the policy's place"]["ansible_facts"] == {
        "network_tuning_policy_overrides": []
    }

    _, changed, _ = run()
    assert changed == []
    assert {k: Path(f"/proc/sys/net/ipv4/{k}").read_text() for k in host_before} == host_before
