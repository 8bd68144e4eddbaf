"""`gpufleet catalog RULE` shows one rule (exit 3 naming an unknown id); `gpufleet report diff` gates on new failures
(--fail-on) and speaks JSON (--json) - issue 29 point 5."""

from __future__ import annotations

import json

import pytest
from report_fixtures import load

from gpufleet import cli


def test_catalog_shows_one_rule(capsys):
    assert cli.main(["catalog", "gpu-pwr-002"]) == 0
    out = capsys.readouterr().out
    heads = [line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert heads == ["GPU-PWR-002"]
    assert "fix: role gpu_runtime, tag GPU-PWR-002" in out and "source: " in out
    assert cli.main(["catalog", "GPU-PWR-002", "SW-FM-001", "--markdown"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [row.split("|")[1].strip() for row in rows] == ["`GPU-PWR-002`", "`SW-FM-001`"]


def test_catalog_names_unknown_ids(capsys):
    assert cli.main(["catalog", "GPU-PWR-002", "GPU-NOPE-9", "x"]) == 3
    err = capsys.readouterr().err
    assert "no rule GPU-NOPE-9, X in the catalog" in err and "GPU-PWR-002" not in err


@pytest.fixture
def reports(tmp_path):
    """sample-v1 before; after, iad-h100-03 fails GPU-PWR-001 (high) and warns GPU-PWR-002 (a new warning), and
    sg-a100-01's HOST-MEM-002 (medium) is fixed."""
    old = load("sample-v1.json")
    new = json.loads(json.dumps(old))
    new["run"]["id"] = "later"
    for f in new["hosts"]["iad-h100-03"]["findings"]:
        if f["rule"] == "GPU-PWR-001":
            f["status"] = "fail"
        if f["rule"] == "GPU-PWR-002":
            f["status"] = "warn"
    for f in new["hosts"]["sg-a100-01"]["findings"]:
        if f["rule"] == "HOST-MEM-002":
            f["status"] = "pass"
    paths = []
    for name, doc in (("old.json", old), ("new.json", new)):
        (tmp_path / name).write_text(json.dumps(doc))
        paths.append(str(tmp_path / name))
    return paths


@pytest.mark.parametrize(
    ("fail_on", "code"), [(None, 0), ("none", 0), ("critical", 0), ("high", 1), ("medium", 1), ("info", 1)]
)
def test_report_diff_exits_1_on_a_new_failure_at_or_above_fail_on(reports, fail_on, code, capsys):
    argv = ["report", "diff", *reports] + (["--fail-on", fail_on] if fail_on else [])
    assert cli.main(argv) == code
    got = capsys.readouterr()
    assert "1 fixed, 2 new" in got.out
    if code:
        assert "gpufleet: exit 1: 1 new failing finding(s) at or above " in got.err
        assert "iad-h100-03 GPU-PWR-001" in got.err and "GPU-PWR-002" not in got.err  # a new warning does not gate


def test_report_diff_json(reports, capsys):
    assert cli.main(["report", "diff", *reports, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["totals"]["fixed"] == 1 and doc["totals"]["new"] == 2
    assert doc["hosts"]["iad-h100-03"]["new"] == ["GPU-PWR-001", "GPU-PWR-002"]
    assert doc["runs"]["new"] == "later"


def test_policy_lists_the_keys_as_readable_text(capsys, monkeypatch):
    """`gpufleet policy` printed a Markdown table of 400-column lines; now `key: default` and the meaning, within
    100 columns (--markdown keeps the README's table)."""
    from gpufleet import docs

    assert cli.main(["policy"]) == 0
    out = capsys.readouterr().out
    assert "|" not in out and "`" not in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "\nmemory.max_swappiness: " in "\n" + out and 'min_severity: "info"' in out
    assert cli.main(["policy", "--markdown"]) == 0
    assert capsys.readouterr().out.strip() == docs.policy_markdown()
    assert cli.main(["policy", "--markdown", "--host", "x"]) == 3
