"""gpufleet CLI: documented exit codes, errors before any host is touched, report diff."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import labkit
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "inventories" / "demo" / "hosts.yml"
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = pytest.mark.integration


def gpufleet(*args: str) -> subprocess.CompletedProcess:
    return labkit.gpufleet(*args, timeout=300)


@pytest.fixture(scope="module")
def demo_built(sim_lib):
    if not (REPO / "build" / "demo" / "iad-h100-03").is_dir():
        demo.build(REPO / "build" / "demo")


def test_clean_host_exits_0(demo_built, tmp_path):
    proc = gpufleet("audit", "-i", str(DEMO), "--limit", "iad-h100-03", "--out", str(tmp_path), "--fail-on", "info")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_fail_on_threshold(demo_built, tmp_path):
    # iad-a100-02 fails only a low-severity rule (GPU-ECC-002).
    args = ("audit", "-i", str(DEMO), "--limit", "iad-a100-02", "--out", str(tmp_path))
    assert gpufleet(*args, "--fail-on", "medium").returncode == 0
    proc = gpufleet(*args, "--fail-on", "low", "--quiet")
    assert proc.returncode == 1
    assert "gpufleet: exit 1: 1 finding at or above low (--fail-on low)" in proc.stderr  # issue 15: say why
    # issue 29: --quiet prints the totals only, without progress
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == ["hosts", "findings", "checks"]
    assert "[1/1]" not in proc.stderr and "auditing" not in proc.stderr
    proc = gpufleet(*args, "--json")
    assert proc.returncode == 0  # default: report, do not gate
    report = json.loads(proc.stdout)  # issue 29: --json is the report alone on stdout
    assert [f["rule"] for f in report["hosts"]["iad-a100-02"]["findings"] if f["status"] == "fail"] == ["GPU-ECC-002"]


def test_unreachable_and_failed_hosts_exit_2_and_are_reported(demo_built, tmp_path):
    inv = yaml.safe_load(DEMO.read_text())
    inv["all"]["children"]["us_east"]["hosts"]["gone-01"] = {
        "ansible_connection": "ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": 1,
        "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no",
    }
    inv["all"]["children"]["us_east"]["hosts"]["broken-01"] = {"ansible_python_interpreter": "/nonexistent/python"}
    inventory = REPO / "inventories" / "demo" / "test-unreachable.yml"  # group_vars/ next to it apply
    inventory.write_text(yaml.safe_dump(inv))
    try:
        proc = gpufleet("audit", "-i", str(inventory), "--limit", "us_east", "--out", str(tmp_path))
    finally:
        inventory.unlink()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "last-partial" / "report.json").read_text())  # --limit: latest is not moved
    assert report["hosts"]["gone-01"]["status"] == "unreachable"
    assert report["hosts"]["broken-01"]["status"] == "failed"
    assert report["hosts"]["iad-h100-03"]["status"] == "ok"  # the others were still audited
    hosts = report["summary"]["hosts"]
    assert hosts == {"total": 5, "ok": 3, "failed": 1, "unreachable": 1, "timeout": 0, "interrupted": 0}


@pytest.mark.parametrize(
    "policy, message",
    [
        ({"memory": {"max_swappiness": "lots"}}, "policy.memory.max_swappiness: expected int"),
        ({"rules": {"GPU-XXX-001": {"enabled": False}}}, "policy.rules.GPU-XXX-001: unknown rule id"),
        ({"sites": {"a": {"links": {"b": {"rtt_ms": -1, "bandwidth_gbps": 1}}}}}, "policy.sites.a.links.b.rtt_ms"),
        (["not", "a", "mapping"], "expected a mapping of policy keys"),
    ],
)
def test_bad_policy_file_is_a_usage_error_before_anything_runs(demo_built, tmp_path, policy, message):
    pfile = tmp_path / "policy.yml"
    pfile.write_text(yaml.safe_dump(policy))
    out = tmp_path / "out"
    proc = gpufleet("audit", "-i", str(DEMO), "--policy", str(pfile), "--out", str(out))
    assert proc.returncode == 3
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (out / "latest").exists()


def test_bad_inventory_policy_names_the_host_and_key(demo_built, tmp_path):
    inv = yaml.safe_load(DEMO.read_text())
    children = inv["all"]["children"]
    children["eu_west"]["hosts"]["fra-h100-01"] = {"gpufleet_policy_host": {"power": {"ecc": "yes"}}}
    children["us_east"]["hosts"]["iad-a100-02"] = {"gpufleet_policy_host": {"power": {"ecc": "yes"}}}
    children["ap_southeast"]["hosts"]["sg-h100-02"] = {"gpufleet_policy_host": {"memory": {"max_swapiness": 5}}}
    inventory = REPO / "inventories" / "demo" / "test-badpolicy.yml"
    inventory.write_text(yaml.safe_dump(inv))
    try:
        proc = gpufleet("audit", "-i", str(inventory), "--out", str(tmp_path))
    finally:
        inventory.unlink()
    assert proc.returncode == 3
    # every bad host at once, one line per distinct problem (not one run per mistake)
    assert "invalid policy for 3 hosts (nothing was run)" in proc.stderr, proc.stderr
    assert "fra-h100-01, iad-a100-02: gpufleet_policy_host: policy.power.ecc: expected bool" in proc.stderr
    assert "sg-h100-02: gpufleet_policy_host: policy.memory.max_swapiness: unknown key" in proc.stderr


def test_unwritable_report_dir_fails_before_any_host(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = gpufleet("audit", "-i", str(DEMO), "--out", str(blocker / "reports"))
    assert proc.returncode == 3
    assert "not writable" in proc.stderr and "auditing" not in proc.stderr


def test_missing_inventory_and_unknown_limit(tmp_path):
    assert gpufleet("audit", "-i", str(tmp_path / "nope.yml"), "--out", str(tmp_path)).returncode == 3
    proc = gpufleet("audit", "-i", str(DEMO), "--limit", "no-such-host", "--out", str(tmp_path))
    assert proc.returncode == 3 and "no host matches" in proc.stderr


def test_report_diff(demo_built, tmp_path):
    out = tmp_path / "r"
    assert gpufleet("audit", "-i", str(DEMO), "--limit", "ap_southeast", "--out", str(out)).returncode == 0
    old = json.loads((out / "last-partial" / "report.json").read_text())
    new = json.loads(json.dumps(old))
    # sg-h100-02's governor got fixed; sg-l40s-03 gained a finding.
    host = new["hosts"]["sg-h100-02"]
    for f in host["findings"]:
        if f["rule"] == "HOST-CPU-001":
            f["status"] = "pass"
    for f in new["hosts"]["sg-l40s-03"]["findings"]:
        if f["rule"] == "GPU-PWR-001":
            f["status"] = "fail"
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    proc = gpufleet("report", "diff", str(tmp_path / "old.json"), str(tmp_path / "new.json"))
    assert proc.returncode == 0, proc.stderr
    lines = [line.split() for line in proc.stdout.splitlines()]
    assert ["fixed", "HOST-CPU-001"] in [words[:2] for words in lines]
    assert ["new", "GPU-PWR-001"] in [words[:2] for words in lines]
    assert "1 fixed, 1 new" in proc.stdout


def test_catalog_lists_every_rule():
    proc = gpufleet("catalog", "--markdown")
    assert proc.returncode == 0
    assert proc.stdout.count("| `") >= 33 and "`GPU-MEM-001`" in proc.stdout


def test_results_are_found_by_module_not_by_task_name(demo_built, tmp_path, capsys):
    """A copy of audit.yml with every task renamed still gives the CLI its progress, the per-host audit results and
    the report: the CLI keys on the module (ansible-runner's resolved_action), never on a display name."""
    from gpufleet import cli
    from gpufleet.commands import audit
    from gpufleet.runner import run_playbook

    text = (REPO / "playbooks" / "audit.yml").read_text()
    renamed = text.replace("- name: ", "- name: Renamed ")
    assert renamed.count("- name: Renamed ") == text.count("- name: ") >= 5 and "Renamed Audit GPU" in renamed
    playbook = tmp_path / "audit-renamed.yml"
    playbook.write_text(renamed)

    result = run_playbook(
        str(playbook), str(DEMO), limit="iad-h100-03", extravars={"gpufleet_report_dir": str(tmp_path / "raw")}
    )
    host = result.hosts["iad-h100-03"]
    assert host.status == "ok", host.message
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet

    # what a partial report is built from: the compact result (audit_json) that fleet.expand decodes
    assert fleet.expand(host.actions[audit.AUDIT_ACTION])["findings"]
    assert "files" in next(
        h.actions[audit.REPORT_ACTION] for h in result.hosts.values() if audit.REPORT_ACTION in h.actions
    )

    args = cli.build_parser().parse_args(["audit", "-i", str(DEMO), "--limit", "iad-h100-03", "--out", str(tmp_path)])
    report, interrupted = audit.run_audit(args, tmp_path / "out", {}, ["iad-h100-03"], playbook=str(playbook))
    assert interrupted is None and report is not None
    assert report["hosts"]["iad-h100-03"]["status"] == "ok"
    assert Path(report["_files"]["json"]).is_file()
    assert "[1/1] iad-h100-03: " in capsys.readouterr().err  # Progress saw the audit module's result


def test_audit_piped_into_head_ends_quietly(demo_built, tmp_path):
    """Issue 15: `gpufleet audit ... | head -2` ended in a BrokenPipeError traceback and exit 1 (failing findings'
    code). Now it ends as coreutils and git do (SIGPIPE: 141 under pipefail), and the report is written."""
    command = [sys.executable, "-m", "gpufleet.cli", "audit", "-i", str(DEMO), "--limit", "iad-a100-02"]

    def piped(reader: str, out: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-o", "pipefail", "-c", " ".join(command) + f" --out {out} --fail-on low | {reader}"],
            capture_output=True,
            text=True,
            timeout=300,
        )

    # head -n 0 exits before the audit writes a line: the write always meets a closed pipe.
    proc = piped("head -n 0", tmp_path / "a")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141, proc.stderr
    assert (tmp_path / "a" / "last-partial" / "report.json").is_file()
    # head -2 may exit before or after the last line is written (a small report fits in the pipe): 141 or 1.
    proc = piped("head -2", tmp_path / "b")
    assert proc.stdout.count("\n") == 2
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode in (1, 141), proc.stderr
