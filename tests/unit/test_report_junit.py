"""JUnit XML: a testsuite per host, a testcase per host x rule, well-formed whatever the data holds."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import junit
from report_fixtures import load


@pytest.fixture(scope="module")
def sample_xml(sample):
    return ET.fromstring(junit.render_junit(sample).encode("utf-8"))


def _suite(root, host):
    return next(s for s in root.iter("testsuite") if s.get("name") == host)


def _case(suite, rule):
    return next(c for c in suite.iter("testcase") if c.get("name").startswith(rule + " "))


def test_declaration_and_root(sample):
    text = junit.render_junit(sample)
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites ')
    root = ET.fromstring(text.encode("utf-8"))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("68", "10", "2", "1")


def test_one_suite_per_host_and_one_case_per_rule(sample, sample_xml):
    suites = sample_xml.findall("testsuite")
    assert [s.get("name") for s in suites] == sorted(sample["hosts"])
    a100 = _suite(sample_xml, "sg-a100-01")
    rules = [c.get("name").split(" ")[0] for c in a100.findall("testcase")]
    assert rules == sorted(f["rule"] for f in sample["hosts"]["sg-a100-01"]["findings"])
    assert (a100.get("tests"), a100.get("failures"), a100.get("errors"), a100.get("skipped")) == ("33", "10", "0", "0")
    props = {p.get("name"): p.get("value") for p in a100.find("properties")}
    assert props == {"status": "ok", "site": "ap_southeast", "run": "6f0d3c1e-8a52-4e8b-9d0a-2b7c41f5e9a3"}
    down = _suite(sample_xml, "sg-l40s-03")
    assert {p.get("name"): p.get("value") for p in down.find("properties")} == {
        "status": "unreachable",
        "run": "6f0d3c1e-8a52-4e8b-9d0a-2b7c41f5e9a3",
    }


def test_status_mapping(sample_xml):
    a100 = _suite(sample_xml, "sg-a100-01")
    fail = _case(a100, "SW-FM-001")
    assert fail.get("name") == "SW-FM-001 Fabric manager version differs from the driver"
    assert [child.tag for child in fail] == ["failure"]
    failure = fail.find("failure")
    assert failure.get("type") == "critical"
    assert failure.get("message").startswith("[critical] fabric manager 535.86.10 does not match driver 535.104.05")
    assert 'observed: {"driver": "535.104.05", "fabricmanager": "535.86.10"}' in failure.text
    assert "expected: equal" in failure.text
    assert "fix: role nvidia_driver, tag SW-FM-001" in failure.text
    assert "why: nvidia-fabricmanager must match the driver exactly" in failure.text
    items = _case(a100, "GPU-PWR-002").find("failure").text
    assert '  {"default_limit_w": 400.0, "gpu": 7, "limit_w": 250.0}' in items.splitlines()  # per-GPU details
    warn = _case(a100, "HOST-HLT-002")
    assert [child.tag for child in warn] == ["system-out"]
    assert warn.find("system-out").text.startswith("WARNING [medium] 184 corrected PCIe errors")
    assert list(_case(a100, "HOST-CPU-001")) == []  # pass: an empty testcase
    h100 = _suite(sample_xml, "iad-h100-03")
    skipped = _case(h100, "SW-FM-001")
    assert [child.tag for child in skipped] == ["skipped"]
    assert skipped.find("skipped").get("message") == "nvidia-fabricmanager not installed"
    assert _case(a100, "GPU-PWR-001").get("classname") == "sg-a100-01.power"


def test_check_error_is_an_error():
    report = {
        "hosts": {
            "h": {
                "status": "ok",
                "findings": [
                    {
                        "rule": "GPU-HLT-002",
                        "area": "health",
                        "status": "error",
                        "severity": "critical",
                        "title": "GPU lost",
                        "message": "KeyError: 'lost'",
                        "observed": None,
                        "expected": None,
                    }
                ],
            }
        }
    }
    root = ET.fromstring(junit.render_junit(report))
    error = root.find("testsuite/testcase/error")
    assert (error.get("type"), error.get("message")) == ("check-error", "KeyError: 'lost'")
    assert (root.get("tests"), root.get("errors"), root.get("failures")) == ("1", "1", "0")


@pytest.mark.parametrize(
    "host, name, kind",
    [("sg-l40s-03", "reachability", "host-unreachable"), ("fra-a100-02", "audit", "host-failed")],
)
def test_down_host_is_one_errored_case(sample_xml, host, name, kind):
    suite = _suite(sample_xml, host)
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [name]
    error = cases[0].find("error")
    assert error.get("type") == kind
    assert error.get("message") == error.text
    assert (suite.get("tests"), suite.get("errors")) == ("1", "1")


def test_hostile_strings_stay_well_formed():
    hostile = load("hostile-v1.json")
    root = ET.fromstring(junit.render_junit(hostile).encode("utf-8"))
    names = [s.get("name") for s in root.findall("testsuite")]
    assert names == sorted(hostile["hosts"])  # quotes, newline, markup, {{ }} round-trip through attributes
    host = "gpu-<script>alert(1)</script>-01"
    suite = _suite(root, host)
    case = _case(suite, "GPU-PWR-001")
    assert case.get("name") == "GPU-PWR-001 " + hostile["catalog"][0]["title"]
    failure = case.find("failure")
    finding = hostile["hosts"][host]["findings"][0]
    assert failure.get("message") == "[high] " + finding["message"]
    assert "<script>document.title='PWNED'" in failure.text  # escaped on the way out, intact on the way in
    assert _case(suite, "GPU-MEM-001").find("failure").text.startswith("line one\nline two")
    failed = _suite(root, 'evil"host\nname{{ 7*7 }}').find("testcase/error")
    # XML 1.0 cannot carry NUL, BEL or ESC at all: they are replaced, everything else is kept
    message = hostile["hosts"]['evil"host\nname{{ 7*7 }}']["message"]
    for ch in "\x00\x07\x1b":
        message = message.replace(ch, "\ufffd")
    assert failed.get("message") == message  # attributes keep even CR and LF (written as character references)
    assert failed.get("message").endswith("bell\ufffd nul\ufffd esc\ufffd[31mRED\ufffd[0m")
    assert "\n# HELP gpufleet_fake injected" in failed.text  # element text: the parser folds CR LF into LF


def test_unknown_status_is_an_error_not_a_pass():
    report = {"hosts": {"h": {"status": "ok", "findings": [{"rule": "R-1", "status": "maybe", "area": "cpu"}]}}}
    root = ET.fromstring(junit.render_junit(report))
    assert root.find("testsuite/testcase/error").get("type") == "invalid-result"
    assert root.get("errors") == "1"


def test_failure_details_name_the_rules_sources():
    """Each failure says where its rule comes from, as the HTML finding does (catalog ``references``)."""
    report = load("statuses-v1.json")
    root = ET.fromstring(junit.render_junit(report).encode("utf-8"))
    refs = next(e["references"] for e in report["catalog"] if e["id"] == "GPU-PWR-002")
    assert refs, "the fixture's catalog entry has references"
    failure = _case(_suite(root, "sg-h100-02"), "GPU-PWR-002").find("failure")
    line = next(t for t in failure.text.splitlines() if t.startswith("sources: "))
    assert line == "sources: " + "; ".join(f"{r['title']} <{r['url']}>" for r in refs)
    for host in ("sg-a100-01", "sg-h100-02"):
        for case in _suite(root, host).iter("testcase"):
            if case.find("failure") is not None:
                rule = case.get("name").split(" ")[0]
                entry = next(e for e in report["catalog"] if e["id"] == rule)
                assert ("sources: " in case.find("failure").text) == bool(entry.get("references")), rule


def test_no_sources_line_without_references(sample_xml):
    failure = _case(_suite(sample_xml, "sg-a100-01"), "SW-FM-001").find("failure")
    assert "sources:" not in failure.text  # the sample's catalog predates references
