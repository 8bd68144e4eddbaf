"""Report schema v1: the validator, the summary, the matrix cell logic, and how the package can be imported."""

from __future__ import annotations

import ast
import copy
import importlib.machinery
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import report as report_pkg
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

REPO = Path(__file__).resolve().parents[2]
REPORTS = REPO / "tests" / "fixtures" / "reports"
PACKAGE = REPO / "plugins" / "plugin_utils" / "report"


@pytest.fixture
def sample():
    return json.loads((REPORTS / "sample-v1.json").read_text(encoding="utf-8"))


def _a100(report):
    return report["hosts"]["sg-a100-01"]


def _finding(host, rule):
    return next(f for f in host["findings"] if f["rule"] == rule)


@pytest.mark.parametrize("name", ["sample-v1.json", "hostile-v1.json"])
def test_fixtures_are_valid(name):
    report = json.loads((REPORTS / name).read_text(encoding="utf-8"))
    assert schema.validate(report) == []


def test_sample_has_the_case_study_hosts(sample):
    hosts = sample["hosts"]
    assert [(n, h["status"]) for n, h in sorted(hosts.items())] == [
        ("fra-a100-02", "failed"), ("iad-h100-03", "ok"), ("sg-a100-01", "ok"), ("sg-l40s-03", "unreachable")]
    a100 = _a100(sample)
    assert {g["name"] for g in a100["facts"]["gpu"]["gpus"]} == {"NVIDIA A100-SXM4-80GB"}
    assert a100["facts"]["gpu"]["gpu_count"] == 8
    failing_areas = {f["area"] for f in a100["findings"] if f["status"] == "fail"}
    assert failing_areas == {"memory", "power", "software"}
    # every host that was audited has a result for every rule of the catalog, like the real producer
    catalog_ids = [e["id"] for e in sample["catalog"]]
    assert sorted(f["rule"] for f in a100["findings"]) == sorted(catalog_ids)
    h100 = hosts["iad-h100-03"]
    assert {g["name"] for g in h100["facts"]["gpu"]["gpus"]} == {"NVIDIA H100 80GB HBM3"}
    assert len(h100["facts"]["gpu"]["gpus"]) == 8
    assert not [f for f in h100["findings"] if f["status"] in ("fail", "warn", "error")]


def test_summarize_counts(sample):
    s = schema.summarize(sample["hosts"])
    assert s["hosts"] == {"total": 4, "ok": 2, "failed": 1, "unreachable": 1, "timeout": 0, "interrupted": 0}
    assert s["findings"]["by_status"] == {"pass": 54, "fail": 10, "warn": 1, "skip": 1, "error": 0}
    # fail + warn only: the skip (SW-FM-001 on the H100) and the passes are not findings
    assert s["findings"]["by_severity"] == {"critical": 3, "high": 5, "medium": 3, "low": 0, "info": 0}
    assert s["findings"]["by_area"] == {"memory": 4, "cpu": 0, "network": 0, "power": 3, "software": 3, "health": 1}
    # The sample predates the timeout/interrupted host counts: the rest is the same.
    assert s["findings"] == sample["summary"]["findings"]
    assert {k: v for k, v in s["hosts"].items() if k in sample["summary"]["hosts"]} == sample["summary"]["hosts"]


def test_new_host_statuses_are_counted_and_valid(sample):
    """timeout and interrupted hosts (and an incomplete run) are v1: counted, rendered, valid; old reports too."""
    sample["hosts"]["slow-01"] = dict(sample["hosts"]["sg-l40s-03"], status="timeout", message="no answer in 3 s")
    sample["hosts"]["late-01"] = dict(sample["hosts"]["sg-l40s-03"], status="interrupted", message="not audited")
    sample["run"].update(complete=False, incomplete_reason="interrupted by SIGINT")
    sample["summary"] = schema.summarize(sample["hosts"])
    assert sample["summary"]["hosts"] == {
        "total": 6, "ok": 2, "failed": 1, "unreachable": 1, "timeout": 1, "interrupted": 1,
    }
    assert schema.validate(sample) == []
    assert schema.cell(sample["hosts"]["slow-01"], "power")["state"] == "timeout"
    assert schema.cell(sample["hosts"]["late-01"], "power")["state"] == "interrupted"
    # old reports lack the two counts and stay valid (test_fixtures_are_valid); a wrong count is a problem
    sample["summary"]["hosts"]["timeout"] = 2
    assert schema.validate(sample) == ["summary.hosts.timeout: is 2, but the hosts add up to 1"]
    sample["run"]["incomplete_reason"] = 7
    assert "run.incomplete_reason: expected a string or null, got an integer" in schema.validate(sample)


def test_summarize_empty():
    s = schema.summarize({})
    assert s["hosts"]["total"] == 0
    assert set(s["findings"]["by_area"]) == set(schema.AREAS)
    assert not any(s["findings"]["by_severity"].values())


# ----------------------------------------------------------------------------------------------- validation


def _set(path, value):
    def mutate(r):
        obj = r
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value

    return mutate


def _delete(path):
    def mutate(r):
        obj = r
        for key in path[:-1]:
            obj = obj[key]
        del obj[path[-1]]

    return mutate


A100 = ("hosts", "sg-a100-01")


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (_set(("schema",), "gpufleet.report/v2"), "schema: expected 'gpufleet.report/v1', got 'gpufleet.report/v2'"),
        (_delete(("tool",)), "report.tool: missing"),
        (_set(("tool", "version"), 1), "tool.version: expected a string, got an integer"),
        (_set(("run", "started_at"), "yesterday"), "run.started_at: 'yesterday' is not an ISO 8601 timestamp"),
        (_set(("run", "complete"), "yes"), "run.complete: expected a boolean, got a string"),
        (_set(("run", "limit"), 5), "run.limit: expected a string or null, got an integer"),
        (_set(("run", "policy_sources"), ["a", 3]), "run.policy_sources[1]: expected a string, got an integer"),
        (_delete(("run", "controller")), "run.controller: missing"),
        (_set(("catalog", 0, "area"), "gpu"), "catalog[0].area: 'gpu' is not one of memory, cpu, network"),
        (_set(("catalog", 1, "id"), "GPU-MEM-001"), "catalog[1].id: duplicate rule id 'GPU-MEM-001'"),
        (_set(("catalog", 0, "severity"), "severe"), "catalog[0].severity: 'severe' is not one of critical"),
        (_set(("catalog", 0, "id"), "gpu pwr 1"), "catalog[0].id: 'gpu pwr 1' is not a rule id"),
        (_set(("catalog", 0, "fix", "role"), 7), "catalog[0].fix.role: expected a string or null"),
        (_set((*A100, "status"), "down"), "hosts['sg-a100-01'].status: 'down' is not one of ok, failed"),
        (_set((*A100, "links", "source"), "guessed"), "links.source: 'guessed' is not one of declared"),
        (_set((*A100, "links", "peers", 0, "rtt_ms"), -3), "links.peers[0].rtt_ms: must be >= 0, got -3"),
        (_set((*A100, "links", "peers", 0, "rtt_ms"), True), "links.peers[0].rtt_ms: expected a number or null"),
        (_set((*A100, "facts", "gpu"), []), "facts.gpu: expected an object, got a list"),
        (_set((*A100, "findings", 0, "status"), "failed"), "findings[0].status: 'failed' is not one of pass, fail"),
        (_set((*A100, "findings", 0, "severity"), "urgent"), "findings[0].severity: 'urgent' is not one of critical"),
        (_delete((*A100, "findings", 0, "observed")), "findings[0].observed: missing (use null for no value)"),
        (_set((*A100, "findings", 0, "items"), [1]), "findings[0].items[0]: expected an object, got an integer"),
        (_set((*A100, "findings", 1, "rule"), "GPU-MEM-001"), "rule 'GPU-MEM-001' has more than one result"),
        (_set((*A100, "findings", 0, "area"), "gpu"), "findings[0].area: 'gpu' is not one of memory"),
        (_set((*A100, "findings", 0, "fix"), None), "findings[0].fix: expected an object, got null"),
        (_set((*A100, "findings", 0, "rule"), "GPU-XYZ-999"), "rule 'GPU-XYZ-999' is not in the catalog"),
        (_set(("summary", "hosts", "ok"), 3), "summary.hosts.ok: is 3, but the hosts add up to 2"),
        (_set(("summary", "hosts", "ok"), True), "summary.hosts.ok: expected an integer, got a boolean"),
        (_set(("summary", "findings", "by_severity", "high"), 4), "by_severity.high: is 4, but the hosts add up to 5"),
        (_set(("summary", "findings", "by_area", "health"), 0), "by_area.health: is 0, but the hosts add up to 1"),
        (_set(("summary", "findings", "by_area", "gpu"), 0), "summary.findings.by_area.gpu: unknown key"),
        (_delete(("summary", "findings", "by_status")), "summary.findings.by_status: expected an object, got null"),
        (_set(("hosts",), []), "report.hosts: expected an object, got a list"),
    ],
)
def test_validate_reports_each_problem(sample, mutate, expected):
    report = copy.deepcopy(sample)
    mutate(report)
    problems = schema.validate(report)
    assert any(expected in p for p in problems), problems


def test_validate_non_object():
    assert schema.validate([]) == ["report: expected an object, got a list"]


def test_validate_allows_unknown_top_level_keys_and_z_times(sample):
    sample["x_producer"] = {"anything": 1}
    sample["run"]["finished_at"] = "2026-11-01T08:31:27Z"
    _a100(sample)["links"]["source"] = "mixed"  # links.resolve: some peers declared, some measured
    assert schema.validate(sample) == []


def test_validate_summary_follows_the_hosts(sample):
    """Changing a finding without the summary is a problem; recomputing the summary clears it."""
    _finding(_a100(sample), "SW-FM-001")["status"] = "pass"
    problems = schema.validate(sample)
    assert "summary.findings.by_severity.critical: is 3, but the hosts add up to 2" in problems
    sample["summary"] = schema.summarize(sample["hosts"])
    assert schema.validate(sample) == []


# ------------------------------------------------------------------------------------------------ the cells


def _host(*findings, status="ok"):
    return {
        "status": status,
        "findings": [
            {"rule": f"GPU-PWR-{i:03d}", "area": area, "status": st, "severity": sev}
            for i, (area, st, sev) in enumerate(findings, 1)
        ],
    }


@pytest.mark.parametrize(
    "findings, status, state, severity",
    [
        ((("power", "fail", "medium"), ("power", "fail", "critical"), ("power", "warn", "high")), "ok", "fail",
         "critical"),
        ((("power", "warn", "low"), ("power", "warn", "high"), ("power", "pass", "critical")), "ok", "warn", "high"),
        ((("power", "pass", "high"), ("power", "error", "low")), "ok", "error", None),
        ((("power", "pass", "high"), ("power", "skip", "low")), "ok", "pass", None),
        ((("power", "skip", "high"),), "ok", "skip", None),
        ((("memory", "fail", "high"),), "ok", "none", None),
        ((("power", "fail", "high"),), "unreachable", "unreachable", None),
        ((), "failed", "failed", None),
        ((("power", "fail", "high"),), "timeout", "timeout", None),
        ((), "interrupted", "interrupted", None),
    ],
)
def test_cell_state(findings, status, state, severity):
    c = schema.cell(_host(*findings, status=status), "power")
    assert (c["state"], c["severity"]) == (state, severity)


def test_cell_lists_failing_rules_worst_first(sample):
    c = schema.cell(_a100(sample), "software")
    assert c["rules"] == ["SW-FM-001", "SW-KMOD-001", "SW-CUDA-001"]  # critical, critical, high
    assert c["counts"] == {"pass": 1, "fail": 3, "warn": 0, "skip": 0, "error": 0}
    assert (c["state"], c["severity"]) == ("fail", "critical")
    health = schema.cell(_a100(sample), "health")
    assert (health["state"], health["severity"], health["rules"]) == ("warn", "medium", ["HOST-HLT-002"])


def test_severity_order():
    assert schema.worst_severity(["low", "info", "high", "medium"]) == "high"
    assert schema.worst_severity(["bogus"]) is None
    assert sorted(["info", "critical", "low"], key=schema.severity_rank) == ["critical", "low", "info"]


def test_format_value():
    assert schema.format_value("x") == "x"
    assert schema.format_value({"b": 1, "a": [True, None]}) == '{"a": [true, null], "b": 1}'
    assert schema.format_value("a" * 10, limit=5) == "aaaa\u2026"


# ------------------------------------------------------------------------------------------------- imports


OUTSIDE = ("module_utils.text", "module_utils.summary", "module_utils.prometheus_text")  # from plugins/


def test_package_imports_only_stdlib_jinja2_and_relative():
    allowed = set(sys.stdlib_module_names) | {"jinja2", "markupsafe"}
    for module in OUTSIDE:  # stdlib only themselves, so the package still loads wherever plugins/ is put
        tree = ast.parse((PACKAGE.parents[1] / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert all(name.split(".")[0] in set(sys.stdlib_module_names) for name in imported), (module, imported)
    for path in PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 3:  # up to plugins/: the one cleaner of host strings and the one count (stdlib only)
                    assert node.module in OUTSIDE, f"{path.name} imports {node.module} from plugins/"
                    continue
                if node.level:  # relative, inside the package: fine
                    assert node.level == 1, f"{path.name} imports {node.module} from outside the package"
                    continue
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in allowed, f"{path.name} imports {name}"


def test_package_loads_under_another_name():
    """Relative imports only: the package works wherever the collection's plugins tree is put on sys.path (here as
    the namespace package ``elsewhere``, not ``ansible_collections.gpufleet.tuning.plugins``)."""
    spec = importlib.machinery.ModuleSpec("elsewhere", None, is_package=True)
    spec.submodule_search_locations = [str(PACKAGE.parents[1])]
    sys.modules["elsewhere"] = importlib.util.module_from_spec(spec)
    try:
        writer = importlib.import_module("elsewhere.plugin_utils.report.writer")
        assert writer.render_all(json.loads((REPORTS / "sample-v1.json").read_text()))["html"].startswith("<!DOCTYPE")
        terminal = importlib.import_module("elsewhere.plugin_utils.report.terminal")
        assert terminal.clean.__module__ == "elsewhere.module_utils.text"
        prometheus = importlib.import_module("elsewhere.plugin_utils.report.prometheus")
        assert prometheus.sample.__module__ == "elsewhere.module_utils.prometheus_text"
    finally:
        for name in [n for n in sys.modules if n == "elsewhere" or n.startswith("elsewhere.")]:
            del sys.modules[name]


def test_package_imports_in_a_fresh_interpreter_by_collection_name():
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer, diff, terminal;"
        "print(writer.FILES['prometheus'])"
    )
    out = subprocess.run([sys.executable, "-c", code, str(REPO / ".collections")], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "gpufleet.prom"


def test_package_exports():
    assert report_pkg.SCHEMA == "gpufleet.report/v1"
    assert report_pkg.validate is schema.validate
