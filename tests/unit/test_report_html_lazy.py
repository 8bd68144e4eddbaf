"""The HTML report of a large fleet (issue 18): under 10 MB at 1,000 hosts, the matrix and a head per host as HTML,
each host's checks as data (one JSON block the page's own script renders when the host is opened), nothing from
the data able to leave that block. Built from the recorded reports (tests/fleetreport.py), not by auditing."""

from __future__ import annotations

import json
import re

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import fleetview, schema
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html as report_html
from fleetreport import scaled_report
from markupsafe import escape
from report_fixtures import load

MAX_BYTES = 10_000_000  # issue 18: the HTML report stays under 10 MB at 1,000 hosts
DATA = re.compile(r'<script type="application/json" id="host-data">(.*?)</script>', re.S)


@pytest.fixture(scope="module")
def fleet():
    return scaled_report(1000)


@pytest.fixture(scope="module")
def fleet_html(fleet):
    return report_html.render_html(fleet)


def _data(page: str) -> dict:
    blocks = DATA.findall(page)
    assert len(blocks) == 1, "one host-data block"
    return json.loads(blocks[0])


def test_1000_hosts_under_10_mb(fleet_html):
    size = len(fleet_html.encode("utf-8"))
    print(f"1,000-host HTML report: {size / 1e6:.2f} MB")
    assert size < MAX_BYTES, f"{size / 1e6:.1f} MB"


def test_matrix_and_host_heads_are_html_checks_are_data(fleet, fleet_html):
    assert len(re.findall(r'<tr id="row-host-\d+" data-host=', fleet_html)) == 1000
    assert len(re.findall(r'<section class="host ', fleet_html)) == 1000
    assert '<tr class="finding' not in fleet_html  # no check rendered up front
    # One executable script (the CSP-pinned one) and the data block, at the end: the matrix comes first.
    assert len(re.findall(r"<script>", fleet_html)) == 1
    assert fleet_html.index('id="matrix"') < fleet_html.index('id="host-data"') < fleet_html.index("<script>")
    data = _data(fleet_html)
    names = sorted(fleet["hosts"])
    for index, name in enumerate(names, 1):
        host = fleet["hosts"][name]
        anchor = f"host-{index}"
        findings = sorted(schema.host_findings(host), key=schema.finding_sort_key)
        failing = [f for f in findings if f.get("status") in ("fail", "warn", "error")]
        others = [f for f in findings if f.get("status") not in ("fail", "warn", "error")]
        if not findings:
            assert anchor not in data["hosts"], name
            assert f'data-host-details="{anchor}"' not in fleet_html
            continue
        assert f'data-host-details="{anchor}"' in fleet_html, name
        got = data["hosts"][anchor]
        assert [(f["rule"], f["status"], f["severity"], f["area"]) for f in got["f"]] == [
            (f["rule"], f["status"], f["severity"], f["area"]) for f in failing
        ], name
        assert [f["message"] for f in got["f"]] == [fleetview.message_text(f["message"]) for f in failing]
        said = fleetview.message_text  # the page's messages: Python lists as words
        assert got["o"] == [[f["rule"], f["status"], f["severity"], f["area"], said(f["message"])] for f in others]


def test_rationale_and_sources_are_in_the_page_once_per_rule_not_in_the_data(fleet, fleet_html):
    data = _data(fleet_html)
    rules = {f["rule"] for h in data["hosts"].values() for f in h["f"]}
    assert rules and rules <= set(data["rules"])
    catalog = schema.catalog_index(fleet)
    for rule in rules:
        anchor = data["rules"][rule]  # the failing check links to its rule's entry in the Rules section
        assert re.fullmatch(r"rule-\d+", anchor) and f'id="{anchor}" data-rule="{rule}"' in fleet_html
        rationale = catalog[rule]["rationale"]
        assert rationale and fleet_html.count(str(escape(rationale))) == 1  # in the Rules section, not per host
    assert '"rationale"' not in DATA.findall(fleet_html)[0]


def test_small_reports_are_rendered_in_full():
    sample = load("sample-v1.json")
    page = report_html.render_html(sample)
    assert 'id="host-data"' not in page and '<tr class="finding' in page
    at_limit = report_html.render_html(scaled_report(report_html.LAZY_FROM_HOSTS))
    assert 'id="host-data"' not in at_limit and '<tr class="finding' in at_limit
    above = report_html.render_html(scaled_report(report_html.LAZY_FROM_HOSTS + 1))
    assert 'id="host-data"' in above and '<tr class="finding' not in above


def test_hostile_data_stays_inside_its_block():
    hostile = load("hostile-v1.json")
    page = report_html.render_html(hostile, lazy=True)
    block = DATA.findall(page)
    assert len(block) == 1
    text = block[0]
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in text, repr(bad)  # nothing can end the element (</script>) or open a comment (<!--)
    data = json.loads(text)
    strings = json.dumps(data, ensure_ascii=False)
    assert "<script>document.title='PWNED'" in strings  # the payload is still there, as data
    assert "<img src=x onerror=" in strings
    for ch in ("\x00", "\x07", "\x1b"):
        assert ch not in strings  # control characters dropped, as in the rendered page
    # The one script that runs is still the CSP-pinned one.
    assert len(re.findall(r"<script>", page)) == 1


def test_lazy_is_a_choice_of_the_caller():
    sample = load("sample-v1.json")
    assert 'id="host-data"' in report_html.render_html(sample, lazy=True)
    assert 'id="host-data"' not in report_html.render_html(scaled_report(400), lazy=False)
