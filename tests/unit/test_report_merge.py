"""report/merge and `gpufleet report merge` (issue 18, sliced runs): slices of the recorded reports merge back into
the fleet report; different schema versions, policies or catalogs and the same run twice are refused, naming the
inputs; a host in two slices is kept once, from the run that finished last, and the report says so."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import merge, schema, writer
from report_fixtures import load

from gpufleet import cli, exits

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reports"


def _slice(report: dict, names, run_id: str, finished_at: str | None = None) -> dict:
    """A copy of ``report`` with only the hosts ``names``, as the run ``run_id`` (finished at ``finished_at``)."""
    part = copy.deepcopy(report)
    part["hosts"] = {name: copy.deepcopy(report["hosts"][name]) for name in names}
    part["summary"] = schema.summarize(part["hosts"])
    part["run"]["id"] = run_id
    if finished_at:
        part["run"]["finished_at"] = finished_at
    return part


@pytest.fixture
def slices(sample):
    names = sorted(sample["hosts"])
    a = _slice(sample, names[:2], "slice-a", "2026-11-01T08:31:00+00:00")
    b = _slice(sample, names[2:], "slice-b", "2026-11-01T08:35:00+00:00")
    b["run"]["started_at"] = "2026-11-01T08:29:00+00:00"
    return a, b


def test_slices_merge_back_into_the_fleet_report(sample, slices):
    a, b = slices
    before = copy.deepcopy([a, b])
    merged = merge.merge_reports([("a/report.json", a), ("b/report.json", b)])
    assert [a, b] == before, "the inputs were modified"
    assert schema.validate(merged) == []
    assert merged["hosts"] == sample["hosts"]
    assert merged["summary"] == schema.summarize(sample["hosts"])
    assert merged["catalog"] == sorted(sample["catalog"], key=lambda e: e["id"])
    run = merged["run"]
    assert (run["started_at"], run["finished_at"]) == ("2026-11-01T08:29:00+00:00", "2026-11-01T08:35:00+00:00")
    assert run["complete"] is True and run["incomplete_reason"] is None
    assert run["policy_sources"] == sample["run"]["policy_sources"]
    assert run["duplicates"] == {}
    assert [(i["label"], i["id"], i["hosts"], i["hosts_kept"], i["complete"]) for i in run["merged_from"]] == [
        ("a/report.json", "slice-a", 2, 2, True),
        ("b/report.json", "slice-b", 2, 2, True),
    ]
    # The same inputs merge to the same report, run id included (no clock, no randomness).
    assert merge.merge_reports([("a/report.json", a), ("b/report.json", b)]) == merged
    assert re.fullmatch(r"merge-[0-9a-f]{32}", run["id"])


def test_every_format_renders_the_merged_hosts(slices, tmp_path):
    merged = merge.merge_reports([("a", slices[0]), ("b", slices[1])])
    files = writer.write_all(merged, tmp_path)
    assert {k for k in files} >= {"json", "html", "junit", "prometheus"}
    assert json.loads(files["json"].read_text()) == merged
    for name in merged["hosts"]:
        assert name in files["prometheus"].read_text()
        assert name in files["junit"].read_text()


@pytest.mark.parametrize("order", [("early", "late"), ("late", "early")])
def test_a_host_in_two_slices_is_kept_from_the_run_that_finished_last(sample, order):
    names = sorted(sample["hosts"])
    twice = "sg-a100-01"
    early = _slice(sample, [twice, names[0]], "early", "2026-11-01T08:31:00+00:00")
    late = _slice(sample, [twice], "late", "2026-11-01T10:00:00Z")
    early["hosts"][twice]["status"] = "unreachable"  # the first try could not reach it; the re-run did
    early["hosts"][twice]["message"] = "ssh: connect timed out"
    early["hosts"][twice]["findings"] = []
    by_name = {"early": early, "late": late}
    merged = merge.merge_reports([(name, by_name[name]) for name in order])
    assert merged["hosts"][twice]["status"] == "ok"
    assert merged["hosts"][twice]["findings"] == sample["hosts"][twice]["findings"]
    assert merged["hosts"][twice]["merged_from"] == {"kept": "late", "dropped": ["early"]}
    assert merged["run"]["duplicates"] == {twice: {"kept": "late", "dropped": ["early"], "rule": merge.DUPLICATE_RULE}}
    assert "merged_from" not in merged["hosts"][names[0]]
    assert merged["summary"]["hosts"]["total"] == 2 and merged["summary"]["hosts"]["unreachable"] == 0
    assert schema.validate(merged) == []
    kept = {i["label"]: i["hosts_kept"] for i in merged["run"]["merged_from"]}
    assert kept == {"early": 1, "late": 1}
    assert any(f"{twice}: kept from late; dropped from early" in line for line in merge.describe(merged))


def test_on_a_tie_the_report_given_last_wins(sample):
    one = _slice(sample, ["sg-a100-01"], "one")
    two = _slice(sample, ["sg-a100-01"], "two")
    two["hosts"]["sg-a100-01"]["message"] = "second"
    assert merge.merge_reports([("1", one), ("2", two)])["hosts"]["sg-a100-01"]["message"] == "second"
    assert merge.merge_reports([("2", two), ("1", one)])["hosts"]["sg-a100-01"]["message"] != "second"


def test_the_merged_run_is_complete_only_if_every_input_is(sample):
    names = sorted(sample["hosts"])
    whole = _slice(sample, names[:2], "whole")
    stopped = _slice(sample, names[2:], "stopped")
    stopped["run"].update(complete=False, incomplete_reason="interrupted by SIGINT after 1 of 2 host(s) answered")
    stopped["hosts"][names[2]] = {**stopped["hosts"][names[2]], "status": "interrupted", "findings": []}
    merged = merge.merge_reports([("ok.json", whole), ("stopped.json", stopped)])
    assert merged["run"]["complete"] is False
    assert merged["run"]["incomplete_reason"] == "stopped.json: interrupted by SIGINT after 1 of 2 host(s) answered"
    assert merged["summary"] == schema.summarize(merged["hosts"])
    assert merged["summary"]["hosts"]["interrupted"] == 1
    assert merge.merge_reports([("ok.json", whole)])["run"]["complete"] is True


def test_different_schema_versions_are_refused_naming_the_inputs(slices):
    a, b = slices
    b["schema"] = "gpufleet.report/v2"
    with pytest.raises(merge.MergeError) as err:
        merge.merge_reports([("a.json", a), ("b.json", b)])
    text = str(err.value)
    assert "different schema versions" in text
    assert "'gpufleet.report/v1': a.json" in text and "'gpufleet.report/v2': b.json" in text


def test_different_policy_files_are_refused_naming_each_input(slices):
    a, b = slices
    b["run"]["policy_sources"] = ["/etc/gpufleet/relaxed.yml"]
    with pytest.raises(merge.MergeError) as err:
        merge.merge_reports([("a.json", a), ("b.json", b)])
    assert "different policy files" in str(err.value)
    assert "a.json: inventories/fleet/group_vars/all.yml" in str(err.value)
    assert "b.json: /etc/gpufleet/relaxed.yml" in str(err.value)
    assert err.value.labels == ["a.json", "b.json"]


def test_a_host_judged_by_two_policies_is_refused(sample):
    one = _slice(sample, ["sg-a100-01"], "one")
    two = _slice(sample, ["sg-a100-01"], "two")
    one["hosts"]["sg-a100-01"]["policy_digest"] = "sha256:" + "1" * 64
    two["hosts"]["sg-a100-01"]["policy_digest"] = "sha256:" + "2" * 64
    with pytest.raises(merge.MergeError) as err:
        merge.merge_reports([("one", one), ("two", two)])
    assert "judged sg-a100-01 by different policies" in str(err.value)
    assert "one: sha256:111" in str(err.value) and "two: sha256:222" in str(err.value)
    # The same digest on both sides merges (the duplicate is marked as usual).
    two["hosts"]["sg-a100-01"]["policy_digest"] = one["hosts"]["sg-a100-01"]["policy_digest"]
    assert "sg-a100-01" in merge.merge_reports([("one", one), ("two", two)])["run"]["duplicates"]


def test_a_different_report_level_policy_digest_is_refused(slices):
    a, b = slices
    a["run"]["policy_digest"] = "sha256:" + "a" * 64
    b["run"]["policy_digest"] = "sha256:" + "b" * 64
    with pytest.raises(merge.MergeError, match=r"different policies \(run.policy_digest\)"):
        merge.merge_reports([("a", a), ("b", b)])
    b["run"]["policy_digest"] = a["run"]["policy_digest"]
    assert merge.merge_reports([("a", a), ("b", b)])["run"]["policy_digest"] == a["run"]["policy_digest"]


def test_catalogs_that_disagree_on_a_rule_are_refused(slices):
    a, b = slices
    b["catalog"][0]["severity"] = "info" if b["catalog"][0]["severity"] != "info" else "low"
    b["tool"]["version"] = "9.9.9"
    with pytest.raises(merge.MergeError) as err:
        merge.merge_reports([("a", a), ("b", b)])
    assert f"catalogs differ on {b['catalog'][0]['id']}" in str(err.value)
    assert "b: gpufleet 9.9.9" in str(err.value)


def test_the_same_run_twice_is_refused(slices):
    a, _ = slices
    with pytest.raises(merge.MergeError, match="x/report.json and y/report.json are the same run"):
        merge.merge_reports([("x/report.json", a), ("y/report.json", copy.deepcopy(a))])


def test_an_invalid_report_is_refused_but_a_stale_summary_is_recomputed(slices):
    a, b = slices
    b["summary"]["hosts"]["total"] = 99  # edited by hand: recomputed, not refused
    assert merge.merge_reports([("a", a), ("b", b)])["summary"]["hosts"]["total"] == 4
    name = sorted(b["hosts"])[0]
    b["hosts"][name]["status"] = "sleeping"
    with pytest.raises(merge.MergeError, match=rf"b: not a valid gpufleet report: hosts\['{name}'\].status"):
        merge.merge_reports([("a", a), ("b", b)])


def test_hostile_names_are_shown_escaped(tmp_path):
    hostile = load("hostile-v1.json")
    other = copy.deepcopy(hostile)
    other["run"]["id"] = "second"
    lines = merge.describe(merge.merge_reports([("evil\x1b[31m", hostile), ("two", other)]))
    assert lines and not any(re.search(r"[\x00-\x1f\x7f]", line) for line in lines)


# ------------------------------------------------------------------------------------------------- the command


def _write(path: Path, report: dict) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report))
    return str(path)


def test_the_command_writes_every_format_and_exits_by_the_merged_verdict(slices, tmp_path, capsys):
    a = _write(tmp_path / "a" / "report.json", slices[0])
    b = _write(tmp_path / "b" / "report.json", slices[1])
    out = tmp_path / "fleet"
    code = cli.main(["report", "merge", a, str(tmp_path / "b"), "-o", str(out)])
    captured = capsys.readouterr()
    # The sample has a failed and an unreachable host: exit 2, as gpufleet audit would.
    assert code == exits.EXIT_HOSTS, captured.err
    assert "exit 2: 2 hosts not audited" in captured.err
    run_dir = (out / "latest").resolve()
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(writer.FILES.values())
    merged = json.loads((run_dir / "report.json").read_text())
    assert [i["label"] for i in merged["run"]["merged_from"]] == [a, b]
    assert "merged 2 report(s):" in captured.out


def test_the_command_exits_1_on_fail_on_when_every_host_was_audited(sample, tmp_path, capsys):
    names = [n for n, h in sorted(sample["hosts"].items()) if h["status"] == "ok"]
    a = _write(tmp_path / "a.json", _slice(sample, names[:1], "a"))
    b = _write(tmp_path / "b.json", _slice(sample, names[1:], "b"))
    assert cli.main(["report", "merge", a, b, "-o", str(tmp_path / "o")]) == exits.EXIT_OK
    assert cli.main(["report", "merge", a, b, "-o", str(tmp_path / "o"), "--fail-on", "info"]) == exits.EXIT_FINDINGS
    assert "at or above info" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"a": 1}', "not a gpufleet report (schema 'gpufleet.report/<version>' expected, got None)"),
        ("[1, 2]", "not a gpufleet report"),
        ("not json", "not a gpufleet report: not JSON"),
        ('{"schema": "gpufleet.report/v1", "hosts": []}', "not a valid gpufleet report"),
    ],
)
def test_the_command_names_an_input_that_is_not_a_report(slices, tmp_path, capsys, content, message):
    good = _write(tmp_path / "good.json", slices[0])
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert cli.main(["report", "merge", good, str(bad), "-o", str(tmp_path / "o")]) == exits.EXIT_USAGE
    err = capsys.readouterr().err
    assert str(bad) in err and message in err
    assert not (tmp_path / "o").exists(), "a refused merge wrote a report"


def test_the_command_refuses_a_merge_naming_the_inputs(slices, tmp_path, capsys):
    a, b = slices
    b["run"]["policy_sources"] = ["/etc/gpufleet/relaxed.yml"]
    pa, pb = _write(tmp_path / "a.json", a), _write(tmp_path / "b.json", b)
    assert cli.main(["report", "merge", pa, pb, "-o", str(tmp_path / "o")]) == exits.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("gpufleet: cannot merge: the reports were judged by different policy files")
    assert f"{pb}: /etc/gpufleet/relaxed.yml" in err


def test_the_command_names_a_missing_input_and_an_unwritable_output(slices, tmp_path, capsys):
    good = _write(tmp_path / "good.json", slices[0])
    assert cli.main(["report", "merge", good, str(tmp_path / "nope.json"), "-o", str(tmp_path / "o")]) == 3
    assert f"{tmp_path / 'nope.json'}: cannot read a gpufleet report" in capsys.readouterr().err
    other = _write(tmp_path / "other.json", slices[1])
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["report", "merge", good, other, "-o", str(blocker)]) == exits.EXIT_USAGE
    assert f"report directory {blocker} is not writable" in capsys.readouterr().err


def test_the_command_help_has_a_description_examples_and_exit_codes(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exc:
        cli.main(["report", "merge", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "examples:\n  gpufleet report merge " in text and "\nexit codes: 0 " in text
    assert "run finished last" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_the_same_report_given_twice_is_refused(slices, tmp_path, capsys):
    a = _write(tmp_path / "a" / "report.json", slices[0])
    assert cli.main(["report", "merge", a, a, "-o", str(tmp_path / "o")]) == exits.EXIT_USAGE
    assert f"cannot merge: {a} given more than once" in capsys.readouterr().err
    # A copy of a slice's report is the same run (its run id) under another name.
    copy_of_a = _write(tmp_path / "copy" / "report.json", slices[0])
    assert cli.main(["report", "merge", a, copy_of_a, "-o", str(tmp_path / "o")]) == exits.EXIT_USAGE
    assert "are the same run (slice-a)" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
