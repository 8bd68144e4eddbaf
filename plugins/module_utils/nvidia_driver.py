# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Role nvidia_driver's decisions, as pure functions of what a host shows, and the two modules' work around them
(``preflight`` gathers and plans for nvidia_driver_preflight; ``DriverReload`` plans, diffs and applies for
nvidia_driver_reload):

- which kernel module flavour (open or proprietary) the GPUs present need (``choose_flavour``);
- whether the GPUs are in use (NVML compute processes, processes holding ``/dev/nvidia*``) (``in_use``);
- whether a new module would load under Secure Boot (``secure_boot_verdict``);
- whether a driver change may run now, and how it is finished (``plan_change``): a new user-space driver under an
  old loaded kernel module makes every new CUDA/NVML process fail ("Driver/library version mismatch",
  NVML_ERROR_LIB_RM_VERSION_MISMATCH) until the module is reloaded or the host reboots;
- whether the host's NVLink fabric software (fabric manager, NSCQ, IMEX) moves with the driver
  (``fabric_decision``), and the refusal when the package sources lack it in the driver's exact version.

Sources: NVIDIA Driver Installation Guide, "Kernel Modules" (docs.nvidia.com/datacenter/tesla/
driver-installation-guide/): the open GPU kernel modules are the default from the 560 branch; Blackwell and Grace
Hopper need them; Turing, Ampere, Ada and Hopper support both; Maxwell, Pascal and Volta (and older) need the
proprietary flavour. Open modules exist from the 515 branch. Same guide, "Secure Boot": the module must be signed
with a key the firmware (or shim's MOK list) trusts, otherwise it does not load.
NVIDIA Fabric Manager User Guide (docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/): fabric manager
runs on NVSwitch systems (HGX/DGX A100, H100 and later); at start it checks the loaded driver stack's version and
aborts when it is not compatible, so its package (nvidia-fabricmanager-<branch> on Debian/Ubuntu,
nvidia-fabric-manager on RHEL) and libnvidia-nscq-<branch> are installed at exactly the driver's version. The
NVIDIA IMEX guide (docs.nvidia.com/multi-node-nvlink-systems/imex-guide/): nvidia-imex-<branch> follows the driver's
version the same way.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

OPEN_DEFAULT_FROM = 560
OPEN_FIRST_BRANCH = 515

# Architectures (decoders.ARCHITECTURES names, plus grace_hopper) and the flavour they need.
NEEDS_PROPRIETARY = frozenset(("kepler", "maxwell", "pascal", "volta"))
NEEDS_OPEN = frozenset(("blackwell", "rubin", "grace_hopper"))

# NVIDIA PCI device ids (vendor 0x10de) by range, from the PCI ID repository's chip families (GK, GM, GP, GV, TU,
# GA, GH, AD, GB). Approximate by design: it only has to tell the flavour, so a range is given to the family whose
# flavour rule it shares; an id outside every range is "unknown" and the branch's default is kept. Grace Hopper
# (GH200: 0x2342, 0x2348) is listed before the Hopper range it sits in.
# The first range that holds an id wins (narrow ones come first).
PCI_RANGES = (
    (0x2342, 0x2342, "grace_hopper"),
    (0x2348, 0x2348, "grace_hopper"),
    (0x15F0, 0x15FF, "pascal"),
    (0x0FC0, 0x12FF, "kepler"),
    (0x1340, 0x17FF, "maxwell"),
    (0x1B00, 0x1D7F, "pascal"),
    (0x1D80, 0x1DFF, "volta"),
    (0x1E00, 0x1FFF, "turing"),
    (0x2180, 0x21FF, "turing"),
    (0x2080, 0x20FF, "ampere"),
    (0x2200, 0x22FF, "ampere"),
    (0x2300, 0x23FF, "hopper"),
    (0x2400, 0x25FF, "ampere"),
    (0x2600, 0x28FF, "ada"),
    # GB100 and later (Blackwell data centre and consumer parts, and whatever follows): open modules only.
    (0x2900, 0x3FFF, "blackwell"),
)

SECURE_BOOT_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-" + SECURE_BOOT_GUID

# Device files of the driver (nvidia0..N, nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset, nvidia-caps/*).
DEVICE_RE = re.compile(r"^/dev/nvidia")
# Processes of the driver itself, which hold the device files and are stopped and started again around a reload.
DRIVER_DAEMONS = frozenset(
    ("nvidia-persiste", "nvidia-persistenced", "nv-fabricmanage", "nv-fabricmanager", "nvidia-imex")
)
# Kernel modules of the driver, in the order they are unloaded (dependants first).
MODULES = ("nvidia_peermem", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia")


def upstream(version):
    """'550.90.07' of '550.90.07-1', '1:550.90.07-0ubuntu1', '550.90.07'; '' for None or ''."""
    if not version:
        return ""
    version = re.sub(r"^[0-9]+:", "", str(version))
    return re.sub(r"-[^-]*$", "", version)


def branch_of(version):
    """550 of '550.90.07(-1)'; None when it does not start with a number."""
    m = re.match(r"^(?:[0-9]+:)?([0-9]+)", str(version or ""))
    return int(m.group(1)) if m else None


def pci_architecture(device_id):
    """Architecture of an NVIDIA PCI device id (int or '0x20b2'), or None when the table does not know it."""
    if isinstance(device_id, str):
        try:
            device_id = int(device_id, 16)
        except ValueError:
            return None
    if device_id is None:
        return None
    for low, high, arch in PCI_RANGES:
        if low <= device_id <= high:
            return arch
    return None


def nvml_device_id(pci_device_id):
    """The PCI device id of NVML's combined id ('0x233010DE' -> 0x2330); None when not given."""
    if not pci_device_id:
        return None
    try:
        return int(str(pci_device_id), 16) >> 16
    except ValueError:
        return None


def gpu_from_nvml(gpu):
    """{'source', 'id', 'name', 'pci_device_id', 'architecture'} of one gpu_info GPU. NVML's architecture is kept
    except where the PCI id says Grace Hopper (NVML calls it Hopper; it needs the open modules)."""
    device = nvml_device_id(gpu.get("pci_device_id"))
    arch = gpu.get("architecture")
    if pci_architecture(device) == "grace_hopper":
        arch = "grace_hopper"
    if not arch or str(arch).startswith("unknown"):
        arch = pci_architecture(device)
    return {
        "source": "nvml",
        "id": gpu.get("pci_bus_id") or str(gpu.get("index")),
        "name": gpu.get("name"),
        "pci_device_id": None if device is None else "0x%04x" % device,
        "architecture": arch,
    }


def gpu_from_pci(address, vendor, device, pci_class):
    """The same from sysfs (vendor, device, class as the kernel shows them: '0x10de', '0x20b2', '0x030200');
    None for a device that is not an NVIDIA display controller (NVSwitch bridges, HDMI audio, USB-C)."""
    try:
        if int(vendor, 16) != 0x10DE or (int(pci_class, 16) >> 16) != 0x03:
            return None
        dev = int(device, 16)
    except (TypeError, ValueError):
        return None
    return {
        "source": "pci",
        "id": address,
        "name": None,
        "pci_device_id": "0x%04x" % dev,
        "architecture": pci_architecture(dev),
    }


def choose_flavour(gpus, branch, requested=None, installed_open=None, installed_branch=None):
    """Open or proprietary kernel modules for these GPUs on ``branch``.

    ``requested``: the user's choice (True open, False proprietary, None auto). ``installed_open``/
    ``installed_branch``: the flavour and branch installed now (auto keeps a flavour that works on the same branch:
    no package swap for nothing). Returns {'open': bool, 'source': 'user'|'gpus'|'installed'|'branch_default',
    'reason': str, 'conflict': str or None}; a conflict means no module of this flavour drives every GPU here.
    """
    branch = int(branch)
    default_open = branch >= OPEN_DEFAULT_FROM
    archs = sorted(set(g.get("architecture") or "unknown" for g in gpus))
    known = [a for a in archs if a != "unknown"]
    need_open = sorted(a for a in known if a in NEEDS_OPEN)
    need_prop = sorted(a for a in known if a in NEEDS_PROPRIETARY)
    described = ", ".join(archs) if gpus else "no GPU found"

    def conflict_for(is_open):
        if is_open and branch < OPEN_FIRST_BRANCH:
            return "branch %d has no open kernel modules (they start with %d)" % (branch, OPEN_FIRST_BRANCH)
        if is_open and need_prop:
            return "the open kernel modules do not drive %s GPUs (proprietary only)" % ", ".join(need_prop)
        if not is_open and need_open:
            return "the proprietary kernel modules do not drive %s GPUs (open only)" % ", ".join(need_open)
        return None

    if requested is not None:
        return {
            "open": bool(requested),
            "source": "user",
            "conflict": conflict_for(bool(requested)),
            "reason": "nvidia_driver_open is %s (GPUs: %s)" % (str(bool(requested)).lower(), described),
        }
    if need_open and need_prop:
        return {
            "open": True,
            "source": "gpus",
            "reason": "GPUs: %s" % described,
            "conflict": "%s need the open kernel modules and %s the proprietary ones: one driver cannot "
            "drive both" % (", ".join(need_open), ", ".join(need_prop)),
        }
    if need_open:
        return {
            "open": True,
            "source": "gpus",
            "conflict": conflict_for(True),
            "reason": "%s GPUs need the open kernel modules" % ", ".join(need_open),
        }
    if need_prop:
        return {
            "open": False,
            "source": "gpus",
            "conflict": None,
            "reason": "%s GPUs need the proprietary kernel modules" % ", ".join(need_prop),
        }
    if installed_open is not None and installed_branch == branch:
        return {
            "open": bool(installed_open),
            "source": "installed",
            "conflict": conflict_for(bool(installed_open)),
            "reason": "the installed %s modules of branch %d drive these GPUs (%s): kept"
            % ("open" if installed_open else "proprietary", branch, described),
        }
    why = (
        ("GPUs %s support both flavours" % described)
        if known and len(known) == len(archs)
        else ("the GPUs' architecture could not be told (%s)" % described)
    )
    return {
        "open": default_open,
        "source": "branch_default",
        "conflict": conflict_for(default_open),
        "reason": "%s: branch %d's default, %s (open from %d)"
        % (why, branch, "open" if default_open else "proprietary", OPEN_DEFAULT_FROM),
    }


def secure_boot_state(efivar_bytes, mokutil_output=None):
    """True (on), False (off) or None (unknown) from the EFI variable's bytes (4 bytes of attributes, then the
    value: last byte 1 = on) or, without it, `mokutil --sb-state` ("SecureBoot enabled" / "disabled")."""
    if efivar_bytes:
        return efivar_bytes[-1:] == b"\x01"
    text = (mokutil_output or "").lower()
    if "secureboot enabled" in text:
        return True
    if "secureboot disabled" in text or "not supported" in text:
        return False
    return None


def secure_boot_verdict(enabled, key_enrolled=None, signer=None, enrolled_text=None):
    """Would a newly built nvidia module load? Returns (ok: bool, message).

    ``enabled``: Secure Boot on/off/None (unknown: no EFI, so no Secure Boot). ``key_enrolled``: whether DKMS's
    signing key is in the MOK list (`mokutil --test-key /var/lib/dkms/mok.pub`; None unknown). ``signer``: the
    built module's signer (`modinfo -F signer`; '' unsigned, None not built yet). ``enrolled_text``: `mokutil
    --list-enrolled` output, searched for the signer.
    """
    if not enabled:
        return True, "Secure Boot is %s" % ("off" if enabled is False else "not in use (no EFI Secure Boot state)")
    fix = (
        "enroll DKMS's key (`mokutil --import /var/lib/dkms/mok.pub`, then confirm at the next boot in the "
        "MOK manager) or sign the module with an enrolled key"
    )
    if signer is not None:
        if not signer.strip():
            return False, "Secure Boot is on and the built nvidia module is not signed: it would not load; " + fix
        if enrolled_text is not None and signer.strip() not in enrolled_text:
            if key_enrolled:
                return True, "Secure Boot is on; the module is signed by %s and DKMS's key is enrolled" % signer
            return False, (
                "Secure Boot is on and the module's signer %s is not among the enrolled keys: it would "
                "not load; %s" % (signer.strip(), fix)
            )
        return True, "Secure Boot is on; the module is signed by %s, an enrolled key" % signer.strip()
    if key_enrolled is False:
        return False, "Secure Boot is on and DKMS's signing key is not enrolled: the new module would not load; " + fix
    if key_enrolled is None:
        return False, (
            "Secure Boot is on and whether DKMS's signing key is enrolled cannot be told (no mokutil or "
            "no /var/lib/dkms/mok.pub): the new module may not load; " + fix
        )
    return True, "Secure Boot is on; DKMS's signing key is enrolled"


def module_users(refcounts):
    """Reasons from the modules' reference counts ({name: refcnt} of /sys/module/<name>/refcnt): nvidia_drm is
    used by a display server or another DRM client through /dev/dri, which the /dev/nvidia* scan does not see."""
    drm = refcounts.get("nvidia_drm")
    if drm:
        return [
            "nvidia_drm is in use (refcount %d: a display server or another DRM client): the modules cannot be "
            "unloaded" % drm
        ]
    return []


def in_use(processes, holders):
    """Why the GPUs are in use (a list of reasons; empty: not in use). ``processes``: NVML compute processes
    [{'gpu', 'pid'}] (None: NVML could not tell). ``holders``: [{'pid', 'comm', 'path'}] of /dev/nvidia*; the
    driver's own daemons (nvidia-persistenced, nv-fabricmanager, nvidia-imex) do not count: a reload stops and
    restarts them."""
    reasons = []
    procs = sorted(set((p.get("pid"), p.get("gpu")) for p in processes or []), key=lambda p: (p[0] or 0, p[1]))
    if procs:
        reasons.append(
            "%d compute process(es) on the GPUs (NVML): %s"
            % (len(procs), ", ".join("pid %s on GPU %s" % p for p in procs))
        )
    users = {}
    for h in holders or []:
        if h.get("comm") in DRIVER_DAEMONS:
            continue
        users.setdefault((h.get("pid"), h.get("comm")), set()).add(h.get("path"))
    if users:
        reasons.append(
            "/dev/nvidia* held open by %s"
            % ", ".join(
                "pid %s (%s: %s)" % (pid, comm, ", ".join(sorted(paths)))
                for (pid, comm), paths in sorted(users.items())
            )
        )
    return reasons


# The NVLink fabric's packages (any branch): fabric manager (Debian/Ubuntu nvidia-fabricmanager-<branch>, RHEL
# nvidia-fabric-manager), NSCQ (libnvidia-nscq-<branch>) and IMEX (nvidia-imex-<branch>).
FABRIC_PACKAGE_RE = re.compile(
    r"^(nvidia-fabricmanager-[0-9]+|nvidia-fabric-manager|libnvidia-nscq-[0-9]+|nvidia-imex(-[0-9]+)?)$"
)
IMEX_RE = re.compile(r"^nvidia-imex(-[0-9]+)?$")


def fabric_decision(requested, nvswitches, installed_packages):
    """Whether the driver change moves the host's NVLink fabric software with it.

    ``requested``: nvidia_driver_fabricmanager (True/False: the owner's choice; None: decide from the host).
    ``nvswitches``: NVSwitch PCI functions on the bus (a list; None when the PCI bus could not be read).
    ``installed_packages``: names of the installed packages (any, only the fabric's are looked at).

    Returns {'managed', 'source' (user, nvswitch, installed, none), 'reason', 'nvswitches' (count or None),
    'installed' (the fabric packages installed now), 'imex' (an IMEX package is installed)}. Auto manages the fabric
    when NVSwitches are on the PCI bus or a fabric package is installed: a driver change without them would leave
    fabric manager at the old version, which refuses to start, and every GPU unusable for CUDA.
    """
    fabric = sorted(n for n in (installed_packages or []) if FABRIC_PACKAGE_RE.match(n))
    count = None if nvswitches is None else len(nvswitches)
    out = {
        "nvswitches": count,
        "installed": fabric,
        "imex": any(IMEX_RE.match(n) for n in fabric),
    }
    if requested is not None:
        out.update(
            managed=bool(requested),
            source="user",
            reason="nvidia_driver_fabricmanager is %s (NVSwitches on the PCI bus: %s; installed: %s)"
            % (str(bool(requested)).lower(), "unknown" if count is None else count, ", ".join(fabric) or "none"),
        )
        return out
    if count:
        out.update(
            managed=True,
            source="nvswitch",
            reason="%d NVSwitch(es) on the PCI bus: fabric manager and NSCQ follow the driver's exact version" % count,
        )
    elif fabric:
        out.update(
            managed=True,
            source="installed",
            reason="%s installed: kept at the driver's exact version" % ", ".join(fabric),
        )
    else:
        out.update(
            managed=False,
            source="none",
            reason="no NVSwitch on the PCI bus%s and no fabric manager installed"
            % (" (the bus could not be read)" if count is None else ""),
        )
    return out


def plan_change(
    installed,
    target,
    loaded,
    busy,
    reboot_ok,
    reload_ok=True,
    secure_boot=(True, ""),
    flavour_conflict=None,
    change=None,
    fabric_missing=None,
):
    """How a driver change from ``installed`` to ``target`` may run on this host.

    ``installed``/``target``: package versions ('' none installed / target not known before installing, as with
    dnf's stream); ``change``: whether the package step would change anything (default: installed != target).
    ``loaded``: the loaded nvidia module's version ('' none). ``busy``: reasons from ``in_use``. ``secure_boot``:
    (ok, message) from ``secure_boot_verdict``. ``fabric_missing``: the fabric packages (fabric manager, NSCQ,
    IMEX) the package sources lack in the driver's version ('nvidia-fabricmanager-550 550.90.07'): the change is
    refused, since the fabric manager would be removed or left at a version that refuses to start.

    Returns {'action', 'blockers', 'message'}; action is one of
      none    nothing to change;
      install the change leaves no mismatch (no module loaded, or the loaded one is the target's version);
      reload  install, then unload and load the modules now (nothing uses the GPUs);
      reboot  install, then reboot (reboot_ok);
      blocked nothing may change: ``blockers`` say why.
    """
    if change is None:
        change = bool(target) and installed != target
    if fabric_missing:
        what = "driver %s -> %s" % (upstream(installed) or "none", upstream(target) or "the branch's newest")
        if not change:
            what = "fabric manager at driver %s" % (upstream(installed) or "none")
        blocker = (
            "no %s in the package sources: fabric manager, NSCQ and IMEX must match the driver's version exactly "
            "(NVIDIA Fabric Manager User Guide)" % ", ".join(fabric_missing)
        )
        return {
            "action": "blocked",
            "blockers": [blocker],
            "message": "%s refused (nothing removed, nothing installed): %s; without them the NVLink fabric is "
            "not set up and CUDA cannot use the GPUs. Add them to the repository, or choose a driver version that "
            "has them (nvidia_driver_version)." % (what, blocker),
        }
    if not change:
        return {"action": "none", "blockers": [], "message": "the driver needs no change"}
    what = "driver %s -> %s" % (upstream(installed) or "none", upstream(target) or "the branch's newest")
    if flavour_conflict:
        return {
            "action": "blocked",
            "blockers": [flavour_conflict],
            "message": "%s refused: %s" % (what, flavour_conflict),
        }
    if not loaded or (target and upstream(target) == loaded):
        return {
            "action": "install",
            "blockers": [],
            "message": "%s: %s"
            % (what, "no nvidia module is loaded" if not loaded else "the loaded module already is " + loaded),
        }
    sb_ok, sb_message = secure_boot
    if not sb_ok:
        return {
            "action": "blocked",
            "blockers": [sb_message],
            "message": "%s refused (the new module would not load): %s" % (what, sb_message),
        }
    if not busy and reload_ok:
        return {
            "action": "reload",
            "blockers": [],
            "message": "%s, then the modules are reloaded (nothing uses the GPUs)" % what,
        }
    if reboot_ok:
        return {
            "action": "reboot",
            "blockers": [],
            "message": "%s, then a reboot (nvidia_driver_reboot_ok)%s"
            % (what, (": " + "; ".join(busy)) if busy else ""),
        }
    blockers = list(busy) if busy else ["module reload not allowed (nvidia_driver_reload is false)"]
    blockers.append("no reboot allowed (nvidia_driver_reboot_ok is false)")
    return {
        "action": "blocked",
        "blockers": blockers,
        "message": "%s refused: the loaded module %s would stay under the new libraries and every new CUDA/NVML "
        "process would fail (driver/library version mismatch) until a reboot. Blocked by: %s. Stop the "
        "GPU jobs (drain the node) or allow a reboot (nvidia_driver_reboot_ok), then run again."
        % (what, loaded, "; ".join(blockers)),
    }


def module_refcounts(fs):
    """{name: refcnt} of the driver's loaded modules."""
    out = {}
    for name in loaded_modules(fs):
        text = (fs.read("/sys/module/%s/refcnt" % name) or "").strip()
        if text.isdigit():
            out[name] = int(text)
    return out


def loaded_modules(fs):
    """The driver's kernel modules loaded now (sysfs /sys/module), in unload order."""
    return [m for m in MODULES if fs.exists("/sys/module/" + m)]


def device_holders(fs, own_pid=None):
    """[{'pid', 'comm', 'path'}] of every open file descriptor on /dev/nvidia* (/proc/<pid>/fd)."""
    out = []
    own_pid = os.getpid() if own_pid is None else own_pid
    for fd_dir in fs.glob("/proc/[0-9]*/fd"):
        pid = int(fd_dir.split("/")[2])
        if pid == own_pid:
            continue
        try:
            fds = os.listdir(fs.path(fd_dir))
        except OSError:
            continue
        paths = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fs.path(fd_dir), fd))
            except OSError:
                continue
            if DEVICE_RE.match(target):
                paths.add(target)
        if paths:
            comm = (fs.read("/proc/%d/comm" % pid) or "").strip()
            out.extend({"pid": pid, "comm": comm, "path": p} for p in sorted(paths))
    return out


def read_efivar(fs, path=SECURE_BOOT_VAR):
    try:
        with open(fs.path(path), "rb") as f:
            return f.read(64)
    except (IOError, OSError):
        return None


# What the modules do with the functions above: nvidia_driver_preflight gathers and plans (``preflight``),
# nvidia_driver_reload plans, diffs and applies (``DriverReload``). These take the AnsibleModule for its commands.


def pci_gpus(fs):
    """The NVIDIA GPUs on the PCI bus (``gpu_from_pci`` of every device in /sys/bus/pci/devices)."""
    found = []
    for dev in fs.glob("/sys/bus/pci/devices/*"):
        g = gpu_from_pci(
            os.path.basename(dev), fs.read(dev + "/vendor"), fs.read(dev + "/device"), fs.read(dev + "/class")
        )
        if g:
            found.append(g)
    return found


def run_read_only(module, argv):
    """stdout+stderr of a read-only command, or None when it is not installed."""
    binary = module.get_bin_path(argv[0])
    if not binary:
        return None
    rc, out, err = module.run_command([binary] + argv[1:], environ_update={"LC_ALL": "C", "LANG": "C"})
    return (out or "") + (err or "")


def secure_boot(module, fs, local, dkms_key, kernel):
    """{'enabled', 'key_enrolled', 'signer', 'ok', 'message'}: the EFI variable or ``mokutil --sb-state``, then (on
    the local host with Secure Boot on) DKMS's key in the MOK list and the built module's signer."""
    mok_state = run_read_only(module, ["mokutil", "--sb-state"]) if local else None
    enabled = secure_boot_state(read_efivar(fs), mok_state)
    info = {"enabled": enabled, "key_enrolled": None, "signer": None}
    enrolled = None
    if enabled and local:
        if os.path.exists(dkms_key):
            out = run_read_only(module, ["mokutil", "--test-key", dkms_key])
            if out is not None:
                info["key_enrolled"] = "already enrolled" in out
        if kernel:
            signer = run_read_only(module, ["modinfo", "-k", kernel, "-F", "signer", "nvidia"])
            if signer is not None and "not found" not in signer:
                info["signer"] = signer.strip()
        enrolled = run_read_only(module, ["mokutil", "--list-enrolled"]) if info["signer"] else None
    info["ok"], info["message"] = secure_boot_verdict(enabled, info["key_enrolled"], info["signer"], enrolled)
    return info


def gpus_of(facts, fs):
    """(gpus, source): NVML's GPUs when it lists any, else the PCI bus's ('pci'), else ([], 'none')."""
    if facts["gpus"]:
        return [gpu_from_nvml(g) for g in facts["gpus"]], "nvml"
    gpus = pci_gpus(fs)
    return gpus, "pci" if gpus else "none"


def nvswitches(facts):
    """NVSwitches on the PCI bus, None when it could not be read: NVIDIA bridges of class 0x0680 (HGX A100/H100)
    and, where the PCI reader lists them, the NVSwitch management bridges through which fabric manager reaches
    fifth-generation NVLink switches (HGX B200)."""
    bus = facts.get("pci") or {}
    if not bus.get("available"):
        return None
    return list(bus.get("nvswitches") or []) + list(bus.get("nvswitch_bridges") or [])


def loaded_module(facts, modules):
    """{'version', 'source', 'modules'} of the loaded nvidia module: the kernel's word first, else NVML's."""
    kmod = facts["driver"].get("kernel_module_version")
    if kmod:
        return {"version": kmod, "source": "kernel", "modules": modules or ["nvidia"]}
    if facts["nvml"].get("available") and facts["driver"].get("version"):
        # NVML answers only while a module is loaded, and reports that module's version.
        return {
            "version": facts["driver"]["version"],
            "source": facts["nvml"]["source"],
            "modules": modules or ["nvidia"],
        }
    return {"version": "", "source": None, "modules": modules}


def compute_processes(facts):
    """[{'gpu', 'pid'}] of NVML's compute processes; None when NVML could not tell."""
    if not facts["nvml"].get("available"):
        return None
    return [{"gpu": g.get("index"), "pid": p.get("pid")} for g in facts["gpus"] for p in g.get("processes") or []]


def busy_reasons(fs, processes):
    """``in_use`` of the compute processes and /dev/nvidia* holders, and ``module_users``."""
    return in_use(processes, device_holders(fs)) + module_users(module_refcounts(fs))


def preflight(module, fs, facts):
    """nvidia_driver_preflight's result (all but ``changed``) from gpu_info's ``facts`` and the module's params."""
    p = module.params
    gpus, source = gpus_of(facts, fs)
    flavour = choose_flavour(gpus, p["branch"], p["open"], p["installed_open"], branch_of(p["installed_version"]))
    fabric = fabric_decision(p["fabricmanager"], nvswitches(facts), p["installed_packages"])
    loaded = loaded_module(facts, loaded_modules(fs))
    processes = compute_processes(facts)
    holders = device_holders(fs)
    busy = in_use(processes, holders) + module_users(module_refcounts(fs))
    sb = secure_boot(module, fs, fs.root == "/", p["dkms_key"], p["kernel"])
    return dict(
        gpus=gpus,
        gpu_source=source,
        flavour=flavour,
        loaded=loaded,
        busy=busy,
        processes=processes,
        holders=holders,
        secure_boot=sb,
        fabric=fabric,
        plan=preflight_plan(p, loaded, busy, sb, flavour, processes, facts["nvml"]),
        nvml=facts["nvml"],
    )


def preflight_plan(p, loaded, busy, sb, flavour, processes, nvml_facts):
    """``plan_change`` for the module's params ``p``; None when they ask about no change."""
    if not (p["target_version"] or p["change"] is not None or p["fabric_missing"]):
        return None
    plan = plan_change(
        p["installed_version"],
        p["target_version"],
        loaded["version"],
        busy,
        p["reboot_ok"],
        p["reload_ok"],
        (sb["ok"], sb["message"]),
        flavour["conflict"],
        p["change"],
        p["fabric_missing"],
    )
    if processes is None and loaded["version"] and plan["action"] == "reload":
        plan["message"] += " (NVML could not list compute processes: %s; judged by /dev/nvidia* holders)" % (
            nvml_facts.get("error") or "unavailable"
        )
    return plan


class DriverReload:
    """nvidia_driver_reload: ``plan`` compares the loaded module's version with ``want`` and fills ``result``
    (changed, before, after, diff, modules); ``apply`` (outside check mode) refuses while the GPUs are in use, stops
    the running services, unloads and loads the modules, starts the services again and checks the loaded version.
    ``read_facts(fs)`` is gpu_info's reader (gpu.read bound to the module)."""

    def __init__(self, module, fs, want, read_facts):
        self.module = module
        self.fs = fs
        self.want = want
        self.read_facts = read_facts
        self.before, self.facts = self.loaded_version()
        self.result = {"changed": False, "before": self.before, "after": self.before}
        self.stopped = []
        self.systemctl = None

    def loaded_version(self):
        """(version, gpu_info facts): the kernel's word first, else the driver version NVML reports (only while a
        module is loaded)."""
        facts = self.read_facts(self.fs)
        version = facts["driver"].get("kernel_module_version")
        if not version and facts["nvml"].get("available"):
            version = facts["driver"].get("version")
        return version or "", facts

    def plan(self):
        if self.before != self.want:
            self.result.update(changed=True, after=self.want, diff=self.diff())
            self.result["modules"] = loaded_modules(self.fs) or (["nvidia"] if self.before else [])
        return self.result

    def diff(self):
        return {
            "before": "nvidia module %s\n" % (self.before or "not loaded"),
            "after": "nvidia module %s\n" % self.want,
        }

    def apply(self):
        busy = busy_reasons(self.fs, compute_processes(self.facts))
        if busy:
            self.fail("refusing to unload the nvidia modules: the GPUs are in use: %s" % "; ".join(busy))
        # PATH first, then the sbin directories get_bin_path adds. Looked up before anything is stopped: a host
        # without modprobe fails here with its services still running.
        modprobe = self.module.get_bin_path("modprobe", required=True)
        self.stop_services()
        self.unload(modprobe)
        self.load(modprobe)
        self.start_services()
        after, self.facts = self.loaded_version()
        self.result["after"] = after
        if after != self.want:
            self.fail("after the reload the loaded nvidia module is %s, not %s" % (after or "none", self.want))

    def fail(self, msg):
        self.module.fail_json(msg=msg, **self.result)

    def stop_services(self):
        """Stop the services that are active (they hold the device files); ``result['services']`` names them."""
        self.systemctl = self.module.get_bin_path("systemctl")
        if self.systemctl:
            for unit in self.module.params["services"]:
                rc, out, err = self.module.run_command([self.systemctl, "is-active", unit])
                if out.strip() == "active":
                    rc, out, err = self.module.run_command([self.systemctl, "stop", unit])
                    if rc != 0:
                        self.fail("cannot stop %s: %s" % (unit, (err or out).strip()))
                    self.stopped.append(unit)
        self.result["services"] = self.stopped

    def start_services(self):
        for unit in self.stopped:
            self.module.run_command([self.systemctl, "start", unit])

    def unload(self, modprobe):
        modules = self.result["modules"]
        if not modules:
            return
        rc, out, err = self.module.run_command([modprobe, "-r"] + modules)
        if rc != 0:
            self.start_services()
            self.fail(
                "modprobe -r %s failed (rc %d): %s; the old module %s stays loaded"
                % (" ".join(modules), rc, (err or out).strip(), self.before)
            )

    def load(self, modprobe):
        for name in reversed(self.result["modules"] or ["nvidia"]):
            rc, out, err = self.module.run_command([modprobe, name])
            if rc != 0:
                self.start_services()
                self.fail(
                    "modprobe %s failed (rc %d): %s (check `dkms status`, `dmesg | grep -i nvidia` and "
                    "Secure Boot module signing)" % (name, rc, (err or out).strip())
                )
