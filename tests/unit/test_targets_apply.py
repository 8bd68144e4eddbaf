"""Issue 29: a host whose findings all pass gets no change from remediate. targets.compute judges every fixable rule
with the audit's own check on the same facts and policy (``verdicts``) and hands the roles only the rules that do
not pass (``apply``); passing rules are applied only with ``persist`` (gpufleet_remediate_persist, ``gpufleet
remediate --persist``) or when one of their role variables is set. Before the change compute returned no verdict:
the roles wrote every rule's value, so a passing host got sysctl.d, limits.d and boot files (every test here failed).
"""

from __future__ import annotations

from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules, targets
from rule_cases import evaluate, host
from rule_facts import healthy


def _policy(overrides=None):
    return pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)


def _failing_swappiness():
    """The healthy host with vm.swappiness 60 where swap exists: HOST-MEM-002 fails, every other fixable rule passes."""
    facts = healthy()
    host(facts)["vm"]["swappiness"] = 60
    host(facts)["memory"]["swap_total_mib"] = 8192
    return facts


def test_a_host_whose_fixable_rules_all_pass_gets_nothing_to_apply():
    facts = healthy()
    out = targets.compute(facts, _policy())
    fixable = [r.id for r in targets.fixable()]
    # The audit's own verdict on the same facts and policy.
    assert out["verdicts"] == {r: evaluate(facts, None)[r]["status"] for r in fixable}
    assert set(out["verdicts"].values()) == {"pass"}
    assert out["apply"] == [] and out["failing"] == []
    assert out["passing"] == fixable


def test_only_the_failing_rule_is_applied_and_persist_applies_the_passing_ones_too():
    facts = _failing_swappiness()
    out = targets.compute(facts, _policy())
    assert out["verdicts"]["HOST-MEM-002"] == "fail"
    assert out["apply"] == ["HOST-MEM-002"] and out["failing"] == ["HOST-MEM-002"]
    assert "HOST-MEM-005" in out["passing"] and "GPU-PWR-001" in out["passing"]
    # The values stay computed for every rule (a user's play may read them); the roles read apply.
    assert out["roles"]["host_tuning"]["swappiness"] == 10

    persisted = targets.compute(facts, _policy(), persist=True)
    assert persisted["apply"] == [r.id for r in targets.fixable()]
    assert persisted["verdicts"] == out["verdicts"]


def test_a_role_variable_set_is_a_request_to_apply_its_rule_where_it_passes():
    facts = healthy()  # vm.swappiness 10 without swap: HOST-MEM-002 passes
    out = targets.compute(facts, _policy(), role_vars={"host_tuning_swappiness": 5})
    assert out["verdicts"]["HOST-MEM-002"] == "pass"
    assert out["apply"] == ["HOST-MEM-002"]
    assert out["roles"]["host_tuning"]["swappiness"] == 5
    # Naming the NICs chooses what the NIC rules cover; it asks for no value, so nothing is applied for it.
    out = targets.compute(facts, _policy(), role_vars={"network_tuning_interfaces": ["ens1f0np0"]})
    assert out["apply"] == []


def test_a_rule_the_check_cannot_judge_is_applied_as_before():
    # Disabled by the policy: the audit reports skip, not pass, and the fix leaves it alone (turned_off).
    facts = healthy()
    out = targets.compute(facts, _policy({"rules": {"HOST-MEM-005": {"enabled": False}}}))
    assert out["verdicts"]["HOST-MEM-005"] == "skip"
    assert out["apply"] == []
    # No facts at all (a role whose facts are not gathered): nothing is judged, everything is applied.
    out = targets.compute({}, _policy(), roles=("host_tuning",))
    assert set(out["verdicts"].values()) == {"skip"}
    assert out["apply"] == [r.id for r in targets.fixable(("host_tuning",))]


def test_rules_that_share_one_fix_are_applied_together():
    # ECC on now, off pending (someone asked for it to go at the next reboot): GPU-ECC-001 passes on the current mode,
    # GPU-ECC-002 fails. Their one fix sets the pending mode, which does not hold: both are applied (gpu_runtime's ECC
    # task runs under GPU-ECC-001's toggle, on by default), as before issue 29.
    facts = healthy()
    for g in facts["gpu"]["gpus"]:
        g["ecc"].update(current=True, pending=False)
    out = targets.compute(facts, _policy(), roles=("gpu_runtime",))
    assert out["verdicts"]["GPU-ECC-001"] == "pass" and out["verdicts"]["GPU-ECC-002"] == "fail"
    assert out["apply"] == ["GPU-ECC-001", "GPU-ECC-002"]
    assert out["roles"]["gpu_runtime"]["ecc_mode"] is True


def test_a_rule_the_policy_turned_off_is_not_applied_even_where_it_fails():
    """The owner turned HOST-MEM-002 off (or set min_severity above it): the audit skips it, and the fix leaves
    vm.swappiness alone too, with persist as well; a role variable set for it is still a request to set it."""
    facts = _failing_swappiness()
    off = _policy({"rules": {"HOST-MEM-002": {"enabled": False}}})
    out = targets.compute(facts, off)
    # turned_off: the roles leave its key out of a file they write whole for another rule (sysctl.d, sysfs.json).
    assert out["apply"] == [] and out["turned_off"] == ["HOST-MEM-002"]
    persisted = targets.compute(facts, off, persist=True)
    assert "HOST-MEM-002" not in persisted["apply"] and persisted["turned_off"] == ["HOST-MEM-002"]
    asked = targets.compute(facts, off, role_vars={"host_tuning_swappiness": 5})
    assert asked["apply"] == ["HOST-MEM-002"] and asked["turned_off"] == []
    above = targets.compute(facts, _policy({"min_severity": "critical"}))
    assert "HOST-MEM-002" not in above["apply"]
    # Every fixable rule below critical is turned off; the critical ones (if any) are judged as usual.
    assert above["turned_off"] == [r.id for r in targets.fixable() if r.severity != "critical"]
    assert targets.compute(facts, _policy())["turned_off"] == []
