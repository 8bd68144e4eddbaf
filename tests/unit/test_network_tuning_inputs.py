"""The pure parts behind network_tuning (issue 12 §1, §3): links classified exactly as the rules judge them, the
policy's per-peer prefixes and congestion control scope validated with the key's path, and the route commands and
boot unit of per-route congestion control. What the role sets (the rules' targets) is tested in
test_targets_network.py."""

from __future__ import annotations

import pytest
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
