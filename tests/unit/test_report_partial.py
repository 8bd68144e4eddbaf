"""Hosts that were not audited and runs that did not finish: the report builder (plugin_utils/fleet.py) turns a
task timeout into status ``timeout`` and a missing result of an interrupted run into ``interrupted``; every
renderer says so, and the report stays schema v1."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html, junit, prometheus, schema, terminal

# A registered result as Ansible leaves it when the task keyword `timeout:` fires (ansible-core 2.19).
TIMED_OUT = {
    "failed": True,
    "changed": False,
    "msg": "Task failed: Timed out after 3 second(s).",
    "timedout": {"frame": "Configure `DISPLAY_TRACEBACK` to see a traceback on timeout errors.", "period": 3},
}
UNREACHABLE = {
    "unreachable": True,
    "changed": False,
    "msg": "ssh: connect to host 127.0.0.1 port 1: Connection refused",
}
OK = {"changed": False, "findings": [], "facts": {}, "links": {"source": "none", "peers": []}}


def _report(complete=True, reason=None):
    results = {"ok-01": OK, "slow-01": TIMED_OUT, "gone-01": UNREACHABLE, "late-01": None}
    return fleet.build_report(results, complete=complete, incomplete_reason=reason)


def test_timeout_is_its_own_status():
    report = _report()
    slow = report["hosts"]["slow-01"]
    assert slow["status"] == "timeout"
    assert slow["message"] == "no answer within the per-host timeout (gpufleet_host_timeout = 3 s)"
    assert report["hosts"]["gone-01"]["status"] == "unreachable"
    # a complete run without a result for a host: it was skipped or the play stopped for it
    assert report["hosts"]["late-01"]["status"] == "failed"
    assert report["run"]["complete"] is True and report["run"]["incomplete_reason"] is None
    assert report["summary"]["hosts"] == {
        "total": 4,
        "ok": 1,
        "failed": 1,
        "unreachable": 1,
        "timeout": 1,
        "interrupted": 0,
    }
    assert schema.validate(report) == []


def test_interrupted_run_marks_the_hosts_without_a_result():
    report = _report(complete=False, reason="interrupted by SIGINT (Ctrl-C) after 3 of 4 host(s)")
    assert report["run"]["complete"] is False
    assert report["run"]["incomplete_reason"] == "interrupted by SIGINT (Ctrl-C) after 3 of 4 host(s)"
    late = report["hosts"]["late-01"]
    assert late["status"] == "interrupted" and "interrupted" in late["message"]
    assert report["hosts"]["slow-01"]["status"] == "timeout"  # results that did arrive keep their status
    assert report["summary"]["hosts"]["interrupted"] == 1
    assert schema.validate(report) == []


def test_renderers_say_what_happened():
    report = _report(complete=False, reason="interrupted by SIGINT")
    text = terminal.render_terminal(report)
    assert "INCOMPLETE RUN" in text and "(interrupted by SIGINT)" in text
    assert "TIMED OUT: no answer within the per-host timeout" in text
    # The label and the message say it once each (issue 29: "NOT AUDITED (run interrupted): not audited: ...").
    assert "NOT AUDITED: the run was interrupted before this host answered" in text
    assert "hosts: 4 (1 ok, 0 failed, 1 unreachable, 1 timed out, 1 not audited (interrupted))" in text

    page = html.render_html(report)
    assert 'id="incomplete"' in page and "(interrupted by SIGINT)" in page
    assert "<b>Timed out:</b>" in page and "<b>Not audited (run interrupted):</b>" in page
    assert 'class="chip host-timeout"' in page and "cell-interrupted" in page

    root = ET.fromstring(junit.render_junit(report).encode("utf-8"))
    errors = {
        s.get("name"): s.find("testcase/error").get("type") for s in root.iter("testsuite") if s.get("errors") != "0"
    }
    assert errors == {"slow-01": "host-timeout", "late-01": "host-interrupted", "gone-01": "host-unreachable"}

    prom = prometheus.render_prometheus(report)
    assert "gpufleet_audit_complete 0" in prom
    assert 'gpufleet_host_up{host="slow-01",status="timeout"} 0' in prom
    assert 'gpufleet_host_up{host="ok-01",status="ok"} 1' in prom
    assert 'gpufleet_host_findings{host="slow-01"' not in prom  # not audited: no counts that read as clean


def test_a_host_without_a_usable_driver_is_listed_with_the_reason():
    """Audited (status ok) but no GPU facts: nothing fails, yet the terminal and the page say why GPU rules skipped."""
    no_driver = dict(
        OK, facts={"gpu": {"nvml": {"available": False, "error": "NVMLError_DriverNotLoaded"}, "gpus": []}}
    )
    report = fleet.build_report({"ok-01": OK, "bare-01": no_driver})
    text = terminal.render_terminal(report)
    assert "bare-01  (no NVIDIA driver found (NVMLError_DriverNotLoaded))" in text
    assert "\nok-01  (" not in text  # a host with nothing to say is not listed
    assert "no NVIDIA driver found (NVMLError_DriverNotLoaded)" in html.render_html(report)
