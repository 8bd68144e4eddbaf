"""The one-call audit module through real Ansible: measured links, gather subsets, bad input."""

from __future__ import annotations

import sys
from pathlib import Path

import labkit
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = pytest.mark.integration
TASK = "Audit"

PLAYBOOK = labkit.audit_play(
    "Audit module",
    ethtool_path="{{ gpufleet_ethtool_path }}",
    gather="{{ test_gather | default(['gpu', 'host', 'network']) }}",
    include_facts="{{ test_include_facts | default(true) }}",
    interfaces="{{ test_interfaces | default(omit) }}",
)


@pytest.fixture(scope="module")
def listener():
    """A TCP listener on loopback standing in for a peer site's SSH port."""
    with labkit.listener() as port:
        yield port


@pytest.fixture(scope="module")
def results(sim_lib, tmp_path_factory, listener):
    tmp = tmp_path_factory.mktemp("audit")
    built = demo.build(tmp / "fleet")
    base = {}
    for part in sorted((REPO / "inventories" / "demo" / "group_vars" / "all").glob("*.yml")):
        base.update(yaml.safe_load(part.read_text()))
    env_host = "iad-h100-03"
    common = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "gpufleet_audit_root": str(built[env_host] / "root"),
        "gpufleet_ethtool_path": str(REPO / "tests/fixtures/ethtool/fake-ethtool"),
        "gpufleet_environment": {
            "LD_LIBRARY_PATH": str(sim_lib.parent),
            "FAKE_NVML_STATE": str(built[env_host] / "nvml.state"),
            "FAKE_ETHTOOL_DIR": str(built[env_host] / "ethtool"),
        },
    }
    hosts = {
        "measured": {
            **common,
            "test_policy": {
                "peers": [
                    {"site": "fra", "host": "127.0.0.1", "port": listener, "bandwidth_gbps": 1},
                    {"site": "closed", "host": "127.0.0.1", "port": 1},
                ]
            },
        },
        "declared": {**common, "test_policy": base["gpufleet_policy"] | {"site": "us_east"}},
        "gpu_only": {**common, "test_gather": ["gpu"], "test_include_facts": False},
        # The same effective policy written two ways (defaults spelled out vs left out) must digest the same.
        "defaults_spelled": {**common, "test_gather": ["gpu"], "test_policy": {"memory": {"max_swappiness": 10}}},
        "bad_policy": {**common, "test_policy": {"memory": {"max_swappiness": "high"}}},
        "bad_rule": {**common, "test_policy": {"rules": {"NOPE-001": {"enabled": False}}}},
        "bad_iface": {**common, "test_interfaces": ["eth0;reboot"]},
    }
    return labkit.run_hosts(tmp, PLAYBOOK, hosts)


def _ok(results, name):
    host = results[name]
    assert host.status == "ok", host.message
    return host.results[TASK]


def test_policy_digest_names_the_effective_policy(results):
    """gpufleet report diff tells a policy change from a fix by this digest of the merged, validated policy."""
    digests = {name: _ok(results, name)["policy_digest"] for name in ("gpu_only", "defaults_spelled", "declared")}
    assert all(d.startswith("sha256:") and len(d) == 7 + 64 for d in digests.values())
    assert digests["gpu_only"] == digests["defaults_spelled"]  # same effective policy, however written
    assert digests["declared"] != digests["gpu_only"]  # sites and links declared: another policy


def test_measured_links_are_used_and_say_so(results):
    res = _ok(results, "measured")
    assert res["links"]["source"] == "measured"
    [peer] = res["links"]["peers"]
    assert peer["site"] == "fra" and 0 < peer["rtt_ms"] < 100
    assert res["links"]["errors"][0]["site"] == "closed"
    findings = {f["rule"]: f for f in res["findings"]}
    # A loopback "link" is short: long-link rules skip, the buffer rule uses the measured RTT.
    assert findings["NET-TCP-002"]["status"] == "skip"
    assert findings["NET-TCP-001"]["observed"]["link"]["site"] == "fra"


def test_declared_links(results):
    res = _ok(results, "declared")
    assert res["links"]["source"] == "declared" and res["links"]["site"] == "us_east"
    assert {p["site"] for p in res["links"]["peers"]} == {"ap_southeast", "eu_west"}
    assert {f["status"] for f in res["findings"]} <= {"pass", "skip"}


def test_gather_subset_skips_the_rest(results):
    res = _ok(results, "gpu_only")
    assert res["facts"] == {}
    findings = {f["rule"]: f for f in res["findings"]}
    assert findings["GPU-PWR-001"]["status"] == "pass"
    assert findings["HOST-CPU-001"]["status"] == "skip" and findings["NET-MTU-001"]["status"] == "skip"
    assert res["summary"]["by_status"]["pass"] + res["summary"]["by_status"]["skip"] == len(res["findings"])


@pytest.mark.parametrize(
    "name, message",
    [
        ("bad_policy", "policy.memory.max_swappiness: expected int"),
        ("bad_rule", "policy.rules.NOPE-001: unknown rule id"),
        ("bad_iface", "interfaces: invalid interface name 'eth0;reboot'"),
    ],
)
def test_bad_input_fails_clearly(results, name, message):
    labkit.assert_clear_error(results[name], message)
