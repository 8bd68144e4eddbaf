"""The CLI along its seams (issue 14): one judgement of "fixed" (report/diff's), severities from the report schema,
results found by the module that produced them, never by a task's display name."""

from __future__ import annotations

import ast
import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import diff, schema

from gpufleet import cli, runner
from gpufleet.commands import audit, remediate, rollback

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "fixtures" / "reports" / "sample-v1.json"


def _report(run_id, findings, status="ok"):
    return {"run": {"id": run_id}, "hosts": {"h1": {"status": status, "findings": findings}}}


def _finding(status, rule="HOST-MEM-002"):
    return {"rule": rule, "status": status, "severity": "high", "fix": {"role": "host_tuning"}}


@pytest.mark.parametrize("after", ["skip", "error", None])
def test_a_finding_not_passing_afterwards_is_unverified_not_fixed(after):
    """fail -> skip, fail -> error, fail -> not run: the audit afterwards cannot tell, so nothing is claimed fixed
    (the old cli.remediation_summary counted these as fixed)."""
    findings_after = [_finding(after)] if after else []
    summary = remediate.remediation_summary(
        _report("a", [_finding("fail")]), _report("b", findings_after), {}, {}, False
    )
    host = summary["hosts"]["h1"]
    assert host["fixed"] == []
    assert host["unverified"] == ["HOST-MEM-002"]
    assert host["remaining_auto"] == host["remaining_manual"] == host["new"] == []
    assert "fixed nothing; unverified (skipped, errored or not run afterwards): HOST-MEM-002" in (
        remediate.render_remediation(summary)
    )


def test_a_finding_that_passes_afterwards_is_fixed():
    summary = remediate.remediation_summary(
        _report("a", [_finding("fail"), _finding("warn", "GPU-PWR-001")]),
        _report("b", [_finding("pass"), _finding("fail", "GPU-PWR-001"), _finding("fail", "NET-TCP-001")]),
        {},
        {},
        False,
    )
    host = summary["hosts"]["h1"]
    assert host["fixed"] == ["HOST-MEM-002"] and host["unverified"] == []
    assert host["remaining_auto"] == ["GPU-PWR-001", "NET-TCP-001"] and host["new"] == ["NET-TCP-001"]


def test_a_host_not_audited_afterwards_claims_nothing():
    summary = remediate.remediation_summary(
        _report("a", [_finding("fail")]), _report("b", [], status="unreachable"), {}, {}, False
    )
    host = summary["hosts"]["h1"]
    assert host["fixed"] is host["unverified"] is host["new"] is None


def test_remediation_and_report_diff_judge_alike():
    """The remediation summary's fixed/new/unverified are report/diff's, host by host, on a real report pair."""
    old = json.loads(SAMPLE.read_text(encoding="utf-8"))
    new = copy.deepcopy(old)
    new["run"]["id"] = "7a1e4b2c-0000-4000-8000-000000000002"
    statuses = {"HOST-MEM-002": "pass", "GPU-HLT-001": "fail", "GPU-PWR-001": "skip", "SW-CUDA-001": "error"}
    for host in new["hosts"].values():
        for f in host["findings"]:
            f["status"] = statuses.get(f["rule"], f["status"])
    summary = remediate.remediation_summary(old, new, {}, {}, False)
    judged = diff.diff_reports(old, new)["hosts"]
    for name, host in summary["hosts"].items():
        if host["fixed"] is None:
            assert new["hosts"][name]["status"] != "ok"
            continue
        for bucket in ("fixed", "new", "unverified"):
            assert host[bucket] == judged[name][bucket], (name, bucket)
    assert any(h["unverified"] for h in summary["hosts"].values() if h["unverified"] is not None)


def test_fail_on_choices_are_the_report_schema_severities():
    parser = cli.build_parser()
    for command in ("audit", "remediate"):
        sub = parser._subparsers._group_actions[0].choices[command]
        [fail_on] = [a for a in sub._actions if a.dest == "fail_on"]
        assert tuple(fail_on.choices) == (*schema.SEVERITIES, "none")


def _task_names(tasks) -> set[str]:
    names = set()
    for task in tasks or []:
        if isinstance(task, dict):
            if task.get("name"):
                names.add(task["name"])
            for key in ("tasks", "block", "rescue", "always", "handlers", "pre_tasks", "post_tasks"):
                names |= _task_names(task.get(key))
    return names


def _strings(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)}


def test_the_cli_names_no_task_of_the_playbooks_it_runs():
    """Results are found by module (resolved_action), so no task display name of audit.yml, remediate.yml or
    rollback.yml appears in the CLI's code (the old one looked up three of them)."""
    names = set()
    for playbook in ("audit.yml", "remediate.yml", "rollback.yml"):
        names |= _task_names(yaml.safe_load((REPO / "playbooks" / playbook).read_text()))
    assert len(names) > 10
    strings = set().union(*(_strings(p) for p in (REPO / "src" / "gpufleet").rglob("*.py")))
    assert not names & strings


def test_the_cli_reads_results_by_the_modules_the_playbooks_call():
    calls = {
        "audit.yml": {audit.AUDIT_ACTION, audit.REPORT_ACTION},
        "rollback.yml": {rollback.ROLLBACK_ACTION},
    }
    for playbook, actions in calls.items():
        text = (REPO / "playbooks" / playbook).read_text()
        for action in actions:
            assert f"{action}:" in text, (playbook, action)


def _event(kind, task, action, res, host="h1"):
    """An ansible-runner event as its display callback writes it (event_data carries resolved_action)."""
    return {
        "event": kind,
        "event_data": {"host": host, "task": task, "task_action": action, "resolved_action": action, "res": res},
    }


def test_progress_follows_the_audit_module_whatever_the_task_is_called():
    lines = []

    class Stream:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    progress = audit.Progress(2, stream=Stream())
    findings = [{"status": "fail"}, {"status": "warn"}, {"status": "pass"}]
    progress(_event("runner_on_ok", "Any name at all", "gpufleet.tuning.audit", {"findings": findings}))
    progress(_event("runner_on_ok", "Audit GPU, host and network state", "ansible.builtin.debug", {}, "h2"))
    progress(_event("runner_on_failed", "Renamed", "gpufleet.tuning.audit", {"failed": True, "timedout": {}}, "h2"))
    text = "".join(lines)
    assert "[1/2] h1: 1 fail, 1 warn (failed hosts so far: 0)" in text
    assert "[2/2] h2: FAILED (failed hosts so far: 1)" in text
    assert progress.done == 2


def test_action_of_prefers_resolved_action_then_task_action():
    assert runner.action_of({"resolved_action": "gpufleet.tuning.audit", "task_action": "audit"}) == (
        "gpufleet.tuning.audit"
    )
    assert runner.action_of({"resolved_action": None, "task_action": "gpufleet.tuning.rollback"}) == (
        "gpufleet.tuning.rollback"
    )
    assert runner.action_of({}) is None


def test_version_needs_no_collection_and_a_command_names_the_missing_one(tmp_path):
    env = {**os.environ, "GPUFLEET_COLLECTION": str(tmp_path)}  # not a collection: no galaxy.yml
    version = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "--version"], capture_output=True, text=True, env=env
    )
    assert version.returncode == 0 and version.stdout.startswith("gpufleet ")
    audit_run = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "audit", "--fail-on", "high"], capture_output=True, text=True, env=env
    )
    assert audit_run.returncode == 3 and "is not a collection" in audit_run.stderr


def test_services_to_restart_reach_remediation_json_and_the_summary():
    """host_tuning writes a daemon's new memlock limit but restarts it only with host_tuning_restart_ok: the
    remediation report says which services still run with the old limit (remediate.yml's gpufleet_restart_required)."""
    watcher = remediate.Watcher(stream=io.StringIO())
    watcher(
        {
            "event": "runner_on_ok",
            "event_data": {
                "host": "h1",
                "task": "Tell whether a reboot is needed, and which role variables took the policy's place",
                "res": {"ansible_facts": {"gpufleet_restart_required": ["slurmd.service"]}},
            },
        }
    )
    summary = watcher.summary(
        _report("a", [_finding("fail", "HOST-MEM-004")]), _report("b", [_finding("pass", "HOST-MEM-004")])
    )
    host = summary["hosts"]["h1"]
    assert host["restart_required"] == ["slurmd.service"]
    assert "restart needed (new limits apply then): slurmd.service" in remediate.render_remediation(summary)
