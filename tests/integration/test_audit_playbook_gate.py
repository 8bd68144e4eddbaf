"""`ansible-playbook playbooks/audit.yml` (the path AWX and Automation Platform run) fails the run as `gpufleet audit`'s
exit codes do: hosts not audited (unreachable, an invalid policy) always, findings at or above gpufleet_fail_on when
asked. The reports are written either way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import simfleet

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "audit.yml"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, sim_lib):
    tmp = tmp_path_factory.mktemp("gate")
    return tmp, simfleet.build(tmp), sim_lib.parent


def _play(tmp: Path, fleet_dir: Path, sim_dir: Path, name: str, hosts: dict, *extra: str):
    inventory = simfleet.inventory(tmp / f"{name}.yml", hosts)
    out = tmp / f"reports-{name}"
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), str(PLAYBOOK), "-e", f"gpufleet_report_dir={out}", *extra],
        cwd=REPO,  # the repository's ansible.cfg, as a checkout or an AWX project has it
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    report = json.loads((out / "latest" / "report.json").read_text())
    return proc, report


def test_a_clean_run_is_green(fleet):
    tmp, fleet_dir, sim_dir = fleet
    hosts = {"iad-h100-03": simfleet.host_vars(fleet_dir, "iad-h100-03", sim_dir)}
    proc, report = _play(tmp, fleet_dir, sim_dir, "clean", hosts, "-e", "gpufleet_fail_on=high")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert report["summary"]["hosts"]["ok"] == 1


def test_unreachable_host_and_invalid_policy_fail_the_run(fleet):
    tmp, fleet_dir, sim_dir = fleet
    bad_policy = simfleet.host_vars(fleet_dir, "iad-h100-03", sim_dir)
    bad_policy["gpufleet_policy_host"] = {"memory": {"max_swapiness": 5}}  # a typo: the audit refuses the policy
    hosts = {
        "iad-h100-03": bad_policy,
        "gone-01": {
            "ansible_connection": "ssh",
            "ansible_host": "127.0.0.1",
            "ansible_port": 1,  # nothing listens: refused at once
            "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no",
        },
    }
    proc, report = _play(tmp, fleet_dir, sim_dir, "down", hosts)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "exit 2: 2 hosts not audited (failed: 1, unreachable: 1)" in proc.stdout, proc.stdout[-3000:]
    assert report["hosts"]["iad-h100-03"]["status"] == "failed"
    assert "max_swapiness" in report["hosts"]["iad-h100-03"]["message"]
    assert report["hosts"]["gone-01"]["status"] == "unreachable"


def test_findings_fail_the_run_only_at_or_above_gpufleet_fail_on(fleet):
    tmp, fleet_dir, sim_dir = fleet
    hosts = {"sg-h100-02": simfleet.host_vars(fleet_dir, "sg-h100-02", sim_dir)}  # HOST-CPU-001 (high) fails
    proc, _report = _play(tmp, fleet_dir, sim_dir, "high", hosts, "-e", "gpufleet_fail_on=high")
    assert proc.returncode != 0
    assert "exit 1: 1 finding at or above high (--fail-on high)" in proc.stdout, proc.stdout[-3000:]
    proc, _report = _play(tmp, fleet_dir, sim_dir, "critical", hosts, "-e", "gpufleet_fail_on=critical")
    assert proc.returncode == 0, proc.stdout[-3000:]
    proc, _report = _play(tmp, fleet_dir, sim_dir, "default", hosts)  # default none: findings alone stay green
    assert proc.returncode == 0, proc.stdout[-3000:]
