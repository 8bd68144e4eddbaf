"""network.congestion_control_scope: follow (issue 28 §4). route_follow's table copies the main table's route the
kernel would use for each long-haul prefix (longest covering route, ECMP nexthops, nexthop objects, more specific
routes inside the prefix) with congctl, and re-derives it when the main table changes: a new gateway gives one
`ip route replace` with the new gateway, a prefix no longer declared loses its rule and routes. The state read is
what `ip -j` prints (a fake `ip` answering from a dict of tables); the audit judges the route `ip route get` shows.
Before issue 28 §4 there was no follow scope: the policy refused it and the only per-destination scope pinned routes
to the gateway of the day."""

from __future__ import annotations

import ipaddress
import json

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import route_follow, routes
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import validate
from rule_cases import evaluate, tcp
from rule_facts import healthy

PREFIX = "198.51.100.0/24"
DEFAULT_A = {"dst": "default", "gateway": "10.9.0.1", "dev": "mg0", "protocol": "dhcp", "metric": 100, "flags": []}


class FakeIp:
    """`ip -j ...` answering from ``main`` (routes of the main table), ``ours`` (routes of table 7250) and ``rules``
    (rules into 7250), IPv4 only; ``ip route get`` from ``get``."""

    def __init__(self, main, ours=(), rules=(), get=None):
        self.main, self.ours, self.rules, self.get = list(main), list(ours), list(rules), get or {}

    def __call__(self, argv):
        assert argv[:2] == ["ip", "-j"], argv
        fam, what = argv[2], argv[3:]
        if fam == "-6":
            return 0, "[]", ""
        if what[:4] == ["route", "show", "table", "main"]:
            sel, prefix = what[4], ipaddress.ip_network(what[5])
            if sel == "match":  # the routes covering the prefix
                out = [r for r in self.main if prefix.subnet_of(_net(r["dst"]))]
            else:  # root: the routes inside it
                out = [r for r in self.main if _net(r["dst"]).subnet_of(prefix)]
            return 0, json.dumps(out), ""
        if what == ["route", "show", "table", "all"]:
            return 0, json.dumps([dict(r, table="7250") for r in self.ours] + self.main), ""
        if what == ["rule", "show"]:
            return 0, json.dumps(self.rules), ""
        if what[:2] == ["route", "get"]:
            return 0, json.dumps([self.get[what[2]]] if what[2] in self.get else []), ""
        raise AssertionError(argv)


def _net(dst):
    return ipaddress.ip_network("0.0.0.0/0" if dst == "default" else dst)


def _rule(prefix=PREFIX, prio=32765):
    d, n = prefix.split("/")
    return {"priority": prio, "src": "all", "dst": d, "dstlen": int(n), "table": "7250", "protocol": "250"}


def follower(ip):
    return route_follow.Follower(ip, [PREFIX], "bbr")


def test_first_sync_adds_the_rule_and_copies_the_default_route():
    actions, unrouted = follower(FakeIp([DEFAULT_A])).plan()
    assert unrouted == []
    assert actions == [
        ["-4", "rule", "add", "to", PREFIX, "lookup", "7250", "pref", "32765", "proto", "250"],
        ["-4", "route", "replace", PREFIX, "table", "7250", "proto", "250", "congctl", "bbr", "via", "10.9.0.1",
         "dev", "mg0"],
    ]  # fmt: skip


def test_in_line_nothing_to_do_and_a_new_gateway_is_followed():
    ours = [{"dst": PREFIX, "gateway": "10.9.0.1", "dev": "mg0", "protocol": "250", "metrics": [{"congestion": "bbr"}]}]
    assert follower(FakeIp([DEFAULT_A], ours, [_rule()])).plan() == ([], [])
    # failover: the main table's default route now goes through the other NIC
    moved = dict(DEFAULT_A, gateway="10.10.0.1", dev="gv0")
    actions, _ = follower(FakeIp([moved], ours, [_rule()])).plan()
    assert actions == [
        ["-4", "route", "replace", PREFIX, "table", "7250", "proto", "250", "congctl", "bbr", "via", "10.10.0.1",
         "dev", "gv0"],
    ]  # fmt: skip


def test_ecmp_nexthop_objects_and_more_specific_routes():
    ecmp = {
        "dst": "default",
        "protocol": "static",
        "metric": 1024,
        "nexthops": [
            {"gateway": "10.9.0.1", "dev": "mg0", "weight": 1, "flags": []},
            {"gateway": "10.10.0.1", "dev": "gv0", "weight": 2, "flags": ["onlink", "linkdown"]},
        ],
    }
    specific = {"dst": "198.51.100.128/25", "dev": "gv0", "scope": "link", "prefsrc": "10.10.0.2",
                "metrics": [{"mtu": 1400}]}  # fmt: skip
    unreachable = {"dst": "198.51.100.64/26", "type": "unreachable"}
    actions, _ = follower(FakeIp([ecmp, specific, unreachable])).plan()
    replaces = [a for a in actions if a[2] == "replace"]
    assert replaces == [
        ["-4", "route", "replace", PREFIX, "table", "7250", "proto", "250", "congctl", "bbr",
         "nexthop", "via", "10.9.0.1", "dev", "mg0", "weight", "1",
         "nexthop", "via", "10.10.0.1", "dev", "gv0", "onlink", "weight", "2"],
        ["-4", "route", "replace", "198.51.100.128/25", "table", "7250", "proto", "250", "scope", "link", "src",
         "10.10.0.2", "mtu", "1400", "congctl", "bbr", "dev", "gv0"],
    ]  # fmt: skip
    nh = route_follow.mirror_argv(PREFIX, {"dst": "default", "nhid": 7, "gateway": "10.9.0.1"}, 7250, "bbr")
    assert nh[-4:] == ["congctl", "bbr", "nhid", "7"]


def test_the_longest_covering_route_wins_then_the_lowest_metric():
    wide = dict(DEFAULT_A)
    backup = dict(DEFAULT_A, gateway="10.9.0.9", metric=200)
    narrow = {"dst": "198.51.0.0/16", "gateway": "10.10.0.1", "dev": "gv0", "metric": 500}
    found = route_follow.underlying(PREFIX, [backup, wide, narrow], [])
    assert found == {PREFIX: narrow}
    assert route_follow.underlying(PREFIX, [backup, wide], []) == {PREFIX: wide}
    assert route_follow.underlying(PREFIX, [{"dst": "default", "type": "blackhole"}], []) == {}


def test_unrouted_prefix_gets_its_rule_only_and_stale_entries_go():
    stale_route = {"dst": "203.0.113.0/24", "gateway": "10.9.0.1", "dev": "mg0", "metrics": [{"congestion": "bbr"}]}
    ip = FakeIp([], [stale_route], [_rule(), _rule("203.0.113.0/24")])
    actions, unrouted = follower(ip).plan()
    assert unrouted == [PREFIX]
    assert actions == [
        ["-4", "rule", "del", "to", "203.0.113.0/24", "pref", "32765", "lookup", "7250"],
        ["-4", "route", "del", "203.0.113.0/24", "table", "7250"],
    ]
    assert follower(ip).clear_plan() == [
        ["-4", "rule", "del", "to", PREFIX, "pref", "32765", "lookup", "7250"],
        ["-4", "rule", "del", "to", "203.0.113.0/24", "pref", "32765", "lookup", "7250"],
        ["-4", "route", "del", "203.0.113.0/24", "table", "7250"],
    ]


def test_read_route_get_congctl_is_what_the_kernel_uses():
    got = {"198.51.100.0": {"dst": "198.51.100.0", "gateway": "10.9.0.1", "table": "7250",
                            "metrics": [{"congestion": "bbr"}]}}  # fmt: skip
    assert routes.read_route_get_congctl(FakeIp([], get=got), [PREFIX, "203.0.113.0/24"]) == {
        PREFIX: "bbr",
        "203.0.113.0/24": None,
    }


@pytest.mark.parametrize("seen, status", [("bbr", "pass"), (None, "fail"), ("cubic", "fail")])
def test_audit_judges_the_kernels_route_under_scope_follow(seen, status):
    policy = {
        "site": "ap",
        "sites": {"ap": {"links": {"eu_west": {"rtt_ms": 180, "bandwidth_gbps": 1, "prefixes": [PREFIX]}}}},
        "network": {"congestion_control_scope": "follow"},
    }
    validate(policy)
    facts = healthy()
    tcp(facts).update(congestion_control="cubic")
    facts["network"]["routes"] = {PREFIX: seen}
    finding = evaluate(facts, policy)["NET-TCP-002"]
    assert finding["status"] == status and finding["observed"]["scope"] == "follow", finding["message"]


def test_unit_runs_the_program_and_clears_when_stopped():
    from ansible_collections.gpufleet.tuning.plugins.module_utils import route_congctl

    text = route_congctl.follow_unit_text("/usr/bin/python3", "/usr/local/lib/gpufleet", "/etc/gpufleet/rf.json")
    assert "ExecStart=/usr/bin/python3 /usr/local/lib/gpufleet/route_follow.py watch /etc/gpufleet/rf.json" in text
    assert "ExecStopPost=/usr/bin/python3 /usr/local/lib/gpufleet/route_follow.py clear /etc/gpufleet/rf.json" in text
    assert "Restart=always" in text and "WantedBy=multi-user.target" in text
