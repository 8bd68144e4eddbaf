"""`gpufleet report merge` over real sliced runs (issue 18): the demo fleet (simfleet.demo_inventory, simulated NVML)
audited once whole and once as two `gpufleet audit --limit` slices, as AWX job slicing would run it; the merged
report has the same hosts, findings, summary and exit code as the whole audit. A slice re-run later for one host is
kept over the first run's result and the report says so; a slice audited with another --policy file is refused."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import labkit
import pytest
import simfleet
import yaml

pytestmark = pytest.mark.integration

SLICES = {"slice1": "ap_southeast", "slice2": "eu_west:us_east"}  # together: the whole fleet, no host twice
RERUN = "sg-a100-01"


def audit(inventory: Path, out: Path, policy: Path, *args: str) -> subprocess.CompletedProcess:
    return labkit.gpufleet(
        "audit",
        "-i",
        str(inventory),
        "--out",
        str(out),
        "--policy",
        str(policy),
        "--fail-on",
        "high",
        *args,
        timeout=300,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory, sim_lib):
    """The whole-fleet audit, the two slices and the re-run of RERUN, each in its own report directory."""
    tmp = tmp_path_factory.mktemp("merge")
    inventory = simfleet.demo_inventory(tmp, sim_lib) / "hosts.yml"
    policy = tmp / "site-policy.yml"
    policy.write_text(yaml.safe_dump({"network": {"min_mtu": 9000}}))
    procs = {"whole": audit(inventory, tmp / "whole", policy)}
    for name, limit in SLICES.items():
        procs[name] = audit(inventory, tmp / name, policy, "--limit", limit)
    procs["rerun"] = audit(inventory, tmp / "rerun", policy, "--limit", RERUN)
    for name, proc in procs.items():
        link = "latest" if name == "whole" else "last-partial"  # a --limit slice does not move latest
        assert (tmp / name / link / "report.json").is_file(), f"{name}: {proc.stdout}{proc.stderr}"
    return tmp, inventory, policy, procs


def _report(directory: Path, link: str = "latest") -> dict:
    return json.loads((directory / link / "report.json").read_text())


def _judged(report: dict) -> dict:
    """Per host: its status, policy digest and every rule's result as the audit judged it (rule, status, severity,
    expected)."""
    return {
        name: (
            host["status"],
            host.get("policy_digest"),
            sorted((f["rule"], f["status"], f["severity"], json.dumps(f["expected"])) for f in host["findings"]),
        )
        for name, host in report["hosts"].items()
    }


def test_two_slices_merge_into_the_whole_fleet_audit(runs):
    tmp, _, _, procs = runs
    proc = labkit.gpufleet(
        "report", "merge", str(tmp / "slice1"), str(tmp / "slice2"), "-o", str(tmp / "fleet"), "--fail-on", "high"
    )
    whole = _report(tmp / "whole")
    assert proc.returncode == procs["whole"].returncode, proc.stdout + proc.stderr
    assert proc.returncode == 1  # the demo fleet has high findings (sg-a100-01's GPU-MEM-001...)
    merged = _report(tmp / "fleet")
    assert sorted(merged["hosts"]) == sorted(whole["hosts"]) == sorted(simfleet.EXPECTED)
    assert _judged(merged) == _judged(whole)
    failing = {n: sorted(f["rule"] for f in h["findings"] if f["status"] == "fail") for n, h in merged["hosts"].items()}
    assert failing == simfleet.EXPECTED
    assert merged["summary"] == whole["summary"]
    assert merged["catalog"] == sorted(whole["catalog"], key=lambda e: e["id"])
    assert merged["run"]["complete"] is True and merged["run"]["duplicates"] == {}
    assert merged["run"]["policy_sources"] == whole["run"]["policy_sources"]
    assert merged["run"]["limit"] == "ap_southeast:eu_west:us_east"
    inputs = merged["run"]["merged_from"]
    assert [i["label"] for i in inputs] == [str(tmp / s / "last-partial" / "report.json") for s in SLICES]
    assert [i["hosts_kept"] for i in inputs] == [3, 5]
    # All four formats, as an audit writes them.
    run_dir = (tmp / "fleet" / "latest").resolve()
    assert sorted(p.name for p in run_dir.iterdir()) == ["gpufleet.prom", "junit.xml", "report.html", "report.json"]
    assert "fra-h100-01" in (run_dir / "report.html").read_text()
    assert "exit 1: " in proc.stderr and "merged 2 report(s):" in proc.stdout
    assert f"gpufleet: {tmp / 'fleet' / 'latest'} now points at this run (a merge of finished runs)" in proc.stderr


def test_a_host_audited_again_later_is_kept_once_from_the_later_run(runs):
    tmp, _, _, _ = runs
    out = tmp / "fleet-rerun"
    # Given first, the re-run still wins: it finished last.
    proc = labkit.gpufleet(
        "report", "merge", str(tmp / "rerun"), str(tmp / "slice1"), str(tmp / "slice2"), "-o", str(out)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    merged, rerun = _report(out), _report(tmp / "rerun", "last-partial")
    rerun_label = str(tmp / "rerun" / "last-partial" / "report.json")
    slice_label = str(tmp / "slice1" / "last-partial" / "report.json")
    assert merged["run"]["duplicates"] == {
        RERUN: {"kept": rerun_label, "dropped": [slice_label], "rule": merged["run"]["duplicates"][RERUN]["rule"]}
    }
    assert merged["hosts"][RERUN]["merged_from"] == {"kept": rerun_label, "dropped": [slice_label]}
    assert merged["hosts"][RERUN]["facts"] == rerun["hosts"][RERUN]["facts"]
    assert merged["summary"]["hosts"]["total"] == len(simfleet.EXPECTED)
    assert f"{RERUN}: kept from {rerun_label}; dropped from {slice_label}" in proc.stdout


def test_a_slice_audited_with_another_policy_file_is_refused(runs):
    tmp, inventory, _, _ = runs
    other = tmp / "relaxed-policy.yml"
    other.write_text(yaml.safe_dump({"network": {"min_mtu": 1500}}))
    proc = audit(inventory, tmp / "relaxed", other, "--limit", "iad-h100-03")
    assert (tmp / "relaxed" / "last-partial").is_symlink(), proc.stdout + proc.stderr
    proc = labkit.gpufleet("report", "merge", str(tmp / "slice1"), str(tmp / "relaxed"), "-o", str(tmp / "no"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "cannot merge: the reports were judged by different policy files" in proc.stderr
    assert f"{tmp / 'relaxed' / 'last-partial' / 'report.json'}: {other}" in proc.stderr
    assert not (tmp / "no").exists()
