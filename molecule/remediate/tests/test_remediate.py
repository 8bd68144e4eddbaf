"""What playbooks/remediate.yml must leave on a GPU server, checked on the real state inside the container (testinfra).

`molecule test -s remediate` runs this file after check, converge, idempotence and the simulated reboot of
side_effect.yml (see molecule.yml). The tests run in file order; the last one rolls the remediation back with
playbooks/rollback.yml, so run `molecule converge` and `molecule side-effect` again before a second `molecule verify`.
Files in /var/tmp/gpufleet-lab/ (written by prepare, converge and side_effect):

    baseline.txt            gpufleet-lab-snapshot after prepare (files, NVML state, TCP sysctls)
    before-converge.txt     the same right before the first real converge: after the check step
    nvml.state.converged    the NVML state converge and idempotence left, before the simulated reboot
    converged.txt           gpufleet-lab-snapshot at the same moment
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import lab_changes  # noqa: E402

LAB = "/var/tmp/gpufleet-lab"
NVML_STATE = "/etc/gpufleet-sim/nvml.state"
ROLLBACK_DIR = "/var/lib/gpufleet/rollback"
UNIT = "gpufleet-gpu-runtime.service"
VENV_PYTHON = "/opt/gpufleet/venv/bin/python"
REPO = Path(__file__).resolve().parents[3]
GPUS = 8
HEADER = "# Managed by gpufleet (gpufleet.tuning). Local changes will be overwritten.\n"
# 4 x 180 ms x 1 Gbit/s (converge.yml: site ap, link to eu).
BUFFER = 4 * 180 * 1_000_000_000 // 8 // 1000
# Per network namespace: the values converge must set, and systemd-sysctl must set again after the reboot.
TCP = {
    "net.ipv4.tcp_congestion_control": "bbr",
    "net.ipv4.tcp_mtu_probing": "1",
    "net.ipv4.tcp_rmem": f"4096 131072 {BUFFER}",
    "net.ipv4.tcp_slow_start_after_idle": "0",
    "net.ipv4.tcp_wmem": f"4096 16384 {BUFFER}",
}
DROPINS = {
    "/etc/sysctl.d/60-gpufleet.conf": HEADER
    + "kernel.numa_balancing = 0\nvm.overcommit_memory = 0\nvm.swappiness = 10\n",
    "/etc/sysctl.d/61-gpufleet-network.conf": HEADER
    + f"net.core.rmem_max = {BUFFER}\n"
    + f"net.core.wmem_max = {BUFFER}\n"
    + "".join(f"{key} = {value}\n" for key, value in sorted(TCP.items())),
}
# converge.yml's own bookkeeping (not a remediation): changes only in the real run.
LAB_TASKS = frozenset({"Snapshot the container before the first real converge"})
SNAPSHOT_SYSCTL = re.compile(r"^sysctl (\S+) = (.*)$", re.M)


def _state(text: str) -> dict[int, dict[str, str]]:
    """Per GPU index, the keys of a fake NVML state file (tests/sim/nvml/README.md)."""
    gpus: dict[int, dict[str, str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        m = re.match(r"^gpu\.(\d+)\.(\w+)$", key.strip())
        if sep and m and not line.lstrip().startswith("#"):
            gpus.setdefault(int(m.group(1)), {})[m.group(2)] = value.strip()
    return gpus


def _lab_file(host, name: str) -> str:
    f = host.file(f"{LAB}/{name}")
    assert f.exists, f"{LAB}/{name} is missing: run the whole sequence (molecule test -s remediate)"
    return f.content_string


def _runtime_tcp(host) -> dict[str, str]:
    return {key: " ".join(host.file("/proc/sys/" + key.replace(".", "/")).content_string.split()) for key in TCP}


def _records(host) -> dict[str, dict]:
    names = host.check_output(f"find {ROLLBACK_DIR} -maxdepth 1 -name '*.json' -printf '%f\\n'").split()
    return {n[: -len(".json")]: json.loads(host.file(f"{ROLLBACK_DIR}/{n}").content_string) for n in names}


def _converge_record(host) -> dict:
    """The record of the run that changed the GPUs (idempotence's run writes a record of its own, without GPUs)."""
    with_gpus = [r for r in _records(host).values() if any(e["kind"] == "gpu" for e in r["entries"])]
    assert len(with_gpus) == 1, f"expected one rollback record with GPU entries, got {len(with_gpus)}"
    return with_gpus[0]


def test_check_step_changed_nothing(host):
    baseline = _lab_file(host, "baseline.txt")
    before = _lab_file(host, "before-converge.txt")
    if before != baseline:
        old, new = set(baseline.splitlines()), set(before.splitlines())
        diff = [f"- {line}" for line in sorted(old - new)] + [f"+ {line}" for line in sorted(new - old)]
        pytest.fail("the check step changed:\n" + "\n".join(diff))


def test_check_predicted_exactly_what_converge_changed():
    """The check step's changed tasks and diffs (--check, diff always on) are converge's, one for one."""
    ephemeral = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not ephemeral:
        pytest.skip("needs molecule's ephemeral directory (molecule verify)")
    problems = lab_changes.broken_promises(Path(ephemeral) / "changes.jsonl", ignore=LAB_TASKS)
    assert not problems, "\n".join(problems)


def test_converge_set_every_gpu(host):
    gpus = _state(_lab_file(host, "nvml.state.converged"))
    assert sorted(gpus) == list(range(GPUS))
    for index, gpu in gpus.items():
        got = {k: gpu[k] for k in ("persistence_mode", "power_limit_mw", "enforced_power_limit_mw", "ecc_pending")}
        want = {
            "persistence_mode": "1",
            "power_limit_mw": "400000",
            "enforced_power_limit_mw": "400000",
            "ecc_pending": "1",
        }
        assert got == want, f"GPU {index}"


@pytest.mark.parametrize("path", sorted(DROPINS))
def test_sysctl_dropin(host, path):
    f = host.file(path)
    assert f.is_file and f.user == "root" and f.mode == 0o644
    assert f.content_string == DROPINS[path]


def test_converge_set_tcp_sysctls_in_the_container(host):
    converged = dict(SNAPSHOT_SYSCTL.findall(_lab_file(host, "converged.txt")))
    assert converged == TCP


def test_host_wide_sysctls_stayed_out_of_reach(host):
    """vm.*/kernel.* are written to the drop-in only: the container cannot see them (molecule.yml masks them)."""
    assert not host.file("/proc/sys/vm/swappiness").exists
    assert not host.file("/proc/sys/kernel/numa_balancing").exists


def test_boot_unit_is_enabled(host):
    assert host.service(UNIT).is_enabled
    unit = host.file(f"/etc/systemd/system/{UNIT}").content_string
    assert f"ExecStart={VENV_PYTHON} /usr/local/libexec/gpufleet/gpufleet-gpu-apply" in unit


def test_boot_config_lists_every_gpu(host):
    uuids = {gpu["uuid"] for gpu in _state(host.file(NVML_STATE).content_string).values()}
    assert len(uuids) == GPUS
    config = json.loads(host.file("/etc/gpufleet/gpu-runtime.json").content_string)
    assert set(config["gpus"]) == uuids
    for uuid, wanted in config["gpus"].items():
        assert wanted["persistence_mode"] is True and float(wanted["power_limit_w"]) == 400.0, uuid


def test_rollback_record_has_prior_values(host):
    record = _converge_record(host)
    gpu = {(e["uuid"], e["setting"]): e["value"] for e in record["entries"] if e["kind"] == "gpu"}
    uuids = {u for u, _ in gpu}
    assert len(uuids) == GPUS
    for uuid in uuids:
        assert gpu[(uuid, "persistence_mode")] in (False, 0), uuid
        assert float(gpu[(uuid, "power_limit_w")]) == 250.0, uuid
        assert gpu[(uuid, "ecc_mode")] in (False, 0), uuid
    initial = dict(SNAPSHOT_SYSCTL.findall(_lab_file(host, "baseline.txt")))
    sysctls = {e["key"]: e["value"] for e in record["entries"] if e["kind"] == "sysctl"}
    for key in (
        "net.ipv4.tcp_mtu_probing",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_slow_start_after_idle",
        "net.ipv4.tcp_wmem",
    ):
        assert " ".join(str(sysctls[key]).split()) == initial[key], key
    files = {e["path"]: e["content"] for e in record["entries"] if e["kind"] == "file"}
    for path in [*DROPINS, "/etc/gpufleet/gpu-runtime.json", f"/etc/systemd/system/{UNIT}"]:
        assert path in files and files[path] is None, f"{path}: not recorded as absent before the run"


def test_settings_are_back_after_the_reboot(host):
    state = host.file(NVML_STATE).content_string
    assert "# gpufleet-lab: simulated reboot" in state, "side_effect did not reset the GPUs"
    for index, gpu in _state(state).items():
        assert (gpu["persistence_mode"], gpu["power_limit_mw"], gpu["enforced_power_limit_mw"]) == (
            "1",
            "400000",
            "400000",
        ), f"GPU {index}"
    show = host.check_output(f"systemctl show -p Result -p ExecMainStatus -p ActiveState {UNIT}")
    assert dict(line.split("=", 1) for line in show.splitlines()) == {
        "Result": "success",
        "ExecMainStatus": "0",
        "ActiveState": "active",
    }
    # side_effect reset them to the container's start values; systemd-sysctl applied the drop-in again.
    assert _runtime_tcp(host) == TCP


def test_rollback_restores_the_host(host):
    """Last: playbooks/rollback.yml for converge's run, then everything is as prepare left it."""
    if not os.environ.get("MOLECULE_INVENTORY_FILE"):
        pytest.skip("needs molecule's inventory (molecule verify)")
    run_id = _converge_record(host)["run_id"]
    playbook = Path(sys.executable).with_name("ansible-playbook")
    extra = {"gpufleet_rollback_run": run_id, "gpufleet_become": False, "ansible_python_interpreter": VENV_PYTHON}
    proc = subprocess.run(
        [
            str(playbook if playbook.exists() else shutil.which("ansible-playbook")),
            "-i",
            str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent),
            "--limit",
            host.backend.get_hostname(),
            "-e",
            json.dumps(extra),
            str(REPO / "playbooks" / "rollback.yml"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    for index, gpu in _state(host.file(NVML_STATE).content_string).items():
        got = tuple(gpu[k] for k in ("persistence_mode", "power_limit_mw", "enforced_power_limit_mw", "ecc_pending"))
        assert got == ("0", "250000", "250000", "0"), f"GPU {index}"
    for path in [*DROPINS, "/etc/gpufleet/gpu-runtime.json", f"/etc/systemd/system/{UNIT}"]:
        assert not host.file(path).exists, f"{path} is still there"
    initial = dict(SNAPSHOT_SYSCTL.findall(_lab_file(host, "baseline.txt")))
    assert _runtime_tcp(host) == {key: initial[key] for key in TCP}
