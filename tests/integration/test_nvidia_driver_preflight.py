"""Modules nvidia_driver_preflight and nvidia_driver_reload (check mode) through real Ansible, unmodified pynvml
and the simulated libnvidia-ml.so.1.

The host files it reads (/proc/<pid>/fd, /sys/bus/pci/devices, the Secure Boot EFI variable) come from a tree
under tmp_path (option `root`); NVML is the simulated library with a state file per case.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import labkit
import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SB_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _preflight(tmp_path: Path, sim_lib: Path, state: Path | None, **args) -> dict:
    return _module(tmp_path, sim_lib, state, "nvidia_driver_preflight", {"root": str(tmp_path / "root"), **args})


def _module(
    tmp_path: Path, sim_lib: Path, state: Path | None, name: str, args: dict, *options: str, ok: bool = True
) -> dict:
    env = {
        **os.environ,
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_NOCOLOR": "1",
        "LD_LIBRARY_PATH": str(sim_lib.parent),
        # No state file: NVML answers DriverNotLoaded, as on a host whose driver is not loaded.
        "FAKE_NVML_STATE": str(state or tmp_path / "absent.state"),
    }
    proc = labkit.on_localhost("ansible", *options, "-m", "gpufleet.tuning." + name, "-a", json.dumps(args), env=env)
    out = json.loads(proc.stdout)
    result = out["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert (proc.returncode == 0) is ok, result
    return result


def _state(tmp_path: Path, profiles, profile: str, driver: str, overrides=()) -> Path:
    path = tmp_path / f"{profile}.state"
    profiles.write_state(path, profiles.build_state(profile, gpus=2, driver=driver, overrides=overrides))
    return path


def _root(tmp_path: Path, secure_boot: bool | None = None, holder: tuple[int, str] | None = None, pci=()) -> Path:
    root = tmp_path / "root"
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    if secure_boot is not None:
        (root / SB_VAR).parent.mkdir(parents=True)
        (root / SB_VAR).write_bytes(b"\x06\x00\x00\x00" + (b"\x01" if secure_boot else b"\x00"))
    if holder:
        fd = root / "proc" / str(holder[0]) / "fd"
        fd.mkdir(parents=True)
        (fd.parent / "comm").write_text(holder[1] + "\n")
        os.symlink("/dev/nvidia0", fd / "3")
    for address, device, pci_class in pci:
        dev = root / "sys" / "bus" / "pci" / "devices" / address
        dev.mkdir()
        (dev / "vendor").write_text("0x10de\n")
        (dev / "device").write_text(device + "\n")
        (dev / "class").write_text(pci_class + "\n")
    return root


# The change the A100 host is asked about: driver 535 installed, branch 550's package as the target.
UPGRADE_535_TO_550 = {"branch": 550, "installed_version": "535.183.01-1", "target_version": "550.90.07-1"}


def test_busy_gpus_block_the_change(tmp_path, sim_lib, profiles):
    state = _state(tmp_path, profiles, "a100", "535", {"gpu.1.processes": "4242:1073741824"})
    _root(tmp_path, holder=(4242, "python3"))
    r = _preflight(tmp_path, sim_lib, state, **UPGRADE_535_TO_550)
    assert r["changed"] is False
    assert r["loaded"]["version"] == "535.183.01" and r["loaded"]["source"] == "pynvml"
    assert r["plan"]["action"] == "blocked"
    assert r["plan"]["blockers"] == [
        "1 compute process(es) on the GPUs (NVML): pid 4242 on GPU 1",
        "/dev/nvidia* held open by pid 4242 (python3: /dev/nvidia0)",
        "no reboot allowed (nvidia_driver_reboot_ok is false)",
    ]
    # A100s are Ampere: both flavours work; branch 550's default is proprietary.
    assert r["gpu_source"] == "nvml"
    assert (r["flavour"]["open"], r["flavour"]["source"]) == (False, "branch_default")


def test_idle_gpus_reload_and_hopper_gets_open_modules_on_570(tmp_path, sim_lib, profiles):
    state = _state(tmp_path, profiles, "h100", "550")
    _root(tmp_path)
    r = _preflight(tmp_path, sim_lib, state, branch=570, installed_version="550.90.07-1", target_version="570.86.15-1")
    assert r["plan"]["action"] == "reload"
    assert [g["architecture"] for g in r["gpus"]] == ["hopper", "hopper"]
    assert r["flavour"]["open"] is True


def test_secure_boot_without_an_enrolled_key_refuses_the_reboot(tmp_path, sim_lib, profiles):
    state = _state(tmp_path, profiles, "a100", "535", {"gpu.0.processes": "77:1073741824"})
    _root(tmp_path, secure_boot=True)
    r = _preflight(tmp_path, sim_lib, state, **UPGRADE_535_TO_550, reboot_ok=True)
    assert r["secure_boot"]["enabled"] is True and r["secure_boot"]["ok"] is False
    assert r["plan"]["action"] == "blocked"
    assert "mokutil --import" in r["plan"]["blockers"][0]


def test_without_a_driver_the_pci_ids_choose_the_flavour(tmp_path, sim_lib):
    """No module loaded (NVML: DriverNotLoaded): a B200 by its PCI id needs the open modules; nothing can
    mismatch, so a fresh install runs."""
    _root(
        tmp_path,
        secure_boot=False,
        pci=[("0000:18:00.0", "0x2901", "0x030200"), ("0000:05:00.0", "0x22a3", "0x068000")],
    )
    r = _preflight(tmp_path, sim_lib, None, branch=570, target_version="570.86.15-1")
    assert r["nvml"]["available"] is False
    assert r["gpu_source"] == "pci"
    assert [(g["id"], g["architecture"]) for g in r["gpus"]] == [("0000:18:00.0", "blackwell")]
    assert (r["flavour"]["open"], r["flavour"]["source"]) == (True, "gpus")
    assert r["loaded"]["version"] == ""
    assert r["plan"]["action"] == "install"


def test_proprietary_on_blackwell_is_refused(tmp_path, sim_lib):
    _root(tmp_path, pci=[("0000:18:00.0", "0x2901", "0x030200")])
    r = _preflight(tmp_path, sim_lib, None, branch=570, open=False, target_version="570.86.15-1")
    assert r["flavour"]["conflict"] == "the proprietary kernel modules do not drive blackwell GPUs (open only)"
    assert r["plan"]["action"] == "blocked"


HGX_SWITCHES = [("0000:%02x:00.0" % (5 + i), "0x22a3", "0x068000") for i in range(4)]


def test_nvswitches_on_the_pci_bus_move_the_fabric_with_the_driver(tmp_path, sim_lib, profiles):
    """An HGX H100 whose fabric manager package is not installed yet: its four NVSwitches (NVIDIA bridges of class
    0x0680) decide that fabric manager and NSCQ move with the driver (issue 25)."""
    state = _state(tmp_path, profiles, "h100", "535")
    _root(tmp_path, pci=HGX_SWITCHES)
    r = _preflight(tmp_path, sim_lib, state, **UPGRADE_535_TO_550, installed_packages=["nvidia-driver-535"])
    assert r["fabric"]["managed"] is True and r["fabric"]["source"] == "nvswitch"
    assert r["fabric"]["nvswitches"] == 4
    assert r["plan"]["action"] == "reload"


def test_no_nvswitch_and_no_fabric_package_leave_the_fabric_alone(tmp_path, sim_lib, profiles):
    state = _state(tmp_path, profiles, "a100", "535")
    _root(tmp_path, pci=[("0000:18:00.0", "0x20b2", "0x030200")])
    r = _preflight(tmp_path, sim_lib, state, branch=550, installed_packages=["nvidia-driver-535"])
    assert (r["fabric"]["managed"], r["fabric"]["source"], r["fabric"]["nvswitches"]) == (False, "none", 0)
    assert r["plan"] is None


def test_fabric_missing_in_the_drivers_version_refuses_the_change(tmp_path, sim_lib, profiles):
    """Idle GPUs (a reload would do), but the sources have no fabric manager 550.90.07: refused and named."""
    state = _state(tmp_path, profiles, "h100", "535")
    _root(tmp_path, pci=HGX_SWITCHES)
    r = _preflight(
        tmp_path,
        sim_lib,
        state,
        **UPGRADE_535_TO_550,
        installed_packages=["nvidia-driver-535", "nvidia-fabricmanager-535", "libnvidia-nscq-535"],
        fabric_missing=["nvidia-fabricmanager-550 550.90.07"],
    )
    assert r["fabric"]["installed"] == ["libnvidia-nscq-535", "nvidia-fabricmanager-535"]
    assert r["plan"]["action"] == "blocked"
    assert r["plan"]["blockers"][0].startswith("no nvidia-fabricmanager-550 550.90.07 in the package sources")


def test_bad_branch_is_a_clear_error(tmp_path, sim_lib):
    _root(tmp_path)
    r = _module(
        tmp_path,
        sim_lib,
        None,
        "nvidia_driver_preflight",
        {"root": str(tmp_path / "root"), "branch": "fivefifty"},
        ok=False,
    )
    assert r["failed"] is True and "branch" in r["msg"]
    assert "Traceback" not in json.dumps(r)


def test_reload_check_mode_predicts_the_new_module(tmp_path, sim_lib, profiles):
    """Check mode reports the reload (and its diff) without touching anything; the loaded version is NVML's."""
    state = _state(tmp_path, profiles, "a100", "535")
    before = state.read_bytes()
    r = _module(tmp_path, sim_lib, state, "nvidia_driver_reload", {"version": "550.90.07-1"}, "--check", "--diff")
    assert r["changed"] is True
    assert (r["before"], r["after"], r["modules"]) == ("535.183.01", "550.90.07", ["nvidia"])
    assert r["diff"] == {"before": "nvidia module 535.183.01\n", "after": "nvidia module 550.90.07\n"}
    assert state.read_bytes() == before


def test_reload_of_the_loaded_version_changes_nothing(tmp_path, sim_lib, profiles):
    state = _state(tmp_path, profiles, "a100", "535")
    r = _module(tmp_path, sim_lib, state, "nvidia_driver_reload", {"version": "535.183.01-1"})
    assert r["changed"] is False and r["after"] == "535.183.01"


def test_reload_bad_version_is_a_clear_error(tmp_path, sim_lib, profiles):
    state = _state(tmp_path, profiles, "a100", "535")
    r = _module(tmp_path, sim_lib, state, "nvidia_driver_reload", {"version": "latest"}, "--check", ok=False)
    assert r["msg"] == "version: a driver version such as 550.90.07 (got 'latest')"
