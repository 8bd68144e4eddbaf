"""gpu_info through real Ansible (ansible-runner), unmodified pynvml and the simulated libnvidia-ml.so.1.

One playbook run covers every scenario: each inventory host is a simulated server with its own state file
(per-host `environment:`), so the module runs exactly as on a real host, in its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import labkit
import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
FIX = HERE.parent / "fixtures"
MIB = 1024 * 1024

HEALTHY = {
    # host name: (profile, gpus, driver)
    "a100x1": ("a100", 1, "535"),
    "a100x8": ("a100", 8, "535"),
    "h100x1": ("h100", 1, "550"),
    "h100x8": ("h100", 8, "550"),
    "l40sx1": ("l40s", 1, "570"),
    "l40sx8": ("l40s", 8, "570"),
}

# host name: (profile, gpus, driver, overrides)
FAULTS = {
    "notsupported": ("h100", 8, "550", ["gpu.1.error.nvmlDeviceGetPowerUsage=NotSupported"]),
    "noperm": ("h100", 2, "550", ["error.nvmlDeviceGetEnforcedPowerLimit=NoPermission"]),
    "lost": ("a100", 4, "535", ["gpu.2.lost=1"]),
    "lost_handle": ("a100", 4, "535", ["gpu.2.error.nvmlDeviceGetHandleByIndex_v2=GpuIsLost"]),
    "old_driver": (
        "a100",
        2,
        "535",
        ["missing=nvmlDeviceGetCurrentClocksEventReasons,nvmlSystemGetCudaDriverVersion_v2,nvmlDeviceGetNumaNodeId"],
    ),
    "init_noperm": ("h100", 1, "550", ["error.nvmlInitWithFlags=NoPermission"]),
    "throttled": ("a100", 2, "535", ["gpu.*.clocks_event_reasons=0x44", "gpu.0.power_limit_mw=300000"]),
    # Issue 13 §3: one HGX H100 host with a fault per GPU, read through unmodified pynvml.
    "health": (
        "h100",
        4,
        "550",
        [
            "gpu.0.nvlink_down=3,4",
            "gpu.1.nvlink_replay_per_s=0,40",
            "gpu.1.nvlink_crc_flit=0,0,7",
            "gpu.1.pcie_replay_per_s=500",
            "gpu.2.fabric_state=1",
            "gpu.2.recovery_action=1",
            "gpu.3.fabric_status=NotSupported",
            "gpu.3.fabric_health_mask=0x11",
            "gpu.3.vbios_version=96.00.30.00.01",
            "gpu.3.mig_pending=1",
        ],
    ),
    # An older driver: no fabric V call, no recovery-action field.
    "health_old_driver": (
        "h100",
        1,
        "535",
        ["missing=nvmlDeviceGetGpuFabricInfoV", "gpu.0.recovery_action=", "gpu.0.fabric_state=2"],
    ),
}


def _i(v):
    return None if v is None else int(v, 0) if isinstance(v, str) else int(v)


def expected_gpu(state: dict[str, str], i: int) -> dict:
    """What gpu_info must return for GPU ``i``, derived from the simulated driver's state file alone."""

    def g(key):
        return state.get(f"gpu.{i}.{key}")

    def w(key):
        return None if g(key) is None else int(g(key)) / 1000.0

    def b(key):
        return None if g(key) is None else bool(int(g(key)))

    total, used = _i(g("memory_total")), _i(g("memory_used"))
    exp = {
        "index": i,
        "name": g("name"),
        "uuid": g("uuid"),
        "pci_bus_id": g("pci_bus_id"),
        "architecture": decoders.architecture_name(_i(g("architecture"))),
        "memory": {
            "total_mib": total // MIB,
            "used_mib": used // MIB,
            "free_mib": (total - used) // MIB,
            "used_pct": round(100.0 * used / total, 1),
        },
        "persistence_mode": b("persistence_mode"),
        "utilization": {"gpu_pct": _i(g("utilization_gpu")), "memory_pct": _i(g("utilization_memory"))},
        "power": {
            "usage_w": w("power_usage_mw"),
            "limit_w": w("power_limit_mw"),
            "default_limit_w": w("power_default_limit_mw"),
            "min_limit_w": w("power_min_limit_mw"),
            "max_limit_w": w("power_max_limit_mw"),
            "enforced_limit_w": w("enforced_power_limit_mw"),
        },
        "ecc": {
            "current": b("ecc_current"),
            "pending": b("ecc_pending"),
            "volatile_uncorrected": _i(g("ecc_volatile_uncorrected")),
            "aggregate_uncorrected": _i(g("ecc_aggregate_uncorrected")),
            "volatile_corrected": _i(g("ecc_volatile_corrected")),
            "aggregate_corrected": _i(g("ecc_aggregate_corrected")),
        },
        "remapped_rows": None
        if g("remapped_corrected") is None
        else {
            "corrected": _i(g("remapped_corrected")),
            "uncorrected": _i(g("remapped_uncorrected")),
            "pending": b("remapped_pending"),
            "failure": b("remapped_failure"),
        },
        "retired_pages": None
        if g("retired_sbe") is None
        else {"single_bit": _i(g("retired_sbe")), "double_bit": _i(g("retired_dbe")), "pending": b("retired_pending")},
        "clocks": {
            "graphics": _i(g("clock_graphics")),
            "sm": _i(g("clock_sm")),
            "mem": _i(g("clock_mem")),
            "max_graphics": _i(g("max_clock_graphics")),
            "max_sm": _i(g("max_clock_sm")),
            "max_mem": _i(g("max_clock_mem")),
            "app_graphics": _i(g("app_clock_graphics")),
            "app_mem": _i(g("app_clock_mem")),
            "default_app_graphics": _i(g("default_app_clock_graphics")),
            "default_app_mem": _i(g("default_app_clock_mem")),
        },
        "temperature": {
            "gpu": _i(g("temperature")),
            "slowdown": _i(g("temp_slowdown")),
            "shutdown": _i(g("temp_shutdown")),
            "gpu_max": _i(g("temp_gpu_max")),
        },
        "pcie": {
            "gen_current": _i(g("pcie_gen_current")),
            "width_current": _i(g("pcie_width_current")),
            "gen_max": _i(g("pcie_gen_max")),
            "width_max": _i(g("pcie_width_max")),
        },
        "compute_mode": decoders.compute_mode_name(_i(g("compute_mode"))),
        "mig": None if g("mig_current") is None else {"current": b("mig_current"), "pending": b("mig_pending")},
        "cpu_affinity": decoders.cpus_to_cpulist(decoders.parse_cpulist(g("cpu_affinity"))),
        "numa_node": _i(g("numa_node")),
        "lost": False,
        "source": "pynvml",
    }
    mask = _i(g("clocks_event_reasons"))
    names = decoders.decode_clock_event_reasons(mask)
    exp["clock_event_reasons"] = {
        "mask": f"0x{mask:016x}",
        "active": names,
        "throttling": decoders.throttling_reasons(names),
    }
    links = _i(g("nvlink_count") or "0")
    down = [int(x) for x in (g("nvlink_down") or "").split(",") if x]

    def link_sum(key):
        return sum(int(x) for x in g(key).split(",")[:links]) if g(key) else None

    exp["nvlink"] = (
        {
            "up": links - len(down),
            "total": links,
            "down": down,
            "errors": {k: link_sum("nvlink_" + k) for k in ("replay", "recovery", "crc_flit", "crc_data")},
        }
        if links
        else None
    )
    exp["pcie"]["replay_count"] = _i(g("pcie_replay"))
    state_code = _i(g("fabric_state"))
    exp["fabric"] = (
        None
        if not state_code
        else {
            "state": {1: "not_started", 2: "in_progress", 3: "completed"}[state_code],
            "status": None
            if state_code != 3
            else ("Success" if g("fabric_status") in (None, "0") else g("fabric_status")),
            "health_mask": "0x%08x" % (_i(g("fabric_health_mask")) or 0),
        }
    )
    actions = ["none", "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset"]
    exp["recovery_action"] = actions[_i(g("recovery_action"))] if g("recovery_action") else None
    exp["vbios_version"] = g("vbios_version")
    procs = [p.split(":") for p in (g("processes") or "").split(",") if p]
    exp["processes"] = [{"pid": int(pid), "used_memory_mib": int(mem) // MIB} for pid, mem in procs]
    return exp


def diff(expected: dict, actual: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in expected.items():
        got = actual.get(key, "<missing>")
        if isinstance(value, dict) and isinstance(got, dict):
            out += diff(value, got, f"{prefix}{key}.")
        elif got != value:
            out.append(f"{prefix}{key}: expected {value!r}, got {got!r}")
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory, profiles, sim_lib):
    """Write state files and an inventory for every scenario, run gpu_info once over all, return per-host results."""
    tmp = tmp_path_factory.mktemp("gpu_info")
    states: dict[str, dict] = {}
    hosts: dict[str, dict] = {}
    base = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sim_lib_dir": str(sim_lib.parent),
    }

    def add(name, profile, gpus, driver, overrides=(), **hostvars):
        path = tmp / f"{name}.state"
        if profile is not None:
            state = profiles.build_state(profile, gpus=gpus, driver=driver, overrides=list(overrides))
            profiles.write_state(path, state)
            states[name] = state
        hosts[name] = {**base, "sim_state": str(path), **hostvars}

    for name, (profile, gpus, driver) in HEALTHY.items():
        add(name, profile, gpus, driver)
    for name, (profile, gpus, driver, overrides) in FAULTS.items():
        add(name, profile, gpus, driver, overrides)
    # The older driver has no nvmlDeviceGetNumaNodeId: give it a sysfs tree with the GPUs' PCI devices.
    sysroot = tmp / "oldroot"
    old = states["old_driver"]
    for i in range(int(old["gpu_count"])):
        domain, rest = old[f"gpu.{i}.pci_bus_id"].lower().split(":", 1)
        dev = sysroot / "sys/bus/pci/devices" / f"{domain[-4:]}:{rest}"
        dev.mkdir(parents=True)
        (dev / "numa_node").write_text(old[f"gpu.{i}.numa_node"] + "\n")
    hosts["old_driver"]["gpu_info_root"] = str(sysroot)

    # No state file: the simulated driver is not loaded.
    add("nodriver", None, 0, None)
    # No library at all on the loader path.
    add("nolibrary", "h100", 1, "550", sim_lib_dir="/nonexistent")
    # Library given by path, nothing on the loader path.
    add("custom_library", "h100", 2, "550", sim_lib_dir="", gpu_info_nvml_library=str(sim_lib))
    add("bad_library", "h100", 1, "550", gpu_info_nvml_library="/nonexistent/libnvidia-ml.so.1")

    # A fixture root for kernel-module and toolkit versions.
    root = tmp / "root"
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024\n"
    )
    for version in ("12.2.2", "12.4.1"):
        d = root / f"usr/local/cuda-{version.rsplit('.', 1)[0]}"
        d.mkdir(parents=True)
        (d / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": version}}))
    (root / "usr/local/cuda-11.8").mkdir(parents=True)
    (root / "usr/local/cuda-11.8/version.txt").write_text("CUDA Version 11.8.89\n")
    os.symlink("cuda-12.4", root / "usr/local/cuda")
    add("with_root", "h100", 1, "550", gpu_info_root=str(root))
    add("bad_root", "h100", 1, "550", gpu_info_root=str(tmp / "nope"))

    # nvidia-smi fallback: an interpreter without pynvml, and a stand-in nvidia-smi on PATH.
    nopynvml = tmp / "nopynvml"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(nopynvml)], check=True)
    smi_bin = tmp / "smi-bin"
    smi_bin.mkdir()
    os.symlink(FIX / "nvidia-smi" / "fake-nvidia-smi", smi_bin / "nvidia-smi")
    smi_path = f"{smi_bin}:{os.environ['PATH']}"
    smi_fixture = str(FIX / "nvidia-smi" / "a100x2-busy.csv")
    for name, extra in {
        "smi_auto": {},
        "smi_legacy": {"NVIDIA_SMI_LEGACY": "1"},
        "smi_nodriver": {"NVIDIA_SMI_NO_DRIVER": "1"},
    }.items():
        add(name, None, 0, None, ansible_python_interpreter=str(nopynvml / "bin" / "python"), sim_path=smi_path)
        hosts[name]["smi_env"] = {"NVIDIA_SMI_FIXTURE": smi_fixture, **extra}
    # One GPU nvidia-smi cannot open (its error line, exit status 15): the other three are still read.
    add(
        "smi_one_gpu_failed",
        None,
        0,
        None,
        ansible_python_interpreter=str(nopynvml / "bin" / "python"),
        sim_path=smi_path,
    )
    hosts["smi_one_gpu_failed"]["smi_env"] = {
        "NVIDIA_SMI_FIXTURE": str(FIX / "nvidia-smi" / "h100x4-handle-error.csv"),
        "NVIDIA_SMI_RC": "15",
    }
    add("smi_forced", None, 0, None, gpu_info_backend="nvidia-smi", sim_path=smi_path)
    hosts["smi_forced"]["smi_env"] = {"NVIDIA_SMI_FIXTURE": smi_fixture}
    add(
        "pynvml_forced_missing",
        None,
        0,
        None,
        gpu_info_backend="pynvml",
        ansible_python_interpreter=str(nopynvml / "bin" / "python"),
    )

    inventory = tmp / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    playbook = tmp / "play.yml"
    # The stand-in nvidia-smi reads its fixture from the environment: merge smi_env into the play's environment.
    text = (HERE / "playbooks" / "gpu_info.yml").read_text()
    text = text.replace(
        'PATH: "{{ sim_path',
        "NVIDIA_SMI_FIXTURE: \"{{ (smi_env | default({})).NVIDIA_SMI_FIXTURE | default('') }}\"\n"
        "    NVIDIA_SMI_LEGACY: \"{{ (smi_env | default({})).NVIDIA_SMI_LEGACY | default('0') }}\"\n"
        "    NVIDIA_SMI_NO_DRIVER: \"{{ (smi_env | default({})).NVIDIA_SMI_NO_DRIVER | default('0') }}\"\n"
        "    NVIDIA_SMI_RC: \"{{ (smi_env | default({})).NVIDIA_SMI_RC | default('0') }}\"\n"
        '    PATH: "{{ sim_path',
    )
    playbook.write_text(text)
    result = run_playbook(str(playbook), str(inventory), forks=8)
    assert set(result.hosts) == set(hosts), f"missing hosts: {set(hosts) - set(result.hosts)}"
    return {"hosts": result.hosts, "states": states}


def _ok(fleet, name) -> dict:
    host = fleet["hosts"][name]
    assert host.status == "ok", f"{name}: {host.status}: {host.message}"
    res = host.results["Read simulated GPU state"]
    assert res["changed"] is False
    return res


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_every_field_equals_the_profile(fleet, name):
    res = _ok(fleet, name)
    state = fleet["states"][name]
    count = int(state["gpu_count"])
    binding = res["nvml"].pop("binding")
    assert res["nvml"] == {"available": True, "source": "pynvml", "error": None, "error_code": None, "library": None}
    # The project's own binding (nvidia-ml-py) has every function the reader calls.
    assert binding["distribution"] == "nvidia-ml-py" and binding["lacks"] == {}
    assert res["gpu_count"] == count == HEALTHY[name][1]
    drv = res["driver"]
    assert drv["version"] == state["driver_version"]
    assert drv["nvml_version"] == state["nvml_version"]
    assert drv["cuda_driver_version_int"] == int(state["cuda_driver_version"])
    assert drv["cuda_driver_version"] == decoders.cuda_version_string(int(state["cuda_driver_version"]))
    assert drv["branch"] == int(HEALTHY[name][2])
    problems = []
    for i, gpu in enumerate(res["gpus"]):
        problems += [f"gpu {i}: {p}" for p in diff(expected_gpu(state, i), gpu)]
    assert not problems, "\n".join(problems)


def test_profiles_look_like_the_real_products(fleet):
    h100 = _ok(fleet, "h100x8")["gpus"]
    assert {g["name"] for g in h100} == {"NVIDIA H100 80GB HBM3"}
    assert h100[0]["power"]["max_limit_w"] == 700.0 and h100[0]["pcie"]["gen_max"] == 5
    assert len({g["uuid"] for g in h100}) == 8
    l40s = _ok(fleet, "l40sx1")["gpus"][0]
    assert l40s["nvlink"] is None and l40s["unsupported"]["nvlink"] == "NotSupported"
    assert l40s["mig"] is None and l40s["unsupported"]["mig.current"] == "NotSupported"


def test_not_supported_on_one_gpu(fleet):
    gpus = _ok(fleet, "notsupported")["gpus"]
    assert gpus[1]["power"]["usage_w"] is None
    assert gpus[1]["unsupported"]["power.usage_w"] == "NotSupported"
    assert gpus[0]["power"]["usage_w"] is not None and "power.usage_w" not in gpus[0]["unsupported"]
    assert gpus[1]["power"]["limit_w"] is not None


def test_no_permission_is_a_null_with_reason(fleet):
    for gpu in _ok(fleet, "noperm")["gpus"]:
        assert gpu["power"]["enforced_limit_w"] is None
        assert gpu["unsupported"]["power.enforced_limit_w"] == "NoPermission"
        assert gpu["power"]["limit_w"] == 700.0


@pytest.mark.parametrize("name", ["lost", "lost_handle"])
def test_lost_gpu_does_not_stop_the_others(fleet, name):
    gpus = _ok(fleet, name)["gpus"]
    assert len(gpus) == 4
    assert gpus[2]["lost"] is True
    for i in (0, 1, 3):
        assert gpus[i]["lost"] is False and gpus[i]["name"] == "NVIDIA A100-SXM4-80GB"
        assert gpus[i]["memory"]["total_mib"] == 81920


def _judge(res):
    from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules

    pol = policy.validate({}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate({"gpu": res}, pol)}


HEALTH_RULES = ("GPU-NVL-001", "GPU-NVL-002", "GPU-FAB-001", "GPU-ECC-003", "GPU-ECC-004", "GPU-RCV-001",
                "GPU-PCI-002", "GPU-MIG-001", "GPU-FW-001")  # fmt: skip


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_profiles_pass_the_health_rules(fleet, name):
    """Every profile's defaults are healthy: counters sampled and not rising, fabric completed on the H100 HGX board,
    NVLink and fabric NotSupported on L40S (no finding), one VBIOS per host."""
    res = _ok(fleet, name)
    for g in res["gpus"]:
        assert g["pcie"]["sample_seconds"] >= 0.9 and g["pcie"]["replay_increase"] == 0
        if g["nvlink"] is not None:
            assert g["nvlink"]["errors_increase"] == {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    findings = _judge(res)
    bad = {r: findings[r]["message"] for r in HEALTH_RULES if findings[r]["status"] in ("fail", "warn", "error")}
    assert not bad
    if name.startswith("l40s"):
        assert findings["GPU-NVL-001"]["status"] == findings["GPU-FAB-001"]["status"] == "skip"
    if name.startswith("h100"):
        assert findings["GPU-FAB-001"]["status"] == "pass"


def test_health_faults_read_and_judged(fleet):
    """The real reader over unmodified pynvml sees each injected fault, and the rule for it fires."""
    res = _ok(fleet, "health")
    state = fleet["states"]["health"]
    gpus = res["gpus"]
    problems = []
    for i, gpu in enumerate(gpus):
        # Counters that rise (nvlink_*_per_s, pcie_replay_per_s) are checked by their increase below.
        rising = ("nvlink.errors.replay", "pcie.replay_count") if i == 1 else ()
        problems += [f"gpu {i}: {p}" for p in diff(expected_gpu(state, i), gpu) if not p.startswith(rising)]
    assert not problems, "\n".join(problems)
    assert gpus[0]["nvlink"]["down"] == [3, 4] and gpus[0]["nvlink"]["up"] == 16
    rise = gpus[1]["nvlink"]["errors_increase"]
    assert rise["replay"] >= 30 and rise["crc_flit"] == 0  # 40/s for about a second; a static total does not rise
    assert gpus[1]["pcie"]["replay_increase"] >= 400
    assert gpus[2]["fabric"]["state"] == "not_started" and gpus[2]["recovery_action"] == "gpu_reset"
    assert gpus[3]["fabric"] == {
        "state": "completed",
        "status": "NotSupported",
        "health_mask": "0x00000011",
        "health_problems": ["degraded_bandwidth", "route_unhealthy"],
    }
    findings = _judge(res)
    fired = {r: ([i.get("gpu") for i in findings[r]["items"]], findings[r]["severity"]) for r in HEALTH_RULES
             if findings[r]["status"] == "fail"}  # fmt: skip
    assert fired == {
        "GPU-NVL-001": ([0], "high"),
        "GPU-NVL-002": ([1], "high"),
        "GPU-FAB-001": ([2, 3], "critical"),
        "GPU-RCV-001": ([2], "critical"),
        "GPU-PCI-002": ([1], "medium"),
        "GPU-MIG-001": ([3], "medium"),
        "GPU-FW-001": ([None], "medium"),
    }


def test_health_on_an_older_driver(fleet):
    """No nvmlDeviceGetGpuFabricInfoV: the plain call gives the state; no recovery-action field: None, no finding."""
    [g] = _ok(fleet, "health_old_driver")["gpus"]
    assert g["fabric"]["state"] == "in_progress" and g["fabric"]["status"] is None
    assert g["recovery_action"] is None and g["unsupported"]["recovery_action"] == "NotSupported"
    findings = _judge(_ok(fleet, "health_old_driver"))
    assert (findings["GPU-FAB-001"]["status"], findings["GPU-FAB-001"]["severity"]) == ("warn", "medium")
    assert findings["GPU-RCV-001"]["status"] == "skip"


def test_older_driver_without_symbols(fleet):
    res = _ok(fleet, "old_driver")
    state = fleet["states"]["old_driver"]
    # CUDA version falls back to the plain call, clock reasons to the "throttle" name.
    assert res["driver"]["cuda_driver_version_int"] == int(state["cuda_driver_version"])
    assert res["driver"]["unsupported"] == {}
    for i, gpu in enumerate(res["gpus"]):
        assert gpu["clock_event_reasons"]["mask"] == "0x{:016x}".format(_i(state[f"gpu.{i}.clocks_event_reasons"]))
        # No nvmlDeviceGetNumaNodeId: the NUMA node comes from the kernel's view of the PCI device.
        assert gpu["numa_node"] == _i(state[f"gpu.{i}.numa_node"])
        assert "numa_node" not in gpu["unsupported"]
        assert "clock_event_reasons" not in gpu["unsupported"]


def test_throttling_decoded(fleet):
    gpus = _ok(fleet, "throttled")["gpus"]
    assert gpus[0]["clock_event_reasons"]["throttling"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert gpus[0]["power"]["limit_w"] == 300.0 and gpus[0]["power"]["default_limit_w"] == 400.0


@pytest.mark.parametrize(
    "name, reason", [("nodriver", "DriverNotLoaded"), ("nolibrary", "LibraryNotFound"), ("init_noperm", "NoPermission")]
)
def test_no_usable_driver_is_a_fact(fleet, name, reason):
    res = _ok(fleet, name)
    assert res["nvml"]["available"] is False
    assert reason in res["nvml"]["error"]
    assert res["gpus"] == [] and res["gpu_count"] == 0


def test_library_by_path(fleet):
    res = _ok(fleet, "custom_library")
    assert res["nvml"]["available"] is True and res["gpu_count"] == 2
    assert res["nvml"]["library"].endswith("libnvidia-ml.so.1")


@pytest.mark.parametrize(
    "name, message",
    [
        ("bad_library", "nvml_library: no such file: /nonexistent/libnvidia-ml.so.1"),
        ("bad_root", "root: not a directory"),
        ("pynvml_forced_missing", "backend=pynvml but pynvml cannot be imported"),
    ],
)
def test_bad_input_is_a_clear_error(fleet, name, message):
    labkit.assert_clear_error(fleet["hosts"][name], message)


def test_software_versions_from_root(fleet):
    drv = _ok(fleet, "with_root")["driver"]
    assert drv["kernel_module_version"] == "550.90.07"
    assert drv["cuda_toolkits"] == [
        {"path": "/usr/local/cuda-11.8", "version": "11.8.89", "default": False},
        {"path": "/usr/local/cuda-12.2", "version": "12.2.2", "default": False},
        {"path": "/usr/local/cuda-12.4", "version": "12.4.1", "default": True},
    ]


@pytest.mark.parametrize("name", ["smi_auto", "smi_legacy", "smi_forced"])
def test_nvidia_smi_fallback(fleet, name):
    res = _ok(fleet, name)
    assert res["nvml"]["available"] is True and res["nvml"]["source"] == "nvidia-smi"
    assert res["driver"]["version"] == "535.183.01" and res["driver"]["branch"] == 535
    gpus = res["gpus"]
    assert [g["source"] for g in gpus] == ["nvidia-smi", "nvidia-smi"]
    assert gpus[0]["memory"]["used_pct"] == 98.0
    assert gpus[1]["clock_event_reasons"]["throttling"] == ["sw_power_cap", "hw_thermal_slowdown"]
    assert gpus[0]["numa_node"] is None and "numa_node" in gpus[0]["unsupported"]


def test_nvidia_smi_one_gpu_failed(fleet):
    """nvidia-smi exits 15 with an error line for GPU 2: GPUs 0, 1 and 3 are read, GPU 2 is lost with the error."""
    res = _ok(fleet, "smi_one_gpu_failed")
    assert res["nvml"]["available"] is True and res["gpu_count"] == 4, res["nvml"]
    assert [(g["index"], g["lost"]) for g in res["gpus"]] == [(0, False), (1, False), (2, True), (3, False)]
    assert res["gpus"][2]["error"] == "nvidia-smi: Unknown Error"
    assert res["gpus"][3]["memory"]["used_mib"] == 76012


def test_nvidia_smi_without_driver(fleet):
    res = _ok(fleet, "smi_nodriver")
    assert res["nvml"]["available"] is False
    assert "pynvml not importable" in res["nvml"]["error"]
    assert "couldn't communicate with the NVIDIA driver" in res["nvml"]["error"]
