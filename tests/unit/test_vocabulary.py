"""One vocabulary (issue 14): the report's terms live in report/schema, the rule terms in module_utils (the targets
need them without the controller's code). Where both must exist, they are pinned equal here."""

from __future__ import annotations

from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema


def test_target_and_report_terms_are_the_same():
    assert policy.SEVERITIES == schema.SEVERITIES
    assert policy.AREAS == schema.AREAS
    assert rules.STATUSES == schema.STATUSES


def test_the_fleet_builder_uses_the_report_schema_terms():
    assert fleet.SCHEMA is schema.SCHEMA
    assert fleet.summarize is schema.summarize


def test_one_count_of_rule_results_on_the_target_and_in_the_report():
    """summary.count_findings is the count behind a host's summary and a report's: values outside the terms are
    left out by both (the target's own copy counted an unknown status and raised on an unknown severity)."""
    findings = [
        {"rule": "GPU-PWR-001", "area": "power", "severity": "high", "status": "fail"},
        {"rule": "GPU-PWR-003", "area": "power", "severity": "info", "status": "warn"},
        {"rule": "NET-TCP-001", "area": "network", "severity": "high", "status": "pass"},
        {"rule": "SW-FM-001", "area": "software", "severity": "critical", "status": "skip"},
        {"rule": "HOST-MEM-002", "area": "memory", "severity": "medium", "status": "error"},
        {"rule": "X-NEW-001", "area": "storage", "severity": "urgent", "status": "fail"},  # another version's
        {"rule": "X-NEW-002", "area": "power", "severity": "low", "status": "later"},
    ]
    want = {
        "by_status": {"pass": 1, "fail": 2, "warn": 1, "skip": 1, "error": 1},
        "by_severity": {"critical": 0, "high": 1, "medium": 0, "low": 0, "info": 1},
        "by_area": {"memory": 0, "cpu": 0, "network": 0, "power": 2, "software": 0, "health": 0},
    }
    assert rules.summarize(findings) == want
    assert schema.summarize({"h1": {"status": "ok", "findings": findings}})["findings"] == want


def test_the_playbook_verdict_and_the_cli_exit_codes_are_the_same():
    from gpufleet import exits

    assert (fleet.VERDICT_OK, fleet.VERDICT_FINDINGS, fleet.VERDICT_HOSTS) == (
        exits.EXIT_OK,
        exits.EXIT_FINDINGS,
        exits.EXIT_HOSTS,
    )
