"""The effective_policy filter, which no role or playbook uses any more (issue 27: gpufleet.tuning.remediation_targets
returns the validated policy; tests/unit/test_policy.py tests policy.from_option and the layer list). It goes once
nothing uses it."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.tuning.plugins.filter import effective_policy as ep
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as policy_mod

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
