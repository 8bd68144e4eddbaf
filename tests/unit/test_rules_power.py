"""The rules of rules/power.py: GPU-PWR-001..003, GPU-THM-001 and GPU-MIG-001, a passing and a failing case each
(CASES), and their tests."""

from __future__ import annotations

import pytest
import rule_cases
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
