"""inventories/example, as the README walkthrough uses it: its group_vars and policy.yml, through the real CLI
(`gpufleet audit -i ... --policy policy.yml`), on a simulated H100 server of the demo fleet. The demo inventory
gives the host its connection and simulated GPUs; a copy of the example, whose hosts.yml puts that host in
us_east, gives the layers the walkthrough describes: the links (group_vars/all.yml), the region's site, power cap
and expected GPU count (group_vars/us_east.yml), and the team's standards (policy.yml, merged last)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventories" / "example"
DEMO = REPO / "inventories" / "demo" / "hosts.yml"
HOST = "iad-h100-03"  # eight H100 SXM at their 700 W default limit, driver 570
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo_built(sim_lib):
    if not (REPO / "build" / "demo" / HOST).is_dir():
        demo.build(REPO / "build" / "demo")


def test_example_layers_and_policy_file_through_the_cli(demo_built, tmp_path):
    fleet = tmp_path / "my-fleet"
    shutil.copytree(EXAMPLE, fleet)  # step 1 of the walkthrough: cp -r inventories/example my-fleet
    hosts = f"---\nall:\n  children:\n    us_east:\n      hosts:\n        {HOST}:\n"
    (fleet / "inventory" / "hosts.yml").write_text(hosts)
    out = tmp_path / "reports"
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", "audit", "-i", str(DEMO), "-i", str(fleet / "inventory"),
         "--limit", HOST, "--policy", str(fleet / "policy.yml"), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]  # accepted: not 3 (usage error)
    report = json.loads((out / "last-partial" / "report.json").read_text())  # --limit: a part of the fleet
    assert report["run"]["policy_sources"] == [str(fleet / "policy.yml")]
    host = report["hosts"][HOST]
    assert host["status"] == "ok" and host["site"] == "us_east"
    findings = {f["rule"]: f for f in host["findings"]}

    # policy.yml: a rule disabled, one re-graded, the MTU of the fabric NICs declared by glob, the driver branch.
    assert findings["HOST-CPU-004"]["status"] == "skip"
    assert "disabled by policy" in findings["HOST-CPU-004"]["message"]
    assert findings["NET-TCP-003"]["severity"] == "medium"
    assert findings["NET-MTU-001"]["expected"]["ens1f0np0"] == "== 9000 (network.mtu.ens1f*)"
    assert findings["SW-DRV-001"]["status"] == "fail"
    assert findings["SW-DRV-001"]["expected"]["branch"] == 550
    # group_vars/us_east.yml: the declared 600 W cap (the GPUs run at 700 W) and the expected GPU count.
    assert findings["GPU-PWR-002"]["status"] == "fail"
    assert {gpu["declared_cap_w"] for gpu in findings["GPU-PWR-002"]["observed"].values()} == {600.0}
    assert findings["GPU-HLT-003"]["expected"]["count"] == 8
    # group_vars/all.yml: the declared link from us_east to eu_west (80 ms, 10 Gbit/s) sizes the TCP buffers.
    assert findings["NET-TCP-001"]["observed"]["link"] == {"bandwidth_gbps": 10.0, "rtt_ms": 80.0, "site": "eu_west"}
