"""node_exporter textfile: metric families, values, and label escaping per the text exposition format.

Every textfile these tests render also goes through ``promtool check metrics`` (Debian's ``prometheus`` package,
installed by ``scripts/install-deps.sh test``; promtool only, no server is started). Without promtool the
dedicated test skips, saying so, and the other tests still check the format with the strict reader below.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import warnings
from datetime import datetime, timezone

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import prometheus
from report_fixtures import load

FAMILIES = [
    "gpufleet_finding",
    "gpufleet_host_up",
    "gpufleet_host_findings",
    "gpufleet_unknown_findings",
    "gpufleet_audit_timestamp_seconds",
    "gpufleet_audit_complete",
]

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? (\S+)$")


PROMTOOL = shutil.which("promtool")
CHECKED: list[str] = []  # every textfile rendered in this module, each already passed promtool when present


def promtool_check(text):
    """``promtool check metrics`` on one textfile: the exposition format and Prometheus' naming lint."""
    CHECKED.append(text)
    if PROMTOOL is None:
        return
    proc = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"promtool check metrics failed:\n{proc.stdout}{proc.stderr}\n--- file:\n{text}"


def render(report, **kwargs):
    """render_prometheus, with the result checked by promtool."""
    text = prometheus.render_prometheus(report, **kwargs)
    promtool_check(text)
    return text


def _unescape(value):
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], value)


def parse(text):
    """A strict reader of the exposition format: returns {family: {"help", "type", "samples": [(labels, value)]}}."""
    assert text.endswith("\n")
    families = {}
    current = None
    series = set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in families, f"family {name} appears twice"
            families[name] = {"help": line.split(" ", 3)[3], "type": None, "samples": []}
            current = name
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == current and kind in ("gauge", "counter", "untyped")
            families[name]["type"] = kind
        else:
            m = _SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, labels_text, value = m.group(1), m.group(2), m.group(m.lastindex)
            assert name == current, f"{name} outside its family"
            labels = {k: _unescape(v) for k, v in re.findall(_LABEL, labels_text or "")}
            key = (name, tuple(sorted(labels.items())))
            assert key not in series, f"duplicate series {key}"
            series.add(key)
            families[name]["samples"].append((labels, float(value)))
    return families


@pytest.fixture(scope="module")
def metrics(sample):
    return parse(render(sample))


def test_families_in_order_with_help_and_type(metrics):
    assert list(metrics) == FAMILIES
    assert all(f["type"] == "gauge" and f["help"] for f in metrics.values())


def test_findings_only_fail_and_warn(sample, metrics):
    samples = metrics["gpufleet_finding"]["samples"]
    assert all(v == 1 for _, v in samples)
    assert all(set(labels) == {"host", "rule", "severity", "area", "status"} for labels, _ in samples)
    got = sorted((s["host"], s["rule"], s["status"]) for s, _ in samples)
    want = sorted(
        (host, f["rule"], f["status"])
        for host, h in sample["hosts"].items()
        for f in h["findings"]
        if f["status"] in ("fail", "warn")
    )
    assert got == want and len(got) == 11
    fm = next(s for s, _ in samples if s["rule"] == "SW-FM-001")
    assert fm == {
        "host": "sg-a100-01",
        "rule": "SW-FM-001",
        "severity": "critical",
        "area": "software",
        "status": "fail",
    }
    aer = next(s for s, _ in samples if s["rule"] == "HOST-HLT-002")
    assert aer["status"] == "warn"


def test_host_up_says_why(metrics):
    up = {(s["host"], s["status"]): v for s, v in metrics["gpufleet_host_up"]["samples"]}
    assert up == {
        ("sg-a100-01", "ok"): 1,
        ("fra-a100-02", "failed"): 0,
        ("iad-h100-03", "ok"): 1,
        ("sg-l40s-03", "unreachable"): 0,
    }


def test_host_findings_per_audited_host_and_severity(metrics):
    totals = {(s["host"], s["severity"]): v for s, v in metrics["gpufleet_host_findings"]["samples"]}
    assert len(totals) == 2 * 5  # the two audited hosts only
    assert [totals[("sg-a100-01", s)] for s in ("critical", "high", "medium", "low", "info")] == [3, 5, 3, 0, 0]
    assert [totals[("iad-h100-03", s)] for s in ("critical", "high", "medium", "low", "info")] == [0] * 5


def test_hosts_not_audited_export_no_finding_counts():
    """A down host must not read as clean (0 findings): it has no finding series at all, and host_up says why."""
    report = load("statuses-v1.json")
    m = parse(render(report))
    down = {n for n, h in report["hosts"].items() if h["status"] != "ok"}
    assert {h["status"] for n, h in report["hosts"].items() if n in down} == {
        "failed",
        "unreachable",
        "timeout",
        "interrupted",
    }
    for family in ("gpufleet_host_findings", "gpufleet_finding"):
        hosts = {labels["host"] for labels, _ in m[family]["samples"]}
        assert not hosts & down, family
    assert {labels["host"] for labels, _ in m["gpufleet_host_findings"]["samples"]} == set(report["hosts"]) - down
    up = {labels["host"]: (labels["status"], v) for labels, v in m["gpufleet_host_up"]["samples"]}
    assert up == {n: (h["status"], 1 if h["status"] == "ok" else 0) for n, h in report["hosts"].items()}


def test_a_failed_host_with_partial_findings_exports_none():
    f = {"rule": "GPU-PWR-001", "status": "fail", "severity": "high", "area": "power"}
    m = parse(render({"hosts": {"h": {"status": "failed", "findings": [f]}}}))
    assert m["gpufleet_finding"]["samples"] == [] and m["gpufleet_host_findings"]["samples"] == []
    assert m["gpufleet_host_up"]["samples"] == [({"host": "h", "status": "failed"}, 0.0)]


def test_no_gauge_ends_in_total(metrics):
    """Prometheus naming: _total is for counters (https://prometheus.io/docs/practices/naming/)."""
    assert all(f["type"] == "gauge" and not name.endswith("_total") for name, f in metrics.items())


def test_promtool_accepts_every_textfile():
    if PROMTOOL is None:
        warnings.warn("promtool not found: the textfiles were NOT checked by promtool", stacklevel=1)
        pytest.skip(
            "promtool not found: install Debian's `prometheus` package (scripts/install-deps.sh test) "
            "so that `promtool check metrics` checks every textfile these tests render"
        )
    for name in ("sample-v1.json", "hostile-v1.json", "statuses-v1.json"):
        render(load(name))
    assert len(CHECKED) >= 3


def test_timestamp_and_complete(sample, metrics):
    ts = metrics["gpufleet_audit_timestamp_seconds"]["samples"]
    assert ts == [({}, datetime(2026, 11, 1, 8, 31, 27, tzinfo=timezone.utc).timestamp())]
    assert metrics["gpufleet_audit_complete"]["samples"] == [({}, 1.0)]
    partial = dict(sample, run=dict(sample["run"], complete=False, finished_at=None))
    m = parse(render(partial))
    assert m["gpufleet_audit_complete"]["samples"] == [({}, 0.0)]
    # no finish time: the start time
    assert (
        m["gpufleet_audit_timestamp_seconds"]["samples"][0][1]
        == datetime(2026, 11, 1, 8, 30, tzinfo=timezone.utc).timestamp()
    )


def test_timestamp_falls_back_to_now():
    now = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    m = parse(render({"hosts": {}}, now=now))
    assert m["gpufleet_audit_timestamp_seconds"]["samples"] == [({}, now.timestamp())]
    assert m["gpufleet_audit_complete"]["samples"] == [({}, 0.0)]


def test_escape_label():
    assert prometheus.escape_label('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert prometheus.escape_label("<script>{{ 7*7 }}") == "<script>{{ 7*7 }}"


def test_hostile_labels_round_trip_and_inject_nothing():
    hostile = load("hostile-v1.json")
    text = render(hostile)
    m = parse(text)  # strict: an unescaped quote or newline would break a line or add a sample
    assert list(m) == FAMILIES
    assert "gpufleet_fake" not in {line.split("{")[0].split(" ")[0] for line in text.splitlines()}
    up = {s["host"]: v for s, v in m["gpufleet_host_up"]["samples"]}
    assert up == {
        "gpu-<script>alert(1)</script>-01": 1,
        'evil"host\nname{{ 7*7 }}': 0,
        "unreach-<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\">": 0,
    }
    assert 'host="evil\\"host\\nname{{ 7*7 }}"' in text


def test_backslash_in_a_rule_label():
    """Label values are escaped, a catalog's rule id as much as a host name."""
    report = {
        "run": {"finished_at": "2026-01-01T00:00:00Z", "complete": True},
        "catalog": [{"id": 'R\\"-1\n', "area": "cpu", "severity": "low"}],
        "hosts": {
            "h\\1": {
                "status": "ok",
                "findings": [{"rule": 'R\\"-1\n', "status": "fail", "severity": "low", "area": "cpu"}],
            }
        },
    }
    m = parse(render(report))
    assert m["gpufleet_finding"]["samples"] == [
        ({"host": "h\\1", "rule": 'R\\"-1\n', "severity": "low", "area": "cpu", "status": "fail"}, 1.0)
    ]


def test_duplicate_rule_results_give_one_series():
    f = {"rule": "GPU-PWR-001", "status": "fail", "severity": "high", "area": "power"}
    report = {"hosts": {"h": {"status": "ok", "findings": [f, dict(f, status="warn")]}}, "catalog": rules.catalog()}
    m = parse(render(report))
    assert len(m["gpufleet_finding"]["samples"]) == 1
    assert m["gpufleet_unknown_findings"]["samples"] == [({"host": "h"}, 0.0)]


# ------------------------------------------------------------------ series bounded by the catalog (issue 26)

INJECTION = 'X"} 1\nfake_metric 2'


def _hostile_result(count=10_000):
    """A host's audit result as a hostile (or broken) host can return it: thousands of random rule ids, a rule id
    that tries to end its label and start a metric, a catalog rule with an unknown area or severity or status, and
    keys that try to name other hosts."""
    rng = random.Random(26)
    findings = [
        {"rule": f"X-{rng.getrandbits(48):012x}", "status": "fail", "severity": "critical", "area": "power"}
        for _ in range(count)
    ]
    findings += [
        {"rule": INJECTION, "status": "fail", "severity": "high", "area": "power"},
        {"rule": "GPU-PWR-002", "status": "fail", "severity": "high", "area": "urgent\n"},  # exported, catalog area
        {"rule": "GPU-PWR-001", "status": "fail", "severity": "urgent\n", "area": "power"},
        {"rule": "HOST-CPU-002", "status": "warn", "severity": "critical", "area": "cpu"},  # policy may raise it
        {"rule": "GPU-ECC-001", "status": "urgent", "severity": "high", "area": "health"},
        {"rule": ["GPU-PWR-003"], "status": "fail", "severity": "high", "area": "power"},
    ]
    return {
        "changed": False,
        "findings": findings,
        "facts": {},
        "host": "another-host",
        "hosts": {"injected-host": {"status": "ok", "findings": findings[:3]}},
        "links": {"source": "none", "peers": [], "site": 'x"} 1\nfake_site 1'},
    }


def _unchecked(results, **kwargs):
    """The report as the builder writes it, then each audited host's findings put back as the host returned them:
    a report written elsewhere (another version, by hand) that the export must hold against all the same (the builder
    itself sets them aside: test_hostile_outputs.py::test_the_builder_sets_aside_what_the_catalog_does_not_know)."""
    report = fleet.build_report(results, **kwargs)
    for name, result in results.items():
        if result is not None and report["hosts"][name]["status"] == "ok":
            report["hosts"][name]["findings"] = result["findings"]
    return report


def test_a_host_cannot_add_series():
    """Only catalog rules x known labels get their own series; everything else is one counter per host."""
    report = _unchecked({"gpu-01": _hostile_result(), "gpu-02": None}, started_at="2026-12-01T00:00:00+00:00")
    text = render(report)  # promtool check metrics, when installed
    m = parse(text)
    assert list(m) == FAMILIES
    samples = sum(len(f["samples"]) for f in m.values())
    assert len(text.splitlines()) == 2 * len(FAMILIES) + samples  # HELP + TYPE per family, then samples only
    assert not [line for line in text.splitlines() if line.startswith(("fake", "X", "gpufleet_fake"))]
    catalog = {r.id: r for r in rules.RULES}
    exported = [labels for labels, _ in m["gpufleet_finding"]["samples"]]
    assert sorted((s["rule"], s["severity"], s["status"]) for s in exported) == [
        ("GPU-PWR-002", "high", "fail"),
        ("HOST-CPU-002", "critical", "warn"),  # a known severity other than the catalog's (policy) is kept
    ]
    assert all(s["area"] == catalog[s["rule"]].area for s in exported)  # the catalog's area, not the host's claim
    hosts = {labels["host"] for family in m.values() for labels, _ in family["samples"] if "host" in labels}
    assert hosts == {"gpu-01", "gpu-02"}  # the inventory's names only
    assert m["gpufleet_unknown_findings"]["samples"] == [({"host": "gpu-01"}, 10_004.0)]
    assert m["gpufleet_unknown_findings"]["type"] == "gauge"
    assert len(m["gpufleet_finding"]["samples"]) <= len(catalog)


def test_series_stay_bounded_as_a_host_returns_more():
    """The number of lines does not grow with the number of unknown rule ids a host returns."""
    small = render(_unchecked({"gpu-01": _hostile_result(10)}))
    large = render(_unchecked({"gpu-01": _hostile_result(5_000)}))
    assert len(small.splitlines()) == len(large.splitlines())
    assert 'gpufleet_unknown_findings{host="gpu-01"} 14' in small
    assert 'gpufleet_unknown_findings{host="gpu-01"} 5004' in large


def test_a_report_without_a_catalog_exports_no_finding_series():
    """The catalog bounds the series: without one, no rule is known, and the findings are counted."""
    f = {"rule": "GPU-PWR-001", "status": "fail", "severity": "high", "area": "power"}
    m = parse(render({"hosts": {"h": {"status": "ok", "findings": [f]}}}))
    assert m["gpufleet_finding"]["samples"] == []
    assert m["gpufleet_unknown_findings"]["samples"] == [({"host": "h"}, 1.0)]
    assert ({"host": "h", "severity": "high"}, 1.0) in m["gpufleet_host_findings"]["samples"]
