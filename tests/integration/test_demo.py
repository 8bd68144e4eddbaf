"""`make demo`'s fleet through the real CLI and through ansible-playbook: exact failing rules per host, all four
report formats, and exactly one module call per host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventories" / "demo" / "hosts.yml"
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo_fleet(sim_lib):
    demo.build(REPO / "build" / "demo")
    return demo.EXPECTED


def _failing(report: dict) -> dict[str, list[str]]:
    return {
        name: sorted(f["rule"] for f in host["findings"] if f["status"] in ("fail", "warn"))
        for name, host in report["hosts"].items()
    }


def _gpufleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpufleet.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cli_run(demo_fleet, tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-reports")
    proc = _gpufleet("audit", "-i", str(INVENTORY), "--out", str(out), "--fail-on", "high")
    return proc, out


def test_demo_fails_exactly_the_expected_rules(cli_run, demo_fleet):
    proc, out = cli_run
    report = json.loads((out / "latest" / "report.json").read_text())
    assert _failing(report) == demo_fleet
    down = {"failed": 0, "unreachable": 0, "timeout": 0, "interrupted": 0}
    assert report["summary"]["hosts"] == {"total": 8, "ok": 8, **down}
    assert report["schema"] == "gpufleet.report/v1" and report["run"]["complete"] is True


def test_demo_writes_all_four_formats_0640(cli_run):
    _, out = cli_run
    latest = out / "latest"
    assert latest.is_symlink()
    for name in ("report.json", "report.html", "junit.xml", "gpufleet.prom"):
        path = latest / name
        assert path.stat().st_size > 0, name
        assert oct(path.stat().st_mode & 0o777) == "0o640", name
    prom = (latest / "gpufleet.prom").read_text()
    assert "gpufleet_finding{" in prom and 'rule="GPU-MEM-001"' in prom
    assert "sg-a100-01" in (latest / "report.html").read_text()


def test_cli_exit_code_and_output(cli_run):
    proc, _ = cli_run
    assert proc.returncode == 1, proc.stderr  # findings at or above --fail-on high
    assert "[8/8]" in proc.stderr  # live progress
    assert "GPU-MEM-001" in proc.stdout and "sg-a100-01" in proc.stdout


def test_exactly_one_module_call_per_host(demo_fleet, tmp_path):
    """Count real module executions: every one starts the target's Python, which we wrap to log the host."""
    log = tmp_path / "calls.log"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho "$FAKE_NVML_STATE" >> {log}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    result = run_playbook(
        "audit.yml",
        str(INVENTORY),
        extravars={"ansible_python_interpreter": str(wrapper), "gpufleet_report_dir": str(tmp_path / "reports")},
    )
    calls = [Path(line).parent.name for line in log.read_text().split()]
    assert sorted(calls) == sorted(demo_fleet), calls
    # ansible-playbook on its own (no CLI) wrote the same reports, with the same findings.
    report = json.loads((tmp_path / "reports" / "latest" / "report.json").read_text())
    assert _failing(report) == demo_fleet
    assert {h.status for h in result.hosts.values()} == {"ok"}


def test_demo_changes_nothing_it_reads(demo_fleet, tmp_path):
    """The audit is read-only: every simulated host's files are byte-identical afterwards."""

    def snapshot():
        out = {}
        for base, _dirs, files in os.walk(REPO / "build" / "demo"):
            for f in files:
                p = Path(base) / f
                if not p.is_symlink():
                    out[str(p)] = p.read_bytes()
        return out

    before = snapshot()
    proc = _gpufleet("audit", "-i", str(INVENTORY), "--out", str(tmp_path), "--limit", "sg-a100-01")
    assert proc.returncode == 0, proc.stderr
    assert snapshot() == before


def test_topology_and_probe_read_the_demo_host(demo_fleet, tmp_path):
    """The demo shows every command: `gpufleet topology` reads the host's PCIe tree (GPUs, NICs, bindings), and
    `gpufleet probe` its GPU jobs in the host's own /proc (a fixture that does not move: figures since boot), not
    this machine's."""
    topo = _gpufleet("topology", "-i", str(INVENTORY), "-l", "sg-a100-01", "--json", str(tmp_path / "topo.json"))
    assert topo.returncode == 0, topo.stdout + topo.stderr
    host = json.loads((tmp_path / "topo.json").read_text())["sg-a100-01"]
    facts = host["topology"]
    assert host["status"] == "ok" and facts["available"], facts.get("error")
    assert len(facts["gpus"]) == 8 and [n["name"] for n in facts["nics"]] == ["ens1f0np0", "ens2f0np0"]
    assert facts["matrix"]["GPU0"]["ens1f0np0"] == "NODE" and facts["matrix"]["GPU7"]["ens1f0np0"] == "SYS"
    assert "NIC ens1f0np0 (then ens2f0np0)" in topo.stdout

    probe = _gpufleet("probe", "-i", str(INVENTORY), "-l", "sg-a100-01", "--seconds", "0.5", "--fail-on", "high")
    assert probe.returncode == 1, probe.stdout + probe.stderr  # HOST-BAL-004: the host swaps under its GPU jobs
    assert "/proc did not change (a fixture tree): CPU figures since boot" in probe.stdout
    assert "?%" not in probe.stdout
    for gpu in range(8):
        assert f"    PID {41000 + gpu} python3: 600.0% CPU, 12 threads" in probe.stdout
    assert "FAIL HOST-BAL-004" in probe.stdout and "PASS HOST-BAL-002" in probe.stdout
