"""network.congestion_control_scope: follow (issue 28 §4) in a real network namespace: the role gives connections to
the long-haul peer's prefix BBR without touching the main table - a rule into gpufleet's table 7250, which copies the
route the kernel would use (the default route via 10.9.0.1) with `congctl bbr`; the namespace default stays reno;
the audit judges the route `ip route get` shows (fail before, pass after). Check mode changes nothing; a second run
changes nothing. The installed program (`route_follow.py watch`, what the unit runs) follows a gateway change - the
default route moved to the other NIC - and an ECMP default route at once. `gpufleet rollback` removes the rule, the
table, the unit, its link and the program, and leaves the main table alone."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import labkit
import pytest

from gpufleet.runner import run_playbook

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_network_tuning_safety import AUDIT, host_sysctls, netns, peer_policy, sysctl  # noqa: E402, F401
from test_network_tuning_safety import PEER_PREFIX as PREFIX  # noqa: E402
from test_route_rollback import recording_host  # noqa: E402

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
POLICY = peer_policy("follow")
PLAY = labkit.play(
    "Tune the network",
    roles=("network_tuning",),
    tasks=AUDIT,
    audit_only=True,
    module_defaults={
        "group/gpufleet.tuning.remediation": {
            "rollback_run_id": "run-1",
            "rollback_dir": "{{ gpufleet_rollback_dir }}",
        }
    },
)
TASK = "Congestion control to the long-haul peers, following the routing table (NET-TCP-002)"


def ip(ns: str, *argv: str) -> str:
    return labkit.ns_exec(ns, "ip", *argv)


def peer_route(ns: str) -> str:
    return " ".join(ip(ns, "route", "get", "198.51.100.5").split())


def ours(ns: str) -> str:
    return ip(ns, "route", "show", "table", "all", "proto", "250")


def wait_for(ns: str, *words: str, seconds: float = 10.0) -> str:
    deadline = time.monotonic() + seconds
    while True:
        table = " ".join(ip(ns, "route", "show", "table", "7250").split())
        if all(w in table for w in words) or time.monotonic() > deadline:
            return table
        time.sleep(0.1)


def test_follow_scope_follows_the_gateway_and_rolls_back(tmp_path, netns):  # noqa: F811 (fixture)
    lib, config = tmp_path / "lib", tmp_path / "etc/gpufleet/route-follow.json"
    host = recording_host(
        tmp_path,
        netns,
        POLICY,
        network_tuning_route_follow_lib_dir=str(lib),
        network_tuning_route_follow_config=str(config),
    )
    host.play = labkit.write_play(tmp_path, PLAY)
    main_before, rules_before = ip(netns, "route", "show"), ip(netns, "rule", "show")
    finding = host.run(audit_only=True).findings["NET-TCP-002"]
    assert finding["status"] == "fail" and PREFIX in finding["message"], finding

    # Routes pinned by scope routes (their boot unit) would be copied as they are: refused until rolled back.
    pinned = tmp_path / "systemd/gpufleet-route-congctl.service"
    pinned.parent.mkdir(parents=True)
    pinned.write_text(f"[Service]\nExecStart=/sbin/ip route replace {PREFIX} via 10.9.0.1 dev mg0 congctl bbr\n")
    inventory = labkit.write_inventory(tmp_path, {"ns": host.vars})
    refused = run_playbook(str(host.play), str(inventory), extravars={"audit_only": False}, check=True).hosts["ns"]
    assert refused.status == "failed" and "pinned by scope routes" in refused.message, refused.message
    assert "gpufleet rollback -l ns --run RUN" in refused.message
    pinned.unlink()
    pinned.parent.rmdir()

    host.run(check=True)
    assert TASK in host.changed
    assert ip(netns, "rule", "show") == rules_before and ours(netns) == ""
    assert not config.exists() and not (tmp_path / "systemd").exists()

    host.run()
    assert "via 10.9.0.1 dev mg0 table 7250" in peer_route(netns) and "congctl bbr" in peer_route(netns)
    assert ip(netns, "route", "show") == main_before  # the main table is the owner's
    assert f"to {PREFIX} lookup 7250" in ip(netns, "rule", "show")
    assert sysctl(netns, "tcp_congestion_control") == "reno"
    assert json.loads(config.read_text())["prefixes"] == [PREFIX]
    unit = tmp_path / "systemd/gpufleet-route-follow.service"
    wants = tmp_path / "systemd/multi-user.target.wants/gpufleet-route-follow.service"
    assert f"route_follow.py watch {config}" in unit.read_text() and wants.resolve() == unit.resolve()
    assert (lib / "route_follow.py").is_file() and (lib / "routes.py").is_file()
    assert host.status("NET-TCP-002") == "pass"
    assert host.run().changed == []

    # What the unit runs, in the namespace: the default route moves to the other NIC, then becomes ECMP.
    watcher = subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, str(lib / "route_follow.py"), "watch", str(config)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        ip(netns, "route", "replace", "default", "via", "10.10.0.1", "dev", "gv0")
        table = wait_for(netns, "via 10.10.0.1 dev gv0")
        assert table == f"{PREFIX} via 10.10.0.1 dev gv0 proto 250 congctl bbr", table
        assert "via 10.10.0.1 dev gv0 table 7250" in peer_route(netns) and "congctl bbr" in peer_route(netns)
        ip(netns, "route", "replace", "default", "nexthop", "via", "10.9.0.1", "dev", "mg0",
           "nexthop", "via", "10.10.0.1", "dev", "gv0")  # fmt: skip
        table = wait_for(netns, "nexthop via 10.9.0.1")
        assert "congctl bbr nexthop via 10.9.0.1 dev mg0 weight 1 nexthop via 10.10.0.1 dev gv0 weight 1" in table
    finally:
        watcher.terminate()
        _out, err = watcher.communicate(timeout=10)
    assert "FAILED" not in err, err
    main_now = ip(netns, "route", "show")

    done = run_playbook(str(REPO / "playbooks" / "rollback.yml"), str(tmp_path / "hosts.yml"))
    assert done.hosts["ns"].status == "ok", done.hosts["ns"].message
    restored = done.hosts["ns"].results["Restore the values recorded before the run"]
    assert restored["changed"] is True and "route_table 7250" in restored["restored"], restored
    assert ip(netns, "rule", "show") == rules_before and ours(netns) == ""
    assert ip(netns, "route", "show") == main_now  # rollback leaves the owner's main table alone
    assert not unit.exists() and not wants.is_symlink() and not config.exists()
    assert not (lib / "route_follow.py").exists() and not (lib / "routes.py").exists()
    assert "table 7250" not in peer_route(netns)
