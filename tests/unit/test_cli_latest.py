"""`reports/latest` is the last complete view of the fleet (issue 29): the CLI says which link a run moved and why,
`report diff`/`merge` read a report directory's newest run whichever link holds it, and the hosts an interrupted
audit never heard from keep their site (from the inventory's policy layers) in the report and its HTML."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import html, writer

from gpufleet import runner
from gpufleet.commands import audit, report

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "tests" / "fixtures" / "reports" / "sample-v1.json"


def _sample(**run) -> dict:
    doc = json.loads(SAMPLE.read_text())
    doc["run"].update(run)
    return doc


def test_the_cli_says_which_link_it_moved_and_why(tmp_path):
    out = tmp_path / "reports"
    writer.write_all(_sample(), out, stamp="20261101T000000Z")
    assert audit.link_note(_sample(), out) == (
        f"gpufleet: {out / 'latest'} now points at this run (a complete run of the whole inventory)"
    )
    partial = _sample(limit="eu_west")
    writer.write_all(partial, out, stamp="20261102T000000Z")
    note = audit.link_note(partial, out)
    assert note.startswith(f"gpufleet: {out / 'last-partial'} now points at this run; ")
    assert f"{out / 'latest'} stays on 20261101T000000Z: --limit eu_west: a part of the inventory" in note
    first = tmp_path / "first"
    writer.write_all(partial, first, stamp="s")
    assert "latest not created (no complete run yet)" in audit.link_note(partial, first)


def test_a_report_directory_is_read_at_its_newest_run_whichever_link_holds_it(tmp_path):
    out = tmp_path / "reports"
    writer.write_all(_sample(), out, stamp="20261101T000000Z")
    assert report.report_file(str(out)) == out / "latest" / "report.json"
    newer = writer.write_all(_sample(limit="eu_west"), out, stamp="20261102T000000Z")
    os.utime(newer["json"], (os.stat(newer["json"]).st_mtime + 60,) * 2)
    assert report.report_file(str(out)) == out / "last-partial" / "report.json"
    only_partial = tmp_path / "slice"
    writer.write_all(_sample(limit="eu_west"), only_partial, stamp="s")
    assert report.report_file(str(only_partial)) == only_partial / "last-partial" / "report.json"


def test_hosts_an_interrupted_audit_never_heard_from_keep_their_site(tmp_path):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    eu_west:\n      hosts:\n        fra-01:\n    us_east:\n      hosts:\n        iad-01:\n"
    )
    (inventory / "group_vars" / "eu_west.yml").write_text("gpufleet_policy_group:\n  site: eu_west\n")
    (inventory / "group_vars" / "all.yml").write_text(
        "gpufleet_policy:\n  site: \"{{ 'us_east' if inventory_hostname.startswith('iad') else 'elsewhere' }}\"\n"
    )
    args = argparse.Namespace(inventory=[str(inventory)], limit=None, policy=None)
    result = runner.RunResult(rc=130, status="failed", hosts={}, interrupted="SIGINT")
    out = tmp_path / "reports"
    doc = audit.partial_report(args, out, result, ["fra-01", "iad-01"], "2026-12-07T13:00:00+00:00", {})
    hosts = doc["hosts"]
    assert {name: (h["status"], h["site"]) for name, h in hosts.items()} == {
        "fra-01": ("interrupted", "eu_west"),  # the group's layer
        "iad-01": ("interrupted", "us_east"),  # the inventory-wide layer, templated per host
    }
    page = (out / "last-partial" / "report.html").read_text()
    assert html.NO_SITE not in page and "eu_west" in page and "us_east" in page
    assert not (out / "latest").exists()  # an interrupted run is not the fleet's view
    # --policy (the overrides layer) is merged last, as the audit merges it
    doc = audit.partial_report(args, out, result, ["fra-01"], "2026-12-07T13:00:00+00:00", {"site": "lab"})
    assert doc["hosts"]["fra-01"]["site"] == "lab"
