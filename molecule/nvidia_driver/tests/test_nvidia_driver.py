"""What role gpufleet.tuning.nvidia_driver must leave on hosts that ran branch 535 (molecule verify, podman://).

The lab repository (files/build-repo.sh) offers branch 550 in two versions, a "transitional" 560 version of
nvidia-driver-550 that only the pin keeps out, and a fabric manager newer than any driver that SW-FM-001 must
not take. The policy asks for branch 550; no reboot is allowed. nvidia-driver-busy runs a GPU job (an NVML compute
process holding /dev/nvidia0): nothing of the driver may change. nvidia-driver-hgx (an HGX H100: NVSwitches on its
PCI bus, fabric manager 535 running) runs none: it is hgx with its fabric manager in one transaction, its
module reloaded and fabric manager runs again at the driver's version; nvidia-driver-hgx-nofm's repository has no
fabric manager 550: its change is refused and nothing is removed (issue 25). Converge wrote the role's facts, and
the HGX hosts' audit of the fabric, to the controller (MOLECULE_EPHEMERAL_DIRECTORY/nvidia_driver/).
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
HGX = "nvidia-driver-hgx"
HGX_NOFM = "nvidia-driver-hgx-nofm"
NVML_STATE = "/etc/gpufleet-sim/nvml.state"


def _name(host) -> str:
    return host.backend.get_hostname()


def _only(host, names: tuple[str, ...], otherwise: str):
    """``host`` for the tests of the hosts ``names``; any other host skips them ("<its name> <otherwise>")."""
    if _name(host) not in names:
        pytest.skip(f"{_name(host)} {otherwise}")
    return host


@pytest.fixture
def refused(host):
    """Tests of the hosts whose change was refused (a GPU job; no fabric manager 550 in the repository)."""
    return _only(host, (BUSY, HGX_NOFM), "was hgx")


@pytest.fixture
def hgx(host):
    """Tests of the host nothing uses: hgx with its fabric manager, its modules reloaded."""
    return _only(host, (HGX,), "is not hgx: see the refused hosts' tests")


@pytest.fixture
def hgx_nofm(host):
    return _only(host, (HGX_NOFM,), "has the full repository")


@pytest.fixture
def busy(host):
    """Tests of the host whose GPUs are in use."""
    return _only(host, (BUSY,), "runs no GPU job")


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
def test_branch_550_installed_at_the_drivers_version(hgx, name):
    status, version = _status(hgx, name)
    assert status.endswith("ok installed"), f"{name}: {status or 'not installed'}"
    # Not 560.35.03 (the pin), not 550.54.15 (upgrade within the branch), not 550.127.05 (SW-FM-001).
    assert version == DRIVER
    assert hgx.file(f"/usr/share/doc/{name}/VERSION").content_string.strip() == DRIVER


@pytest.mark.parametrize("name", OLD)
def test_branch_535_removed(hgx, name):
    status, _ = _status(hgx, name)
    assert not status.endswith("ok installed"), f"{name} is still installed"
    assert not hgx.file(f"/usr/share/doc/{name}/VERSION").exists


def test_packages_held(hgx):
    selections = dict(line.split() for line in hgx.check_output("dpkg --get-selections").splitlines())
    assert {name: selections.get(name) for name in NEW} == dict.fromkeys(NEW, "hold")
    assert not [name for name in OLD if selections.get(name) == "hold"]


def test_pin_file(hgx):
    pin = hgx.file(PIN_FILE)
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


def test_pin_keeps_the_driver_on_the_branch(hgx):
    """The 560 version of nvidia-driver-550 is newer, but the pin ranks every 550.* above it."""
    candidate, priorities = _policy(hgx, "nvidia-driver-550")
    assert candidate == DRIVER
    assert priorities == {"560.35.03-0gpufleet1": "500", DRIVER: "1000", "550.54.15-1": "1000"}


def test_pin_keeps_the_fabric_manager_at_the_drivers_version(hgx):
    """A newer fabric manager (550.127.05) than the driver must not become the candidate."""
    candidate, priorities = _policy(hgx, "nvidia-fabricmanager-550")
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
    # The HGX host's new module was loaded by the reload: its package change needs no reboot; the busy host's
    # packages did not change.
    assert not [r for r in reasons if r.startswith("SW-DRV-001")], reasons
    # Remembered until the reboot (which clears /run), so later runs still report it.
    assert set(host.file(MARKER).content_string.splitlines()) == set(reasons)


def test_kernel_findings_reported(hgx, reported):
    """A container has no headers or DKMS for the machine's kernel: reported (kernel_check: warn), not hidden."""
    findings = " ".join(reported["nvidia_driver_kernel_findings"])
    assert "no kernel headers for the running kernel" in findings
    assert "DKMS has not built nvidia 550.90.07" in findings


def test_idle_host_upgraded_and_its_module_reloaded(hgx, reported):
    """Nothing used the GPUs: the change ran and was finished by reloading the modules (no mismatch left)."""
    assert reported["nvidia_driver_installed_version"] == DRIVER
    assert reported["nvidia_driver_blocked"] is False and reported["nvidia_driver_blocked_reasons"] == []
    assert reported["nvidia_driver_blocked_message"] == ""
    # The lab's modprobe loaded the installed package's "module": NVML now reports 550.90.07.
    assert _nvml_driver(hgx) == "550.90.07"


def test_role_variable_over_the_policy_is_reported(host, reported):
    overrides = reported["nvidia_driver_policy_overrides"]
    if _name(host) == HGX:
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
    """A GPU job runs and no reboot is allowed: no driver package, pin or hold changes (its packages and pin:
    test_refused_hosts_keep_every_package)."""
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


def test_services_enabled(host):
    """Enabled for the next boot. nvidia-persistenced waits for the reboot (nouveau's blacklist); fabric manager runs
    wherever the driver's own module is loaded under it: restarted after the reload on the hgx hosts, left
    running on the refused HGX host, never started under the busy host's old module by the role."""
    persistenced = host.service("nvidia-persistenced")
    assert persistenced.is_enabled and not persistenced.is_running
    fabricmanager = host.service("nvidia-fabricmanager")
    assert fabricmanager.is_enabled
    assert fabricmanager.is_running is (_name(host) != BUSY)


def test_hgx_fabric_manager_runs_at_the_drivers_version(hgx):
    """The NVSwitches decided it (nvidia_driver_fabricmanager unset): fabric manager 550.90.07 runs under the
    reloaded 550.90.07 module - the dummy aborts under any other version, as NVIDIA's does."""
    assert _nvml_driver(hgx) == "550.90.07"
    assert hgx.check_output("nv-fabricmanager --version") == "Fabric Manager version is : 550.90.07"
    assert hgx.service("nvidia-fabricmanager").is_running
    assert hgx.check_output("cat /proc/$(systemctl show -p MainPID --value nvidia-fabricmanager)/comm") == (
        "nv-fabricmanage"
    )


def test_hgx_audit_passes_the_fabric(hgx, reported):
    """The audit after the change: SW-FM-001 (4 NVSwitches, fabric manager at the driver's version, running) and
    GPU-FAB-001 (every GPU registered in the fabric) pass."""
    assert reported["gpufleet_lab_fabric_status"] == {"SW-FM-001": "pass", "GPU-FAB-001": "pass"}, reported[
        "gpufleet_lab_fabric_message"
    ]
    assert "550.90.07" in reported["gpufleet_lab_fabric_message"]["SW-FM-001"]


def test_hgx_without_fabric_manager_550_is_refused_and_named(hgx_nofm, reported):
    """The repository has driver 550.90.07 but no nvidia-fabricmanager-550: nothing removed, nothing installed,
    fabric manager 535 still runs under the 535 module, and the audit still passes the fabric."""
    assert reported["nvidia_driver_blocked"] is True
    assert reported["nvidia_driver_blocked_reasons"] == [
        "no nvidia-fabricmanager-550 550.90.07 in the package sources: fabric manager, NSCQ and IMEX must match "
        "the driver's version exactly (NVIDIA Fabric Manager User Guide)"
    ]
    assert reported["nvidia_driver_blocked_message"].startswith(
        "driver 535.183.01 -> 550.90.07 refused (nothing removed, nothing installed)"
    )
    assert _nvml_driver(hgx_nofm) == "535.183.01"
    assert hgx_nofm.check_output("nv-fabricmanager --version") == "Fabric Manager version is : 535.183.01"
    assert hgx_nofm.service("nvidia-fabricmanager").is_running
    assert reported["gpufleet_lab_fabric_status"] == {"SW-FM-001": "pass", "GPU-FAB-001": "pass"}


def test_refused_hosts_keep_every_package(refused):
    """Blocked: no driver or fabric package removed, installed or released, no pin written."""
    for name in OLD:
        status, version = _status(refused, name)
        assert status == "hold ok installed", f"{name}: {status}"
        assert version == "535.183.01-1"
    for name in NEW:
        assert not _status(refused, name)[0].endswith("ok installed"), f"{name} was installed under the loaded 535"
    assert not refused.file(PIN_FILE).exists


def test_check_predicted_exactly_what_converge_changed():
    """The check step's changed tasks and diffs (--check, diff always on) are converge's, one for one."""
    ephemeral = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
    if not ephemeral:
        pytest.skip("needs molecule's ephemeral directory (molecule verify)")
    # converge.yml's own bookkeeping: the report for verify is written only in the real run.
    ignore = frozenset({"Create the report directory", "Write the role's facts"})
    problems = lab_changes.broken_promises(Path(ephemeral) / "changes.jsonl", ignore=ignore)
    assert not problems, "\n".join(problems)
