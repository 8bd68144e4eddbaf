"""One policy for the check and the fix (issue 12 §1): the filter the roles use merges the same layers, in the same
order, with the same code as the audit; every role and both playbooks name the same layers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.tuning.plugins.filter import effective_policy as ep
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as policy_mod

from gpufleet import cli

REPO = Path(__file__).resolve().parents[2]
FLEET = {"sites": {"ap": {"links": {"eu": {"rtt_ms": 180, "bandwidth_gbps": 1}}}}, "network": {"min_mtu": 9000}}


def test_layers_merge_in_order_over_the_defaults():
    pol = ep.effective_policy([FLEET, {"site": "ap"}, None, {"network": {"buffer_factor": 8}}])
    assert pol["site"] == "ap"
    assert pol["network"]["buffer_factor"] == 8
    assert pol["network"]["min_mtu"] == 9000
    assert pol["network"]["max_buffer_bytes"] == policy_mod.DEFAULTS["network"]["max_buffer_bytes"]
    later = ep.effective_policy([{"network": {"min_mtu": 9000}}, {"network": {"min_mtu": 1500}}])
    assert later["network"]["min_mtu"] == 1500


def test_same_result_as_the_audit_module():
    layers = [
        FLEET,
        {"site": "ap"},
        {"power": {"min_power_limit_pct": 90}},
        {"rules": {"NET-TCP-003": {"enabled": False}}},
    ]
    combined = {}
    for layer in layers:
        combined = policy_mod.merge(combined, layer)
    assert ep.effective_policy(layers) == policy_mod.validate(combined)


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([{"network": {"buffer_factor": "x"}}], "policy.network.buffer_factor"),
        ([{}, {"memory": {"swapiness": 5}}], "policy.memory.swapiness: unknown key"),
        ([{"rules": {"NOPE-001": {"enabled": False}}}], "policy.rules.NOPE-001: unknown rule id"),
        ([{}, "site: ap"], "gpufleet_policy_group must be a mapping"),
        ("not a list", "expected a list of policy layers"),
    ],
)
def test_bad_policy_names_the_key(layers, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        ep.effective_policy(layers)


def _layer_list(text):
    return re.findall(r"(gpufleet_policy\w*) \| default\(\{\}\)", text)


def _policy_homes(role):
    """The files of a role that define __<role>_policy: vars/main.yml, or for host_tuning (whose vars/main.yml holds
    constants only, issue 14) tasks/targets.yml, which sets it as a fact."""
    files = [role / "vars" / "main.yml", *sorted((role / "tasks").glob("*.yml"))]
    return [p for p in files if p.is_file() and re.search(rf"^\s*__{role.name}_policy:", p.read_text(), re.M)]


def test_every_role_and_playbook_names_the_same_layers():
    want = [*cli.POLICY_LAYERS, "gpufleet_policy_overrides"]
    assert list(ep.LAYERS) == want
    homes = {role.name: _policy_homes(role) for role in sorted((REPO / "roles").iterdir()) if role.is_dir()}
    homes = {name: files for name, files in homes.items() if files}
    assert sorted(homes) == ["gpu_runtime", "host_tuning", "network_tuning", "nvidia_driver", "watch"]
    assert all(len(files) == 1 for files in homes.values()), homes  # one home each
    assert homes["host_tuning"] == [REPO / "roles" / "host_tuning" / "tasks" / "targets.yml"]
    sources = [REPO / "playbooks" / name for name in ("audit.yml", "remediate.yml", "watch.yml", "probe.yml")]
    sources += [files[0] for files in homes.values()]
    for path in sources:
        assert _layer_list(path.read_text()) == want, path
