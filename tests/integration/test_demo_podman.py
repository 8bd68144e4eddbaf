"""`make demo` as it runs: the eight simulated hosts as podman containers (tests/sim/demo_podman.yml), audited,
remediated and audited again through the real CLI. Exact failing rules before and after, the changes inside the
containers, and nothing changed on this machine (the host trees the containers were made from are byte-identical)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INVENTORY = REPO / "inventories" / "demo-podman" / "hosts.yml"
UP = REPO / "tests" / "sim" / "demo_podman.yml"
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (make test installs it)"),
]


def _tree_hash(root: Path) -> dict[str, str]:
    out = {}
    for base, _dirs, files in os.walk(root):
        for name in files:
            path = Path(base) / name
            out[str(path.relative_to(root))] = (
                "link:" + os.readlink(path) if path.is_symlink() else hashlib.sha256(path.read_bytes()).hexdigest()
            )
    return out


def _failing(report: dict) -> dict[str, list[str]]:
    return {
        name: sorted(f["rule"] for f in host["findings"] if f["status"] in ("fail", "warn"))
        for name, host in report["hosts"].items()
    }


def _playbook(*extra: str) -> None:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(UP), *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _exec(host: str, *argv: str) -> str:
    proc = subprocess.run(["podman", "exec", f"gpufleet-demo-{host}", *argv], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def fleet(sim_lib, tmp_path_factory):
    probe = subprocess.run(["podman", "image", "exists", "localhost/gpufleet-debian12:current"], capture_output=True)
    assert probe.returncode == 0, "image localhost/gpufleet-debian12:current not built: run scripts/lab-setup.sh"
    build = tmp_path_factory.mktemp("demo-build")
    demo.build(build / "demo")
    shutil.copytree(build / "demo", build / "copy", symlinks=True)
    _playbook("-e", f"gpufleet_demo_build={build / 'demo'}")
    out = tmp_path_factory.mktemp("demo-podman-reports")
    cli = [sys.executable, "-m", "gpufleet.cli"]
    audit = subprocess.run(
        [*cli, "audit", "-i", str(INVENTORY), "--out", str(out)], capture_output=True, text=True, timeout=600
    )
    remediate = subprocess.run(
        [*cli, "remediate", "-i", str(INVENTORY), "--out", str(out)], capture_output=True, text=True, timeout=1200
    )
    # `make demo` ends by installing the watch: its checker judges each container with the same policy and code.
    watch = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(INVENTORY), str(REPO / "playbooks" / "watch.yml")],
        cwd=REPO,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    yield {
        "out": out,
        "audit": audit,
        "remediate": remediate,
        "watch": watch,
        "built": build / "demo",
        "copy": build / "copy",
    }
    _playbook("-e", "gpufleet_demo_state=absent")


def test_containers_audit_exactly_like_the_demo(fleet):
    assert fleet["audit"].returncode in (0, 1), fleet["audit"].stderr[-3000:]
    report = json.loads((fleet["out"] / "latest" / "report.json").read_text())
    down = {"failed": 0, "unreachable": 0, "timeout": 0, "interrupted": 0}
    assert report["summary"]["hosts"] == {"total": 8, "ok": 8, **down}
    assert _failing(report) == demo.EXPECTED


def test_remediation_leaves_only_what_it_cannot_fix(fleet):
    proc = fleet["remediate"]
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = fleet["out"].glob("remediation-*")
    summary = json.loads((run_dir / "remediation.json").read_text())
    after = json.loads((run_dir / "after" / "latest" / "report.json").read_text())
    assert _failing(after) == demo.EXPECTED_AFTER
    for host, fixed in ((h, sorted(set(demo.EXPECTED[h]) - set(demo.EXPECTED_AFTER[h]))) for h in demo.EXPECTED):
        assert sorted(summary["hosts"][host]["fixed"]) == fixed, host


def test_changes_landed_inside_the_containers(fleet):
    assert fleet["remediate"].returncode in (0, 1)
    state = _exec("sg-a100-01", "cat", "/etc/gpufleet-sim/nvml.state")
    assert "gpu.0.persistence_mode=1" in state.replace(" ", "")
    dropin = _exec("sg-a100-01", "cat", "/var/lib/gpufleet-demo/root/etc/sysctl.d/60-gpufleet.conf")
    assert "vm.swappiness = 10" in dropin
    tcp = _exec("sg-l40s-03", "cat", "/var/lib/gpufleet-demo/root/proc/sys/net/ipv4/tcp_congestion_control")
    assert tcp.strip() == "bbr"


def test_the_watch_on_each_container_finds_what_the_audit_found(fleet):
    """A finding means the same wherever it was made: the on-host checker's textfile names exactly the rules that
    the controller's audit after remediation reports failing or warning on that host."""
    proc = fleet["watch"]
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    (run_dir,) = fleet["out"].glob("remediation-*")
    after = _failing(json.loads((run_dir / "after" / "latest" / "report.json").read_text()))
    for host in demo.EXPECTED:
        text = _exec(host, "cat", "/var/lib/prometheus/node-exporter/gpufleet.prom")
        rules = sorted(
            line.split('rule="', 1)[1].split('"', 1)[0]
            for line in text.splitlines()
            if line.startswith("gpufleet_finding{")
        )
        assert rules == after[host], host
        assert f'gpufleet_host_up{{host="{host}",status="ok"}} 1' in text


def test_nothing_changed_on_this_machine(fleet):
    """The trees the containers were copied from are exactly as tests/sim/demo.py built them."""
    assert fleet["remediate"].returncode in (0, 1)
    assert _tree_hash(fleet["built"]) == _tree_hash(fleet["copy"])
