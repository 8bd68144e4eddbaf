"""The pure parts behind network_tuning (issue 12 §1, §3): links classified exactly as the rules judge them, the
policy's per-peer prefixes and congestion control scope validated with the key's path, what one NIC gets per
selected field, and the route commands and boot unit of per-route congestion control."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.tuning.plugins.filter.nic_targets import nic_targets
from ansible_collections.gpufleet.tuning.plugins.filter.tcp_buffer_bytes import tcp_buffer_bytes
from ansible_collections.gpufleet.tuning.plugins.module_utils import links, route_congctl, routes, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import PolicyError, validate

POLICY = {
    "site": "sg",
    "sites": {
        "sg": {
            "links": {
                "fra": {"rtt_ms": 160, "bandwidth_gbps": 1, "prefixes": ["198.51.100.0/24", "2001:db8:100::/48"]},
                "hk": {"rtt_ms": 30, "bandwidth_gbps": 10, "prefixes": ["203.0.113.0/24"]},
                "iad": {"rtt_ms": 220, "bandwidth_gbps": 1},
            }
        }
    },
}


def test_links_classified_as_the_rules_judge_them():
    policy = validate(POLICY)
    resolved = links.resolve(policy)
    long_links, sized, prefixes = links.classify(policy, resolved)
    facts = {"links": resolved}
    assert (
        [p["site"] for p in long_links] == [p["site"] for p in rules.long_haul_links(facts, policy)] == ["fra", "iad"]
    )
    assert [p["site"] for p in sized] == ["fra", "hk", "iad"]
    assert prefixes == ["198.51.100.0/24", "2001:db8:100::/48"]  # hk's link is short: its prefix stays default
    # The size the role writes is the size NET-TCP-001 asks for: the largest bandwidth-delay product of every link
    # with a bandwidth, long or not (4 x 30 ms x 10 Gbit/s beats 4 x 220 ms x 1 Gbit/s).
    assert tcp_buffer_bytes(sized, 4.0, 268435456) == 150000000
    for size, status in ((150000000, "pass"), (149999999, "fail")):
        tcp = {"rmem": [4096, 131072, size], "wmem": [4096, 16384, size]}
        assert rules.network.check_tcp_buffers({"links": resolved, "network": {"tcp": tcp}}, policy)["status"] == status


def test_tcp_buffer_bytes_takes_links_only():
    """The policy-dict mode is gone: the role sizes from links_info's links (declared or measured), never from the
    policy's declared links alone."""
    with pytest.raises(AnsibleFilterError, match="expected a list of links, got dict"):
        tcp_buffer_bytes(POLICY)
    assert tcp_buffer_bytes([]) == 0


def test_no_links_nothing_long():
    policy = validate({"site": "sg"})
    assert links.classify(policy, links.resolve(policy)) == ([], [], [])


@pytest.mark.parametrize(
    "prefixes, message",
    [
        ("198.51.100.0/24", "policy.sites.sg.links.fra.prefixes: expected a list"),
        (["198.51.100.1/24"], "policy.sites.sg.links.fra.prefixes[0]: '198.51.100.1/24' is not a CIDR network"),
        (["10.0.0.0/33"], "prefixes[0]: '10.0.0.0/33' is not a CIDR network"),
        ([24], "prefixes[0]: 24 is not a CIDR network"),
    ],
)
def test_bad_prefixes_name_the_key(prefixes, message):
    link = {"rtt_ms": 160, "bandwidth_gbps": 1, "prefixes": prefixes}
    with pytest.raises(PolicyError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate({"site": "sg", "sites": {"sg": {"links": {"fra": link}}}})


def test_congestion_control_scope():
    assert validate({})["network"]["congestion_control_scope"] == "host"
    assert validate({"network": {"congestion_control_scope": "routes"}})["network"]["congestion_control_scope"] == (
        "routes"
    )
    with pytest.raises(
        PolicyError, match="policy.network.congestion_control_scope: 'route' is not one of host, routes"
    ):
        validate({"network": {"congestion_control_scope": "route"}})


NIC = {
    "name": "ens1f0",
    "mtu": 1500,
    "offloads": {"generic-receive-offload": False, "tcp-segmentation-offload": True, "rx-checksumming": True},
    "offloads_fixed": ["rx-checksumming"],
    "rings": {"rx": 512, "tx": 4096, "rx_max": 4096, "tx_max": 4096},
}
WANT = {
    "generic-receive-offload": True,
    "tcp-segmentation-offload": True,
    "rx-checksumming": True,
    "scatter-gather": True,
}


DROPPING = dict(
    NIC,
    drops={
        "interval_s": 1.0,
        "ring": {"rx_out_of_buffer": {"total": 7000, "delta": 120}},
        "other": {},
        "allowance": {},
    },
)


def test_nic_targets_apply_every_field():
    out = nic_targets(
        DROPPING, min_mtu=9000, offloads=WANT, rings={"rx": "max", "tx": "max"}, apply=["mtu", "offloads", "rings"]
    )
    # scatter-gather: the NIC has no such feature; rx-checksumming: fixed by the driver.
    assert out == {
        "mtu": 9000,
        "offloads": {"generic-receive-offload": True, "tcp-segmentation-offload": True},
        "rings": {"rx": "max", "tx": "max"},
    }


def test_nic_targets_keep_passes_only_what_is_already_at_target():
    out = nic_targets(
        NIC, min_mtu=9000, offloads=WANT, rings={"rx": "max", "tx": "max"}, apply=["mtu"], keep=["offloads", "rings"]
    )
    assert out == {"mtu": 9000, "offloads": {"tcp-segmentation-offload": True}, "rings": {"tx": "max"}}
    assert nic_targets(NIC, min_mtu=9000, apply=[], keep=["mtu"]) == {}  # 1500 is not the target: left out


def test_nic_targets_mtu_never_lowered_by_policy():
    jumbo = dict(NIC, mtu=9001)
    assert "mtu" not in nic_targets(jumbo, min_mtu=9000, apply=["mtu"])
    assert nic_targets(dict(NIC, mtu=9000), min_mtu=9000, apply=["mtu"]) == {"mtu": 9000}  # kept in persistence
    assert nic_targets(jumbo, mtu=1500, apply=["mtu"]) == {"mtu": 1500}  # a user's explicit value is set as given
    with pytest.raises(AnsibleFilterError, match="unknown field 'ring'"):
        nic_targets(NIC, apply=["ring"])


def test_nic_targets_mtu_is_what_the_audit_declares():
    """network.mtu is the network's MTU: set exactly, raised or lowered, by the audit's own resolution (exact name,
    then the longest glob); nothing declared: the MTU is the operator's, never guessed."""
    table = {"ens*": 9001, "ens1f*": 9000, "ens4": 1460}
    assert nic_targets(dict(NIC, name="ens4", mtu=1500), mtu_policy=table, apply=["mtu"]) == {"mtu": 1460}  # lowered
    assert nic_targets(dict(NIC, name="ens1f0", mtu=1500), mtu_policy=table, apply=["mtu"]) == {"mtu": 9000}
    assert nic_targets(dict(NIC, name="ens5", mtu=1500), mtu_policy=table, apply=["mtu"]) == {"mtu": 9001}
    assert nic_targets(dict(NIC, name="eth0", mtu=1500), mtu_policy=table, apply=["mtu"]) == {}
    assert nic_targets(dict(NIC, mtu=1460), apply=["mtu"]) == {}  # GCP's 1460, nothing declared: left alone
    # The declaration beats the fabric floor for that NIC, exactly as NET-MTU-001 judges it.
    for name, mtu in (("ens4", 1460), ("ens1f0", 9000)):
        target = nic_targets(dict(NIC, name=name, mtu=1500), mtu_policy=table, min_mtu=9000, apply=["mtu"])["mtu"]
        assert target == mtu
        nic = dict(NIC, name=name, mtu=target, present=True, physical=True, operstate="up")
        policy = validate({"network": {"mtu": table, "min_mtu": 9000}})
        assert rules.network.check_mtu({"network": {"nics": [nic]}}, policy)["status"] == "pass"


def test_nic_targets_rings_only_where_the_audit_sees_drops():
    rings = {"rx": "max", "tx": "max"}
    assert nic_targets(DROPPING, rings=rings, apply=["rings"]) == {"rings": rings}
    counted = dict(NIC, drops={"interval_s": 1.0, "ring": {"rx_out_of_buffer": {"total": 7000, "delta": 0}}})
    assert nic_targets(counted, rings=rings, apply=["rings"]) == {"rings": rings}  # NET-RING-001 warns: flagged
    clean = dict(NIC, drops={"interval_s": 1.0, "ring": {"rx_out_of_buffer": {"total": 0, "delta": 0}}})
    # No drops: rx (512 of 4096) is left alone; tx, already at its maximum, is passed so persistence keeps it.
    assert nic_targets(clean, rings=rings, apply=["rings"]) == {"rings": {"tx": "max"}}
    assert nic_targets(NIC, rings=rings, apply=["rings"]) == {"rings": {"tx": "max"}}  # no ring counter (virtio)
    # A sizing choice, said so: every named NIC gets the rings.
    assert nic_targets(clean, rings=rings, apply=["rings"], rings_only_with_drops=False) == {"rings": rings}


def test_route_commands_keep_the_path():
    route = {"dst": "198.51.100.0/24", "gateway": "10.9.0.1", "dev": "mg0", "metric": 100, "metrics": []}
    assert routes.route_congctl_of(route) is None
    assert routes.route_congctl_of({"metrics": [{"congestion": "bbr"}]}) == "bbr"
    assert routes.route_congctl_of({"metrics": [{"congctl": "lock cubic"}]}) == "cubic"
    argv = route_congctl.replace_argv("198.51.100.0/24", route, "bbr")
    assert argv == [
        "route",
        "replace",
        "198.51.100.0/24",
        "via",
        "10.9.0.1",
        "dev",
        "mg0",
        "metric",
        "100",
        "congctl",
        "bbr",
    ]
    unit = route_congctl.unit_text("/usr/sbin/ip", [argv])
    assert "ExecStart=/usr/sbin/ip route replace 198.51.100.0/24 via 10.9.0.1 dev mg0 metric 100 congctl bbr\n" in unit
    assert "After=network-online.target" in unit and "WantedBy=multi-user.target" in unit and "Type=oneshot" in unit
