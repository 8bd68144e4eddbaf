"""The checker as a host runs it: the zipapp watch_install builds (watch/bundle.py), started as its own process with
real pynvml over the simulated library, on a healthy reference server (tests/sim/reference.py, PCIe L40S).

node-problem-detector's convention (exit 0, 1, 2 and one short line), the run mode's outputs and journal lines, and
nothing of the host changed by a run: the fixture tree's /etc and the GPU state hash the same before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import bundle

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "sim"))
import reference  # noqa: E402

pytestmark = pytest.mark.integration
HOST = "pcie-l40s"


def _tree(path: Path) -> str:
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
        digest.update(str(item.relative_to(path)).encode() + b"\0" + item.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def host(sim_lib, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("watch-checker")
    built = reference.build(tmp / "ref", hosts=[HOST])[HOST]["dir"]
    data, version = bundle.build(python=sys.executable)
    checker = tmp / "gpufleet-watch"
    checker.write_bytes(data)
    checker.chmod(0o755)
    out = tmp / "out"
    config = {
        "host": HOST,
        "policy": {"watch": {"textfile_dir": str(out / "textfile"), "state_file": str(out / "state" / "s.json")}},
        "environment": {
            "LD_LIBRARY_PATH": str(sim_lib.parent),
            "FAKE_NVML_STATE": str(built / "nvml.state"),
            "FAKE_ETHTOOL_DIR": str(built / "ethtool"),
        },
        "audit": {
            "root": str(built / "root"),
            "ethtool_path": str(REPO / "tests" / "fixtures" / "ethtool" / "fake-ethtool"),
            "sample_seconds": 0,
        },
    }
    (tmp / "watch.json").write_text(json.dumps(config))
    return {"dir": built, "checker": checker, "config": tmp / "watch.json", "out": out, "version": version}


def _run(host, *args: str) -> subprocess.CompletedProcess:
    # The environment the configuration names is applied by the checker itself (it starts again with it), as under
    # Slurm's HealthCheckProgram or node-problem-detector, which give it their own.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE", "PYTHONPATH")}
    return subprocess.run(
        [str(host["checker"]), "--config", str(host["config"]), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def _set_lost(host, lost: bool) -> None:
    state = host["dir"] / "nvml.state"
    lines = [line for line in state.read_text().splitlines() if not line.startswith("gpu.2.lost=")]
    if lost:
        lines.append("gpu.2.lost=1")
    tmp = state.with_suffix(".new")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(state)


def test_npd_mode_exit_codes_and_messages(host):
    ok = _run(host, "--mode", "npd")
    assert (ok.returncode, ok.stdout) == (0, "gpufleet: no critical+ findings\n"), ok.stdout + ok.stderr
    _set_lost(host, True)
    try:
        problem = _run(host, "--mode", "npd")
    finally:
        _set_lost(host, False)
    assert problem.returncode == 1, problem.stdout + problem.stderr
    assert problem.stdout.startswith("gpufleet: GPU-HLT-002 GPU 2") and len(problem.stdout.strip()) <= 80
    broken = json.loads(host["config"].read_text())
    broken["audit"]["backend"] = "dcgm"
    bad = host["config"].with_name("bad.json")
    bad.write_text(json.dumps(broken))
    unknown = subprocess.run(
        [str(host["checker"]), "--config", str(bad), "--mode", "npd"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert unknown.returncode == 2 and unknown.stdout.startswith("gpufleet: could not check the host")
    assert not host["out"].exists()  # npd mode writes nothing


def test_a_run_writes_only_its_outputs_and_changes_nothing_of_the_host(host):
    before = (
        _tree(host["dir"] / "root" / "etc"),
        _tree(host["dir"] / "root" / "sys"),
        (host["dir"] / "nvml.state").read_bytes(),
    )
    run = _run(host)
    assert run.returncode == 0, run.stdout + run.stderr
    after = (
        _tree(host["dir"] / "root" / "etc"),
        _tree(host["dir"] / "root" / "sys"),
        (host["dir"] / "nvml.state").read_bytes(),
    )
    assert before == after
    written = sorted(str(p.relative_to(host["out"])) for p in host["out"].rglob("*") if p.is_file())
    # its outputs: the state, the hardware baseline its first complete run records (watch/baseline.py), the textfile
    assert written == ["state/s.json", "state/watch-baseline.json", "textfile/gpufleet.prom"]
    text = (host["out"] / "textfile" / "gpufleet.prom").read_text()
    assert f'version="{host["version"]}"' in text and f'gpufleet_host_up{{host="{HOST}",status="ok"}} 1' in text
    assert run.stdout.splitlines()[-1].startswith(f"gpufleet-watch {HOST}: {len(rules.RULES)} rules")


def test_a_lost_gpu_is_logged_once_and_its_clearing_too(host):
    _run(host)  # the state now holds the healthy host
    _set_lost(host, True)
    try:
        first, second = _run(host), _run(host)
    finally:
        _set_lost(host, False)
    cleared = _run(host)
    assert "GPU-HLT-002 started failing on GPU 2 [critical]" in first.stdout, first.stdout
    # still lost: only the run's summary line, which names the problem
    assert (
        second.stdout.splitlines() == [second.stdout.strip()]
        and "problems (critical and worse): GPU-HLT-002" in second.stdout
    )
    assert "GPU-HLT-002 cleared (was failing on GPU 2)" in cleared.stdout, cleared.stdout


def test_the_watch_runs_the_balance_probe_when_the_policy_asks(host, tmp_path):
    """watch.probe_seconds: the HOST-BAL rules are judged in the watch run (a job pinned to one CPU on an idle GPU)
    instead of skipping as in an audit."""
    busy = subprocess.Popen(
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-c",
            "import time\nend = time.time() + 60\nwhile time.time() < end: pass",
        ]
    )
    state = host["dir"] / "nvml.state"
    original = state.read_text()
    try:
        lines = [x for x in original.splitlines() if not x.startswith(("gpu.0.processes=", "gpu.0.utilization_gpu="))]
        state.write_text(
            "\n".join(lines + [f"gpu.0.processes={busy.pid}:4294967296", "gpu.0.utilization_gpu=5"]) + "\n"
        )
        config = json.loads(host["config"].read_text())
        config["policy"]["watch"]["probe_seconds"] = 1
        config["policy"]["watch"]["textfile_dir"] = str(tmp_path / "textfile")
        config["policy"]["watch"]["state_file"] = str(tmp_path / "state.json")
        probe_config = tmp_path / "watch.json"
        probe_config.write_text(json.dumps(config))
        run = subprocess.run(
            [str(host["checker"]), "--config", str(probe_config)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        busy.send_signal(signal.SIGKILL)
        busy.wait(timeout=10)
        state.write_text(original)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "HOST-BAL-003 started failing" in run.stdout, run.stdout
    text = (tmp_path / "textfile" / "gpufleet.prom").read_text()
    assert 'rule="HOST-BAL-003"' in text
