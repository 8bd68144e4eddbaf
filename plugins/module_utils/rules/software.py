# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the software area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders, nvlink_platform
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    RoleVar,
    driver_facts,
    result,
    skip,
    version_tuple,
)


def pinned_branch(pol):
    """The driver branch SW-DRV-001 pins (software.driver_branch), or None (any branch)."""
    return pol["software"]["driver_branch"]


def target_driver_branch(facts, pol, given):
    """SW-DRV-001's fix: the branch nvidia_driver installs (nvidia_driver_branch takes the policy's place); None
    when neither names one (the role then stops: it never guesses a branch)."""
    return {"driver_branch": given["driver_branch"] if "driver_branch" in given else pinned_branch(pol)}


def check_driver_version(facts, pol):
    version = driver_facts(facts).get("version")
    if not version:
        return skip("driver version not available")
    minimum = pol["software"]["driver_min_version"]
    branch = pinned_branch(pol)
    problems = []
    if minimum and version_tuple(version) < version_tuple(minimum):
        problems.append("older than %s" % minimum)
    actual_branch = decoders.driver_branch(version)
    if branch is not None and actual_branch != branch:
        problems.append("outside pinned branch %s" % branch)
    expected = {"min_version": minimum, "branch": branch}
    if problems:
        return result("fail", version, expected, "driver %s is %s" % (version, " and ".join(problems)))
    return result("pass", version, expected, "driver %s meets policy" % version)


# Oldest driver branch each CUDA major release runs on through minor-version compatibility (CUDA compatibility
# guide, "Minor Version Compatibility", table 1: 11.x >= 450, 12.x >= 525, 13.x >= 580).
CUDA_MAJOR_MIN_BRANCH = {11: 450, 12: 525, 13: 580}

PTX_CAVEAT = (
    "runs through CUDA minor-version compatibility, except PTX JIT: kernels shipped only as PTX newer than the driver "
    "fail to load (cudaErrorUnsupportedPtxVersion), and features of the newer toolkit that need a newer driver "
    "are unavailable"
)


def _compat_covers(compat, toolkit):
    """A cuda-compat package whose CUDA version is at least the toolkit's (forward compatibility)."""
    want = version_tuple(toolkit)[:2]
    for entry in compat or []:
        if entry.get("cuda") and version_tuple(entry["cuda"])[:2] >= want:
            return entry
    return None


def check_cuda_toolkit(facts, pol):
    drv = driver_facts(facts)
    supported = drv.get("cuda_driver_version")
    toolkits = drv.get("cuda_toolkits")
    branch = decoders.driver_branch(drv.get("version") or drv.get("library_version"))
    if not toolkits:
        return skip("no CUDA toolkit installed under /usr/local")
    if not supported and branch is None:
        return skip("neither the driver's CUDA version nor its branch is available")
    driver_cuda = version_tuple(supported)[:2] if supported else None
    major_gap, minor_gap, covered = [], [], []
    for t in toolkits:
        version = version_tuple(t["version"])[:2]
        major = version[0]
        minimum = CUDA_MAJOR_MIN_BRANCH.get(major)
        too_old_branch = branch is not None and minimum is not None and branch < minimum
        major_ahead = driver_cuda is not None and major > driver_cuda[0]
        minor_ahead = driver_cuda is not None and major == driver_cuda[0] and version > driver_cuda
        if not (too_old_branch or major_ahead or minor_ahead):
            continue
        compat = _compat_covers(drv.get("cuda_compat"), t["version"])
        if compat:
            covered.append(dict(t, compat=compat))
        elif too_old_branch or major_ahead:
            major_gap.append(dict(t, needs_branch=minimum))
        else:
            minor_gap.append(t)
    observed = {
        "driver_cuda": supported,
        "branch": branch,
        "toolkits": [t["version"] for t in toolkits],
        "cuda_compat": [c.get("cuda") for c in drv.get("cuda_compat") or []],
    }
    expected = "toolkits of the driver's CUDA major version (branch >= %s for 11.x/12.x/13.x), or cuda-compat" % (
        "/".join(str(v) for v in sorted(CUDA_MAJOR_MIN_BRANCH.values()))
    )
    if major_gap:
        return result(
            "fail",
            observed,
            expected,
            "CUDA toolkit(s) %s need a newer driver major (driver %s, CUDA %s): code built with them does not run; "
            "install a branch >= %s or the matching cuda-compat package"
            % (
                [t["version"] for t in major_gap],
                drv.get("version") or drv.get("library_version"),
                supported,
                max(t["needs_branch"] or 0 for t in major_gap) or "the toolkit's",
            ),
            items=major_gap,
        )
    if minor_gap:
        return result(
            "warn",
            observed,
            expected,
            "CUDA toolkit(s) %s are newer than the driver's CUDA %s: code built with them %s"
            % ([t["version"] for t in minor_gap], supported, PTX_CAVEAT),
            items=minor_gap,
            severity="low",
        )
    if covered:
        return result(
            "pass",
            observed,
            expected,
            "toolkit(s) %s run through the installed cuda-compat package" % [t["version"] for t in covered],
            items=covered,
        )
    return result("pass", observed, expected, "toolkits match the driver")


def check_kernel_module(facts, pol):
    gpu = facts.get("gpu") or {}
    drv = driver_facts(facts)
    code = (gpu.get("nvml") or {}).get("error_code")
    kmod, library, nvml_version = drv.get("kernel_module_version"), drv.get("library_version"), drv.get("version")
    observed = {
        "kernel_module": kmod,
        "kernel_module_loaded": drv.get("kernel_module_loaded"),
        "library": library,
        "driver": nvml_version,
        "nvml_error": code,
    }
    if code == "LibRmVersionMismatch":
        versions = "kernel module %s, library %s" % (kmod or "unknown", library or "unknown")
        return result(
            "fail",
            observed,
            "equal",
            "NVML refuses to start (NVML_ERROR_LIB_RM_VERSION_MISMATCH): the loaded kernel module and the user-space "
            "library differ (%s); every CUDA and NVML process fails until the module is reloaded or the host "
            "reboots" % versions,
        )
    user = library or nvml_version
    if not user or not kmod:
        return skip("driver or kernel module version not available")
    differ = sorted({v for v in (library, nvml_version) if v and v != kmod})
    if differ:
        where = "loaded kernel module" if drv.get("kernel_module_loaded", True) else "installed kernel module (modinfo)"
        return result(
            "fail",
            observed,
            "equal",
            "%s %s and user-space driver %s differ (reboot or reload the module after a driver upgrade)"
            % (where, kmod, " / ".join(differ)),
        )
    return result("pass", observed, "equal", "kernel module matches the driver")


def _nvswitches(facts):
    """NVSwitch PCI functions, or None when the PCI bus was not read."""
    pci = (facts.get("gpu") or {}).get("pci") or {}
    if not pci.get("available"):
        return None
    return pci.get("nvswitches") or []


def check_fabricmanager(facts, pol):
    drv = driver_facts(facts)
    user = drv.get("version") or drv.get("library_version")
    fm, running = drv.get("fabricmanager_version"), drv.get("fabricmanager_running")
    platform = nvlink_platform.classify(facts)
    switches = _nvswitches(facts)
    pci = (facts.get("gpu") or {}).get("pci") or {}
    observed = {
        "platform": platform and platform["kind"],
        "nvswitches": None if switches is None else len(switches),
        "nvswitch_bridges": None if switches is None else len(pci.get("nvswitch_bridges") or []),
        "fabricmanager": fm,
        "running": running,
        "nvlsm_installed": drv.get("nvlsm_installed"),
        "nvlsm_running": drv.get("nvlsm_running"),
        "driver": user,
    }
    expected = (
        "on NVSwitch systems: nvidia-fabricmanager at the driver's version, running; on HGX B200 and later also "
        "NVLSM running"
    )
    if platform is None or switches is None:
        # PCI bus not read: an installed fabric manager is the only hint that this is an NVSwitch system.
        if not fm:
            return skip("nvidia-fabricmanager not installed and NVSwitch presence unknown")
        if not user:
            return skip("driver version not available")
        if fm != user:
            return result(
                "fail",
                observed,
                "equal",
                "fabric manager %s does not match driver %s: it refuses to start and NVSwitch systems cannot use "
                "their GPUs" % (fm, user),
            )
        return result("pass", observed, "equal", "fabric manager matches the driver")
    if not platform["fabricmanager_needed"]:
        if fm and user and fm != user:
            # gpud's users report this false alarm on H100 PCIe, GH200 and L40S hosts: nothing uses FM there.
            return result(
                "warn",
                observed,
                expected,
                "fabric manager %s is installed but does not match driver %s; this host has no NVSwitch, so nothing "
                "needs it (remove it, or keep it in step with the driver)" % (fm, user),
                severity="info",
            )
        if platform["kind"] == "multinode":
            return result(
                "pass",
                observed,
                expected,
                "multi-node NVLink compute tray (%s): its NVSwitches are managed in the NVLink switch trays, not by a "
                "fabric manager here (IMEX: SW-IMEX-001)" % platform["evidence"],
            )
        return result("pass", observed, expected, "no NVSwitch on the PCI bus: fabric manager not needed")
    problems = []
    if not fm and not running:
        problems.append("nvidia-fabricmanager is not installed")
    elif fm and user and fm != user:
        problems.append("fabric manager %s does not match driver %s (it refuses to start)" % (fm, user))
    if fm and running is False:
        problems.append("nv-fabricmanager is not running")
    if platform["nvlsm_needed"] and not drv.get("nvlsm_running"):
        # Running counts whatever installed it (the GPU operator's driver container runs both without a host package).
        if drv.get("nvlsm_installed") is False:
            problems.append("NVLSM (package nvlsm), which fabric manager needs here, is not installed")
        elif drv.get("nvlsm_running") is False:
            problems.append("nvlsm is not running")
    if problems:
        return result(
            "fail",
            observed,
            expected,
            "%s: %s; until fabric manager%s runs, the NVLink fabric is not set up and CUDA jobs on these GPUs fail "
            "(cudaErrorSystemNotReady)"
            % (platform["evidence"], "; ".join(problems), " with NVLSM" if platform["nvlsm_needed"] else ""),
        )
    return result(
        "pass",
        observed,
        expected,
        "%s: fabric manager %s runs%s" % (platform["evidence"], fm or "(not installed on the host: its version is "
                                          "not known)", " with NVLSM" if platform["nvlsm_needed"] else ""),
    )


def check_imex(facts, pol):
    """SW-IMEX-001: on a compute tray of a multi-node NVLink domain, nvidia-imex runs with a sound node list."""
    platform = nvlink_platform.classify(facts)
    if platform is None:
        return skip("neither the PCI bus nor NVML was read: the NVLink platform is unknown")
    imex = driver_facts(facts).get("imex")
    expected = (
        "on multi-node NVLink compute trays: nvidia-imex installed and running, its node list present, one IP "
        "address per line, listing this host"
    )
    if not platform["imex_needed"]:
        return result("pass", {"platform": platform["kind"]}, expected,
                      "not a multi-node NVLink compute tray (%s): IMEX not needed" % platform["evidence"])
    if not isinstance(imex, dict):
        return skip("IMEX facts not gathered (gpu_info before issue 25)")
    per_job = pol["software"]["imex_per_job"]
    local = imex.get("local_addresses")
    nodes = imex.get("nodes") or []
    if per_job and not imex.get("running"):
        return result("pass", {"platform": platform["kind"], "per_job": True, "running": imex.get("running")},
                      expected, "nvidia-imex is started per job (software.imex_per_job) and no job runs it now")
    if per_job and not imex.get("installed"):
        return result("pass", {"platform": platform["kind"], "per_job": True, "running": True, "installed": False},
                      expected, "nvidia-imex runs from outside the host's installation (a container started per "
                      "job, such as the Kubernetes DRA driver's): its node list is not the host's to judge")
    observed = {
        "platform": platform["kind"],
        "installed": imex.get("installed"),
        "running": imex.get("running"),
        "nodes_file": imex.get("nodes_file"),
        "nodes": len(nodes),
        "invalid": imex.get("invalid") or [],
        "bind_ip": imex.get("bind_ip"),
        "this_host_listed": None,
    }
    problems = []
    if not imex.get("installed"):
        problems.append("nvidia-imex is not installed")
    elif not imex.get("running"):
        problems.append("nvidia-imex is not running")
    if not imex.get("nodes_file_present"):
        problems.append("its node list %s is missing" % imex.get("nodes_file"))
    elif not nodes and not imex.get("invalid"):
        problems.append("its node list %s is empty" % imex.get("nodes_file"))
    if imex.get("invalid"):
        problems.append("%s holds lines that are not IP addresses: %s" % (imex.get("nodes_file"), imex["invalid"]))
    duplicates = sorted({n for n in nodes if nodes.count(n) > 1})
    if duplicates:
        problems.append("%s lists %s more than once" % (imex.get("nodes_file"), duplicates))
    if nodes:
        mine = [imex["bind_ip"]] if imex.get("bind_ip") else local
        if mine is not None:
            listed = sorted(set(nodes) & set(mine))
            observed["this_host_listed"] = listed
            if not listed:
                problems.append(
                    "%s does not list this host (%s %s), so IMEX finds no address of its own to bind to"
                    % (imex.get("nodes_file"), "BIND_INTERFACE_IP" if imex.get("bind_ip") else "addresses",
                       ", ".join(mine) or "none")
                )
    if problems:
        return result(
            "fail",
            observed,
            expected,
            "%s: %s; without IMEX, CUDA jobs cannot share GPU memory with the other nodes of the NVLink domain"
            % (platform["evidence"], "; ".join(problems)),
        )
    return result("pass", observed, expected,
                  "nvidia-imex runs; its node list has %d node(s), this host among them" % len(nodes))


# The first nvidia-ml-py release with every NVML function the GPU reader calls (nvmlDeviceGetNumaNodeId and
# nvmlDeviceGetGpuFabricInfoV arrived in 12.550; tests/integration/test_nvml_bindings.py reads the simulated GPUs
# through each binding family).
NVML_BINDING_FULL = "12.550"


def check_nvml_binding(facts, pol):
    nvml_status = (facts.get("gpu") or {}).get("nvml") or {}
    binding = nvml_status.get("binding")
    if nvml_status.get("source") != "pynvml" or not isinstance(binding, dict):
        return skip("GPUs not read through a Python NVML binding")
    if not nvml_status.get("available"):
        return skip("NVML did not start: what the binding cannot read is unknown")
    lacks = binding.get("lacks") or {}
    name = "%s %s" % (binding.get("distribution") or "pynvml", binding.get("version") or "(version unknown)")
    observed = {
        "distribution": binding.get("distribution"),
        "version": binding.get("version"),
        "module": binding.get("module"),
        "cannot_read": sorted(lacks),
    }
    expected = "a binding with every NVML function gpufleet reads (nvidia-ml-py >= %s)" % NVML_BINDING_FULL
    if not lacks:
        return result("pass", observed, expected, "%s has every NVML function gpufleet reads" % name)
    functions = sorted(set(f for names in lacks.values() for f in names))
    return result(
        "fail",
        observed,
        expected,
        "the NVML binding %s cannot read %d field(s): %s (it lacks %s); the checks that need them report unknown"
        % (name, len(lacks), ", ".join(sorted(lacks)), ", ".join(functions)),
        items=[{"field": field, "lacks": lacks[field]} for field in sorted(lacks)],
    )


RULES = (
    Rule(
        "SW-DRV-001",
        "software",
        "high",
        "Driver below minimum or outside the pinned branch",
        "Old drivers miss fixes and performance work; a node outside the fleet's pinned branch behaves "
        "differently from the others.",
        check_driver_version,
        role="nvidia_driver",
        target=target_driver_branch,
        role_vars=(RoleVar("nvidia_driver_branch", "driver_branch", "software.driver_branch"),),
        policy_keys=("software.driver_branch", "software.driver_min_version"),
        references=(sources.DRIVER_INSTALL,),
    ),
    Rule(
        "SW-CUDA-001",
        "software",
        "high",
        "CUDA toolkit needs a newer driver",
        "Since CUDA 11 a toolkit runs on any driver of its major release's minimum branch (12.x on >= 525, 13.x on "
        ">= 580): a newer minor only loses PTX JIT of newer PTX and the newest features (a low-severity warning). A "
        "toolkit of a newer major than the driver does not run at all, unless a cuda-compat package covers it.",
        check_cuda_toolkit,
        role="nvidia_driver",
        manual="Install a driver branch of the toolkit's CUDA major (or the cuda-compat package for the toolkit), or "
        "a toolkit of the driver's major.",
        references=(sources.CUDA_MINOR_COMPAT, sources.CUDA_COMPAT, sources.CUDA_RELEASE_NOTES),
    ),
    Rule(
        "SW-KMOD-001",
        "software",
        "critical",
        "Kernel module and driver versions differ",
        "After a driver upgrade without a reboot the old kernel module stays loaded; NVML and CUDA then fail with "
        "'driver/library version mismatch' (nvmlInit returns NVML_ERROR_LIB_RM_VERSION_MISMATCH). The versions are "
        "read from /proc/driver/nvidia/version and the libnvidia-ml.so.<version> file, so the finding does not "
        "depend on NVML starting.",
        check_kernel_module,
        role="nvidia_driver",
        manual="Reboot, or unload and reload the nvidia modules when no process uses the GPUs.",
        references=(sources.NVML_INIT, sources.DRIVER_INSTALL),
    ),
    Rule(
        "SW-FM-001",
        "software",
        "critical",
        "Fabric manager missing, stopped or at another version than the driver on an NVSwitch system",
        "On NVSwitch systems nvidia-fabricmanager must run at exactly the driver's version, or the NVLink fabric is "
        "never set up and CUDA returns cudaErrorSystemNotReady. Up to HGX H100/H200 the NVSwitches are NVIDIA PCI "
        "functions of class 0x0680; on HGX B200/B100 and later they sit behind the baseboard's ConnectX bridge "
        "(limited PFs whose VPD says SMDL=SW_MNG), and fabric manager needs NVLSM, the NVLink subnet manager, "
        "running beside it. Hosts without NVSwitch (PCIe cards, H100 PCIe, GH200, a single GPU) and the compute "
        "trays of multi-node NVLink racks (GB200 NVL72: the switch trays manage the fabric) do not use it: a stale "
        "one there is only reported as info.",
        check_fabricmanager,
        role="nvidia_driver",
        references=(sources.FABRIC_MANAGER, sources.NVIDIA_PCI_TABLE, sources.PCI_IDS, sources.MNNVL_GUIDE),
    ),
    Rule(
        "SW-IMEX-001",
        "software",
        "high",
        "IMEX not running or its node list unsound on a multi-node NVLink compute tray",
        "On the compute trays of a multi-node NVLink domain (GB200/GB300 NVL72, GH200 NVL32: Grace superchips whose "
        "GPUs report an NVLink fabric) nvidia-imex is the service that maps GPU memory between the domain's nodes; "
        "it reads the domain's node IP addresses from IMEX_NODE_CONFIG_FILE (/etc/nvidia-imex/nodes_config.cfg) and "
        "binds to the one that is its own. Without it, or with a node list that is missing, not one IP address per "
        "line, or without this host, multi-node CUDA jobs cannot share memory over NVLink. Single nodes (HGX "
        "boards, a GH200 or GB200 NVL4 on its own, PCIe cards) do not need IMEX and pass. Where the job launcher "
        "starts IMEX for each job (software.imex_per_job), only a running daemon is judged.",
        check_imex,
        policy_keys=("software.imex_per_job",),
        manual="Install nvidia-imex at the driver's version, write the domain's node addresses to "
        "/etc/nvidia-imex/nodes_config.cfg (the same list on every node, this host included) and "
        "systemctl enable --now nvidia-imex.",
        references=(sources.IMEX_GUIDE, sources.IMEX_CONFIG, sources.IMEX_DEPLOYMENT, sources.MNNVL_GUIDE),
    ),
    Rule(
        "SW-NVML-001",
        "software",
        "low",
        "The Python NVML binding is older than the fields the audit reads",
        "A binding (nvidia-ml-py, nvidia-ml-py3, the pynvml package) has only the NVML functions of the driver "
        "release it was cut from: an 11.x binding has no nvmlDeviceGetCurrentClocksEventReasons, NUMA node or "
        "fabric-probe call, nvidia-ml-py3 7.352 (Ubuntu 22.04's python3-pynvml) not even row remapping, MIG mode or "
        "NVLink. The audit reads everything else and reports those fields unknown; this finding names the binding "
        "and what it cannot see, so that an unknown is never read as healthy.",
        check_nvml_binding,
        manual="Run playbooks/prereqs.yml: it installs nvidia-ml-py >= %s into a venv (/opt/gpufleet/venv) on "
        "hosts whose Python imports an older binding; set ansible_python_interpreter to that venv's python."
        % NVML_BINDING_FULL,
        references=(sources.NVML_CHANGE_LOG, sources.NVML_PYTHON_BINDING),
    ),
)
