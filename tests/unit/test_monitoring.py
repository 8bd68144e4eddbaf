"""monitoring/: the Prometheus alerting rules (promtool check + promtool test) and the Grafana dashboard.

promtool is Debian's (`prometheus` package, installed by ``scripts/install-deps.sh test``). These tests FAIL, not
skip, without it: the alert rules are shipped untested otherwise. The metric names the rules and the dashboard may
use are the watch's textfile families (the design in issue 16: gpufleet_* written by gpufleet-watch), node_exporter's
textfile-collector families and Prometheus' own ``up``; a name outside that list is a typo or a family nobody
writes, and its panel or alert would stay empty forever.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import watch_families
import yaml
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

REPO = Path(__file__).resolve().parents[2]
MONITORING = REPO / "monitoring"
ALERTS = MONITORING / "prometheus" / "gpufleet-alerts.yml"
ALERT_TESTS = sorted((MONITORING / "prometheus" / "tests").glob("*.yml"))
DASHBOARD = MONITORING / "grafana" / "gpufleet-dashboard.json"

# The textfile the watch writes (<watch.textfile_dir>/gpufleet.prom).
WATCH_METRICS = watch_families.ALL
# node_exporter's textfile collector (collector/textfile.go, Debian 12's 1.5.0) and the scrape's own `up`.
EXPORTER_METRICS = {"node_textfile_mtime_seconds", "node_textfile_scrape_error", "up"}
KNOWN_METRICS = WATCH_METRICS | EXPORTER_METRICS

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, label names and strings dropped)."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors and subqueries
    text = _GROUPING.sub("", text)  # by (...), on (...), group_left (...)
    text = re.sub(r"(?<![A-Za-z0-9_:])\d[A-Za-z0-9_.]*", "", text)  # numbers and durations (offset 5m)
    names = set()
    for m in _IDENT.finditer(text):
        rest = text[m.end() :].lstrip()
        if m.group(0) in _KEYWORDS or rest.startswith("("):  # a function or an aggregation
            continue
        names.add(m.group(0))
    return names


def promtool() -> str:
    path = shutil.which("promtool") or ("/usr/bin/promtool" if Path("/usr/bin/promtool").exists() else None)
    if path is None:
        pytest.fail("promtool not found: install Debian's `prometheus` package (scripts/install-deps.sh test)")
    return path


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def all_panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # a collapsed row holds its panels
    return out


def panel_exprs(dash: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in all_panels(dash) for t in p.get("targets", []) if t.get("expr")]


# --- the extractor the name checks rely on


def test_metric_names_reads_selectors_not_functions_labels_or_strings():
    expr = (
        'label_join(sum by (site, host) (gpufleet_finding{rule=~"GPU-PWR-003|x"} * on (instance, job) '
        'group_left (site) max_over_time(gpufleet_watch_info[1d])), "site_host", " / ", "site", "host") '
        "and on (instance) (up == 1) or vector(0) unless bogus_metric offset 5m"
    )
    assert metric_names(expr) == {"gpufleet_finding", "gpufleet_watch_info", "up", "bogus_metric"}


# --- alerting rules


def test_promtool_check_rules():
    proc = run_promtool("check", "rules", str(ALERTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_promtool_test_rules():
    assert ALERT_TESTS, "no promtool test files under monitoring/prometheus/tests"
    proc = run_promtool("test", "rules", *map(str, ALERT_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(ALERT_TESTS), proc.stdout


def test_every_alert_is_tested_firing_and_not_firing():
    firing, quiet = set(), set()
    for path in ALERT_TESTS:
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == ["../gpufleet-alerts.yml"], path
        for case in doc["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - firing == set(), "alerts never seen firing in a test"
    assert names - quiet == set(), "alerts never seen quiet in a test"
    assert (firing | quiet) - names == set(), "tests name alerts that do not exist"


def test_alert_labels_annotations_and_runbook():
    for rule in alert_rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook"} <= set(annotations), name
        assert "gpufleet audit -i INVENTORY --limit" in annotations["runbook"], name
        assert not re.search(r"[a-z][a-z0-9+.-]*://", json.dumps(rule)), f"{name}: an external URL"
    by_name = {r["alert"]: r for r in alert_rules()}
    # the finding alerts name the rule and its fix
    for name in ("GpufleetCriticalFinding", "GpufleetHighFinding", "GpufleetFindingNewlyFailing"):
        text = by_name[name]["annotations"]["runbook"]
        assert "{{ $labels.host }}" in text and "--tags {{ $labels.rule }}" in text and "gpufleet catalog" in text
    # for: 0m on the critical finding - the checker already samples; the e2e test needs it within two intervals
    assert by_name["GpufleetCriticalFinding"]["for"] == "0m"
    assert by_name["GpufleetCriticalFinding"]["labels"]["severity"] == "critical"


def test_alert_exprs_use_only_known_metrics():
    for rule in alert_rules():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        assert names <= KNOWN_METRICS, (rule["alert"], names - KNOWN_METRICS)


@pytest.mark.parametrize(
    "old, new",
    [
        # the critical alert would also fire on a warning (status warn) finding
        ('gpufleet_finding{severity="critical", status="fail"} == 1', 'gpufleet_finding{severity="critical"} == 1'),
        # a `for:` on the critical alert delays it past the first evaluation
        ('status="fail"} == 1\n        for: 0m', 'status="fail"} == 1\n        for: 2m'),
        # a stale threshold of one interval fires on a fresh textfile
        ("> 3 * gpufleet_watch_interval_seconds", "> 0.5 * gpufleet_watch_interval_seconds"),
        # the missing-file alert without `up == 1` fires for a target that is down
        ("and on (instance, job) (up == 1)", "and on (instance, job) (up >= 0)"),
        # without the earliest success of the hour, what the first run finds is "newly failing"
        (
            "min_over_time(gpufleet_watch_last_success_timestamp_seconds[1h])\n",
            "min_over_time(gpufleet_watch_last_success_timestamp_seconds[1h]) - 1e9\n",
        ),
    ],
    ids=["critical-on-warn", "critical-delayed", "stale-too-eager", "missing-on-down", "newly-on-first-run"],
)
def test_promtool_tests_catch_a_broken_rule(tmp_path, old, new):
    """The promtool tests can fail: each mutation of the shipped rules makes `promtool test rules` fail."""
    text = ALERTS.read_text()
    assert text.count(old) == 1, old
    (tmp_path / "gpufleet-alerts.yml").write_text(text.replace(old, new))
    (tmp_path / "tests").mkdir()
    for path in ALERT_TESTS:
        shutil.copy(path, tmp_path / "tests" / path.name)
    assert run_promtool("check", "rules", str(tmp_path / "gpufleet-alerts.yml")).returncode == 0
    proc = run_promtool("test", "rules", *(str(tmp_path / "tests" / p.name) for p in ALERT_TESTS))
    assert proc.returncode != 0, proc.stdout


# --- Grafana dashboard


def test_dashboard_is_current_grafana_json_with_variables():
    dash = dashboard()
    assert dash["schemaVersion"] >= 39  # Grafana 11+ (41: Grafana 12)
    assert dash["uid"] == "gpufleet-watch" and dash["id"] is None  # importable anywhere
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("site", "host"):
        var = variables[name]
        assert var["type"] == "query" and var["datasource"]["uid"] == "${datasource}"
        assert var["includeAll"] and var["multi"] and var["allValue"] == ".*"
        assert metric_names(re.sub(r"^label_values\((.*), \w+\)$", r"\1", var["definition"])) == {"gpufleet_watch_info"}
    assert "$site" in variables["host"]["definition"]  # hosts of the chosen sites


def test_dashboard_panels_query_the_chosen_prometheus_with_known_metrics():
    dash = dashboard()
    exprs = panel_exprs(dash)
    assert len(exprs) >= 15
    for panel in all_panels(dash):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    for title, expr in exprs:
        names = metric_names(expr)
        assert names and names <= KNOWN_METRICS, (title, names - KNOWN_METRICS)
        if "gpufleet_" in expr:  # every gpufleet panel follows the site and host variables
            assert "$site" in expr and "$host" in expr, title
    ids = [p["id"] for p in all_panels(dash)]
    assert len(ids) == len(set(ids))
    for p in all_panels(dash):
        pos = p["gridPos"]
        assert pos["x"] + pos["w"] <= 24, p["title"]


def test_dashboard_has_no_external_url():
    text = DASHBOARD.read_text()
    assert not re.search(r"[a-z][a-z0-9+.-]*://", text, re.I)
    assert dashboard()["links"] == []


def test_dashboard_exprs_parse(tmp_path):
    """Every panel query, with the variables set to All, is valid PromQL (promtool parses it as a recording rule)."""
    exprs = panel_exprs(dashboard())
    group = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {
                        "record": f"gpufleet_dashboard:panel{i}",
                        "expr": expr.replace("$site", ".*").replace("$host", ".*"),
                    }
                    for i, (_, expr) in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yml"
    path.write_text(yaml.safe_dump(group))
    proc = run_promtool("check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dashboard_covers_matrix_trend_throttling_and_checker_health():
    dash = dashboard()
    exprs = " ".join(e for _, e in panel_exprs(dash))
    titles = " ".join(p["title"] for p in all_panels(dash))
    assert "Fleet matrix" in titles and "site_host" in exprs
    # the throttling panels name real rules of the power area
    throttling = {p["title"]: p for p in all_panels(dash) if "GPU-PWR-003" in json.dumps(p.get("targets", []))}
    assert throttling
    catalog = {r.id: r for r in rules.RULES}
    for panel in throttling.values():
        for expr in (t["expr"] for t in panel["targets"]):
            for rule_id in re.findall(r"[A-Z]+-[A-Z]+-\d{3}", expr):
                assert rule_id in catalog and catalog[rule_id].area == "power", rule_id
    for family in (
        "gpufleet_watch_last_success_timestamp_seconds",
        "gpufleet_watch_run_duration_seconds",
        "gpufleet_watch_run_cpu_seconds",
        "gpufleet_watch_last_run_ok",
        "gpufleet_host_findings",
    ):
        assert family in exprs, family
