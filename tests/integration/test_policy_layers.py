"""The policy layers reach every module that judges through one reader (plugins/plugin_utils/policy_layers.py): the
action plugins of audit, gpu_probe and remediation_targets hand the host's gpufleet_policy, gpufleet_policy_group,
gpufleet_policy_host and gpufleet_policy_overrides (policy.LAYERS) to the module, which merges and validates them on
the host. No playbook writes the layer list out any more.

Real ansible-runner, real modules on the local connection; the hosts' variables are the only input.
"""

from __future__ import annotations

import labkit
import pytest

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

TARGETS = {"name": "Targets", "gpufleet.tuning.remediation_targets": {"roles": []}, "ignore_errors": True}


def _run(tmp_path, hosts, task):
    inventory = labkit.write_inventory(tmp_path, hosts)
    playbook = labkit.write_play(tmp_path, labkit.play("Layers", tasks=[task]))
    result = run_playbook(str(playbook), str(inventory))
    return {name: (result.hosts[name].status, result.hosts[name].results[task["name"]]) for name in hosts}


def test_the_layers_merge_in_order_and_later_wins(tmp_path):
    """Each layer is read from the host's variables (templated), in LAYERS order: a later layer wins key by key."""
    hosts = {
        "all_four": labkit.local_host(
            gpufleet_policy={"memory": {"max_swappiness": 30}, "cpu": {"governor": "schedutil"}},
            gpufleet_policy_group={"memory.max_swappiness": 20},
            gpufleet_policy_host={"memory": {"max_swappiness": "{{ 5 + 2 }}"}},
            gpufleet_policy_overrides={"min_severity": "low"},
        ),
        "none": labkit.local_host(),
    }
    out = _run(tmp_path, hosts, TARGETS)
    status, res = out["all_four"]
    assert status == "ok", res
    assert res["policy"]["memory"]["max_swappiness"] == 7  # the host layer, templated, over group and fleet
    assert res["policy"]["cpu"]["governor"] == "schedutil"  # the fleet layer where no later one says otherwise
    assert res["policy"]["min_severity"] == "low"
    status, res = out["none"]
    assert status == "ok" and res["policy"]["memory"]["max_swappiness"] == 10  # the documented default


def test_an_invalid_layer_stops_each_judging_module_with_the_key_named(tmp_path):
    """The audit, the probe and the targets read the same layers: one bad value fails each, naming the key."""
    bad = labkit.local_host(gpufleet_policy_host={"probe": {"gpu_idle_pct": 200}})
    tasks = [
        {"name": "Audit", "gpufleet.tuning.audit": {"sample_seconds": 0}, "ignore_errors": True},
        {"name": "Probe", "gpufleet.tuning.gpu_probe": {"sample_seconds": 0.5}, "ignore_errors": True},
        TARGETS,
    ]
    for task in tasks:
        status, res = _run(tmp_path, {"bad": bad}, task)["bad"]
        assert status == "failed", (task["name"], res)
        assert "probe.gpu_idle_pct: must be a percent" in res["msg"], (task["name"], res)
        assert "Traceback (most recent call last)" not in str(res)


def test_a_task_cannot_hand_the_targets_its_own_policy(tmp_path):
    """remediation_targets judges exactly the host's layers: a policy or role_vars given in the task is refused."""
    task = {
        "name": "Targets",
        "gpufleet.tuning.remediation_targets": {"roles": [], "policy": [{"memory": {"max_swappiness": 90}}]},
        "ignore_errors": True,
    }
    status, res = _run(tmp_path, {"h": labkit.local_host()}, task)["h"]
    assert status == "failed" and "policy is filled in by the action plugin" in res["msg"], res


def test_a_role_variable_takes_the_policy_place_and_is_listed(tmp_path):
    """A public role variable set in the inventory replaces the policy's value in the target, and is listed."""
    host = labkit.local_host(gpufleet_policy_group={"memory": {"max_swappiness": 5}}, host_tuning_swappiness=1)
    task = {
        "name": "Targets",
        "gpufleet.tuning.remediation_targets": {"roles": ["host_tuning"], "sample_seconds": 0},
        "ignore_errors": True,
    }
    status, res = _run(tmp_path, {"h": host}, task)["h"]
    assert status == "ok", res
    assert res["roles"]["host_tuning"]["swappiness"] == 1
    assert {"variable": "host_tuning_swappiness", "value": 1, "policy_key": "memory.max_swappiness",
            "policy_value": 5} in res["overrides"]
    assert res["rules"]["HOST-MEM-002"] == ["swappiness"]


def test_a_role_variable_the_target_cannot_use_is_named_not_a_traceback(tmp_path):
    """A bad public role variable (a memlock limit with a unit systemd's LimitMEMLOCK would misread) fails the host
    at the targets, before any role changes anything, naming the variable and what it takes."""
    host = labkit.local_host(host_tuning_memlock="8M")
    task = {
        "name": "Targets",
        "gpufleet.tuning.remediation_targets": {"roles": ["host_tuning"], "sample_seconds": 0},
        "ignore_errors": True,
    }
    status, res = _run(tmp_path, {"h": host}, task)["h"]
    assert status == "failed" and "role_vars: host_tuning_memlock" in res["msg"], res
    assert "Traceback (most recent call last)" not in str(res)
