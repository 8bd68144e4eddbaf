"""The fix reads exactly the policy the audit judged (issue 12 §1): a fleet laid out like inventories/example (links
for the whole fleet in gpufleet_policy, the site set per region in gpufleet_policy_group) and a --policy file that
raises the buffer factor. `gpufleet remediate` must size the TCP buffers from the merged policy, so NET-TCP-001
passes in the after-audit; a role reading only gpufleet_policy would write no buffers (no site) or too small ones."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import labkit
import pytest
import simfleet
import yaml

pytestmark = pytest.mark.integration
HOST = "sg-l40s-03"  # stock TCP settings: fails NET-TCP-001..004 before
FACTOR = 8.0  # --policy: 8 x the largest bandwidth-delay product (220 ms x 1 Gbit/s) = 220000000 bytes


@pytest.fixture(scope="module")
def example_layout(tmp_path_factory, sim_lib):
    tmp = tmp_path_factory.mktemp("remediate-policy")
    inv = simfleet.demo_inventory(tmp, sim_lib)
    # As inventories/example: no site in the fleet-wide policy, one per region in gpufleet_policy_group.
    fleet = inv / "group_vars" / "all" / "fleet.yml"
    fv = yaml.safe_load(fleet.read_text())
    del fv["gpufleet_policy"]["site"]
    fleet.write_text(yaml.safe_dump(fv))
    for region in ("ap_southeast", "eu_west", "us_east"):
        (inv / "group_vars" / f"{region}.yml").write_text(yaml.safe_dump({"gpufleet_policy_group": {"site": region}}))
    policy = tmp / "site-policy.yml"
    policy.write_text(yaml.safe_dump({"network": {"buffer_factor": FACTOR}}))
    return tmp, inv / "hosts.yml", policy


def remediate(inventory: Path, policy: Path, out: Path, *args: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`gpufleet remediate` on HOST with the --policy file; the run's directory."""
    proc = labkit.gpufleet(
        "remediate", "-i", str(inventory), "--limit", HOST, "--policy", str(policy), "--out", str(out), *args
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    [run] = list(out.glob("remediation-*"))
    return proc, run


def _tcp_finding(report: dict) -> dict:
    return next(f for f in report["hosts"][HOST]["findings"] if f["rule"] == "NET-TCP-001")


def test_remediate_example_layout_fixes_tcp_buffers(example_layout):
    tmp, inventory, policy = example_layout
    proc, run = remediate(inventory, policy, tmp / "r", "--tags", "network")
    before = json.loads((run / "before" / "last-partial" / "report.json").read_text())  # --limit HOST
    after = json.loads((run / "after" / "last-partial" / "report.json").read_text())
    wanted = int(FACTOR * 220 / 1000 * 1e9 / 8)
    assert _tcp_finding(before)["status"] == "fail"
    assert _tcp_finding(before)["expected"]["tcp_rmem_max"] == f">= {wanted}"
    assert _tcp_finding(after)["status"] == "pass", _tcp_finding(after)
    summary = json.loads((run / "remediation.json").read_text())
    assert "NET-TCP-001" in summary["hosts"][HOST]["fixed"]
    assert summary["hosts"][HOST]["role_overrides"] == []
    # The drop-in holds exactly the size the audit asked for (the fixture's running value was smaller).
    dropin = tmp / "fleet" / HOST / "root" / "etc" / "sysctl.d" / "61-gpufleet-network.conf"
    assert f"net.ipv4.tcp_rmem = 4096 131072 {wanted}" in dropin.read_text()


def test_a_role_variable_wins_and_the_report_says_so(example_layout):
    tmp, inventory, policy = example_layout
    # Set through the inventory, as an operator would for one host.
    host_vars = inventory.parent / "host_vars"
    host_vars.mkdir(exist_ok=True)
    (host_vars / f"{HOST}.yml").write_text(yaml.safe_dump({"network_tuning_buffer_bytes": 16777216}))
    try:
        proc, run = remediate(inventory, policy, tmp / "r3", "--tags", "NET-TCP-001", "--check")
    finally:
        shutil.rmtree(host_vars)
    summary = json.loads((run / "remediation.json").read_text())
    [override] = summary["hosts"][HOST]["role_overrides"]
    assert override["variable"] == "network_tuning_buffer_bytes"
    assert override["value"] == 16777216
    assert "network_tuning_buffer_bytes=16777216" in proc.stdout
