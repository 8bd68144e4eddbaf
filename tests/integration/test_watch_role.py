"""Role gpufleet.tuning.watch in a systemd container with simulated GPUs (tests/integration/watchlab.py).

Check mode first (it writes nothing), then the real run, then a second run that changes nothing; the timer really
runs the checker (hardened unit) every watch.interval_seconds; a GPU lost in the simulated library is logged and
exported within two intervals and cleared when it comes back; the checker changes nothing of the host apart from its
two outputs (hashes of /etc, the GPU state and everything else it could reach); node-problem-detector mode keeps its
exit-code convention; state absent removes everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import watchlab

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
import reference  # noqa: E402

pytestmark = pytest.mark.integration

NAME = "gpufleet-test-watch-role"
INTERVAL = 10
TEXTFILE = "/var/lib/prometheus/node-exporter/gpufleet.prom"
STATE = "/var/lib/gpufleet/watch-state.json"
BASELINE = "/var/lib/gpufleet/watch-baseline.json"
NPD_DIR = "/etc/node-problem-detector.d"
GROUP_VARS = {
    "gpufleet_sample_seconds": 0,
    "gpufleet_policy": {"watch": {"interval_seconds": INTERVAL, "randomized_delay_seconds": 0}},
    "watch_npd_config_dir": NPD_DIR,
}
# What the checker may not change: everything of the host that is not its output (its own state and textfile).
UNTOUCHED = ("/etc", "/usr/local", "/opt", "/var/lib/gpufleet-test")


@pytest.fixture(scope="module")
def host(sim_lib, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("watch-role")
    built = reference.build(tmp / "ref", hosts=["dgx-h100"])
    state = (built["dgx-h100"]["dir"] / "nvml.state").read_text()
    # CAP_SYS_ADMIN lets systemd in the container build the unit's sandbox (without it systemd skips
    # ProtectSystem= and friends silently), so the checker is tested under the hardening it ships with.
    with watchlab.gpu_container(NAME, state, sim_lib, extra=("--cap-add=SYS_ADMIN",)) as name:
        inventory = watchlab.inventory(tmp, {name: {}}, GROUP_VARS)
        prereqs, _ = watchlab.apply_watch(tmp, inventory, roles=("prereqs",))
        assert prereqs.returncode == 0, prereqs.stdout[-3000:] + prereqs.stderr[-2000:]
        before = watchlab.digest_inside(name, "/etc", "/usr/local")
        check, check_stats = watchlab.apply_watch(tmp, inventory, check=True, roles=("watch",))
        after_check = watchlab.digest_inside(name, "/etc", "/usr/local")
        first, first_stats = watchlab.apply_watch(tmp, inventory)
        second, second_stats = watchlab.apply_watch(tmp, inventory)
        yield {
            "name": name,
            "tmp": tmp,
            "inventory": inventory,
            "check": (check, check_stats),
            "digests": (before, after_check),
            "first": (first, first_stats),
            "second": (second, second_stats),
        }


def _journal(name: str) -> str:
    return watchlab.exec_in(name, "journalctl", "-u", "gpufleet-watch.service", "--no-pager", "-o", "cat").stdout


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def _textfile_shows(name: str, rule: str, seconds: float, what: str) -> str:
    """The checker's textfile once ``rule`` is in it, which must be within ``seconds`` from now."""
    started = time.monotonic()
    text = _wait_for(lambda: (lambda t: rule in t and t)(watchlab.exec_in(name, "cat", TEXTFILE).stdout), seconds, what)
    assert time.monotonic() - started <= seconds
    return text


def _textfile_drops(name: str, rule: str, what: str) -> None:
    """Until ``rule`` is gone from the checker's textfile, within two intervals (and a little)."""
    _wait_for(lambda: rule not in watchlab.exec_in(name, "cat", TEXTFILE).stdout, 2 * INTERVAL + 5, what)


def test_check_mode_predicts_and_writes_nothing(host):
    proc, stats = host["check"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert stats[host["name"]]["changed"] > 0
    before, after = host["digests"]
    assert before == after


def test_the_role_installs_and_a_second_run_changes_nothing(host):
    for key in ("first", "second"):
        proc, _ = host[key]
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert host["first"][1][host["name"]]["changed"] > 0
    assert host["second"][1][host["name"]]["changed"] == 0
    name = host["name"]
    assert watchlab.exec_in(name, "systemctl", "is-enabled", "gpufleet-watch.timer").stdout.strip() == "enabled"
    config = json.loads(watchlab.exec_in(name, "cat", "/etc/gpufleet/watch.json").stdout)
    assert config["host"] == name and config["policy"]["watch"]["interval_seconds"] == INTERVAL
    unit = watchlab.exec_in(name, "systemctl", "cat", "gpufleet-watch.service").stdout
    for line in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/prometheus/node-exporter /var/lib/gpufleet",
    ):
        assert line in unit
    npd = json.loads(watchlab.exec_in(name, "cat", f"{NPD_DIR}/gpufleet-watch.json").stdout)
    assert npd["rules"][0]["path"] == "/usr/local/sbin/gpufleet-watch"
    assert npd["rules"][0]["args"][:2] == ["--mode", "npd"]


def test_the_timer_runs_the_hardened_checker_and_its_textfile_is_valid(host):
    name = host["name"]
    _wait_for(
        lambda: _journal(name).count("gpufleet-watch " + name + ":") >= 2,
        3 * INTERVAL + 10,
        "two timer runs in the journal",
    )
    result = watchlab.exec_in(name, "systemctl", "show", "gpufleet-watch.service", "-p", "Result").stdout.strip()
    assert result == "Result=success"
    text = watchlab.exec_in(name, "cat", TEXTFILE).stdout
    assert f'gpufleet_host_up{{host="{name}",status="ok"}} 1' in text
    assert f'gpufleet_watch_interval_seconds{{host="{name}"}} {INTERVAL}' in text
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_lost_gpu_is_logged_and_exported_within_two_intervals_then_clears(host):
    name = host["name"]
    rule = 'rule="GPU-HLT-002"'
    watchlab.set_gpu(name, {"gpu.5.lost": "1"})
    try:
        _textfile_shows(name, rule, 2 * INTERVAL + 5, "GPU-HLT-002 in the textfile")
        assert "GPU-HLT-002 started failing on GPU 5 [critical]" in _journal(name)
        npd = watchlab.exec_in(name, "/usr/local/sbin/gpufleet-watch", "--mode", "npd", check=False)
        assert npd.returncode == 1 and npd.stdout.strip().startswith("gpufleet: GPU-HLT-002 GPU 5"), npd.stdout
        assert len(npd.stdout.strip()) <= 80
    finally:
        watchlab.set_gpu(name, {"gpu.5.lost": None})
    _textfile_drops(name, rule, "GPU-HLT-002 gone from the textfile")
    assert "GPU-HLT-002 cleared (was failing on GPU 5)" in _journal(name)


def test_a_gpu_removed_after_install_fails_within_one_interval(host):
    """The run at install recorded 8 GPUs (watch-baseline.json); GPU 7 then disappears from the simulated host (NVML
    lists 7, as after a reset or a reboot that lost it): GPU-HLT-003 fails at critical against the baseline's count
    within one interval, with no health.expected_gpu_count in the policy. Before, it passed."""
    name = host["name"]
    base = json.loads(watchlab.exec_in(name, "cat", BASELINE).stdout)
    assert base["gpu_count"] == 8 and len(base["gpus"]) == 8, base
    rule = 'rule="GPU-HLT-003",severity="critical",area="health",status="fail"'
    watchlab.set_gpu(name, {"gpu_count": "7"})
    try:
        text = _textfile_shows(name, rule, INTERVAL + 10, "GPU-HLT-003 failing in the textfile")
        assert f'gpufleet_watch_baseline{{host="{name}",part="gpus"}} 8' in text
        assert f'gpufleet_watch_baseline_seen{{host="{name}",part="gpus"}} 7' in text
        journal = _journal(name)
        assert "GPU-HLT-003 started failing [critical]: 7 usable GPU(s), the policy expects 8" in journal
        assert f"baseline: GPU {base['gpus'][7]} missing (on the PCI bus and usable at install)" in journal
    finally:
        watchlab.set_gpu(name, {"gpu_count": "8"})
    _textfile_drops(name, rule, "GPU-HLT-003 gone from the textfile")
    assert "baseline: this host has again everything recorded at install" in _journal(name)


def test_the_checker_changes_nothing_but_its_outputs(host):
    name = host["name"]
    watchlab.exec_in(name, "systemctl", "stop", "gpufleet-watch.timer")
    try:
        before = (
            watchlab.digest_inside(name, *UNTOUCHED[:3]),
            watchlab.exec_in(name, "sha256sum", watchlab.STATE_PATH).stdout,
        )
        outputs = watchlab.exec_in(name, "sha256sum", TEXTFILE, STATE).stdout
        run = watchlab.exec_in(name, "/usr/local/sbin/gpufleet-watch", check=False)
        assert run.returncode == 0, run.stdout + run.stderr
        after = (
            watchlab.digest_inside(name, *UNTOUCHED[:3]),
            watchlab.exec_in(name, "sha256sum", watchlab.STATE_PATH).stdout,
        )
        assert before == after
        assert watchlab.exec_in(name, "sha256sum", TEXTFILE, STATE).stdout != outputs  # it did write its outputs
        # npd mode writes nothing at all
        outputs = watchlab.exec_in(name, "sha256sum", TEXTFILE, STATE).stdout
        npd = watchlab.exec_in(name, "/usr/local/sbin/gpufleet-watch", "--mode", "npd", check=False)
        assert npd.returncode in (0, 1), npd.stdout + npd.stderr
        assert watchlab.exec_in(name, "sha256sum", TEXTFILE, STATE).stdout == outputs
    finally:
        watchlab.exec_in(name, "systemctl", "start", "gpufleet-watch.timer")


def test_npd_mode_says_unknown_when_the_check_cannot_run(host):
    name = host["name"]
    run = watchlab.exec_in(
        name, "/usr/local/sbin/gpufleet-watch", "--mode", "npd", "--config", "/nonexistent.json", check=False
    )
    assert run.returncode == 2 and run.stdout.startswith("gpufleet: could not check the host"), run.stdout


def test_state_absent_removes_the_watch(host):
    name = host["name"]
    proc, stats = watchlab.apply_watch(host["tmp"], host["inventory"], extra_vars={"watch_state": "absent"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert stats[name]["changed"] > 0
    for path in (
        "/usr/local/sbin/gpufleet-watch",
        "/etc/gpufleet/watch.json",
        TEXTFILE,
        STATE,
        BASELINE,
        "/etc/systemd/system/gpufleet-watch.timer",
        f"{NPD_DIR}/gpufleet-watch.json",
    ):
        assert watchlab.exec_in(name, "test", "-e", path, check=False).returncode != 0, path
    active = watchlab.exec_in(name, "systemctl", "is-active", "gpufleet-watch.timer", check=False).stdout.strip()
    assert active != "active"
