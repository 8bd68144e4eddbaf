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


def test_a_host_summary_on_the_target_equals_the_report_summary_of_that_host():
    findings = [
        {"rule": "GPU-PWR-001", "area": "power", "severity": "high", "status": "fail"},
        {"rule": "GPU-PWR-003", "area": "power", "severity": "info", "status": "warn"},
        {"rule": "NET-TCP-001", "area": "network", "severity": "high", "status": "pass"},
        {"rule": "SW-FM-001", "area": "software", "severity": "critical", "status": "skip"},
        {"rule": "HOST-MEM-002", "area": "memory", "severity": "medium", "status": "error"},
    ]
    on_target = rules.summarize(findings)
    in_report = schema.summarize({"h1": {"status": "ok", "findings": findings}})["findings"]
    assert in_report == on_target


def test_the_playbook_verdict_and_the_cli_exit_codes_are_the_same():
    from gpufleet import exits

    assert (fleet.VERDICT_OK, fleet.VERDICT_FINDINGS, fleet.VERDICT_HOSTS) == (
        exits.EXIT_OK,
        exits.EXIT_FINDINGS,
        exits.EXIT_HOSTS,
    )
