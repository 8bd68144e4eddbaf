"""`gpufleet rollback` (playbooks/rollback.yml) undoes per-route congestion control (network.congestion_control_scope:
routes) in a real network namespace: the route route_congctl changed is re-created exactly as it was (its own route:
gateway, device, protocol, metric, MTU, no congctl) or deleted (the route it created from the default route), and the
boot unit and its multi-user.target.wants link are removed. Rollback in check mode changes nothing; a second rollback
changes nothing. The old rollback knew no `route` entries and left the link (and a dangling link once the unit was
gone)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import labkit
import pytest

from gpufleet.runner import run_playbook

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_network_tuning_safety import PEER_PREFIX as PREFIX  # noqa: E402
from test_network_tuning_safety import Host, host_sysctls, netns, peer_policy  # noqa: E402, F401

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
POLICY = peer_policy("routes")
# The role with the rollback records remediate.yml would give it (module_defaults of the remediation group).
PLAY = """
- name: Tune the network, recording prior values
  hosts: all
  gather_facts: false
  module_defaults:
    group/gpufleet.tuning.remediation:
      rollback_run_id: run-1
      rollback_dir: "{{ gpufleet_rollback_dir }}"
  roles:
    - role: gpufleet.tuning.network_tuning
"""


def routes(ns: str) -> list:
    return json.loads(labkit.ns_exec(ns, "ip", "-j", "-4", "route", "show")) + json.loads(
        labkit.ns_exec(ns, "ip", "-j", "-6", "route", "show")
    )


def rollback(host: Host, check: bool = False, diff: bool = False) -> dict:
    res = run_playbook(str(REPO / "playbooks" / "rollback.yml"), str(host.tmp / "hosts.yml"), check=check, diff=diff)
    assert res.hosts["ns"].status == "ok", res.hosts["ns"].message
    return res.hosts["ns"].results["Restore the values recorded before the run"]


def recording_host(tmp_path: Path, ns: str, policy: dict, **host_vars) -> Host:
    """The namespace's host with ``policy``, its rollback records and remediation lock under tmp_path (no become);
    ``host_vars`` are more of its variables."""
    return Host(
        tmp_path,
        ns,
        {
            "gpufleet_policy": policy,
            "gpufleet_become": False,
            "gpufleet_rollback_dir": str(tmp_path / "rollback"),
            "gpufleet_lock_path": str(tmp_path / "run/remediation.lock"),
            **host_vars,
        },
    )


def _lab_host(tmp_path, ns):
    """The namespace's host (rollback records and lock under tmp_path), the play and its inventory."""
    host = recording_host(tmp_path, ns, POLICY)
    return host, labkit.write_play(tmp_path, PLAY), labkit.write_inventory(tmp_path, {"ns": host.vars})


@pytest.mark.parametrize("own_route", [True, False], ids=["existing-route", "created-from-default"])
def test_rollback_restores_routes_unit_and_link(tmp_path, netns, own_route):  # noqa: F811 (fixture)
    if own_route:
        # A route of its own with attributes a replace must keep and a rollback must bring back.
        labkit.ns_exec(
            netns, "ip", "route", "add", PREFIX, "via", "10.9.0.1", "dev", "mg0", "proto", "static", "mtu", "1400"
        )
    host, play, inventory = _lab_host(tmp_path, netns)
    before = routes(netns)
    res = run_playbook(str(play), str(inventory))
    assert res.hosts["ns"].status == "ok", res.hosts["ns"].message
    exact = json.loads(labkit.ns_exec(netns, "ip", "-j", "route", "show", "exact", PREFIX))
    assert exact and exact[0]["metrics"][-1].get("congestion") == "bbr", exact
    if own_route:  # the replace kept the route's protocol and MTU
        assert exact[0]["protocol"] == "static" and exact[0]["metrics"][0].get("mtu") == 1400, exact
    unit = tmp_path / "systemd/gpufleet-route-congctl.service"
    wants = tmp_path / "systemd/multi-user.target.wants/gpufleet-route-congctl.service"
    assert unit.exists() and wants.is_symlink()
    record = json.loads((tmp_path / "rollback/run-1.json").read_text())
    [entry] = [e for e in record["entries"] if e["kind"] == "route"]
    assert entry["prefix"] == PREFIX and entry["family"] == "inet"
    assert (entry["route"] is None) is (not own_route)
    assert {e["path"] for e in record["entries"] if e["kind"] == "file"} >= {str(unit), str(wants)}
    after = routes(netns)

    # Issue 29: --check --diff shows what every kind would restore (the value now, the recorded one), not only
    # files and sysctl/sysfs values: a route, gpufleet's own routing table (route_follow) and NIC settings.
    labkit.ns_exec(netns, "ip", "rule", "add", "to", PREFIX, "pref", "900", "lookup", "1234")
    labkit.ns_exec(netns, "ip", "route", "add", PREFIX, "via", "10.9.0.1", "dev", "mg0", "table", "1234")
    record["entries"] += [
        {"kind": "route_table", "table": 1234, "unit": "gpufleet-route-follow.service"},
        {"kind": "nic", "name": "gv0", "field": "mtu", "value": 1400},
        {"kind": "nic", "name": "gv0", "field": "offloads", "value": {"generic-receive-offload": True}},
    ]
    (tmp_path / "rollback/run-1.json").write_text(json.dumps(record))
    nics = labkit.ns_exec(netns, "ip", "-j", "link", "show", "gv0")
    predicted = rollback(host, check=True, diff=True)
    assert predicted["changed"] is True and f"route {PREFIX}" in predicted["restored"], predicted
    assert routes(netns) == after and unit.exists() and wants.is_symlink()
    assert labkit.ns_exec(netns, "ip", "-j", "link", "show", "gv0") == nics
    assert "to 198.51.100.0/24 lookup 1234" in labkit.ns_exec(netns, "ip", "rule", "show")
    diffs = {d["before_header"]: (d["before"], d["after"]) for d in predicted["diff"]}
    tuned = f"{PREFIX} via 10.9.0.1 dev mg0" + (" proto static" if own_route else "")
    assert diffs[f"route {PREFIX}"][0].startswith(tuned) and "congctl bbr" in diffs[f"route {PREFIX}"][0]
    assert diffs[f"route {PREFIX}"][1] == (f"{tuned} mtu 1400\n" if own_route else ""), diffs
    assert diffs["route_table 1234"] == (
        f"-4 rule to {PREFIX} pref 900 lookup 1234\n-4 route {PREFIX} table 1234\n",
        "",
    ), diffs
    assert diffs["nic gv0 mtu"] == ("mtu: 1500\n", "mtu: 1400\n")
    assert diffs["nic gv0 offloads"] == (
        "offloads.generic-receive-offload: off\n",
        "offloads.generic-receive-offload: on\n",
    ), diffs

    done = rollback(host)
    assert done["changed"] is True and f"route {PREFIX}" in done["restored"], done
    assert routes(netns) == before
    assert not unit.exists() and not wants.is_symlink() and not wants.exists()
    assert "lookup 1234" not in labkit.ns_exec(netns, "ip", "rule", "show")

    again = rollback(host)
    assert again["changed"] is False and again["restored"] == [], again
    assert routes(netns) == before
    assert rollback(host, check=True)["changed"] is False


def test_replace_and_rollback_keep_locked_and_time_metrics(tmp_path, netns):  # noqa: F811 (fixture)
    """A route with `mtu lock 1400 rtt 30ms`: route_congctl's replace keeps both (the lock too, which `ip -j`
    does not print: compared on the text output as well), and rollback puts the route back exactly as it was.
    Before issue 28's fix the replace dropped the lock and rtt (only plain-number metrics were replayed)."""
    labkit.ns_exec(
        netns, "ip", "route", "add", PREFIX, "via", "10.9.0.1", "dev", "mg0", "proto", "static",
        "mtu", "lock", "1400", "rtt", "30ms",
    )  # fmt: skip
    host, play, inventory = _lab_host(tmp_path, netns)
    before = routes(netns)
    text_before = labkit.ns_exec(netns, "ip", "route", "show", "exact", PREFIX)
    assert "mtu lock 1400" in text_before and "rtt 30ms" in text_before, text_before
    res = run_playbook(str(play), str(inventory))
    assert res.hosts["ns"].status == "ok", res.hosts["ns"].message
    text_tuned = labkit.ns_exec(netns, "ip", "route", "show", "exact", PREFIX)
    assert "mtu lock 1400" in text_tuned and "rtt 30ms" in text_tuned and "congctl bbr" in text_tuned, text_tuned

    done = rollback(host)
    assert done["changed"] is True and f"route {PREFIX}" in done["restored"], done
    assert routes(netns) == before
    assert labkit.ns_exec(netns, "ip", "route", "show", "exact", PREFIX) == text_before
