"""The HTML report read at 60 hosts (issue 29 point 5): a per-rule rollup ("GPU-MEM-001 fails on 30 of 54 hosts",
the hosts linked), each rule's rationale and sources once in the page (not once per host card), observed and
expected values in words (no JSON braces, no Python lists) and the host cards in the matrix's order, worst first
within a site. Built from the recorded report scaled to 60 hosts (tests/fleetreport.py)."""

from __future__ import annotations

import json
import re

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import fleetview, schema
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html as report_html
from fleetreport import scaled_report
from markupsafe import escape
from test_report_html import parse

SITES = ("ap_southeast", "eu_west", "us_east")


@pytest.fixture(scope="module")
def fleet():
    """60 hosts in three sites (the recorded hosts' sites replaced: 20 per site, worst and healthy mixed)."""
    report = scaled_report(60)
    for i, host in enumerate(report["hosts"].values()):
        host["site"] = SITES[i % 3]
    return report


@pytest.fixture(scope="module", params=[False, True], ids=["full", "lazy"])
def page(request, fleet):
    return report_html.render_html(fleet, lazy=request.param)


def test_each_failing_rule_is_rolled_up_once_with_its_hosts(fleet, page):
    tree = parse(page)
    rollup = fleetview.rule_rollup(fleet)
    assert rollup
    entries = [d for d in tree.iter("div") if "rule-entry" in d.classes()]
    assert [d.attrs["data-rule"] for d in entries] == [r["rule"] for r in rollup]  # worst rule first
    cards = {s.attrs["data-host"]: s.attrs["id"] for s in tree.iter("section") if "host" in s.classes()}
    verbs = {"fail": "fails on", "warn": "warns on", "error": "could not be checked on"}
    for r, entry in zip(rollup, entries, strict=True):
        for key, verb in verbs.items():
            line = entry.find("div", data_result=key)
            assert (line is not None) == bool(r[key]), (r["rule"], key)
            if not r[key]:
                continue
            text = " ".join(line.all_text().split())
            assert f"{r['rule']} {verb} {len(r[key])} of {r['checked']} hosts:" in text
            links = [(a.all_text(), a.attrs["href"]) for a in line.iter("a")]
            assert links == [(name, "#" + cards[name]) for name in r[key]]  # every host, linked to its card
            shown = [a for a in line.iter("a") if a.parent is line]
            assert len(shown) == min(len(r[key]), report_html.ROLLUP_HOSTS)  # the rest folded: "(+K)"
            if len(r[key]) > report_html.ROLLUP_HOSTS:
                assert line.find("summary").all_text() == f"(+{len(r[key]) - report_html.ROLLUP_HOSTS})"
    assert any(len(r["fail"]) > report_html.ROLLUP_HOSTS for r in rollup)


def test_a_rules_rationale_and_sources_are_said_once(fleet, page):
    catalog = schema.catalog_index(fleet)
    failing = {r["rule"] for r in fleetview.rule_rollup(fleet)}
    hosts = sum(1 for h in fleet["hosts"].values() if any(f.get("status") == "fail" for f in schema.host_findings(h)))
    assert hosts >= 20  # the rules fail on many hosts, and still ...
    for rule in failing:
        rationale = str(escape(catalog[rule]["rationale"]))
        assert page.count(rationale) == 1, rule  # ... the rationale is in the page once
        for ref in catalog[rule].get("references") or []:
            assert page.count(str(escape(ref["url"]))) == 1, ref
        manual = (catalog[rule].get("fix") or {}).get("manual")
        if manual:  # the manual steps of a fix, too (once per rule that has them): the host cards link to them
            rules = sum(1 for r in failing if (catalog[r].get("fix") or {}).get("manual") == manual)
            assert page.count(str(escape(manual))) == rules, rule
    assert page.count("Why: ") == len(failing)
    assert any((catalog[rule].get("fix") or {}).get("manual") for rule in failing)


def test_a_finding_links_to_its_rule_entry(page):
    tree = parse(page)
    if 'id="host-data"' in page:
        data = json.loads(re.search(r'id="host-data">(.*?)</script>', page, re.S).group(1))
        links = data["rules"]
    else:
        rows = [tr for tr in tree.iter("tr") if "finding" in tr.classes() and "hidden" not in tr.attrs]
        assert rows
        links = {tr.find("td", class_="rule").find("a").all_text(): tr.find("a").attrs["href"][1:] for tr in rows}
    for rule, anchor in links.items():
        assert tree.find("div", id=anchor).attrs["data-rule"] == rule


def _values(value):
    """The dict and list values in ``value`` and below it."""
    if isinstance(value, dict):
        yield value
        for item in value.values():
            yield from _values(item)
    elif isinstance(value, list):
        yield value
        for item in value:
            yield from _values(item)


def test_observed_and_expected_values_are_words_not_json_or_python_lists(fleet):
    page = report_html.render_html(fleet, lazy=False)
    structured = [
        f
        for h in fleet["hosts"].values()
        for f in schema.host_findings(h)
        if f.get("status") in ("fail", "warn") and any(True for _ in _values(f.get("observed")))
    ]
    assert structured, "the fixture has findings whose observed value is a mapping or a list"
    tree = parse(page)
    cells = [td for td in tree.iter("td") if "vals" in td.classes()]
    assert cells
    for td in cells:
        text = td.all_text()
        for bad in ("{", "}", "[", "]", '"', "'"):
            assert bad not in text, (bad, text)
    a100 = next(s for s in tree.iter("section") if s.attrs.get("data-host") == "sg-a100-01-0001")
    row = next(tr for tr in a100.iter("tr") if "GPU-MEM-001" in tr.all_text())
    assert "gpus_full: 0\u20137" in row.find("td", class_="vals").all_text()  # one line per key, GPUs as a run
    assert "GPU(s) 0\u20137 at" in row.all_text()  # the message too: no Python list


def test_host_cards_come_in_the_matrix_order_worst_first_within_a_site(fleet, page):
    tree = parse(page)
    matrix = [tr.attrs["data-host"] for tr in tree.find("table", id="matrix").iter("tr") if "data-host" in tr.attrs]
    cards = [s.attrs["data-host"] for s in tree.iter("section") if "host" in s.classes()]
    assert cards == matrix
    expected = []
    for site in SITES:
        expected += fleetview.host_order({n: h for n, h in fleet["hosts"].items() if h["site"] == site})
    assert matrix == expected
    assert len(matrix) == 60
