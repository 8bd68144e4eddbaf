"""Diff of two reports: fixed, new, unchanged (and unverified) findings per host; hosts in one report only."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.diff import diff_reports, render_diff

REPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "reports"
A100 = "sg-a100-01"


@pytest.fixture
def old():
    return json.loads((REPORTS / "sample-v1.json").read_text(encoding="utf-8"))


def _set_status(report, host, rule, status):
    next(f for f in report["hosts"][host]["findings"] if f["rule"] == rule)["status"] = status


@pytest.fixture
def new(old):
    new = copy.deepcopy(old)
    new["run"]["id"] = "7a1e4b2c-0000-4000-8000-000000000002"
    _set_status(new, A100, "HOST-MEM-002", "pass")  # fixed
    _set_status(new, A100, "HOST-HLT-002", "pass")  # fixed (was a warning)
    _set_status(new, A100, "GPU-HLT-001", "fail")  # new
    _set_status(new, A100, "SW-CUDA-001", "warn")  # still a finding: unchanged
    _set_status(new, A100, "GPU-PWR-001", "skip")  # not confirmed either way
    new["hosts"][A100]["findings"] = [f for f in new["hosts"][A100]["findings"] if f["rule"] != "SW-FM-001"]
    del new["hosts"]["sg-l40s-03"]
    new["hosts"]["iad-h100-04"] = copy.deepcopy(old["hosts"]["iad-h100-03"])
    return new


def test_same_report_has_no_changes(old):
    d = diff_reports(old, old)
    assert d["totals"] == {"fixed": 0, "new": 0, "unchanged": 11, "unverified": 0, "policy": 0, "enabled": 0}
    assert d["only_old"] == d["only_new"] == []
    assert d["hosts"][A100]["unchanged"] == sorted(
        f["rule"] for f in old["hosts"][A100]["findings"] if f["status"] in ("fail", "warn")
    )


def test_fixed_new_unchanged(old, new):
    d = diff_reports(old, new)
    h = d["hosts"][A100]
    assert h["fixed"] == ["HOST-HLT-002", "HOST-MEM-002"]
    assert h["new"] == ["GPU-HLT-001"]
    assert h["unverified"] == ["GPU-PWR-001", "SW-FM-001"]  # skipped now / not run now: not claimed fixed
    assert "SW-CUDA-001" in h["unchanged"] and "HOST-MEM-002" not in h["unchanged"]
    assert len(h["unchanged"]) == 11 - 2 - 2
    assert h["rules"]["SW-CUDA-001"] == {
        "title": "CUDA toolkit newer than the driver supports",
        "area": "software",
        "severity": "high",
        "old": "fail",
        "new": "warn",
    }
    assert h["rules"]["SW-FM-001"]["new"] is None
    assert d["hosts"]["iad-h100-03"] == {
        "fixed": [],
        "new": [],
        "unchanged": [],
        "unverified": [],
        "policy": [],
        "enabled": [],
        "status": {"old": "ok", "new": "ok"},
        "rules": {},
    }
    assert d["only_old"] == ["sg-l40s-03"]
    assert d["only_new"] == ["iad-h100-04"]
    assert d["totals"] == {"fixed": 2, "new": 1, "unchanged": 7, "unverified": 2, "policy": 0, "enabled": 0}
    assert d["runs"] == {"old": "6f0d3c1e-8a52-4e8b-9d0a-2b7c41f5e9a3", "new": "7a1e4b2c-0000-4000-8000-000000000002"}


def test_a_host_not_audited_now_fixes_nothing(old):
    new = copy.deepcopy(old)
    new["hosts"][A100] = {"status": "unreachable", "message": "timeout", "findings": []}
    h = diff_reports(old, new)["hosts"][A100]
    assert h["fixed"] == [] and h["unchanged"] == []
    assert len(h["unverified"]) == 11
    assert h["status"] == {"old": "ok", "new": "unreachable"}


def test_a_host_back_from_unreachable_has_new_findings(old):
    new = copy.deepcopy(old)
    new["hosts"]["sg-l40s-03"] = copy.deepcopy(old["hosts"][A100])
    h = diff_reports(old, new)["hosts"]["sg-l40s-03"]
    assert len(h["new"]) == 11 and h["fixed"] == []


def test_render_diff(old, new):
    text = render_diff(diff_reports(old, new))
    lines = text.splitlines()
    assert lines[0] == "gpufleet diff  6f0d3c1e-8a52-4e8b-9d0a-2b7c41f5e9a3 -> 7a1e4b2c-0000-4000-8000-000000000002"
    assert lines[1] == "2 fixed, 1 new, 7 unchanged, 2 unverified"
    assert any(line.split()[:2] == ["fixed", "HOST-MEM-002"] and line.endswith("[fail -> pass]") for line in lines)
    assert any(line.split()[:2] == ["fixed", "HOST-HLT-002"] and line.endswith("[warn -> pass]") for line in lines)
    assert any(line.split()[:3] == ["new", "GPU-HLT-001", "critical"] for line in lines)
    assert any(line.split()[:2] == ["unverified", "SW-FM-001"] and line.endswith("[fail -> absent]") for line in lines)
    assert "only in the old report: sg-l40s-03" in lines
    assert "only in the new report: iad-h100-04" in lines
    assert "iad-h100-03" not in text  # nothing changed there
    assert lines.index("sg-a100-01") < lines.index("only in the old report: sg-l40s-03")


def test_render_diff_escapes_control_characters(old):
    new = copy.deepcopy(old)
    new["hosts"]["evil\x1b[2J\nhost"] = {"status": "ok", "findings": []}
    text = render_diff(diff_reports(old, new))
    assert "\x1b" not in text
    assert "only in the new report: evil\\x1b[2J\\nhost" in text


def test_a_finding_gone_because_the_policy_changed_is_not_fixed(old):
    """HOST-MEM-002 passes in the new run only because its target moved (<= 10 -> <= 60): a policy change, not a
    fix. The old diff counted it as fixed."""
    new = copy.deepcopy(old)
    finding = next(f for f in new["hosts"][A100]["findings"] if f["rule"] == "HOST-MEM-002")
    was = finding["expected"]
    finding.update(status="pass", expected="<= 60")
    new["run"]["policy_sources"] = ["/etc/gpufleet/relaxed.yml"]
    d = diff_reports(old, new)
    h = d["hosts"][A100]
    assert "HOST-MEM-002" not in h["fixed"] and h["policy"] == ["HOST-MEM-002"]
    assert h["rules"]["HOST-MEM-002"]["expected"] == {"old": was, "new": "<= 60"}
    assert d["totals"]["fixed"] == 0 and d["totals"]["policy"] == 1
    assert d["policy_sources"] == {"old": old["run"]["policy_sources"], "new": ["/etc/gpufleet/relaxed.yml"]}
    text = render_diff(d)
    assert "0 fixed" in text and "1 passes under the new policy" in text
    assert "different policy files" in text and "relaxed.yml" in text
    assert f"policy: expected {was} -> <= 60" in text


def test_same_policy_says_nothing_about_policies(old, new):
    d = diff_reports(old, new)
    assert d["policy_sources"] is None
    text = render_diff(d)
    assert "policy files" not in text and "policy changed" not in text and "policy:" not in text


def test_a_host_policy_digest_that_differs_is_named(old, new):
    """Reports whose hosts carry policy_digest (optional) say on which hosts the policy changed."""
    for report, digest in ((old, "sha256:aaa"), (new, "sha256:bbb")):
        report["hosts"][A100]["policy_digest"] = digest
        report["hosts"]["iad-h100-03"]["policy_digest"] = "sha256:same"
    d = diff_reports(old, new)
    assert d["policy_hosts"] == [A100]
    assert f"the policy changed between the runs on: {A100}" in render_diff(d)
    del new["hosts"][A100]["policy_digest"]  # an older report: nothing to compare
    assert diff_reports(old, new)["policy_hosts"] == []


@pytest.mark.parametrize(
    "off",
    [
        "disabled by policy (rules.GPU-HLT-001.enabled: false)",
        "severity critical is below policy min_severity critical",
    ],
)
def test_a_rule_the_policy_turned_back_on_is_not_new(old, off):
    """GPU-HLT-001 was skipped by the old run's policy (disabled, or under min_severity) and fails now: the policy
    turned it on, the host did not change (issue 29: it was listed as new, and tripped --fail-on)."""
    before = copy.deepcopy(old)
    was = next(f for f in before["hosts"][A100]["findings"] if f["rule"] == "GPU-HLT-001")
    was.update(status="skip", message=off)
    after = copy.deepcopy(old)
    _set_status(after, A100, "GPU-HLT-001", "fail")
    d = diff_reports(before, after)
    h = d["hosts"][A100]
    assert h["new"] == [] and h["enabled"] == ["GPU-HLT-001"]
    assert h["rules"]["GPU-HLT-001"]["was_off"] == off
    assert d["totals"]["new"] == 0 and d["totals"]["enabled"] == 1
    text = render_diff(d)
    assert "0 new" in text and "1 turned on by the new policy" in text
    assert any(line.split()[:2] == ["enabled", "GPU-HLT-001"] for line in text.splitlines())
    assert f"policy: the old run skipped it ({off})" in text
    from gpufleet.commands.report import new_failures

    assert new_failures(d, "info") == []  # `report diff --fail-on` gates on new failures: this is none


def test_a_rule_skipped_for_another_reason_that_fails_now_is_new(old):
    before = copy.deepcopy(old)
    was = next(f for f in before["hosts"][A100]["findings"] if f["rule"] == "GPU-HLT-001")
    was.update(status="skip", message="no GPU could be read")
    after = copy.deepcopy(old)
    _set_status(after, A100, "GPU-HLT-001", "fail")
    h = diff_reports(before, after)["hosts"][A100]
    assert h["new"] == ["GPU-HLT-001"] and h["enabled"] == []
    assert "turned on by" not in render_diff(diff_reports(before, after))
