"""The catalog as a whole: every rule has a passing and a failing case in the test file named after the rules file
that holds it (tests/unit/test_rules_<area>.py for rules/<area>.py), ids are unique, every rule cites its sources,
and what ``rules.evaluate`` does for every rule alike (policy toggles, min_severity, missing facts, a rule that
raises, the summary counts)."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from rule_cases import DOC_HOSTS, all_cases, area_test_files, evaluate, host, rule_files
from rule_facts import healthy

REPO = Path(__file__).resolve().parents[2]


def _failing(rule_id):
    """The mutation of the healthy host that makes ``rule_id`` fail (its area file's CASES)."""
    return all_cases()[rule_id][1]


# ---------------------------------------------------------------- tests follow the source


def test_every_rules_file_has_its_test_file():
    missing = sorted(f"tests/unit/test_rules_{name}.py" for name, test in area_test_files().items() if test is None)
    assert not missing, f"rules files without their test file (CASES for each of its rules): {missing}"


def test_each_test_file_holds_the_cases_of_its_rules_file():
    tests = area_test_files()
    for name, module in rule_files().items():
        ids = {r.id for r in module.RULES}
        cases = set(getattr(tests[name], "CASES", {})) if tests[name] else set()
        missing, foreign = sorted(ids - cases), sorted(cases - ids)
        assert not missing, f"rules/{name}.py: {missing} lack a case in tests/unit/test_rules_{name}.py"
        assert not foreign, f"tests/unit/test_rules_{name}.py: cases of {foreign}, which rules/{name}.py does not hold"


def test_every_rule_has_a_pass_and_a_fail_case():
    cases = all_cases()
    assert set(cases) == set(rules.BY_ID)
    files = {}
    for test in filter(None, area_test_files().values()):
        for rule_id in getattr(test, "CASES", {}):
            files.setdefault(rule_id, []).append(test.__name__ + ".py")
    twice = {rule_id: names for rule_id, names in files.items() if len(names) > 1}
    assert not twice, f"rules with cases in more than one file: {twice}"
    for rule_id, case in cases.items():
        assert len(case) in (2, 3) and callable(case[1]), rule_id
        assert case[0] is None or callable(case[0]), rule_id


def test_catalog_entries_are_complete():
    ids = [r["id"] for r in rules.catalog()]
    assert len(ids) == len(set(ids)) >= 30
    for r in rules.catalog():
        assert r["rationale"].endswith(".") and len(r["rationale"]) > 40
        assert r["fix"]["role"] or r["fix"]["manual"]
        if r["fix"]["role"]:
            assert r["fix"]["tag"] == r["id"]


def test_every_rule_cites_at_least_one_source():
    for entry in rules.catalog():
        refs = entry["references"]
        assert refs, entry["id"]
        for ref in refs:
            assert ref["title"].strip() and ref["url"].strip(), entry["id"]
            if ref["url"].startswith("https://"):
                assert DOC_HOSTS.match(ref["url"]), (entry["id"], ref["url"])
            else:  # a threshold of our own: the script or test that measured it must exist
                assert (REPO / ref["url"]).is_file(), (entry["id"], ref["url"])
                assert ref["title"].startswith("gpufleet measurement"), (entry["id"], ref["title"])


# ---------------------------------------------------------------- what evaluate does for every rule


def test_healthy_host_passes_everything():
    findings = evaluate(healthy())
    bad = {k: (f["status"], f["message"]) for k, f in findings.items() if f["status"] != "pass"}
    assert not bad


def test_no_gpus_skips_gpu_rules_but_host_rules_run():
    facts = healthy()
    facts["gpu"] = {"nvml": {"available": False, "error": "DriverNotLoaded"}, "driver": {}, "gpus": [], "gpu_count": 0}
    findings = evaluate(facts)
    for rule_id in ("GPU-PWR-001", "GPU-MEM-001", "HOST-CPU-002", "GPU-HLT-002", "SW-DRV-001"):
        assert findings[rule_id]["status"] == "skip", rule_id
    assert findings["HOST-CPU-001"]["status"] == "pass"


def test_missing_facts_skip_with_reason():
    findings = evaluate({"gpu": None, "host": None, "network": None, "links": None})
    assert {f["status"] for f in findings.values()} == {"skip"}
    assert all(f["message"] for f in findings.values())


def test_policy_toggle_and_regrade():
    facts = healthy()
    _failing("HOST-MEM-002")(facts)
    off = evaluate(facts, {"rules": {"HOST-MEM-002": {"enabled": False}}})["HOST-MEM-002"]
    assert off["status"] == "skip" and "disabled by policy" in off["message"]
    low = evaluate(facts, {"rules": {"HOST-MEM-002": {"severity": "low"}}})["HOST-MEM-002"]
    assert low["status"] == "fail" and low["severity"] == "low"


def test_min_severity_threshold():
    facts = healthy()
    _failing("HOST-MEM-002")(facts)  # medium
    findings = evaluate(facts, {"min_severity": "high"})
    assert findings["HOST-MEM-002"]["status"] == "skip"
    assert findings["GPU-PWR-001"]["status"] == "pass"  # high: still evaluated


def test_a_rule_that_raises_is_an_error_not_a_crash():
    facts = healthy()
    _failing("HOST-MEM-002")(facts)
    host(facts)["vm"]["swappiness"] = "sixty"  # a type the check does not expect
    finding = evaluate(facts)["HOST-MEM-002"]
    assert finding["status"] == "error" and "TypeError" in finding["message"]


def test_summarize_counts_fail_and_warn():
    facts = healthy()
    _failing("GPU-MEM-001")(facts)
    summary = rules.summarize(list(evaluate(facts).values()))
    assert summary["by_status"]["fail"] == 2
    assert summary["by_severity"]["critical"] == 1 and summary["by_severity"]["high"] == 1
    assert summary["by_area"]["memory"] == 2
