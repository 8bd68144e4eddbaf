"""Role network_tuning on real network namespaces (issue 12 §1 and §3): it takes its targets from the policy the audit
judged, changes only the NICs the policy names (never the management NIC that carries the default route), one field
per rule tag, and TCP settings only on hosts with long links; with network.congestion_control_scope: routes the
long-haul peers' routes get `congctl bbr` and the host default stays.

Each namespace is a "host": Ansible's local connection runs the modules with a Python started by `ip netns exec`.
Only per-namespace settings change; the machine's own are compared before and after."""

from __future__ import annotations

import subprocess
from pathlib import Path

import labkit
import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example" / "inventory" / "group_vars"
HOST_KEYS = ("tcp_rmem", "tcp_wmem", "tcp_congestion_control", "tcp_mtu_probing", "tcp_slow_start_after_idle")

AUDIT = """
# The audit's action plugin hands the module the same policy layers the roles' targets read.
- name: Audit with the same policy layers
  gpufleet.tuning.audit:
    gather: [network]
  tags: [always]
"""
PLAY = labkit.play("Tune the network", roles=("network_tuning",), tasks=AUDIT, audit_only=True)
# The long-haul peer's prefix of the per-route congestion control tests (here, test_route_follow, test_route_rollback).
PEER_PREFIX = "198.51.100.0/24"


def peer_policy(scope: str) -> dict:
    """Site sg with a 180 ms link to fra, whose prefix PEER_PREFIX the namespace reaches through its default route;
    network.congestion_control_scope: ``scope``."""
    return {
        "site": "sg",
        "sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1, "prefixes": [PEER_PREFIX]}}}},
        "network": {"congestion_control_scope": scope},
    }


def sysctl(ns: str, key: str) -> str:
    return " ".join(labkit.ns_exec(ns, "cat", f"/proc/sys/net/ipv4/{key}").split())


def nic(ns: str, name: str) -> dict:
    mtu = int(labkit.ns_exec(ns, "cat", f"/sys/class/net/{name}/mtu"))
    features = labkit.ns_exec(ns, "ethtool", "-k", name)
    gro = next(line.split(":")[1].split()[0] for line in features.splitlines() if "generic-receive-offload" in line)
    return {"mtu": mtu, "gro": gro}


@pytest.fixture
def host_sysctls():
    before = {k: Path(f"/proc/sys/net/ipv4/{k}").read_text() for k in HOST_KEYS}
    yield
    assert {k: Path(f"/proc/sys/net/ipv4/{k}").read_text() for k in HOST_KEYS} == before


@pytest.fixture
def netns(host_sysctls):
    """A host with a management NIC mg0 (10.9.0.2/24, the default route via 10.9.0.1) and a data NIC gv0, both at
    MTU 1500 with GRO off; per-namespace TCP keys at stock values (slow start after idle on, no MTU probing)."""
    with labkit.namespace("gpfs") as name:
        labkit.veth(name, "mg0", "mg1")
        labkit.veth(name, "gv0", "gv1")
        for cmd in (
            ["addr", "add", "10.9.0.2/24", "dev", "mg0"],
            ["addr", "add", "10.10.0.2/24", "dev", "gv0"],
            ["route", "add", "default", "via", "10.9.0.1", "dev", "mg0"],
        ):
            subprocess.run(["ip", "-n", name, *cmd], check=True)
        for cmd in (
            ["sysctl", "-q", "-w", "net.ipv4.tcp_slow_start_after_idle=1"],
            ["sysctl", "-q", "-w", "net.ipv4.tcp_mtu_probing=0"],
            # reno: allowed in every namespace (tcp_allowed_congestion_control), and not what the role sets.
            ["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=reno"],
            ["ethtool", "-K", "mg0", "gro", "off"],
            ["ethtool", "-K", "gv0", "gro", "off"],
        ):
            labkit.ns_exec(name, *cmd)
        yield name


class Host:
    def __init__(self, tmp_path: Path, ns: str, host_vars: dict):
        self.tmp, self.ns = tmp_path, ns
        self.vars = labkit.local_host(
            labkit.ns_python(tmp_path, ns),
            network_tuning_sysctl_file=str(tmp_path / "etc/sysctl.d/61-gpufleet-network.conf"),
            network_tuning_persist_method="udev",
            network_tuning_udev_dir=str(tmp_path / "udev"),
            network_tuning_route_unit_dir=str(tmp_path / "systemd"),
            network_tuning_load_bbr=False,
            **host_vars,
        )
        self.play = labkit.write_play(tmp_path, PLAY)

    def run(self, audit_only=False, tags=None, check=False):
        inventory = labkit.write_inventory(self.tmp, {"ns": self.vars})
        events = []
        res = run_playbook(
            str(self.play),
            str(inventory),
            extravars={"audit_only": audit_only},
            on_event=events.append,
            tags=tags,
            check=check,
        ).hosts["ns"]
        assert res.status == "ok", res.message
        oks = [e["event_data"] for e in events if e.get("event") == "runner_on_ok"]
        items = [e["event_data"] for e in events if e.get("event") == "runner_item_on_ok"]
        self.changed = sorted({d["task"] for d in oks if (d.get("res") or {}).get("changed")})
        self.actions = [d.get("resolved_action") or d.get("task_action") for d in oks + items]
        self.invocations = {
            d["res"]["item"]["name"]: d["res"]["invocation"]["module_args"]
            for d in items
            if (d.get("res") or {}).get("invocation") and isinstance(d["res"].get("item"), dict)
        }
        self.findings = {f["rule"]: f for f in res.results["Audit with the same policy layers"]["findings"]}
        self.res = res
        return self

    def status(self, rule):
        return self.findings[rule]["status"]


LONG_LINK = {"site": "sg", "sites": {"sg": {"links": {"fra": {"rtt_ms": 180, "bandwidth_gbps": 1}}}}}


def test_only_the_named_data_nic_changes(tmp_path, netns):
    """network.interfaces null: no NIC is read or changed (the old role took every physical NIC, the uplink
    included). Named [gv0] in the policy: gv0 is raised to network.min_mtu with GRO on, from the policy alone (the old
    role read neither network.interfaces nor min_mtu); mg0, which carries the default route, is untouched."""
    host = Host(tmp_path, netns, {"gpufleet_policy": {"network": {"min_mtu": 9000}}})
    host.run()
    assert not any(a and a.endswith(("nic_info", "nic_settings")) for a in host.actions), host.actions
    assert nic(netns, "mg0") == {"mtu": 1500, "gro": "off"} and nic(netns, "gv0") == {"mtu": 1500, "gro": "off"}
    assert not (tmp_path / "udev").exists()
    assert "No NIC is named" in host.res.results["Say that no NIC is named, so NIC settings are left alone"]["msg"]

    host.vars["gpufleet_policy_host"] = {"network": {"interfaces": ["gv0"]}}
    host.run()
    assert nic(netns, "gv0") == {"mtu": 9000, "gro": "on"}
    assert nic(netns, "mg0") == {"mtu": 1500, "gro": "off"}
    assert sorted(host.invocations) == ["gv0"]
    assert host.invocations["gv0"]["allow_uplink"] is True  # named: the operator's consent, should it be an uplink
    assert host.invocations["gv0"]["rings"] is None  # NET-RING-001 is opt-in
    assert sorted(p.name for p in (tmp_path / "udev").iterdir()) == ["90-gpufleet-gv0.rules"]
    assert host.status("NET-MTU-001") == "pass" and host.status("NET-OFFL-001") == "pass"
    assert host.run().changed == []

    # Naming the management NIC is the consent nic_settings' uplink guard needs; the role says what it did.
    host.vars["gpufleet_policy_host"] = {"network": {"interfaces": ["gv0", "mg0"]}}
    host.run()
    assert nic(netns, "mg0") == {"mtu": 9000, "gro": "on"}
    report = host.res.results["Report named NICs that are on the path to the host (changed because they are named)"]
    assert report["msg"].startswith("On the path to this host") and report["msg"].endswith(
        ": mg0. Remove a NIC from the list to leave it alone."
    )


def test_tags_select_one_nic_field(tmp_path, netns):
    """--tags NET-MTU-001 changes the MTU and nothing else: GRO stays off and no ring size reaches nic_settings even
    with NET-RING-001 turned on (the old role's one task set offloads and rings whatever the tag). The persistence
    file keeps what is already at its target, so a later full run completes it."""
    host = Host(
        tmp_path,
        netns,
        {
            "gpufleet_policy": {"network": {"min_mtu": 9000, "interfaces": ["gv0"]}},
            "network_tuning_net_ring_001_enabled": True,
        },
    )
    host.run(tags="NET-MTU-001")
    assert nic(netns, "gv0") == {"mtu": 9000, "gro": "off"}
    args = host.invocations["gv0"]
    assert args["mtu"] == 9000 and args["rings"] is None
    assert "generic-receive-offload" not in (args["offloads"] or {})
    rule = (tmp_path / "udev/90-gpufleet-gv0.rules").read_text()
    assert 'ATTR{mtu}="9000"' in rule and " gro " not in rule

    host.run(tags="NET-OFFL-001")
    assert nic(netns, "gv0") == {"mtu": 9000, "gro": "on"}
    assert host.invocations["gv0"]["rings"] is None
    assert " gro on" in (tmp_path / "udev/90-gpufleet-gv0.rules").read_text()
    assert host.run().changed == []


def test_no_long_link_no_tcp_change(tmp_path, netns):
    """A host whose site has no long-haul link gets no TCP change: no drop-in, every per-namespace key as it was
    (the old role set BBR, MTU probing and slow start after idle on every host). A short link (10 ms) sizes buffers
    only (NET-TCP-001 judges it) and still leaves congestion control, MTU probing and slow start alone."""
    stock = {k: sysctl(netns, k) for k in HOST_KEYS}
    host = Host(tmp_path, netns, {"gpufleet_policy": {"site": "sg"}})
    host.run()
    assert {k: sysctl(netns, k) for k in HOST_KEYS} == stock
    assert not (tmp_path / "etc").exists()
    assert {host.status(r) for r in ("NET-TCP-001", "NET-TCP-002", "NET-TCP-003", "NET-TCP-004")} == {"skip"}

    host.vars["gpufleet_policy"] = {
        "site": "sg",
        "sites": {"sg": {"links": {"fra": {"rtt_ms": 10, "bandwidth_gbps": 1}}}},
    }
    host.run()
    after = {k: sysctl(netns, k) for k in HOST_KEYS}
    for key in ("tcp_congestion_control", "tcp_mtu_probing", "tcp_slow_start_after_idle"):
        assert after[key] == stock[key], key
    text = (tmp_path / "etc/sysctl.d/61-gpufleet-network.conf").read_text()
    assert "tcp_congestion_control" not in text and "mtu_probing" not in text and "slow_start" not in text
    assert "default_qdisc" not in text
    assert host.status("NET-TCP-001") == "pass"


def test_example_inventory_layers(tmp_path, netns):
    """The policy split as inventories/example splits it: links in gpufleet_policy (group_vars/all.yml), the site in
    gpufleet_policy_group (group_vars/ap_southeast.yml), and a --policy file's gpufleet_policy_overrides. NET-TCP-001
    asks for 4 x 220 ms x 1 Gbit/s = 110 MB (x 5 with the override: 137.5 MB) and the role writes exactly that; the
    audit with the same layers passes. The old role read gpufleet_policy alone: no site, no links, no buffers."""
    layers = {
        "gpufleet_policy": yaml.safe_load((EXAMPLE / "all.yml").read_text())["gpufleet_policy"],
        "gpufleet_policy_group": yaml.safe_load((EXAMPLE / "ap_southeast.yml").read_text())["gpufleet_policy_group"],
    }
    host = Host(tmp_path, netns, layers)
    assert host.run(audit_only=True).status("NET-TCP-001") == "fail"
    host.run()
    assert sysctl(netns, "tcp_rmem") == "4096 131072 110000000"
    assert host.status("NET-TCP-001") == "pass"
    assert (
        host.res.results["Tell which role variables take the policy's place"]["ansible_facts"][
            "network_tuning_policy_overrides"
        ]
        == []
    )

    host.vars["gpufleet_policy_overrides"] = {"network": {"buffer_factor": 5}}
    assert host.run(audit_only=True).status("NET-TCP-001") == "fail"
    host.run()
    assert sysctl(netns, "tcp_rmem") == "4096 131072 137500000" == sysctl(netns, "tcp_rmem")
    assert host.status("NET-TCP-001") == "pass"

    # A role variable set by the user wins, and the role says so.
    host.vars["network_tuning_buffer_bytes"] = 150000000
    host.run()
    assert sysctl(netns, "tcp_wmem") == "4096 16384 150000000"
    overrides = host.res.results["Tell which role variables take the policy's place"]["ansible_facts"][
        "network_tuning_policy_overrides"
    ]
    assert [(o["variable"], o["value"], o["policy_value"]) for o in overrides] == [
        ("network_tuning_buffer_bytes", 150000000, 137500000)
    ]


def test_per_route_congestion_control(tmp_path, netns):
    """network.congestion_control_scope: routes. The route to the long-haul peer's prefix (reached through the
    default route) gets its own route with the same gateway and device plus `congctl bbr`; the namespace's default
    stays reno; the drop-in has no tcp_congestion_control; a boot unit replays the route, enabled by its .wants link.
    The audit judges NET-TCP-002 on the route: fail before, pass after. Check mode predicts it and changes nothing; a
    second run changes nothing. The old role set the host default (and the old audit judged only the default)."""
    host = Host(tmp_path, netns, {"gpufleet_policy": peer_policy("routes")})
    routes_before = labkit.ns_exec(netns, "ip", "route", "show")
    finding = host.run(audit_only=True).findings["NET-TCP-002"]
    assert finding["status"] == "fail" and "198.51.100.0/24" in finding["message"]  # the audit reads the routes
    host.run(check=True)
    assert "Per-route congestion control to the long-haul peers (NET-TCP-002)" in host.changed
    assert labkit.ns_exec(netns, "ip", "route", "show") == routes_before and not (tmp_path / "systemd").exists()

    host.run()
    assert labkit.ns_exec(netns, "ip", "route", "show", "exact", "198.51.100.0/24").split() == [
        "198.51.100.0/24",
        "via",
        "10.9.0.1",
        "dev",
        "mg0",
        "congctl",
        "bbr",
    ]
    assert "congctl" not in labkit.ns_exec(netns, "ip", "route", "show", "default")
    assert sysctl(netns, "tcp_congestion_control") == "reno"
    conf = (tmp_path / "etc/sysctl.d/61-gpufleet-network.conf").read_text()
    assert "tcp_congestion_control" not in conf and "tcp_slow_start_after_idle = 0" in conf
    unit = tmp_path / "systemd/gpufleet-route-congctl.service"
    assert "ExecStart=" in unit.read_text() and "198.51.100.0/24 via 10.9.0.1 dev mg0 congctl bbr" in unit.read_text()
    wants = tmp_path / "systemd/multi-user.target.wants/gpufleet-route-congctl.service"
    assert wants.is_symlink() and wants.resolve() == unit.resolve()
    assert host.status("NET-TCP-002") == "pass"  # judged on the route, the default (reno) is the owner's
    assert host.run().changed == []
