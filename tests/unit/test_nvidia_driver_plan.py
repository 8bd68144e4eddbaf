"""Role nvidia_driver's decisions (module_utils/nvidia_driver.py): which blocker refuses a driver change, open or
proprietary kernel modules from the GPUs present, the Secure Boot verdict, who holds /dev/nvidia*."""

from __future__ import annotations

import os

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import nvidia_driver as nd
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

BUSY = nd.in_use([{"gpu": 0, "pid": 4242}], [])
OK_SB = (True, "Secure Boot is off")


# ------------------------------------------------------------------------------------------ plan_change


def test_busy_gpu_without_reboot_blocks_and_names_the_blockers():
    plan = nd.plan_change("535.183.01-1", "550.90.07-1", "535.183.01", BUSY, reboot_ok=False, secure_boot=OK_SB)
    assert plan["action"] == "blocked"
    assert plan["blockers"] == [
        "1 compute process(es) on the GPUs (NVML): pid 4242 on GPU 0",
        "no reboot allowed (nvidia_driver_reboot_ok is false)",
    ]
    assert "535.183.01 -> 550.90.07 refused" in plan["message"]
    assert "version mismatch" in plan["message"]


def test_busy_gpu_with_reboot_allowed_upgrades_then_reboots():
    plan = nd.plan_change("535.183.01-1", "550.90.07-1", "535.183.01", BUSY, reboot_ok=True, secure_boot=OK_SB)
    assert plan["action"] == "reboot" and plan["blockers"] == []


def test_idle_gpu_reloads_the_modules():
    plan = nd.plan_change("535.183.01-1", "550.90.07-1", "535.183.01", [], reboot_ok=False, secure_boot=OK_SB)
    assert plan["action"] == "reload"


def test_idle_gpu_with_reload_off_and_no_reboot_blocks():
    plan = nd.plan_change(
        "535.183.01-1", "550.90.07-1", "535.183.01", [], reboot_ok=False, reload_ok=False, secure_boot=OK_SB
    )
    assert plan["action"] == "blocked"
    assert plan["blockers"][0].startswith("module reload not allowed")


def test_no_module_loaded_installs():
    """A host without a loaded module cannot get a mismatch: the new module comes with the new libraries."""
    plan = nd.plan_change("", "550.90.07-1", "", BUSY, reboot_ok=False, secure_boot=OK_SB)
    assert plan["action"] == "install"


def test_packaging_revision_under_the_same_module_installs():
    plan = nd.plan_change("550.90.07-1", "550.90.07-2", "550.90.07", BUSY, reboot_ok=False, secure_boot=OK_SB)
    assert plan["action"] == "install"


def test_nothing_to_change():
    plan = nd.plan_change("550.90.07-1", "550.90.07-1", "550.90.07", BUSY, reboot_ok=False, secure_boot=OK_SB)
    assert plan == {"action": "none", "blockers": [], "message": "the driver needs no change"}


def test_unknown_target_with_change_is_judged_against_the_loaded_module():
    """dnf: the version is known only after installing; a change under a busy loaded module is refused."""
    plan = nd.plan_change("535.183.01", "", "535.183.01", BUSY, reboot_ok=False, secure_boot=OK_SB, change=True)
    assert plan["action"] == "blocked"


def test_secure_boot_blocks_before_the_busy_check():
    sb = nd.secure_boot_verdict(True, key_enrolled=False)
    plan = nd.plan_change("535.183.01-1", "550.90.07-1", "535.183.01", [], reboot_ok=True, secure_boot=sb)
    assert plan["action"] == "blocked"
    assert "enroll" in plan["blockers"][0]


def test_flavour_conflict_blocks_even_a_fresh_install():
    plan = nd.plan_change(
        "",
        "550.90.07-1",
        "",
        [],
        reboot_ok=True,
        secure_boot=OK_SB,
        flavour_conflict="the proprietary kernel modules do not drive blackwell GPUs",
    )
    assert plan["action"] == "blocked"


# ------------------------------------------------------------------------------------------ in_use


def test_driver_daemons_do_not_count_as_users():
    holders = [
        {"pid": 10, "comm": "nvidia-persiste", "path": "/dev/nvidia0"},
        {"pid": 11, "comm": "nv-fabricmanage", "path": "/dev/nvidiactl"},
    ]
    assert nd.in_use([], holders) == []


def test_holders_are_named():
    holders = [
        {"pid": 77, "comm": "python3", "path": "/dev/nvidia0"},
        {"pid": 77, "comm": "python3", "path": "/dev/nvidiactl"},
    ]
    assert nd.in_use(None, holders) == ["/dev/nvidia* held open by pid 77 (python3: /dev/nvidia0, /dev/nvidiactl)"]


def test_nvidia_drm_in_use_counts(tmp_path):
    """A display server holds nvidia_drm through /dev/dri, which the /dev/nvidia* scan does not see."""
    for name, refcnt in (("nvidia", "3"), ("nvidia_drm", "2"), ("nvidia_modeset", "1")):
        (tmp_path / "sys" / "module" / name).mkdir(parents=True)
        (tmp_path / "sys" / "module" / name / "refcnt").write_text(refcnt + "\n")
    fs = HostFS(str(tmp_path))
    assert nd.loaded_modules(fs) == ["nvidia_drm", "nvidia_modeset", "nvidia"]
    reasons = nd.module_users(nd.module_refcounts(fs))
    assert len(reasons) == 1 and reasons[0].startswith("nvidia_drm is in use (refcount 2")
    assert nd.module_users({"nvidia": 3, "nvidia_drm": 0}) == []


# ------------------------------------------------------------------------------------------ flavour


def _gpus(*archs):
    return [{"architecture": a} for a in archs]


@pytest.mark.parametrize(
    ("archs", "branch", "expected_open", "source"),
    [
        (("blackwell",), 570, True, "gpus"),
        (("grace_hopper",), 550, True, "gpus"),
        (("volta",), 570, False, "gpus"),
        (("pascal", "pascal"), 535, False, "gpus"),
        (("ampere",), 550, False, "branch_default"),
        (("hopper",), 560, True, "branch_default"),
        (("ada", "turing"), 570, True, "branch_default"),
        ((), 550, False, "branch_default"),
        (("unknown",), 580, True, "branch_default"),
    ],
)
def test_flavour_from_architectures(archs, branch, expected_open, source):
    chosen = nd.choose_flavour(_gpus(*archs), branch)
    assert (chosen["open"], chosen["source"], chosen["conflict"]) == (expected_open, source, None)


def test_unknown_architecture_says_it_kept_the_branch_default():
    chosen = nd.choose_flavour(_gpus("unknown"), 550)
    assert "could not be told" in chosen["reason"] and "branch 550's default" in chosen["reason"]


def test_mixed_volta_and_blackwell_is_a_conflict():
    chosen = nd.choose_flavour(_gpus("volta", "blackwell"), 570)
    assert chosen["conflict"] and "one driver cannot drive both" in chosen["conflict"]


def test_user_choice_wins_but_a_conflict_is_reported():
    chosen = nd.choose_flavour(_gpus("blackwell"), 570, requested=False)
    assert chosen["open"] is False and chosen["source"] == "user"
    assert "do not drive blackwell" in chosen["conflict"]
    assert nd.choose_flavour(_gpus("ampere"), 535, requested=True)["conflict"] is None
    assert "no open kernel modules" in nd.choose_flavour(_gpus("ampere"), 470, requested=True)["conflict"]


def test_installed_flavour_of_the_same_branch_is_kept():
    chosen = nd.choose_flavour(_gpus("hopper"), 570, installed_open=False, installed_branch=570)
    assert (chosen["open"], chosen["source"]) == (False, "installed")
    # Another branch: the branch's default.
    assert nd.choose_flavour(_gpus("hopper"), 570, installed_open=False, installed_branch=550)["open"] is True


@pytest.mark.parametrize(
    ("device", "arch"),
    [
        (0x1DB1, "volta"),  # V100-SXM2-16GB
        (0x1EB8, "turing"),  # T4
        (0x20B2, "ampere"),  # A100-SXM4-80GB
        (0x2236, "ampere"),  # A10
        (0x2330, "hopper"),  # H100 SXM5
        (0x2342, "grace_hopper"),  # GH200
        (0x26B9, "ada"),  # L40S
        (0x2901, "blackwell"),  # B200
        (0x15F8, "pascal"),  # P100
        (0x0001, None),
    ],
)
def test_pci_table(device, arch):
    assert nd.pci_architecture(device) == arch


def test_nvml_gpu_gets_grace_hopper_from_its_pci_id():
    gpu = nd.gpu_from_nvml({"index": 0, "architecture": "hopper", "pci_device_id": "0x234210DE"})
    assert gpu["architecture"] == "grace_hopper"


def test_pci_gpu_only_display_controllers():
    assert nd.gpu_from_pci("0000:18:00.0", "0x10de", "0x20b2", "0x030200")["architecture"] == "ampere"
    assert nd.gpu_from_pci("0000:05:00.0", "0x10de", "0x22a3", "0x068000") is None  # NVSwitch bridge
    assert nd.gpu_from_pci("0000:00:02.0", "0x8086", "0x20b2", "0x030000") is None


# ------------------------------------------------------------------------------------------ Secure Boot


def test_secure_boot_state_from_efivar_and_mokutil():
    assert nd.secure_boot_state(b"\x06\x00\x00\x00\x01") is True
    assert nd.secure_boot_state(b"\x06\x00\x00\x00\x00") is False
    assert nd.secure_boot_state(None, "SecureBoot enabled\n") is True
    assert nd.secure_boot_state(None, "SecureBoot disabled\n") is False
    assert nd.secure_boot_state(None, None) is None


@pytest.mark.parametrize(
    ("args", "ok", "words"),
    [
        ((False,), True, "off"),
        ((None,), True, "not in use"),
        ((True, True), True, "enrolled"),
        ((True, False), False, "not enrolled"),
        ((True, None), False, "cannot be told"),
        ((True, True, ""), False, "not signed"),
        ((True, False, "DKMS module signing key", "Subject: CN=DKMS module signing key"), True, "enrolled key"),
        ((True, False, "DKMS module signing key", "Subject: CN=Canonical"), False, "not among the enrolled"),
    ],
)
def test_secure_boot_verdict(args, ok, words):
    verdict, message = nd.secure_boot_verdict(*args)
    assert verdict is ok and words in message
    if not ok:
        assert "mokutil --import" in message


# ------------------------------------------------------------------------------------------ host readers


def test_device_holders_and_efivar_from_a_root(tmp_path):
    fd = tmp_path / "proc" / "321" / "fd"
    fd.mkdir(parents=True)
    (tmp_path / "proc" / "321" / "comm").write_text("python3\n")
    os.symlink("/dev/nvidia0", fd / "3")
    os.symlink("/dev/null", fd / "4")
    efi = tmp_path / nd.SECURE_BOOT_VAR.lstrip("/")
    efi.parent.mkdir(parents=True)
    efi.write_bytes(b"\x06\x00\x00\x00\x01")
    fs = HostFS(str(tmp_path))
    assert nd.device_holders(fs) == [{"pid": 321, "comm": "python3", "path": "/dev/nvidia0"}]
    assert nd.secure_boot_state(nd.read_efivar(fs)) is True


# ------------------------------------------------------------------------------------------ the NVLink fabric

SWITCHES = [{"address": "0000:%02x:00.0" % (5 + i), "device": "0x22a3", "class": "0x068000"} for i in range(4)]
HGX_535 = ["nvidia-driver-535", "nvidia-fabricmanager-535", "libnvidia-nscq-535", "nvidia-dkms-535"]


def test_nvswitches_on_the_bus_move_the_fabric_with_the_driver():
    """An HGX H100 whose fabric manager is not even installed: the NVSwitches alone decide (SW-FM-001)."""
    fabric = nd.fabric_decision(None, SWITCHES, ["nvidia-driver-535", "nvidia-dkms-535"])
    assert (fabric["managed"], fabric["source"], fabric["nvswitches"]) == (True, "nvswitch", 4)
    assert fabric["installed"] == [] and fabric["imex"] is False


def test_an_installed_fabric_manager_moves_with_the_driver_without_switches_seen():
    fabric = nd.fabric_decision(None, None, HGX_535 + ["nvidia-imex-535", "nvidia-utils-535"])
    assert (fabric["managed"], fabric["source"], fabric["nvswitches"]) == (True, "installed", None)
    assert fabric["installed"] == [
        "libnvidia-nscq-535",
        "nvidia-fabricmanager-535",
        "nvidia-imex-535",
    ]
    assert fabric["imex"] is True


def test_rhel_fabric_manager_counts_as_installed():
    assert nd.fabric_decision(None, [], ["nvidia-fabric-manager", "nvidia-driver"])["managed"] is True


def test_no_switch_and_no_fabric_package_leaves_the_fabric_alone():
    fabric = nd.fabric_decision(None, [], ["nvidia-driver-550", "nvidia-dkms-550", "nvidia-utils-550"])
    assert (fabric["managed"], fabric["source"]) == (False, "none")
    assert "no NVSwitch on the PCI bus and no fabric manager installed" == fabric["reason"]


@pytest.mark.parametrize("requested", [True, False])
def test_the_owners_choice_wins_over_the_host(requested):
    fabric = nd.fabric_decision(requested, SWITCHES if not requested else [], HGX_535)
    assert (fabric["managed"], fabric["source"]) == (requested, "user")


@pytest.mark.parametrize(
    "installed, candidate, loaded, reboot_ok, missing, refused",
    [
        (
            "535.183.01-1",
            "550.90.07-1",
            "535.183.01",
            True,
            "nvidia-fabricmanager-550 550.90.07",
            "driver 535.183.01 -> 550.90.07 refused (nothing removed, nothing installed)",
        ),
        (
            "550.90.07-1",
            "550.90.07-1",
            "550.90.07",
            False,
            "libnvidia-nscq-550 550.90.07",
            "fabric manager at driver 550.90.07 refused",
        ),
    ],
    ids=["driver-change", "no-driver-change"],
)
def test_fabric_missing_in_the_drivers_version_refuses(installed, candidate, loaded, reboot_ok, missing, refused):
    """The repository has driver 550.90.07 but no fabric manager (or NSCQ) of that version: nothing may change, even
    though the GPUs are idle and the modules could be reloaded; without a driver change as well."""
    plan = nd.plan_change(
        installed, candidate, loaded, [], reboot_ok=reboot_ok, secure_boot=OK_SB, fabric_missing=[missing]
    )
    assert plan["action"] == "blocked"
    assert plan["blockers"] == [
        f"no {missing} in the package sources: fabric manager, NSCQ and IMEX must match "
        "the driver's version exactly (NVIDIA Fabric Manager User Guide)"
    ]
    assert plan["message"].startswith(refused)


def test_fabric_present_plans_as_before():
    plan = nd.plan_change(
        "535.183.01-1", "550.90.07-1", "535.183.01", [], reboot_ok=False, secure_boot=OK_SB, fabric_missing=[]
    )
    assert plan["action"] == "reload"


def test_imex_is_one_of_the_drivers_daemons():
    """nvidia-imex holds the driver's device files like fabric manager; a reload stops and restarts it."""
    holders = [{"pid": 77, "comm": "nvidia-imex", "path": "/dev/nvidia-caps-imex-channels/channel0"}]
    assert nd.in_use([], holders) == []
