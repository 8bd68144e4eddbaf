"""Faults in a fleet, through the real CLI over simulated hosts: a host that cannot be reached and a link that never
answers (bounded by the per-host timeout) in a fleet of six; SIGINT in the middle of `gpufleet audit` and of
`gpufleet remediate`. Every time the other hosts are audited, the report says what happened to each host, and no
target is left with a half-written file."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import simfleet
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import schema

pytestmark = pytest.mark.integration

FAST = ["sg-a100-01", "sg-h100-02", "fra-h100-01", "iad-h100-03"]
CLI = [sys.executable, "-m", "gpufleet.cli"]


def _gpufleet(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def _leftovers(marker: str) -> list[int]:
    """Processes still running whose command line names ``marker`` (this test's temp dir)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                pids.append(int(entry))
    return pids


@pytest.fixture
def fleet(tmp_path, sim_lib):
    fleet = simfleet.build(tmp_path)
    yield fleet
    for pid in _leftovers(str(tmp_path)):  # only processes this test started (their command names its temp dir)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def _failing(report: dict) -> dict:
    return {n: sorted(f["rule"] for f in h["findings"] if f["status"] == "fail") for n, h in report["hosts"].items()}


# --------------------------------------------------------------------------------------------- fleet of six


def test_unreachable_and_hung_hosts_in_a_fleet_of_six(tmp_path, fleet, sim_lib):
    hosts = {name: simfleet.host_vars(fleet, name, sim_lib.parent) for name in FAST}
    # Nothing listens on port 1: ssh is refused at once.
    hosts["gone-01"] = {
        "ansible_connection": "ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": 1,
        "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no",
    }
    # A link that never answers: "ssh" that hangs for 120 s. Only the per-host timeout ends the wait (25 s: the
    # other hosts answer in a few seconds, well within it even on a busy machine).
    hosts["slow-01"] = {
        "ansible_connection": "ssh",
        "ansible_host": "192.0.2.1",
        "ansible_ssh_executable": simfleet.sleeper(tmp_path / "hung-ssh", 120, then=None),
    }
    inventory = simfleet.inventory(tmp_path / "hosts.yml", hosts)
    out = tmp_path / "reports"

    start = time.monotonic()
    proc = _gpufleet("audit", "-i", str(inventory), "--out", str(out), "--host-timeout", "25")
    elapsed = time.monotonic() - start

    assert proc.returncode == 2, proc.stdout + proc.stderr  # hosts not audited
    print(f"fleet of six with a hung link: {elapsed:.0f} s")  # quoted in the README (pytest -s)
    assert elapsed < 100, f"the run took {elapsed:.0f} s: the hung host was not cut off"
    report = json.loads((out / "latest" / "report.json").read_text())
    assert schema.validate(report) == []
    assert report["run"]["complete"] is True
    assert report["summary"]["hosts"] == {
        "total": 6,
        "ok": 4,
        "failed": 0,
        "unreachable": 1,
        "timeout": 1,
        "interrupted": 0,
    }
    gone, slow = report["hosts"]["gone-01"], report["hosts"]["slow-01"]
    assert gone["status"] == "unreachable" and "Connection refused" in gone["message"]
    assert slow["status"] == "timeout"
    assert slow["message"] == "no answer within the per-host timeout (gpufleet_host_timeout = 25 s)"
    # hosts that did not answer keep their site (from the inventory's policy, templated), so the report groups them
    assert gone["site"] == slow["site"] == "us_east"
    # the other four were audited exactly as without the faults
    assert {n: f for n, f in _failing(report).items() if n in FAST} == {n: simfleet.EXPECTED[n] for n in FAST}
    assert "TIMED OUT: no answer within the per-host timeout" in proc.stdout
    assert "UNREACHABLE:" in proc.stdout
    assert "slow-01: timeout" in proc.stderr  # progress line


# ---------------------------------------------------------------------------------------------------- SIGINT


class Watched:
    """A `gpufleet` subprocess whose stdout and stderr lines are read as they come."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue = queue.Queue()
        self.out: list[str] = []
        self.err: list[str] = []
        for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    def _pump(self, stream, sink) -> None:
        for line in stream:
            sink.append(line)
            self.lines.put(line)

    def wait_for(self, predicate, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                assert self.proc.poll() is None, "gpufleet ended early:\n" + "".join(self.out + self.err)
                continue
            if predicate(line):
                return line
        raise AssertionError("not seen in time:\n" + "".join(self.out + self.err))

    def interrupt(self, timeout: float = 60) -> tuple[int, float]:
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        rc = self.proc.wait(timeout=timeout)
        took = time.monotonic() - sent
        print(f"SIGINT to exit: {took:.1f} s")  # the README's reliability table quotes it (pytest -s)
        time.sleep(0.2)  # let the readers drain
        return rc, took

    @property
    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)


def test_sigint_during_audit_writes_a_partial_report(tmp_path, fleet, sim_lib):
    simfleet.clone(fleet, "iad-h100-01", "slow-01")
    hosts = {name: simfleet.host_vars(fleet, name, sim_lib.parent) for name in FAST}
    slow_python = simfleet.sleeper(tmp_path / "slow-python", 60)  # this host takes a minute to answer
    hosts["slow-01"] = simfleet.host_vars(fleet, "slow-01", sim_lib.parent, python=slow_python)
    inventory = simfleet.inventory(tmp_path / "hosts.yml", hosts)
    out = tmp_path / "reports"

    run = Watched("audit", "-i", str(inventory), "--out", str(out))
    run.wait_for(lambda line: line.startswith("[4/5] "), timeout=120)  # the four fast hosts have answered
    rc, took = run.interrupt()

    assert rc == 130, run.text
    assert took < 20, f"{took:.0f} s from SIGINT to exit"
    # issue 29: an interrupted run is written and listed, but latest (what scrapers and diffs read) is not moved
    assert not (out / "latest").exists()
    report = json.loads((out / "last-partial" / "report.json").read_text())
    assert f"{out / 'last-partial'} now points at this run; {out / 'latest'} not created" in "".join(run.err)
    assert schema.validate(report) == []
    assert report["run"]["complete"] is False
    assert report["run"]["incomplete_reason"] == "interrupted by SIGINT after 4 of 5 host(s) answered"
    assert report["hosts"]["slow-01"]["status"] == "interrupted"
    assert report["hosts"]["slow-01"]["site"] == "us_east"  # its site from the inventory's policy, templated
    assert _failing(report) == {**{n: simfleet.EXPECTED[n] for n in FAST}, "slow-01": []}
    assert all(report["hosts"][n]["status"] == "ok" for n in FAST)
    run_dir = (out / "last-partial").resolve()
    assert sorted(p.name for p in run_dir.iterdir()) == ["gpufleet.prom", "junit.xml", "report.html", "report.json"]
    assert {oct(p.stat().st_mode & 0o777) for p in run_dir.iterdir()} == {"0o640"}
    assert 'id="incomplete"' in (run_dir / "report.html").read_text()
    assert "no site recorded" not in (run_dir / "report.html").read_text()  # slow-01 is listed under us_east
    assert "gpufleet_audit_complete 0" in (run_dir / "gpufleet.prom").read_text()
    out_text = "".join(run.out)
    assert "INCOMPLETE RUN" in out_text and "NOT AUDITED" in out_text
    assert "the run was interrupted before this host answered" in out_text and "not audited: the run" not in out_text
    # the slow host's module never started, and nothing it started is left running
    time.sleep(0.5)
    assert _leftovers(slow_python) == []


def _snapshot(fleet: Path) -> dict[str, bytes]:
    """Every file of the simulated hosts but gpufleet's own bookkeeping (rollback records, the lock)."""
    files = {}
    for p in sorted(fleet.rglob("*")):
        rel = str(p.relative_to(fleet))
        if (
            p.is_file()
            and not p.is_symlink()
            and "/var/lib/gpufleet/rollback/" not in rel
            and "/run/gpufleet/" not in rel
        ):
            files[rel] = p.read_bytes()
    return files


def _dotfiles(fleet: Path) -> set[str]:
    """Hidden files of the simulated hosts (an atomic write's temp file is one), but the rollback records' flock."""
    return {
        str(p.relative_to(fleet))
        for p in fleet.rglob(".*")
        if p.is_file() and not (p.name == ".lock" and p.parent.name == "rollback")
    }


def test_sigint_during_remediate_leaves_no_half_written_file(tmp_path, fleet, sim_lib):
    names = ["sg-a100-01", "sg-h100-02"]
    # Every module call on both hosts waits 2 s: after the first change, the lock's release (a module call of its
    # own) is at least 2 s away, so the SIGINT lands while the lock is held even when this machine is busy. (Since
    # remediate applies only failing rules, few tasks follow the first change: with 0.5 s on one host, a busy CI
    # machine once saw the line only after the release.)
    slow_python = simfleet.sleeper(tmp_path / "slow-python", 2)
    hosts = {name: simfleet.host_vars(fleet, name, sim_lib.parent, python=slow_python) for name in names}
    inventory = simfleet.inventory(tmp_path / "hosts.yml", hosts)
    before = _snapshot(fleet)
    dotfiles = _dotfiles(fleet)
    out = tmp_path / "reports"

    run = Watched("remediate", "-i", str(inventory), "--out", str(out), "--verbose")
    line = run.wait_for(lambda line: line.startswith("gpufleet: remediating"), timeout=180)
    run_id = line.split("run ")[-1].strip()
    run.wait_for(lambda line: "changed: [" in line, timeout=180)  # the first change is made
    rc, took = run.interrupt()

    assert rc == 130, run.text
    assert took < 30, f"{took:.0f} s from SIGINT to exit"
    [summary_path] = list(out.glob("remediation-*/remediation.json"))
    summary = json.loads(summary_path.read_text())
    assert summary["complete"] is False and summary["run_id"] == run_id
    assert summary["interrupted"] == {"signal": "SIGINT", "stage": "remediate"}
    assert summary["after"] is None
    assert any(summary["hosts"][n]["changed_tasks"] for n in names), summary
    assert all(summary["hosts"][n]["fixed"] is None for n in names)  # not audited afterwards: nothing claimed
    assert f"gpufleet rollback --run {run_id}" in run.text

    # No target file is half-written: no temp file of an atomic write is left, every JSON file parses, and the
    # changed files are whole (the rollback below puts back exactly what was there).
    leftovers = sorted(_dotfiles(fleet) - dotfiles)
    assert leftovers == [], leftovers
    for p in fleet.rglob("*.json"):
        json.loads(p.read_text())
    assert _snapshot(fleet) != before, "the run was interrupted before it changed anything: nothing tested"

    # The interrupted run never released its lock; its ansible-playbook is gone, so the rollback takes it over.
    locks = list(fleet.rglob("remediation.lock"))
    assert locks, "the interrupted run left no lock: was it interrupted before it took one?"
    proc = _gpufleet("rollback", "-i", str(inventory), "--run", run_id)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "restored" in proc.stdout
    assert not any(p.exists() for p in locks)
    after = _snapshot(fleet)
    assert sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)) == []


# ----------------------------------------------------------------------------------------------- GPU faults


def test_gpu_faults_through_the_whole_audit(tmp_path, fleet, sim_lib):
    """Driver-side faults on five hosts and one healthy host, in one `gpufleet audit`: each faulty host is still
    audited (status ok) and its report says what was wrong; the healthy host's findings are unchanged."""
    healthy = "iad-h100-03"
    faults = {
        "gpu-nolib": None,  # no libnvidia-ml.so.1 on the loader path
        "gpu-nodriver": "error.nvmlInitWithFlags=DriverNotLoaded",
        "gpu-lost": "gpu.2.lost=1",  # GPU 2 fell off the bus
        "gpu-noperm": "error.nvmlDeviceGetEnforcedPowerLimit=NoPermission",  # a reading needs root
        "gpu-nopynvml": None,  # no pynvml for the target's Python: nvidia-smi fallback
    }
    hosts = {healthy: simfleet.host_vars(fleet, healthy, sim_lib.parent)}
    for name, line in faults.items():
        simfleet.clone(fleet, healthy, name)
        if line:
            with open(fleet / name / "nvml.state", "a") as f:
                f.write(line + "\n")
        hosts[name] = simfleet.host_vars(fleet, name, sim_lib.parent)
    empty = tmp_path / "no-nvml"
    empty.mkdir()
    hosts["gpu-nolib"]["gpufleet_environment"]["LD_LIBRARY_PATH"] = str(empty)
    nopynvml = tmp_path / "nopynvml"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(nopynvml)], check=True)
    smi_bin = tmp_path / "smi-bin"
    smi_bin.mkdir()
    os.symlink(simfleet.REPO / "tests/fixtures/nvidia-smi/fake-nvidia-smi", smi_bin / "nvidia-smi")
    hosts["gpu-nopynvml"]["ansible_python_interpreter"] = str(nopynvml / "bin" / "python")
    hosts["gpu-nopynvml"]["gpufleet_environment"].update(
        PATH=f"{smi_bin}:{os.environ['PATH']}",
        NVIDIA_SMI_FIXTURE=str(simfleet.REPO / "tests/fixtures/nvidia-smi/a100x2-busy.csv"),
    )
    inventory = simfleet.inventory(tmp_path / "hosts.yml", hosts)
    out = tmp_path / "reports"

    proc = _gpufleet("audit", "-i", str(inventory), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "latest" / "report.json").read_text())
    assert schema.validate(report) == []
    assert {n: h["status"] for n, h in report["hosts"].items()} == {n: "ok" for n in hosts}
    gpu = {n: h["facts"]["gpu"] for n, h in report["hosts"].items()}
    failing = _failing(report)

    for name, reason in (("gpu-nolib", "LibraryNotFound"), ("gpu-nodriver", "DriverNotLoaded")):
        assert gpu[name]["nvml"]["available"] is False and reason in gpu[name]["nvml"]["error"], gpu[name]["nvml"]
        # The host's GPUs are on its PCI bus (the demo fleet's PCIe trees) but none can be used: GPU-HLT-003, once.
        assert gpu[name]["gpus"] == [] and failing[name] == ["GPU-HLT-003"], failing[name]
        hlt = next(f for f in report["hosts"][name]["findings"] if f["rule"] == "GPU-HLT-003")
        assert hlt["message"].startswith("NVML could not start (") and "none of the" in hlt["message"], hlt
        skipped = {f["rule"] for f in report["hosts"][name]["findings"] if f["status"] == "skip"}
        assert {"GPU-PWR-001", "GPU-HLT-002"} <= skipped  # no GPU facts: GPU rules skip, host rules still run
        assert {"HOST-MEM-002", "HOST-CPU-001"} - skipped == {"HOST-MEM-002", "HOST-CPU-001"}
    assert proc.stdout.count("no NVIDIA driver found (") == 2  # listed with the reason
    page = (out / "latest" / "report.html").read_text()
    assert "no NVIDIA driver found (" in page and "LibraryNotFound" in page

    lost = gpu["gpu-lost"]["gpus"]
    assert [g["lost"] for g in lost] == [False, False, True, False, False, False, False, False]
    assert failing["gpu-lost"] == ["GPU-HLT-002"]

    noperm = gpu["gpu-noperm"]["gpus"]
    assert all(g["unsupported"]["power.enforced_limit_w"] == "NoPermission" for g in noperm)
    assert failing["gpu-noperm"] == []

    assert gpu["gpu-nopynvml"]["nvml"]["source"] == "nvidia-smi"
    assert [g["name"] for g in gpu["gpu-nopynvml"]["gpus"]] == ["NVIDIA A100-SXM4-80GB"] * 2
    assert failing[healthy] == simfleet.EXPECTED[healthy]
