"""Runs through execution nodes (gpufleet audit --worker, issue 18): the terminal summary and the HTML report say how
each host was reached (``via``) and list the run's workers (``run.workers``), as report.json does."""

from __future__ import annotations

import copy

from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.html import render_html
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report.terminal import render_terminal
from report_fixtures import load


def _with_workers() -> dict:
    report = copy.deepcopy(load("sample-v1.json"))
    names = sorted(report["hosts"])
    for name in names:
        report["hosts"][name]["via"] = "worker:ap" if name.startswith("sg-") else "direct"
    report["run"]["workers"] = [
        {
            "region": "ap",
            "url": "ssh://runner@exec-sg",
            "hosts": 2,
            "status": "successful",
            "error": None,
            "wall_s": 12.5,
        },
        {
            "region": "eu",
            "url": "ssh://runner@exec-fra",
            "hosts": 0,
            "status": "failed",
            "error": "ssh: connect to host exec-fra port 22: Connection refused",
            "wall_s": 0.1,
        },
    ]
    return report


def test_terminal_names_each_hosts_route_and_the_workers():
    text = render_terminal(_with_workers())
    assert "worker ap via ssh://runner@exec-sg: 2 hosts, successful" in text
    assert "worker eu via ssh://runner@exec-fra: 0 hosts, failed (ssh: connect to host exec-fra port 22" in text
    sg = [line for line in text.splitlines() if "via worker:ap" in line]
    assert sg and all("via direct" not in line for line in sg)
    assert "via direct" in text
    assert "via " not in render_terminal(load("sample-v1.json")).replace("via ssh", "")  # direct runs say nothing


def test_html_names_each_hosts_route_and_the_workers():
    for lazy in (False, True):
        page = render_html(_with_workers(), lazy=lazy)
        assert "ap via ssh://runner@exec-sg: 2 hosts, successful, 12.5 s" in page
        assert "Connection refused" in page
        assert page.count("· via worker:ap") == 2 and "· via direct" in page
    assert "· via " not in render_html(load("sample-v1.json"))
