"""What role gpufleet.tuning.nvidia_driver must leave on hosts that ran branch 535 (molecule verify, podman://).

The lab repository (files/build-repo.sh) offers branch 550 in two versions, a "transitional" 560 version of
nvidia-driver-550 that only the pin keeps out, and a fabric manager newer than any driver that SW-FM-001 must
not take. The policy asks for branch 550; no reboot is allowed. nvidia-driver-busy runs a GPU job (an NVML compute
process holding /dev/nvidia0): nothing of the driver may change. nvidia-driver-idle does not: it is upgraded and
its module reloaded. Converge wrote the role's facts to the controller (MOLECULE_EPHEMERAL_DIRECTORY/nvidia_driver/).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
import lab_changes  # noqa: E402

DRIVER = "550.90.07-1"
NEW = ["nvidia-driver-550", "nvidia-dkms-550", "nvidia-fabricmanager-550", "libnvidia-nscq-550"]
OLD = ["nvidia-driver-535", "nvidia-dkms-535", "nvidia-fabricmanager-535", "libnvidia-nscq-535"]
PIN_FILE = "/etc/apt/preferences.d/gpufleet-nvidia.pref"
BLACKLIST = "/etc/modprobe.d/gpufleet-blacklist-nouveau.conf"
MARKER = "/run/gpufleet/nvidia_driver.reboot-required"
BUSY = "nvidia-driver-busy"
IDLE = "nvidia-driver-idle"
NVML_STATE = "/etc/gpufleet-sim/nvml.state"


def _name(host) -> str:
    return host.backend.get_hostname()


@pytest.fixture
def idle(host):
    """Tests of the upgraded host."""
    if _name(host) != IDLE:
        pytest.skip(f"{_name(host)} is not upgraded: see the busy host's tests")
    return host


@pytest.fixture
def busy(host):
    """Tests of the host whose GPUs are in use."""
    if _name(host) != BUSY:
        pytest.skip(f"{_name(host)} runs no GPU job")
    return host


def _nvml_driver(host) -> str:
    """The simulated NVML's driver version: the loaded kernel module's (files/modprobe)."""
    lines = host.file(NVML_STATE).content_string.splitlines()
    return next(line.split("=", 1)[1].strip() for line in lines if line.startswith("driver_version="))


@pytest.fixture(scope="module")
def reported(host) -> dict:
    eph = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not eph:
        pytest.skip("no MOLECULE_EPHEMERAL_DIRECTORY: the role's facts are written there by converge")
    path = Path(eph) / "nvidia_driver" / f"{host.backend.get_hostname()}.json"
    assert path.is_file(), f"{path}: converge did not report the role's facts"
    return json.loads(path.read_text())


def _status(host, name: str) -> tuple[str, str]:
    """(status, version) of a package from dpkg; ("", "") when dpkg does not know it."""
    out = host.run("dpkg-query -W -f='${Status}|${Version}' %s", name)
    if out.rc != 0:
        return "", ""
    status, _, version = out.stdout.partition("|")
    return status, version


@pytest.mark.parametrize("name", NEW)
def test_branch_550_installed_at_the_drivers_version(idle, name):
    status, version = _status(idle, name)
    assert status.endswith("ok installed"), f"{name}: {status or 'not installed'}"
    # Not 560.35.03 (the pin), not 550.54.15 (upgrade within the branch), not 550.127.05 (SW-FM-001).
    assert version == DRIVER
    assert idle.file(f"/usr/share/doc/{name}/VERSION").content_string.strip() == DRIVER


@pytest.mark.parametrize("name", OLD)
def test_branch_535_removed(idle, name):
    status, _ = _status(idle, name)
    assert not status.endswith("ok installed"), f"{name} is still installed"
    assert not idle.file(f"/usr/share/doc/{name}/VERSION").exists


def test_packages_held(idle):
    selections = dict(line.split() for line in idle.check_output("dpkg --get-selections").splitlines())
    assert {name: selections.get(name) for name in NEW} == dict.fromkeys(NEW, "hold")
    assert not [name for name in OLD if selections.get(name) == "hold"]


def test_pin_file(idle):
    pin = idle.file(PIN_FILE)
    assert pin.is_file and pin.user == "root" and pin.mode == 0o644
    # Records in order (apt uses the first that matches a version): the fabric manager at the driver's version,
    # then the branch.
    records = [
        dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith("#"))
        for block in pin.content_string.split("\n\n")
        if "Pin:" in block
    ]
    assert [(r["Package"], r["Pin"], r["Pin-Priority"]) for r in records] == [
        ("nvidia-fabricmanager-550 libnvidia-nscq-550", "version 550.90.07-*", "1001"),
        ("nvidia-* libnvidia-* cuda-drivers cuda-drivers-*", "version 550.*", "1000"),
    ]


def _policy(host, name: str) -> tuple[str, dict[str, str]]:
    """(candidate, {version: priority}) from `apt-cache policy` (which ignores holds: the pin alone)."""
    out = host.check_output("apt-cache policy %s", name)
    candidate = next(line.split()[-1] for line in out.splitlines() if line.strip().startswith("Candidate:"))
    rows = [line.replace("***", "").split() for line in out.splitlines()]
    return candidate, {r[0]: r[1] for r in rows if len(r) == 2 and r[0][:1].isdigit() and r[1].isdigit()}


def test_pin_keeps_the_driver_on_the_branch(idle):
    """The 560 version of nvidia-driver-550 is newer, but the pin ranks every 550.* above it."""
    candidate, priorities = _policy(idle, "nvidia-driver-550")
    assert candidate == DRIVER
    assert priorities == {"560.35.03-0gpufleet1": "500", DRIVER: "1000", "550.54.15-1": "1000"}


def test_pin_keeps_the_fabric_manager_at_the_drivers_version(idle):
    """A newer fabric manager (550.127.05) than the driver must not become the candidate."""
    candidate, priorities = _policy(idle, "nvidia-fabricmanager-550")
    assert candidate == DRIVER
    assert priorities == {"550.127.05-1": "1000", DRIVER: "1001", "550.54.15-1": "1000"}


def test_upgrade_moves_nothing(host):
    """What unattended-upgrades would do: nothing of the driver."""
    sim = host.check_output("apt-get -s dist-upgrade")
    assert not [line for line in sim.splitlines() if line.startswith(("Inst ", "Remv ")) and "nvidia" in line], sim


def test_nouveau_blacklisted(host):
    blacklist = host.file(BLACKLIST)
    assert blacklist.is_file and blacklist.mode == 0o644
    lines = {line.strip() for line in blacklist.content_string.splitlines()}
    assert {"blacklist nouveau", "options nouveau modeset=0"} <= lines


def test_reboot_required_reported(host, reported):
    assert reported["nvidia_driver_reboot_required"] is True
    reasons = reported["nvidia_driver_reboot_reasons"]
    assert any(r.startswith("SW-KMOD-001: nouveau blacklist added") for r in reasons), reasons
    # The idle host's new module was loaded by the reload: its package change needs no reboot; the busy host's
    # packages did not change.
    assert not [r for r in reasons if r.startswith("SW-DRV-001")], reasons
    # Remembered until the reboot (which clears /run), so later runs still report it.
    assert set(host.file(MARKER).content_string.splitlines()) == set(reasons)


def test_kernel_findings_reported(idle, reported):
    """A container has no headers or DKMS for the machine's kernel: reported (kernel_check: warn), not hidden."""
    findings = " ".join(reported["nvidia_driver_kernel_findings"])
    assert "no kernel headers for the running kernel" in findings
    assert "DKMS has not built nvidia 550.90.07" in findings


def test_idle_host_upgraded_and_its_module_reloaded(idle, reported):
    """Nothing used the GPUs: the change ran and was finished by reloading the modules (no mismatch left)."""
    assert reported["nvidia_driver_installed_version"] == DRIVER
    assert reported["nvidia_driver_blocked"] is False and reported["nvidia_driver_blocked_reasons"] == []
    assert reported["nvidia_driver_blocked_message"] == ""
    # The lab's modprobe loaded the installed package's "module": NVML now reports 550.90.07.
    assert _nvml_driver(idle) == "550.90.07"


def test_role_variable_over_the_policy_is_reported(host, reported):
    overrides = reported["nvidia_driver_policy_overrides"]
    if _name(host) == IDLE:
        assert overrides == [
            {
                "variable": "nvidia_driver_branch",
                "value": "550",
                "policy_key": "software.driver_branch",
                "policy_value": 550,
            }
        ]
    else:
        assert overrides == []


def test_busy_host_keeps_its_driver(busy):
    """A GPU job runs and no reboot is allowed: no driver package, pin or hold changes."""
    for name in OLD:
        status, version = _status(busy, name)
        assert status == "hold ok installed", f"{name}: {status}"
        assert version == "535.183.01-1"
    for name in NEW:
        assert not _status(busy, name)[0].endswith("ok installed"), f"{name} was installed under the loaded 535"
    assert not busy.file(PIN_FILE).exists
    # The loaded module is still 535 and the job still runs.
    assert _nvml_driver(busy) == "535.183.01"
    assert busy.service("gpufleet-lab-gpu-job").is_running


def test_busy_host_says_why(busy, reported):
    assert reported["nvidia_driver_blocked"] is True
    pid = busy.check_output("systemctl show -p MainPID --value gpufleet-lab-gpu-job.service")
    reasons = reported["nvidia_driver_blocked_reasons"]
    assert reasons == [
        f"1 compute process(es) on the GPUs (NVML): pid {pid} on GPU 0",
        f"/dev/nvidia* held open by pid {pid} (sleep: /dev/nvidia0)",
        "no reboot allowed (nvidia_driver_reboot_ok is false)",
    ]
    message = reported["nvidia_driver_blocked_message"]
    assert "535.183.01 -> 550.90.07 refused" in message and "version mismatch" in message


def test_services_enabled_not_started(host):
    """Enabled for the next boot; not started while the new driver waits for that reboot."""
    for unit in ("nvidia-persistenced", "nvidia-fabricmanager"):
        service = host.service(unit)
        assert service.is_enabled, unit
        assert not service.is_running, unit


def test_check_predicted_exactly_what_converge_changed():
    """The check step's changed tasks and diffs (--check, diff always on) are converge's, one for one."""
    ephemeral = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not ephemeral:
        pytest.skip("needs molecule's ephemeral directory (molecule verify)")
    # converge.yml's own bookkeeping: the report for verify is written only in the real run.
    ignore = frozenset({"Create the report directory", "Write the role's facts"})
    problems = lab_changes.broken_promises(Path(ephemeral) / "changes.jsonl", ignore=ignore)
    assert not problems, "\n".join(problems)
