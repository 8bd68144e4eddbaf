"""Rollback records of kind `route` (route_congctl) and the one `ip route` argv builder route_congctl and rollback
share: a route replaced keeps its path, protocol and metrics; a restore re-creates it without congctl when it had
none; the first record of a prefix wins."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.routes import route_argv

# As `ip -j route show exact 198.51.100.0/24` prints it (iproute2 6.x).
OWN = {
    "dst": "198.51.100.0/24",
    "gateway": "10.9.0.1",
    "dev": "mg0",
    "protocol": "static",
    "metric": 50,
    "flags": [],
    "metrics": [{"mtu": 1400, "congestion": "bbr"}],
}
# As `ip -j route get 198.51.100.0` prints it.
GOT = {"dst": "198.51.100.0", "gateway": "10.9.0.1", "dev": "mg0", "uid": 0, "flags": [], "cache": []}


def test_replace_keeps_path_protocol_and_metrics_not_the_old_congctl():
    assert route_argv("replace", "198.51.100.0/24", OWN, "cubic") == [
        "route", "replace", "198.51.100.0/24", "via", "10.9.0.1", "dev", "mg0", "proto", "static", "metric", "50",
        "mtu", "1400", "congctl", "cubic",
    ]  # fmt: skip


def test_restore_without_congctl_when_there_was_none():
    route = dict(OWN, metrics=[{"mtu": 1400}], scope="link")
    assert route_argv("replace", "198.51.100.0/24", route) == [
        "route", "replace", "198.51.100.0/24", "via", "10.9.0.1", "dev", "mg0", "proto", "static", "scope", "link",
        "metric", "50", "mtu", "1400",
    ]  # fmt: skip


def test_created_route_and_its_delete():
    assert route_argv("replace", "198.51.100.0/24", GOT, "bbr") == [
        "route", "replace", "198.51.100.0/24", "via", "10.9.0.1", "dev", "mg0", "congctl", "bbr",
    ]  # fmt: skip
    assert route_argv("del", "198.51.100.0/24", GOT, metrics=False) == [
        "route", "del", "198.51.100.0/24", "via", "10.9.0.1", "dev", "mg0",
    ]  # fmt: skip


def test_route_entries_keyed_by_family_and_prefix_first_wins(tmp_path):
    first = {"kind": "route", "family": "inet", "prefix": "198.51.100.0/24", "route": None, "created": GOT}
    second = {"kind": "route", "family": "inet", "prefix": "198.51.100.0/24", "route": OWN, "created": None}
    v6 = {"kind": "route", "family": "inet6", "prefix": "2001:db8:100::/48", "route": None, "created": {}}
    other = dict(first, prefix="203.0.113.0/24")
    rollback.record(str(tmp_path), "run-1", [first])
    rollback.record(str(tmp_path), "run-1", [second, v6, other])
    entries = json.loads((tmp_path / "run-1.json").read_text())["entries"]
    assert entries == [first, v6, other]
    assert rollback._target(first) == ("route", "inet", "198.51.100.0/24")
