"""The audit module's two result shapes (issue 27 §4): ``full`` (the default: facts, links, findings and policy each
a value of its own, what a user's play reads) and ``compact`` (those four as one JSON string, ``audit_json``, what
playbooks/audit.yml registers: ansible-core copies one string more cheaply than ~4,700 values). The report decodes
a compact result once (``fleet.expand``) and must come out byte for byte as from the full one, in every format.

Results here are made by the module's own shaping (``audit_core.module_result``) from the hosts of the recorded
sample report; tests/integration/test_audit_shapes_through_ansible.py does the same with real audits of the demo
fleet and the reference hosts through Ansible."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import report_fixtures
from ansible_collections.gpufleet.tuning.plugins.module_utils import audit_core, policy, rules
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer

from gpufleet.commands import audit as audit_command

FILES = ("json", "html", "junit", "prometheus")


def _run_results() -> dict[str, dict]:
    """host -> what audit_core.run returns, from the recorded reports' audited hosts."""
    out = {}
    for fixture in ("sample-v1.json", "statuses-v1.json"):
        for name, host in report_fixtures.load(fixture)["hosts"].items():
            if host["status"] == "ok":
                out[f"{fixture.split('-')[0]}-{name}"] = _as_run_result(host)
    assert len(out) >= 3, "the recorded reports have audited hosts"
    return out


def _as_run_result(host: dict) -> dict:
    return {
        "facts": host["facts"],
        "links": {"source": host["links"]["source"], "site": host.get("site"), "peers": host["links"]["peers"]},
        "findings": host["findings"],
        "summary": rules.summarize(host["findings"]),
        "policy_digest": host.get("policy_digest") or audit_core.policy_digest(policy.from_option({})),
    }


def _registered(shape: str, include_facts: bool = True) -> dict[str, dict]:
    """What each host registers in ``shape``: the module's answer, as Ansible adds ``changed``."""
    effective = policy.from_option({})
    return {
        name: {"changed": False, **audit_core.module_result(res, effective, include_facts=include_facts, shape=shape)}
        for name, res in _run_results().items()
    }


def _written(results: dict, tmp: Path, run: dict | None = None) -> tuple[dict, dict[str, bytes]]:
    report = fleet.build_report(results, started_at="2026-12-07T10:00:00+00:00", sites={})
    if run is not None:
        report["run"] = copy.deepcopy(run)  # the run's id and finishing time differ between two builds
    files = writer.write_all(report, tmp, stamp="run")
    return report, {key: files[key].read_bytes() for key in FILES}


def test_compact_result_is_the_full_one_in_one_string():
    full, compact = _registered("full"), _registered("compact")
    for name in full:
        assert sorted(compact[name]) == ["audit_json", "changed", "policy_digest", "summary"]
        assert isinstance(compact[name]["audit_json"], str)
        decoded = json.loads(compact[name]["audit_json"])
        assert sorted(decoded) == sorted(audit_core.PACKED)
        for key in audit_core.PACKED:
            assert decoded[key] == full[name][key], key
        assert compact[name]["summary"] == full[name]["summary"]
        assert compact[name]["policy_digest"] == full[name]["policy_digest"]


def test_full_is_the_default_shape_with_every_part():
    res = next(iter(_run_results().values()))
    default = audit_core.module_result(res, policy.from_option({}))
    assert {"facts", "links", "findings", "summary", "policy_digest", "policy"} <= set(default)
    assert "audit_json" not in default
    assert audit_core.module_result(res, policy.from_option({}), include_facts=False)["facts"] == {}


def test_reports_from_compact_results_are_byte_identical(tmp_path):
    """Old against new on the same inputs: JSON, HTML, JUnit and Prometheus files equal byte for byte."""
    full_report, full_files = _written(_registered("full"), tmp_path / "full")
    compact_report, compact_files = _written(_registered("compact"), tmp_path / "compact", run=full_report["run"])
    assert compact_report == full_report
    for key in FILES:
        assert compact_files[key] == full_files[key], key


def test_expand_reads_both_shapes_and_decodes_once():
    full, compact = _registered("full"), _registered("compact")
    for name in full:
        expanded = fleet.expand(compact[name])
        assert "audit_json" not in expanded
        assert expanded == json.loads(json.dumps(full[name]))
        assert fleet.expand(expanded) == expanded  # a decoded result is full: nothing left to decode
        assert fleet.answered(compact[name]) and fleet.answered(full[name])
    assert not fleet.answered({"failed": True, "msg": "boom"})
    assert not fleet.answered(None)


@pytest.mark.parametrize("packed", ["{not json", "[1, 2]", "null"])
def test_unreadable_compact_result_fails_the_host_by_name(packed):
    entry = fleet.host_entry({"changed": False, "summary": {}, "audit_json": packed})
    assert entry["status"] == "failed"
    assert entry["message"].startswith("audit_json: the compact audit result cannot be read")
    assert entry["findings"] == []


def test_progress_counts_either_shape():
    full, compact = _registered("full"), _registered("compact")
    for name in full:
        assert audit_command.counts(compact[name]) == audit_command.counts(full[name])
    assert any(audit_command.counts(r) != (0, 0) for r in full.values())
    assert audit_command.counts({"summary": {"by_status": {"fail": "x", "warn": True}}}) == (0, 0)
    assert audit_command.counts({}) == (0, 0)
