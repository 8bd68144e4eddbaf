"""The rules of rules/power.py: GPU-PWR-001..003, GPU-THM-001 and GPU-MIG-001, a passing and a failing case each
(CASES), and their tests."""

from __future__ import annotations

import pytest
import rule_cases
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu_settings, rules, targets
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from rule_cases import evaluate, gpu_at, gpus
from rule_facts import healthy

# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    "GPU-PWR-001": (None, gpu_at(3, lambda g: g.update(persistence_mode=False))),
    "GPU-PWR-002": (None, gpu_at(0, lambda g: g["power"].update(limit_w=250.0, enforced_limit_w=250.0))),
    "GPU-PWR-003": (
        None,
        gpu_at(
            1,
            lambda g: g["clock_event_reasons"].update(
                mask="0x44",
                active=["sw_power_cap", "hw_thermal_slowdown"],
                throttling=["sw_power_cap", "hw_thermal_slowdown"],
            ),
        ),
    ),
    "GPU-THM-001": (None, gpu_at(2, lambda g: g["temperature"].update(gpu=86))),
    "GPU-MIG-001": (
        rule_cases.each_gpu(lambda g: g["mig"].update(current=True, pending=True)),
        gpu_at(2, lambda g: g["mig"].update(pending=True)),
    ),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


# ---------------------------------------------------------------- issue 12: deliberate choices are kept


def _limits(f, *watts):
    for g, w in zip(gpus(f), watts, strict=True):
        g["power"].update(limit_w=w, enforced_limit_w=w)


@pytest.mark.parametrize(
    "power, limits, status, problems",
    [
        ({"limit_w": 500}, [500.0] * 8, "pass", []),
        ({"limit_w": 500}, [700.0] + [500.0] * 7, "fail", ["above the declared cap"]),  # the default is not the cap
        ({"limit_w": 500}, [450.0] + [500.0] * 7, "fail", ["below the declared cap"]),
        ({"limit_pct": 80}, [560.0] * 8, "pass", []),  # 80 % of 700 W
        ({"limit_pct": 80}, [700.0] * 8, "fail", ["above the declared cap"] * 8),
        ({"limit_w": 150}, [200.0] * 8, "pass", []),  # below the GPU's 200 W minimum: clamped to it
        ({"limit_w": 900}, [700.0] * 8, "pass", []),  # above the 700 W maximum: clamped to it
        ({}, [500.0] + [700.0] * 7, "fail", ["power limit below"]),  # no cap declared: a capped GPU is a finding
    ],
)
def test_power_limit_against_a_declared_cap(power, limits, status, problems):
    facts = healthy()
    _limits(facts, *limits)
    finding = evaluate(facts, {"power": power})["GPU-PWR-002"]
    assert finding["status"] == status, finding
    if power:
        assert [i["problem"] for i in finding["items"]] == problems
        assert "declared cap" in finding["expected"]
    elif problems:
        assert problems[0] in finding["message"] and finding["items"][0]["gpu"] == 0


def test_above_the_declared_cap_names_the_gpu_and_the_cap():
    facts = healthy()
    _limits(facts, *([300.0] + [250.0] * 7))
    finding = evaluate(facts, {"power": {"limit_w": 250}})["GPU-PWR-002"]
    assert finding["status"] == "fail"
    assert finding["items"] == [
        {"gpu": 0, "limit_w": 300.0, "declared_cap_w": 250.0, "problem": "above the declared cap"}
    ]
    assert "GPU(s) [0] above the declared cap" in finding["message"] and "250 W" in finding["message"]


def test_power_cap_alone_is_info_not_throttling():
    facts = healthy()
    gpus(facts)[1]["clock_event_reasons"].update(mask="0x4", active=["sw_power_cap"], throttling=["sw_power_cap"])
    finding = evaluate(facts)["GPU-PWR-003"]
    assert finding["status"] == "warn" and finding["severity"] == "info"
    assert finding["items"] == [{"gpu": 1, "reasons": ["sw_power_cap"]}]
    # With a thermal reason too it is a fault, and the message names only the reasons that mean trouble.
    gpus(facts)[1]["clock_event_reasons"].update(
        mask="0x44", active=["sw_power_cap", "hw_thermal_slowdown"], throttling=["sw_power_cap", "hw_thermal_slowdown"]
    )
    finding = evaluate(facts)["GPU-PWR-003"]
    assert finding["status"] == "fail" and finding["severity"] == "high"
    assert finding["items"] == [{"gpu": 1, "reasons": ["hw_thermal_slowdown"]}]


def test_mig_change_pending():
    facts = healthy()
    gpus(facts)[2]["mig"].update(pending=True)
    finding = evaluate(facts)["GPU-MIG-001"]
    assert finding["status"] == "fail" and finding["severity"] == "medium"
    assert finding["items"] == [{"gpu": 2, "current": False, "pending": True}]


# ---------------------------------------------------------------- targets (issue 27): what gpu_runtime sets
# GPU-PWR-001/002's targets sit next to their checks; gpu_runtime hands them to gpufleet.tuning.gpu_settings as they
# are. Here the real gpu_settings planner (module_utils/gpu_settings.py) runs them against an NVML that reads the
# facts' GPUs, and the rules judge what it would set. Before issue 27 the role computed them in Jinja
# (roles/gpu_runtime/vars/main.yml) and targets.compute returned nothing for gpu_runtime, so these tests failed then.


class FactsNvml:
    """The NVML calls gpu_settings plans with, answered from the audit's facts of each GPU (watts -> mW)."""

    NVML_FEATURE_ENABLED, NVML_FEATURE_DISABLED = 1, 0

    class NVMLError(Exception):
        pass

    def __init__(self, facts):
        self.gpus = gpus(facts)

    def _power(self, handle, key):
        return int(round(self.gpus[handle]["power"][key] * 1000))

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle}"

    def nvmlDeviceGetPersistenceMode(self, handle):
        return int(bool(self.gpus[handle]["persistence_mode"]))

    def nvmlDeviceGetPowerManagementLimit(self, handle):
        return self._power(handle, "limit_w")

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle):
        return self._power(handle, "min_limit_w"), self._power(handle, "max_limit_w")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle):
        return self._power(handle, "default_limit_w")

    def nvmlDeviceGetEccMode(self, handle):
        ecc = self.gpus[handle]["ecc"]
        return int(bool(ecc["current"])), int(bool(ecc["pending"]))

    def nvmlDeviceGetMigMode(self, handle):
        mig = self.gpus[handle]["mig"]
        return int(bool(mig["current"])), int(bool(mig["pending"]))

    def nvmlDeviceSetPersistenceMode(self, handle, mode):
        raise AssertionError("planning only")

    nvmlDeviceSetPowerManagementLimit = nvmlDeviceSetEccMode = nvmlDeviceSetMigMode = nvmlDeviceSetPersistenceMode


def _gpu_targets(overrides=None, role_vars=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return targets.compute({}, policy, role_vars, roles=("gpu_runtime",))


def _apply_gpu_runtime(facts, t):
    """What gpu_runtime's persistence and power tasks would leave on each GPU (gpu_settings' own planner)."""
    nv = FactsNvml(facts)
    for key in ("persistence_mode", "power_limit"):
        params = {k: v for k, v in t.items() if k.startswith(key)}
        want = gpu_settings.parse_request(params)
        for g in gpus(facts):
            after = gpu_settings.plan_gpu(nv, g["index"], want, {})["after"]
            if "persistence_mode" in after:
                g["persistence_mode"] = after["persistence_mode"]
            if "power_limit_w" in after:
                g["power"].update(limit_w=after["power_limit_w"], enforced_limit_w=after["power_limit_w"])


@pytest.mark.parametrize(
    "power, limits",
    [
        ({}, [500.0, 700.0] + [250.0] * 6),  # no cap: power.min_power_limit_pct (100 %) of the default
        ({"min_power_limit_pct": 50}, [300.0, 600.0] + [700.0] * 6),  # a minimum: 600 W and 700 W are kept
        ({"limit_w": 500}, [700.0, 450.0] + [500.0] * 6),  # a declared cap: exactly, from above and below
        ({"limit_w": 150}, [700.0] * 8),  # below the 200 W minimum: clamped to it, as the rule judges
        ({"limit_w": 900}, [250.0] * 8),  # above the 700 W maximum: clamped to it
        ({"limit_pct": 80}, [700.0, 200.0] + [560.0] * 6),
        ({"limit_pct": 10}, [700.0] * 8),  # 70 W: clamped to 200 W
    ],
)
def test_applying_the_power_targets_makes_the_rules_pass(power, limits):
    facts = healthy()
    _limits(facts, *limits)
    gpus(facts)[3]["persistence_mode"] = False
    before = evaluate(facts, {"power": power})
    assert before["GPU-PWR-001"]["status"] == "fail"
    t = _gpu_targets({"power": power})
    assert t["rules"]["GPU-PWR-001"] == ["persistence_mode"]
    _apply_gpu_runtime(facts, t["roles"]["gpu_runtime"])
    after = evaluate(facts, {"power": power})
    assert after["GPU-PWR-001"]["status"] == "pass", after["GPU-PWR-001"]
    assert after["GPU-PWR-002"]["status"] == "pass", after["GPU-PWR-002"]


@pytest.mark.parametrize(
    "power, spec",
    [
        (
            {},
            {
                "power_limit": "100.0%",
                "power_limit_cap": None,
                "power_limit_clamp": False,
                "power_limit_at_least": True,
            },
        ),
        (
            {"limit_w": 300},
            {"power_limit": "300", "power_limit_cap": "300", "power_limit_clamp": True, "power_limit_at_least": False},
        ),
        (
            {"limit_pct": 80},
            {"power_limit": "80%", "power_limit_cap": "80%", "power_limit_clamp": True, "power_limit_at_least": False},
        ),
    ],
)
def test_power_target_is_what_gpu_settings_takes(power, spec):
    t = _gpu_targets({"power": power})["roles"]["gpu_runtime"]
    assert {k: v for k, v in t.items() if k.startswith("power_limit")} == spec


@pytest.mark.parametrize(
    "power, policy_key, policy_value, cap",
    [
        ({}, "power.min_power_limit_pct", 100.0, None),
        ({"min_power_limit_pct": 90}, "power.min_power_limit_pct", 90, None),
        ({"limit_w": 300}, "power.limit_w", 300, "300"),
        ({"limit_pct": 80}, "power.limit_pct", 80, "80%"),
    ],
)
def test_gpu_runtime_power_limit_takes_the_deciding_policy_keys_place(power, policy_key, policy_value, cap):
    out = _gpu_targets({"power": power}, {"gpu_runtime_power_limit": "350"})
    t = out["roles"]["gpu_runtime"]
    # The user's value is set as given (gpu_settings still refuses one above a declared cap: power_limit_cap).
    assert (t["power_limit"], t["power_limit_cap"], t["power_limit_clamp"], t["power_limit_at_least"]) == (
        "350",
        cap,
        False,
        False,
    )
    assert out["overrides"] == [
        {"variable": "gpu_runtime_power_limit", "value": "350", "policy_key": policy_key, "policy_value": policy_value}
    ]
    assert _gpu_targets({"power": power})["overrides"] == []
