"""Tests of the fake NVML library (tests/sim/nvml) through the unmodified pynvml.

pynvml loads libnvidia-ml.so.1 once per process, so every check runs pynvml in a child process with
LD_LIBRARY_PATH=<built lib> and FAKE_NVML_STATE=<state file>.  The library re-reads the state on every call, so
one child can change the state between calls.
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

NVML_DIR = pathlib.Path(__file__).resolve().parent / "nvml"
sys.path.insert(0, str(NVML_DIR))
import profiles  # noqa: E402

NOBODY = 65534

EXPORTED = """
nvmlInitWithFlags nvmlInit_v2 nvmlInit nvmlShutdown nvmlErrorString nvmlSystemGetDriverVersion
nvmlSystemGetNVMLVersion nvmlSystemGetCudaDriverVersion nvmlSystemGetCudaDriverVersion_v2 nvmlDeviceGetCount_v2
nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByUUID nvmlDeviceGetHandleByPciBusId_v2 nvmlDeviceGetIndex
nvmlDeviceGetName nvmlDeviceGetUUID nvmlDeviceGetSerial nvmlDeviceGetPciInfo_v3 nvmlDeviceGetArchitecture
nvmlDeviceGetMemoryInfo nvmlDeviceGetMemoryInfo_v2 nvmlDeviceGetPersistenceMode nvmlDeviceGetPowerUsage
nvmlDeviceGetUtilizationRates
nvmlDeviceGetPowerManagementLimit nvmlDeviceGetPowerManagementDefaultLimit nvmlDeviceGetPowerManagementLimitConstraints
nvmlDeviceGetEnforcedPowerLimit nvmlDeviceGetEccMode nvmlDeviceGetTotalEccErrors nvmlDeviceGetRemappedRows
nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPagesPendingStatus nvmlDeviceGetClockInfo nvmlDeviceGetMaxClockInfo
nvmlDeviceGetApplicationsClock nvmlDeviceGetDefaultApplicationsClock nvmlDeviceGetSupportedMemoryClocks
nvmlDeviceGetSupportedGraphicsClocks nvmlDeviceGetCurrentClocksEventReasons nvmlDeviceGetCurrentClocksThrottleReasons
nvmlDeviceGetTemperature nvmlDeviceGetTemperatureThreshold nvmlDeviceGetCurrPcieLinkGeneration
nvmlDeviceGetCurrPcieLinkWidth nvmlDeviceGetMaxPcieLinkGeneration nvmlDeviceGetMaxPcieLinkWidth
nvmlDeviceGetGpuMaxPcieLinkGeneration nvmlDeviceGetComputeMode nvmlDeviceGetMigMode nvmlDeviceGetNvLinkState
nvmlDeviceGetCpuAffinity nvmlDeviceGetNumaNodeId nvmlDeviceGetComputeRunningProcesses_v3
nvmlDeviceGetComputeRunningProcesses_v2 nvmlDeviceSetPersistenceMode nvmlDeviceSetPowerManagementLimit
nvmlDeviceSetComputeMode nvmlDeviceSetApplicationsClocks nvmlDeviceResetApplicationsClocks nvmlDeviceSetGpuLockedClocks
nvmlDeviceResetGpuLockedClocks nvmlDeviceSetEccMode nvmlDeviceSetMigMode
nvmlDeviceGetNvLinkErrorCounter nvmlDeviceGetPcieReplayCounter nvmlDeviceGetVbiosVersion nvmlDeviceGetGpuFabricInfo
nvmlDeviceGetGpuFabricInfoV nvmlDeviceGetFieldValues nvmlDeviceGetNvLinkRemotePciInfo_v2
nvmlDeviceGetPciInfo_v2 nvmlDeviceGetComputeRunningProcesses
""".split()

# Code run at the top of every child: helpers around the unmodified pynvml.
PRELUDE = r"""
import ctypes, json, os, sys
import pynvml as N

def res(f, *a):
    try:
        return f(*a)
    except N.NVMLError as e:
        return "!" + type(e).__name__

def out(x):
    print(json.dumps(x, default=str))
"""


def _find_nvml_include() -> str | None:
    if os.environ.get("NVML_INCLUDE"):
        return os.environ["NVML_INCLUDE"]
    try:
        import nvidia  # namespace package from nvidia-nvml-dev / nvidia-*-cu* wheels
    except ImportError:
        nvidia = None
    for base in getattr(nvidia, "__path__", []):
        for header in sorted(pathlib.Path(base).glob("cu*/include/nvml.h")) + sorted(
            pathlib.Path(base).glob("*/include/nvml.h")
        ):
            return str(header.parent)
    for d in ("/usr/include", "/usr/local/cuda/include"):
        if os.path.exists(os.path.join(d, "nvml.h")):
            return d
    return None


@pytest.fixture(scope="session")
def shared_dir():
    """A world-readable scratch dir (pytest's tmp dirs are 0700; the non-root child must read the lib and state)."""
    d = tempfile.mkdtemp(prefix="fake-nvml-")
    os.chmod(d, 0o755)
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def libdir(shared_dir):
    include = _find_nvml_include()
    if include is None:
        pytest.skip("nvml.h not found (pip install nvidia-nvml-dev, or set NVML_INCLUDE)")
    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.skip("make and gcc are needed to build the fake NVML library")
    out = shared_dir / "lib"
    subprocess.run(
        ["make", "-s", "-C", str(NVML_DIR), f"NVML_INCLUDE={include}", f"OUT={out}"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert (out / "libnvidia-ml.so.1").is_file()
    return out


@pytest.fixture
def sdir(shared_dir, request):
    d = pathlib.Path(tempfile.mkdtemp(dir=shared_dir, prefix="t-"))
    os.chmod(d, 0o755)
    return d


def make_state(sdir, profile="h100", gpus=8, overrides=(), name="nvml.state"):
    path = sdir / name
    profiles.write_state(path, profiles.build_state(profile, gpus, "550", overrides))
    return path


def _as_user(uid):
    return {"user": uid, "group": uid, "extra_groups": []}


@pytest.fixture(scope="session")
def nobody_python(shared_dir):
    """(python, env) that user 65534 can run with pynvml importable.  The venv's interpreter may live under a
    0700 home directory; then use the system python with a copy of the (unmodified) pynvml.py."""
    import pynvml

    pylib = shared_dir / "pylib"
    pylib.mkdir(mode=0o755, exist_ok=True)
    shutil.copy2(pynvml.__file__, pylib / "pynvml.py")
    (pylib / "pynvml.py").chmod(0o644)
    candidates = [(sys.executable, {})]
    for exe in ("/usr/bin/python3", shutil.which("python3")):
        if exe:
            candidates.append((exe, {"PYTHONPATH": str(pylib)}))
    for exe, env in candidates:
        try:
            probe = subprocess.run(
                [exe, "-c", "import os, pynvml; print(os.geteuid())"],
                env=dict(os.environ, **env),
                capture_output=True,
                text=True,
                cwd=str(shared_dir),
                timeout=30,
                **_as_user(NOBODY),
            )
        except OSError:
            continue
        if probe.returncode == 0 and probe.stdout.strip() == str(NOBODY):
            return exe, env
    pytest.skip("no python interpreter usable by uid 65534")


def run_child(libdir, state, code, user=None, expect_rc=0, extra_env=None, python=None):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir), FAKE_NVML_STATE=str(state), PYTHONDONTWRITEBYTECODE="1")
    env.pop("LD_PRELOAD", None)
    env.update(extra_env or {})
    exe = sys.executable
    if python is not None:
        exe, py_env = python
        env.update(py_env)
    kwargs = _as_user(user) if user is not None else {}
    proc = subprocess.run(
        [exe, "-c", PRELUDE + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(state.parent),
        **kwargs,
    )
    assert proc.returncode == expect_rc, proc.stderr
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


# ---------------------------------------------------------------------------------------------------------------------
# Build and exports


def test_exports(libdir):
    lib = ctypes.CDLL(str(libdir / "libnvidia-ml.so.1"))
    missing = [name for name in EXPORTED if not hasattr(lib, name)]
    assert missing == []
    nm = shutil.which("nm")
    if nm:
        syms = subprocess.run(
            [nm, "-D", "--defined-only", str(libdir / "libnvidia-ml.so.1")], capture_output=True, text=True, check=True
        ).stdout.split("\n")
        names = {line.split()[-1] for line in syms if line.strip()}
        assert names == set(EXPORTED)
    needed = (
        subprocess.run(["readelf", "-d", str(libdir / "libnvidia-ml.so.1")], capture_output=True, text=True).stdout
        if shutil.which("readelf")
        else ""
    )
    if needed:
        assert "Library soname: [libnvidia-ml.so.1]" in needed
        assert [line for line in needed.splitlines() if "(NEEDED)" in line and "libc.so" not in line] == []


@pytest.mark.parametrize("how", ["LD_LIBRARY_PATH", "LD_PRELOAD"])
def test_pynvml_loads_the_fake(libdir, sdir, how):
    state = make_state(sdir, gpus=1)
    lib = str(libdir / "libnvidia-ml.so.1")
    extra = {"LD_LIBRARY_PATH": "", "LD_PRELOAD": lib} if how == "LD_PRELOAD" else {}
    code = """
        N.nvmlInit()
        out([N.nvmlDeviceGetCount()] + [l.split()[-1] for l in open("/proc/self/maps") if "libnvidia-ml" in l])
    """
    got = run_child(libdir, state, code, extra_env=extra)
    assert got[0] == 1 and got[1:] and all(m == lib for m in got[1:])


# ---------------------------------------------------------------------------------------------------------------------
# Profiles read back exactly

READBACK = r"""
N.nvmlInit()
r = {}
r["driver_version"] = N.nvmlSystemGetDriverVersion()
r["nvml_version"] = N.nvmlSystemGetNVMLVersion()
r["cuda_driver_version"] = N.nvmlSystemGetCudaDriverVersion()
r["cuda_v2"] = N.nvmlSystemGetCudaDriverVersion_v2()
r["gpu_count"] = N.nvmlDeviceGetCount()

def cpulist(mask):
    cpus = [w * 64 + b for w, word in enumerate(mask) for b in range(64) if word >> b & 1]
    ranges, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            ranges.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(ranges)

for i in range(r["gpu_count"]):
    h = N.nvmlDeviceGetHandleByIndex(i)
    p = f"gpu.{i}."
    def put(key, f, *a):
        r[p + key] = res(f, h, *a)
    put("index", N.nvmlDeviceGetIndex)
    put("name", N.nvmlDeviceGetName)
    put("uuid", N.nvmlDeviceGetUUID)
    put("serial", N.nvmlDeviceGetSerial)
    pci = N.nvmlDeviceGetPciInfo(h)
    r[p + "pci_bus_id"] = pci.busId
    r[p + "pci_device_id"] = pci.pciDeviceId
    r[p + "pci_subsystem_id"] = pci.pciSubSystemId
    r[p + "_pci_legacy"] = [pci.busIdLegacy, pci.domain, pci.bus, pci.device]
    put("architecture", N.nvmlDeviceGetArchitecture)
    m1 = N.nvmlDeviceGetMemoryInfo(h)
    m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    r[p + "memory_total"] = m1.total
    r[p + "memory_used"] = m1.used
    r[p + "_mem"] = [m1.free, m2.total, m2.used, m2.free, m2.reserved]
    put("persistence_mode", N.nvmlDeviceGetPersistenceMode)
    put("power_usage_mw", N.nvmlDeviceGetPowerUsage)
    util = res(N.nvmlDeviceGetUtilizationRates, h)
    r[p + "utilization_gpu"] = util.gpu if hasattr(util, "gpu") else util
    r[p + "utilization_memory"] = util.memory if hasattr(util, "memory") else util
    put("power_limit_mw", N.nvmlDeviceGetPowerManagementLimit)
    put("power_default_limit_mw", N.nvmlDeviceGetPowerManagementDefaultLimit)
    r[p + "power_min_limit_mw"], r[p + "power_max_limit_mw"] = N.nvmlDeviceGetPowerManagementLimitConstraints(h)
    put("enforced_power_limit_mw", N.nvmlDeviceGetEnforcedPowerLimit)
    r[p + "ecc_current"], r[p + "ecc_pending"] = N.nvmlDeviceGetEccMode(h)
    put("ecc_volatile_corrected", N.nvmlDeviceGetTotalEccErrors, 0, 0)
    put("ecc_volatile_uncorrected", N.nvmlDeviceGetTotalEccErrors, 1, 0)
    put("ecc_aggregate_corrected", N.nvmlDeviceGetTotalEccErrors, 0, 1)
    put("ecc_aggregate_uncorrected", N.nvmlDeviceGetTotalEccErrors, 1, 1)
    rows = res(N.nvmlDeviceGetRemappedRows, h)
    rows = rows if isinstance(rows, tuple) else [rows] * 4
    for k, v in zip(["corrected", "uncorrected", "pending", "failure"], rows):
        r[p + "remapped_" + k] = v
    for k, cause in (("retired_sbe", 0), ("retired_dbe", 1)):
        pages = res(N.nvmlDeviceGetRetiredPages, h, cause)
        r[p + k] = len(pages) if isinstance(pages, list) else pages
        r[p + "_" + k] = pages
    put("retired_pending", N.nvmlDeviceGetRetiredPagesPendingStatus)
    for t, k in enumerate(["graphics", "sm", "mem", "video"]):
        put("clock_" + k, N.nvmlDeviceGetClockInfo, t)
        put("max_clock_" + k, N.nvmlDeviceGetMaxClockInfo, t)
    put("app_clock_graphics", N.nvmlDeviceGetApplicationsClock, N.NVML_CLOCK_GRAPHICS)
    put("app_clock_mem", N.nvmlDeviceGetApplicationsClock, N.NVML_CLOCK_MEM)
    put("_app_clock_sm", N.nvmlDeviceGetApplicationsClock, N.NVML_CLOCK_SM)
    put("default_app_clock_graphics", N.nvmlDeviceGetDefaultApplicationsClock, N.NVML_CLOCK_GRAPHICS)
    put("default_app_clock_mem", N.nvmlDeviceGetDefaultApplicationsClock, N.NVML_CLOCK_MEM)
    mem_clocks = N.nvmlDeviceGetSupportedMemoryClocks(h)
    r[p + "supported_mem_clocks"] = ",".join(map(str, mem_clocks))
    r[p + "supported_graphics_clocks"] = ",".join(map(str, N.nvmlDeviceGetSupportedGraphicsClocks(h, mem_clocks[0])))
    put("clocks_event_reasons", N.nvmlDeviceGetCurrentClocksEventReasons)
    put("_throttle_reasons", N.nvmlDeviceGetCurrentClocksThrottleReasons)
    put("temperature", N.nvmlDeviceGetTemperature, N.NVML_TEMPERATURE_GPU)
    put("temp_shutdown", N.nvmlDeviceGetTemperatureThreshold, N.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    put("temp_slowdown", N.nvmlDeviceGetTemperatureThreshold, N.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    put("temp_gpu_max", N.nvmlDeviceGetTemperatureThreshold, N.NVML_TEMPERATURE_THRESHOLD_GPU_MAX)
    put("temp_mem_max", N.nvmlDeviceGetTemperatureThreshold, N.NVML_TEMPERATURE_THRESHOLD_MEM_MAX)
    put("pcie_gen_current", N.nvmlDeviceGetCurrPcieLinkGeneration)
    put("pcie_width_current", N.nvmlDeviceGetCurrPcieLinkWidth)
    put("pcie_gen_max", N.nvmlDeviceGetMaxPcieLinkGeneration)
    put("pcie_width_max", N.nvmlDeviceGetMaxPcieLinkWidth)
    put("_gpu_max_pcie_gen", N.nvmlDeviceGetGpuMaxPcieLinkGeneration)
    put("compute_mode", N.nvmlDeviceGetComputeMode)
    mig = res(N.nvmlDeviceGetMigMode, h)
    r[p + "mig_current"], r[p + "mig_pending"] = mig if isinstance(mig, list) else (mig, mig)
    links = []
    for link in range(64):
        s = res(N.nvmlDeviceGetNvLinkState, h, link)
        if isinstance(s, str):
            break
        links.append(s)
    if not links:
        r[p + "nvlink_count"] = r[p + "nvlink_down"] = s
    else:
        r[p + "nvlink_count"] = len(links)
        r[p + "nvlink_down"] = ",".join(str(k) for k, s in enumerate(links) if s == 0)
    remote = [res(N.nvmlDeviceGetNvLinkRemotePciInfo, h, link) for link in range(max(len(links), 1))]
    r[p + "nvlink_remote"] = remote[0] if isinstance(remote[0], str) else ",".join(x.busId for x in remote)
    for c, name in enumerate(["replay", "recovery", "crc_flit", "crc_data", "ecc_data"]):
        vals = [res(N.nvmlDeviceGetNvLinkErrorCounter, h, link, c) for link in range(max(len(links), 1))]
        while len(vals) > 1 and vals[-1] == 0:
            vals.pop()
        r[p + "nvlink_" + name] = vals[0] if isinstance(vals[0], str) else ",".join(map(str, vals))
    pr = res(N.nvmlDeviceGetPcieReplayCounter, h)
    r[p + "pcie_replay"] = pr if isinstance(pr, str) else str(pr)
    fab = N.c_nvmlGpuFabricInfoV_t()
    fr = res(N.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(fab))
    for k, v in (("state", fab.state), ("status", fab.status), ("health_mask", fab.healthMask)):
        r[p + "fabric_" + k] = fr if isinstance(fr, str) else v
    fv = N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0]
    r[p + "recovery_action"] = fv.value.uiVal if fv.nvmlReturn == 0 else "!" + type(N.NVMLError(fv.nvmlReturn)).__name__
    put("vbios_version", N.nvmlDeviceGetVbiosVersion)
    r[p + "cpu_affinity"] = cpulist(N.nvmlDeviceGetCpuAffinity(h, 4))
    put("numa_node", N.nvmlDeviceGetNumaNodeId)
    for name, f in (("processes", N.nvmlDeviceGetComputeRunningProcesses),
                    ("_processes_v2", N.nvmlDeviceGetComputeRunningProcesses_v2)):
        r[p + name] = ",".join(f"{x.pid}:{x.usedGpuMemory}" for x in f(h))
    r[p + "_by_uuid"] = N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByUUID(r[p + "uuid"]))
    r[p + "_by_pci"] = N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(pci.busId))
    r[p + "_by_pci_short"] = N.nvmlDeviceGetIndex(N.nvmlDeviceGetHandleByPciBusId(pci.busId[4:].lower()))
N.nvmlShutdown()
out(r)
"""

# No getter of their own: locked clocks and "lost"; rates (seen as a counter's rise, test_health_getters_*), the
# fabric clique id and health summary (read with fabric_state, asserted there).
# nvlink_count_field: read through nvmlDeviceGetFieldValues (test_nvml_reader.py), no getter of its own.
NO_GETTER = {
    "locked_clock_min",
    "locked_clock_max",
    "lost",
    "fabric_clique_id",
    "fabric_health_summary",
    "nvlink_count_field",
} | {k + "_per_s" for k in profiles.COUNTER_KEYS}


def _normalize(key, value):
    base = key.rsplit(".", 1)[-1]
    if base in profiles._STRING_KEYS or base in profiles._FORMATS:
        return value
    return int(value, 0)


@pytest.mark.parametrize("gpus", [1, 8])
@pytest.mark.parametrize("profile", sorted(profiles.PROFILES))
def test_profile_reads_back(libdir, sdir, profile, gpus):
    expected = profiles.build_state(profile, gpus)
    state = sdir / "nvml.state"
    profiles.write_state(state, expected)
    got = run_child(libdir, state, READBACK)

    for key in profiles.SYSTEM_KEYS:
        if key != "missing" and key != "require_root":
            assert got[key] == _normalize(key, expected[key]), key
    assert got["cuda_v2"] == got["cuda_driver_version"]
    for i in range(gpus):
        for base in profiles.GPU_KEYS:
            key = f"gpu.{i}.{base}"
            if base in NO_GETTER:
                continue
            if key in expected:
                assert got[key] == _normalize(key, expected[key]), key
            else:
                assert got[key] == "!NVMLError_NotSupported", key
        p = f"gpu.{i}."
        total, used = int(expected[p + "memory_total"]), int(expected[p + "memory_used"])
        assert got[p + "_mem"] == [total - used, total, used, total - used, 0]
        bus = expected[p + "pci_bus_id"]
        assert got[p + "_pci_legacy"] == [bus[4:], int(bus[:8], 16), int(bus[9:11], 16), 0]
        assert got[p + "_throttle_reasons"] == got[p + "clocks_event_reasons"] == profiles.GPU_IDLE
        assert got[p + "_app_clock_sm"] == got[p + "app_clock_graphics"]
        assert got[p + "_gpu_max_pcie_gen"] == got[p + "pcie_gen_max"]
        assert got[p + "_processes_v2"] == got[p + "processes"] == ""
        assert got[p + "_by_uuid"] == got[p + "_by_pci"] == got[p + "_by_pci_short"] == i


def test_profile_values_are_realistic():
    h100 = profiles.build_state("h100", 8)
    assert h100["gpu.0.name"] == "NVIDIA H100 80GB HBM3" and h100["gpu.0.architecture"] == "9"
    assert [h100[f"gpu.{i}.numa_node"] for i in range(8)] == ["0"] * 4 + ["1"] * 4
    assert [h100[f"gpu.{i}.pci_bus_id"][9:11] for i in range(8)] == ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    assert h100["gpu.7.cpu_affinity"] == "56-111,168-223"
    uuids = {h100[f"gpu.{i}.uuid"] for i in range(8)} | {
        profiles.build_state("a100", 8)[f"gpu.{i}.uuid"] for i in range(8)
    }
    assert len(uuids) == 16 and all(len(u) == 40 and u.startswith("GPU-") for u in uuids)
    assert profiles.build_state("h100", 8) == h100  # deterministic
    assert profiles.build_state("h100", 8, seed="host2")["gpu.0.uuid"] != h100["gpu.0.uuid"]
    l40s = profiles.build_state("l40s", 1)
    for key in ("nvlink_count", "mig_current", "mig_pending", "retired_sbe", "temp_mem_max"):
        assert f"gpu.0.{key}" not in l40s
    assert int(profiles.build_state("a100", 1)["gpu.0.power_max_limit_mw"]) == 400000
    assert profiles.build_state("h100", 1, driver="535")["cuda_driver_version"] == "12020"
    assert profiles.build_state("h100", 1, driver="570")["nvml_version"] == "12.570.86.15"
    assert profiles.build_state("h100", 1, driver="550.54.15")["cuda_driver_version"] == "12040"


# ---------------------------------------------------------------------------------------------------------------------
# Error injection, missing functions, lost GPUs

INJECT = r"""
sys.path.insert(0, os.environ["NVML_PROFILES_DIR"])
import profiles
STATE = os.environ["FAKE_NVML_STATE"]
BASE = profiles.read_state(STATE)

def with_state(extra, f, *a):
    s = dict(BASE); s.update(extra); profiles.write_state(STATE, s)
    try:
        return res(f, *a)
    finally:
        profiles.write_state(STATE, BASE)

r = {}
# init
r["init_inject"] = with_state({"error.nvmlInitWithFlags": "DriverNotLoaded"}, N.nvmlInit)
r["init_missing"] = with_state({"missing": "nvmlDeviceGetCount_v2, nvmlInitWithFlags"}, N.nvmlInit)
N._LoadNvmlLibrary()
r["init_v2_inject"] = with_state({"error.nvmlInit_v2": "Timeout"}, lambda: N.nvmlLib.nvmlInit_v2())
r["init_unversioned_inject"] = with_state({"error.nvmlInit": "9"}, lambda: N.nvmlLib.nvmlInit())
r["init_v2_ok"] = N.nvmlLib.nvmlInit_v2() + N.nvmlLib.nvmlInit() + N.nvmlLib.nvmlShutdown() + N.nvmlLib.nvmlShutdown()
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
uuid0 = N.nvmlDeviceGetUUID(h)
bus0 = N.nvmlDeviceGetPciInfo(h).busId
mem0 = N.nvmlDeviceGetSupportedMemoryClocks(h)[0]
gr0 = N.nvmlDeviceGetSupportedGraphicsClocks(h, mem0)[0]
st = ctypes.c_uint()


def legacy(name, h, *args):  # a symbol only old bindings call (nvidia-ml-py3 7.352), through pynvml's table
    N._nvmlCheckReturn(N._nvmlGetFunctionPointer(name)(h, *args))
    return 0


class PciInfoV2(ctypes.Structure):  # the shorter nvmlPciInfo_t that nvmlDeviceGetPciInfo_v2 callers allocate
    _fields_ = [("busId", ctypes.c_char * 16), ("ids", ctypes.c_uint * 5), ("reserved", ctypes.c_uint * 4)]


class ProcessInfoV1(ctypes.Structure):  # nvmlProcessInfo_v1_t
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]

CALLS = {
    "nvmlSystemGetDriverVersion": lambda h: N.nvmlSystemGetDriverVersion(),
    "nvmlSystemGetNVMLVersion": lambda h: N.nvmlSystemGetNVMLVersion(),
    "nvmlSystemGetCudaDriverVersion": lambda h: N.nvmlSystemGetCudaDriverVersion(),
    "nvmlSystemGetCudaDriverVersion_v2": lambda h: N.nvmlSystemGetCudaDriverVersion_v2(),
    "nvmlDeviceGetCount_v2": lambda h: N.nvmlDeviceGetCount(),
    "nvmlDeviceGetHandleByIndex_v2": lambda h: N.nvmlDeviceGetHandleByIndex(0) and 0,
    "nvmlDeviceGetHandleByUUID": lambda h: N.nvmlDeviceGetHandleByUUID(uuid0) and 0,
    "nvmlDeviceGetHandleByPciBusId_v2": lambda h: N.nvmlDeviceGetHandleByPciBusId(bus0) and 0,
    "nvmlDeviceGetIndex": lambda h: N.nvmlDeviceGetIndex(h),
    "nvmlDeviceGetName": lambda h: N.nvmlDeviceGetName(h),
    "nvmlDeviceGetUUID": lambda h: N.nvmlDeviceGetUUID(h),
    "nvmlDeviceGetSerial": lambda h: N.nvmlDeviceGetSerial(h),
    "nvmlDeviceGetPciInfo_v3": lambda h: N.nvmlDeviceGetPciInfo_v3(h).busId,
    "nvmlDeviceGetArchitecture": lambda h: N.nvmlDeviceGetArchitecture(h),
    "nvmlDeviceGetMemoryInfo": lambda h: N.nvmlDeviceGetMemoryInfo(h).total,
    "nvmlDeviceGetMemoryInfo_v2": lambda h: N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2).total,
    "nvmlDeviceGetPersistenceMode": lambda h: N.nvmlDeviceGetPersistenceMode(h),
    "nvmlDeviceGetPowerUsage": lambda h: N.nvmlDeviceGetPowerUsage(h),
    "nvmlDeviceGetUtilizationRates": lambda h: N.nvmlDeviceGetUtilizationRates(h).gpu,
    "nvmlDeviceGetPowerManagementLimit": lambda h: N.nvmlDeviceGetPowerManagementLimit(h),
    "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: N.nvmlDeviceGetPowerManagementDefaultLimit(h),
    "nvmlDeviceGetPowerManagementLimitConstraints": lambda h: N.nvmlDeviceGetPowerManagementLimitConstraints(h),
    "nvmlDeviceGetEnforcedPowerLimit": lambda h: N.nvmlDeviceGetEnforcedPowerLimit(h),
    "nvmlDeviceGetEccMode": lambda h: N.nvmlDeviceGetEccMode(h),
    "nvmlDeviceGetTotalEccErrors": lambda h: N.nvmlDeviceGetTotalEccErrors(h, 1, 1),
    "nvmlDeviceGetRemappedRows": lambda h: N.nvmlDeviceGetRemappedRows(h),
    "nvmlDeviceGetRetiredPages": lambda h: N.nvmlDeviceGetRetiredPages(h, 0),
    "nvmlDeviceGetRetiredPagesPendingStatus": lambda h: N.nvmlDeviceGetRetiredPagesPendingStatus(h),
    "nvmlDeviceGetClockInfo": lambda h: N.nvmlDeviceGetClockInfo(h, 0),
    "nvmlDeviceGetMaxClockInfo": lambda h: N.nvmlDeviceGetMaxClockInfo(h, 0),
    "nvmlDeviceGetApplicationsClock": lambda h: N.nvmlDeviceGetApplicationsClock(h, 0),
    "nvmlDeviceGetDefaultApplicationsClock": lambda h: N.nvmlDeviceGetDefaultApplicationsClock(h, 2),
    "nvmlDeviceGetSupportedMemoryClocks": lambda h: N.nvmlDeviceGetSupportedMemoryClocks(h),
    "nvmlDeviceGetSupportedGraphicsClocks": lambda h: len(N.nvmlDeviceGetSupportedGraphicsClocks(h, mem0)),
    "nvmlDeviceGetCurrentClocksEventReasons": lambda h: N.nvmlDeviceGetCurrentClocksEventReasons(h),
    "nvmlDeviceGetCurrentClocksThrottleReasons": lambda h: N.nvmlDeviceGetCurrentClocksThrottleReasons(h),
    "nvmlDeviceGetTemperature": lambda h: N.nvmlDeviceGetTemperature(h, 0),
    "nvmlDeviceGetTemperatureThreshold": lambda h: N.nvmlDeviceGetTemperatureThreshold(h, 1),
    "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: N.nvmlDeviceGetCurrPcieLinkGeneration(h),
    "nvmlDeviceGetCurrPcieLinkWidth": lambda h: N.nvmlDeviceGetCurrPcieLinkWidth(h),
    "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: N.nvmlDeviceGetMaxPcieLinkGeneration(h),
    "nvmlDeviceGetMaxPcieLinkWidth": lambda h: N.nvmlDeviceGetMaxPcieLinkWidth(h),
    "nvmlDeviceGetGpuMaxPcieLinkGeneration": lambda h: N.nvmlDeviceGetGpuMaxPcieLinkGeneration(h),
    "nvmlDeviceGetComputeMode": lambda h: N.nvmlDeviceGetComputeMode(h),
    "nvmlDeviceGetMigMode": lambda h: N.nvmlDeviceGetMigMode(h),
    "nvmlDeviceGetNvLinkState": lambda h: N.nvmlDeviceGetNvLinkState(h, 0),
    "nvmlDeviceGetCpuAffinity": lambda h: list(N.nvmlDeviceGetCpuAffinity(h, 4)),
    "nvmlDeviceGetNumaNodeId": lambda h: N.nvmlDeviceGetNumaNodeId(h),
    "nvmlDeviceGetComputeRunningProcesses_v3": lambda h: len(N.nvmlDeviceGetComputeRunningProcesses_v3(h)),
    "nvmlDeviceGetComputeRunningProcesses_v2": lambda h: len(N.nvmlDeviceGetComputeRunningProcesses_v2(h)),
    "nvmlDeviceGetComputeRunningProcesses": lambda h: legacy(
        "nvmlDeviceGetComputeRunningProcesses", h, ctypes.byref(ctypes.c_uint(4)), (ProcessInfoV1 * 4)()
    ),
    "nvmlDeviceGetPciInfo_v2": lambda h: legacy("nvmlDeviceGetPciInfo_v2", h, ctypes.byref(PciInfoV2())),
    "nvmlDeviceGetNvLinkErrorCounter": lambda h: N.nvmlDeviceGetNvLinkErrorCounter(h, 0, 0),
    "nvmlDeviceGetPcieReplayCounter": lambda h: N.nvmlDeviceGetPcieReplayCounter(h),
    "nvmlDeviceGetVbiosVersion": lambda h: N.nvmlDeviceGetVbiosVersion(h),
    "nvmlDeviceGetGpuFabricInfo": lambda h: N.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(N.c_nvmlGpuFabricInfo_t())),
    "nvmlDeviceGetGpuFabricInfoV": lambda h: N.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(N.c_nvmlGpuFabricInfoV_t())),
    "nvmlDeviceGetFieldValues": lambda h: N.nvmlDeviceGetFieldValues(h, [230])[0].value.uiVal,
    "nvmlDeviceGetNvLinkRemotePciInfo_v2": lambda h: N.nvmlDeviceGetNvLinkRemotePciInfo(h, 0).busId,
    "nvmlDeviceSetPersistenceMode": lambda h: N.nvmlDeviceSetPersistenceMode(h, 1),
    "nvmlDeviceSetPowerManagementLimit": lambda h: N.nvmlDeviceSetPowerManagementLimit(h, 700000),
    "nvmlDeviceSetComputeMode": lambda h: N.nvmlDeviceSetComputeMode(h, 0),
    "nvmlDeviceSetApplicationsClocks": lambda h: N.nvmlDeviceSetApplicationsClocks(h, mem0, gr0),
    "nvmlDeviceResetApplicationsClocks": lambda h: N.nvmlDeviceResetApplicationsClocks(h),
    "nvmlDeviceSetGpuLockedClocks": lambda h: N.nvmlDeviceSetGpuLockedClocks(h, 0, 0),
    "nvmlDeviceResetGpuLockedClocks": lambda h: N.nvmlDeviceResetGpuLockedClocks(h),
    "nvmlDeviceSetEccMode": lambda h: N.nvmlDeviceSetEccMode(h, 1),
    "nvmlDeviceSetMigMode": lambda h: N.nvmlDeviceSetMigMode(h, 0),
}
ERRS = os.environ["ERRS"].split()
calls = {}
for n, (name, f) in enumerate(CALLS.items()):
    err = ERRS[n % len(ERRS)]
    before = res(f, h)
    injected = with_state({"error." + name: err}, f, h)
    per_gpu = with_state({"gpu.0.error." + name: err}, f, h)
    other_gpu = with_state({"gpu.1.error." + name: err}, f, h)
    missing = with_state({"missing": "nvmlFoo," + name}, f, h)
    after = res(f, h)
    calls[name] = [err, before, injected, per_gpu, other_gpu, missing, after]
r["calls"] = calls
r["by_name"] = {e: with_state({"error.nvmlDeviceGetPowerUsage": e}, N.nvmlDeviceGetPowerUsage, h) for e in ERRS}
r["numeric"] = with_state({"error.nvmlDeviceGetPowerUsage": "15"}, N.nvmlDeviceGetPowerUsage, h)
r["zero"] = with_state({"error.nvmlDeviceGetPowerUsage": "0"}, N.nvmlDeviceGetPowerUsage, h)
r["garbage"] = with_state({"error.nvmlDeviceGetPowerUsage": "Bogus"}, N.nvmlDeviceGetPowerUsage, h)

# lost GPU 1: handle still works, every device call on it fails, GPU 0 unaffected
lost = {"gpu.1.lost": "1"}
h1 = with_state(lost, N.nvmlDeviceGetHandleByIndex, 1)
r["lost_handle_ok"] = not isinstance(h1, str)
s = dict(BASE); s.update(lost); profiles.write_state(STATE, s)
r["lost"] = {name: res(f, h1) for name, f in CALLS.items()
             if name.startswith("nvmlDevice") and "Handle" not in name and "Count" not in name}
r["lost_other_gpu"] = res(N.nvmlDeviceGetPowerUsage, h)
r["lost_handle_inject"] = with_state({"gpu.1.lost": "1", "gpu.1.error.nvmlDeviceGetHandleByIndex_v2": "GpuIsLost"},
                                     N.nvmlDeviceGetHandleByIndex, 1)
profiles.write_state(STATE, BASE)
r["shutdown_inject"] = with_state({"error.nvmlShutdown": "Unknown"}, N.nvmlShutdown)
r["still_init"] = res(N.nvmlDeviceGetCount)
N.nvmlShutdown()
out(r)
"""

CHECKED_ERRORS = [
    "InvalidArgument",
    "NotSupported",
    "NoPermission",
    "NotFound",
    "InsufficientSize",
    "DriverNotLoaded",
    "Timeout",
    "FunctionNotFound",
    "GpuIsLost",
    "Unknown",
]


def test_error_injection(libdir, sdir):
    state = make_state(sdir, "h100", 2)
    r = run_child(
        libdir, state, INJECT, extra_env={"NVML_PROFILES_DIR": str(NVML_DIR), "ERRS": " ".join(CHECKED_ERRORS)}
    )

    assert r["init_inject"] == "!NVMLError_DriverNotLoaded"
    assert r["init_missing"] == "!NVMLError_FunctionNotFound"
    assert r["init_v2_inject"] == 10 and r["init_unversioned_inject"] == 9 and r["init_v2_ok"] == 0
    assert set(r["calls"]) | {"nvmlInitWithFlags", "nvmlInit_v2", "nvmlInit", "nvmlShutdown", "nvmlErrorString"} == set(
        EXPORTED
    )
    system = {
        "nvmlSystemGetDriverVersion",
        "nvmlSystemGetNVMLVersion",
        "nvmlSystemGetCudaDriverVersion",
        "nvmlSystemGetCudaDriverVersion_v2",
        "nvmlDeviceGetCount_v2",
    }
    for name, (err, before, injected, per_gpu, other_gpu, missing, after) in r["calls"].items():
        want = "!NVMLError_" + err
        assert injected == want, name
        assert missing == "!NVMLError_FunctionNotFound", name
        assert after == before, name
        if name in system:
            assert per_gpu == before, name  # no device involved: per-GPU keys do not apply
        else:
            assert per_gpu == want, name
        assert other_gpu == before, name
    # retired pages are NotSupported on H100 (row remapping), NVLink remote ends in every profile (no
    # nvlink_remote key); everything else works
    failing = {n for n, v in r["calls"].items() if isinstance(v[1], str) and v[1].startswith("!")}
    assert failing == {
        "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        "nvmlDeviceGetNvLinkRemotePciInfo_v2",
    }
    assert r["by_name"] == {e: "!NVMLError_" + e for e in CHECKED_ERRORS}
    assert r["numeric"] == "!NVMLError_GpuIsLost"
    assert isinstance(r["zero"], int) and r["garbage"] == "!NVMLError_Unknown"
    assert r["lost_handle_ok"] is True
    assert set(r["lost"].values()) == {"!NVMLError_GpuIsLost"} and len(r["lost"]) > 45
    assert isinstance(r["lost_other_gpu"], int)
    assert r["lost_handle_inject"] == "!NVMLError_GpuIsLost"
    assert r["shutdown_inject"] == "!NVMLError_Unknown" and r["still_init"] == 2


def test_missing_state_file(libdir, sdir):
    r = run_child(
        libdir,
        sdir / "does-not-exist.state",
        """
        r = [res(N.nvmlInit), res(N.nvmlInit), N.nvmlLib.nvmlInit_v2()]
        N._LoadNvmlLibrary()
        cnt = ctypes.c_uint()
        r.append(N.nvmlLib.nvmlDeviceGetCount_v2(ctypes.byref(cnt)))
        out(r)
    """,
    )
    assert r == ["!NVMLError_DriverNotLoaded", "!NVMLError_DriverNotLoaded", 9, 1]


def test_state_removed_after_init(libdir, sdir):
    state = make_state(sdir, gpus=1)
    r = run_child(
        libdir,
        state,
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        os.rename(os.environ["FAKE_NVML_STATE"], os.environ["FAKE_NVML_STATE"] + ".gone")
        r = [res(N.nvmlDeviceGetPowerUsage, h), res(N.nvmlDeviceGetCount), res(N.nvmlShutdown)]
        out(r)
    """,
    )
    assert r == ["!NVMLError_DriverNotLoaded", "!NVMLError_DriverNotLoaded", None]


def test_uninitialized_and_refcount(libdir, sdir):
    state = make_state(sdir, gpus=2)
    r = run_child(
        libdir,
        state,
        """
        N._LoadNvmlLibrary()
        lib = N.nvmlLib
        cnt = ctypes.c_uint()
        r = {"before": lib.nvmlDeviceGetCount_v2(ctypes.byref(cnt)), "shutdown_early": lib.nvmlShutdown()}
        N.nvmlInit(); N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        N.nvmlShutdown()
        r["after_one_shutdown"] = res(N.nvmlDeviceGetPowerUsage, h)
        N.nvmlShutdown()
        r["after_last_shutdown"] = res(N.nvmlDeviceGetPowerUsage, h)
        r["handle_after"] = res(N.nvmlDeviceGetHandleByIndex, 0)
        r["version_without_init"] = N.nvmlSystemGetNVMLVersion()
        r["cuda_without_init"] = N.nvmlSystemGetCudaDriverVersion()
        r["driver_without_init"] = res(N.nvmlSystemGetDriverVersion)
        r["errstr"] = [N.nvmlErrorString(c) for c in (0, 3, 4, 15, 999, 12345)]
        out(r)
    """,
    )
    assert r["before"] == 1 and r["shutdown_early"] == 1
    assert isinstance(r["after_one_shutdown"], int)
    assert r["after_last_shutdown"] == r["handle_after"] == r["driver_without_init"] == "!NVMLError_Uninitialized"
    assert r["version_without_init"] == "12.550.90.07" and r["cuda_without_init"] == 12040
    assert r["errstr"] == [
        "Success",
        "Not Supported",
        "Insufficient Permissions",
        "GPU is lost",
        "Unknown Error",
        "Unknown Error",
    ]


# ---------------------------------------------------------------------------------------------------------------------
# Argument validation, raw C protocol


def test_invalid_arguments(libdir, sdir):
    state = make_state(
        sdir,
        "h100",
        2,
        [
            "gpu.1.processes=1234:1073741824,5678:2147483648",
            "gpu.0.retired_sbe=3",
            "gpu.0.retired_dbe=1",
            "gpu.0.retired_pending=1",
            "gpu.0.nvlink_down=3,17",
        ],
    )
    r = run_child(
        libdir,
        state,
        """
        N.nvmlInit()
        lib = N.nvmlLib
        h = N.nvmlDeviceGetHandleByIndex(0)
        h1 = N.nvmlDeviceGetHandleByIndex(1)
        u = ctypes.c_uint()
        r = {}
        r["power_low"] = res(N.nvmlDeviceSetPowerManagementLimit, h, 199999)
        r["power_high"] = res(N.nvmlDeviceSetPowerManagementLimit, h, 700001)
        r["power_min_ok"] = res(N.nvmlDeviceSetPowerManagementLimit, h, 200000)
        r["app_bad_mem"] = res(N.nvmlDeviceSetApplicationsClocks, h, 1593, 1980)
        r["app_bad_gr"] = res(N.nvmlDeviceSetApplicationsClocks, h, 2619, 1981)
        r["locked_inverted"] = res(N.nvmlDeviceSetGpuLockedClocks, h, 1500, 1000)
        r["locked_too_high"] = res(N.nvmlDeviceSetGpuLockedClocks, h, 1000, 1995)
        r["compute_thread"] = res(N.nvmlDeviceSetComputeMode, h, 1)
        r["persist_2"] = res(N.nvmlDeviceSetPersistenceMode, h, 2)
        r["ecc_2"] = res(N.nvmlDeviceSetEccMode, h, 2)
        r["mig_2"] = res(N.nvmlDeviceSetMigMode, h, 2)
        r["nvlink_17"] = res(N.nvmlDeviceGetNvLinkState, h, 17)
        r["nvlink_3"] = res(N.nvmlDeviceGetNvLinkState, h, 3)
        r["nvlink_18"] = res(N.nvmlDeviceGetNvLinkState, h, 18)
        r["nvlink_0"] = res(N.nvmlDeviceGetNvLinkState, h, 0)
        r["clock_type"] = res(N.nvmlDeviceGetClockInfo, h, 7)
        r["ecc_type"] = res(N.nvmlDeviceGetTotalEccErrors, h, 2, 0)
        r["temp_sensor"] = res(N.nvmlDeviceGetTemperature, h, 5)
        r["threshold_acoustic"] = res(N.nvmlDeviceGetTemperatureThreshold, h, 4)
        r["threshold_bad"] = res(N.nvmlDeviceGetTemperatureThreshold, h, 99)
        r["graphics_for_bad_mem"] = res(N.nvmlDeviceGetSupportedGraphicsClocks, h, 1234)
        r["bad_uuid"] = res(N.nvmlDeviceGetHandleByUUID, "GPU-00000000-0000-0000-0000-000000000000")
        r["bad_bus"] = res(N.nvmlDeviceGetHandleByPciBusId, "0000:77:00.0")
        r["garbage_bus"] = res(N.nvmlDeviceGetHandleByPciBusId, "nonsense")
        r["index_2"] = res(N.nvmlDeviceGetHandleByIndex, 2)
        fake = ctypes.cast(ctypes.c_void_p(0x1000), N.c_nvmlDevice_t)
        r["bad_handle"] = res(N.nvmlDeviceGetPowerUsage, fake)
        r["null_handle"] = lib.nvmlDeviceGetPowerUsage(None, ctypes.byref(u))
        r["null_out"] = [lib.nvmlDeviceGetPowerUsage(h, None), lib.nvmlDeviceGetCount_v2(None),
                         lib.nvmlDeviceGetMemoryInfo(h, None), lib.nvmlDeviceGetEccMode(h, None, None),
                         lib.nvmlDeviceGetHandleByIndex_v2(0, None), lib.nvmlDeviceSetMigMode(h, 0, None)]
        small = ctypes.create_string_buffer(8)
        r["small_buf"] = [lib.nvmlDeviceGetName(h, small, 8), lib.nvmlDeviceGetUUID(h, small, 8),
                          lib.nvmlSystemGetDriverVersion(small, 8), lib.nvmlDeviceGetSerial(h, small, 0)]
        exact = ctypes.create_string_buffer(10)
        r["exact_buf"] = [lib.nvmlSystemGetDriverVersion(exact, 10), exact.value.decode()]
        m2 = N.c_nvmlMemory_v2_t(); m2.version = 1
        r["mem_v2_version"] = lib.nvmlDeviceGetMemoryInfo_v2(h, ctypes.byref(m2))
        # processes: two-call protocol
        cnt = ctypes.c_uint(0)
        first = lib.nvmlDeviceGetComputeRunningProcesses_v3(h1, ctypes.byref(cnt), None)
        r["procs_first"] = [first, cnt.value]
        buf = (N.c_nvmlProcessInfo_v3_t * 1)(); cnt.value = 1
        r["procs_short"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h1, ctypes.byref(cnt), buf), cnt.value]
        r["procs"] = [[p.pid, p.usedGpuMemory, p.gpuInstanceId, p.computeInstanceId]
                      for p in N.nvmlDeviceGetComputeRunningProcesses(h1)]
        r["procs_v2"] = [[p.pid, p.usedGpuMemory] for p in N.nvmlDeviceGetComputeRunningProcesses_v2(h1)]
        r["procs_none"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(cnt), None), cnt.value]
        r["retired"] = [N.nvmlDeviceGetRetiredPages(h, 0), N.nvmlDeviceGetRetiredPages(h, 1),
                        N.nvmlDeviceGetRetiredPagesPendingStatus(h), res(N.nvmlDeviceGetRetiredPages, h, 2)]
        cnt.value = 0
        r["clocks_first"] = [lib.nvmlDeviceGetSupportedGraphicsClocks(h, 2619, ctypes.byref(cnt), None), cnt.value]
        out(r)
    """,
    )
    ia = "!NVMLError_InvalidArgument"
    for key in (
        "power_low",
        "power_high",
        "app_bad_mem",
        "app_bad_gr",
        "locked_inverted",
        "locked_too_high",
        "compute_thread",
        "persist_2",
        "ecc_2",
        "mig_2",
        "nvlink_18",
        "clock_type",
        "ecc_type",
        "temp_sensor",
        "threshold_bad",
        "garbage_bus",
        "index_2",
        "bad_handle",
    ):
        assert r[key] == ia, key
    assert r["power_min_ok"] is None
    assert r["nvlink_17"] == 0 and r["nvlink_3"] == 0 and r["nvlink_0"] == 1
    assert r["threshold_acoustic"] == "!NVMLError_NotSupported"
    assert r["graphics_for_bad_mem"] == r["bad_uuid"] == r["bad_bus"] == "!NVMLError_NotFound"
    assert r["null_handle"] == 2 and r["null_out"] == [2] * 6
    assert r["small_buf"] == [7] * 4 and r["exact_buf"] == [0, "550.90.07"]
    assert r["mem_v2_version"] == 25
    assert r["procs_first"] == [7, 2] and r["procs_short"] == [7, 2] and r["procs_none"] == [0, 0]
    assert r["procs"] == [[1234, 1 << 30, 0xFFFFFFFF, 0xFFFFFFFF], [5678, 2 << 30, 0xFFFFFFFF, 0xFFFFFFFF]]
    assert r["procs_v2"] == [[1234, 1 << 30], [5678, 2 << 30]]
    sbe, dbe, pending, bad = r["retired"]
    assert len(sbe) == 3 and len(set(sbe)) == 3 and len(dbe) == 1 and not set(sbe) & set(dbe)
    assert pending == 1 and bad == ia
    assert r["clocks_first"] == [7, 110]


def test_l40s_not_supported(libdir, sdir):
    state = make_state(sdir, "l40s", 1)
    r = run_child(
        libdir,
        state,
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(0)
        out([res(N.nvmlDeviceSetMigMode, h, 1), res(N.nvmlDeviceGetNvLinkState, h, 0), res(N.nvmlDeviceGetMigMode, h),
             N.nvmlDeviceGetSupportedMemoryClocks(h), len(N.nvmlDeviceGetSupportedGraphicsClocks(h, 405))])
    """,
    )
    assert r == ["!NVMLError_NotSupported"] * 3 + [[9001, 5001, 810, 405], 155]


def test_nvlink_remote_ends(libdir, sdir):
    """nvmlDeviceGetNvLinkRemotePciInfo_v2: item i of nvlink_remote, an empty item NotSupported, past the links
    InvalidArgument; without the key NotSupported (every profile)."""
    remote = "00000000:05:00.0,,0:2a:00.0"
    state = make_state(sdir, "h100", 2, [f"gpu.0.nvlink_remote={remote}", "gpu.0.nvlink_count=3"])
    r = run_child(
        libdir,
        state,
        """
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        def bus(x):
            return x if isinstance(x, str) else [x.busId, x.busIdLegacy, x.domain, x.bus]
        out([bus(res(N.nvmlDeviceGetNvLinkRemotePciInfo, h, link)) for h, link in ((h0, 0), (h0, 1), (h0, 2), (h0, 3),
                                                                                (h1, 0))])
    """,
    )
    assert r == [
        ["00000000:05:00.0", "0000:05:00.0", 0, 5],
        "!NVMLError_NotSupported",
        ["00000000:2A:00.0", "0000:2A:00.0", 0, 0x2A],
        "!NVMLError_InvalidArgument",
        "!NVMLError_NotSupported",
    ]


def test_health_getters_healthy_profiles(libdir, sdir):
    """NVLink error counters, PCIe replays, GPU fabric, recovery action and VBIOS: h100 (HGX, NVSwitch) reports its
    fabric completed and zero errors, a100 has no fabric probe, l40s neither NVLink nor fabric."""
    code = """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(1)
        fab = N.c_nvmlGpuFabricInfoV_t()
        fr = res(N.nvmlDeviceGetGpuFabricInfoV, h, ctypes.byref(fab))
        old = N.c_nvmlGpuFabricInfo_t()
        fo = res(N.nvmlDeviceGetGpuFabricInfo, h, ctypes.byref(old))
        fv = N.nvmlDeviceGetFieldValues(h, [N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, N.NVML_FI_DEV_PCIE_REPLAY_COUNTER])
        out({
            "crc": [res(N.nvmlDeviceGetNvLinkErrorCounter, h, 0, c) for c in range(4)],
            "replay": res(N.nvmlDeviceGetPcieReplayCounter, h),
            "vbios": res(N.nvmlDeviceGetVbiosVersion, h),
            "fabric": fr if fr == "!NVMLError_NotSupported" else [fab.state, fab.status, fab.healthMask],
            "fabric_old": fo if fo == "!NVMLError_NotSupported" else [old.state, old.status],
            "recovery": [fv[0].nvmlReturn, fv[0].value.uiVal, fv[1].nvmlReturn],
        })
    """
    h100 = run_child(libdir, make_state(sdir, "h100", 2), code)
    assert h100 == {
        "crc": [0, 0, 0, 0],
        "replay": 0,
        "vbios": "96.00.5E.00.01",
        "fabric": [3, 0, 0],
        "fabric_old": [3, 0],
        "recovery": [0, 0, 3],  # other fields: NotSupported in their own slot
    }
    a100 = run_child(libdir, make_state(sdir, "a100", 2, name="a.state"), code)
    assert a100["crc"] == [0, 0, 0, 0] and a100["fabric"] == a100["fabric_old"] == "!NVMLError_NotSupported"
    l40s = run_child(libdir, make_state(sdir, "l40s", 2, name="l.state"), code)
    assert l40s["crc"] == ["!NVMLError_NotSupported"] * 4 and l40s["fabric"] == "!NVMLError_NotSupported"
    assert l40s["replay"] == 0 and l40s["recovery"] == [0, 0, 3]


def test_health_getters_faults_and_rates(libdir, sdir):
    """Counters rise at <key>_per_s since nvmlInit; fabric status/health mask, recovery action and argument checks."""
    state = make_state(
        sdir,
        "h100",
        2,
        [
            "gpu.0.nvlink_replay=0,7",
            "gpu.0.nvlink_crc_flit_per_s=0,0,400",
            "gpu.0.pcie_replay=4294967290",
            "gpu.0.pcie_replay_per_s=100",
            "gpu.0.fabric_status=NotSupported",
            "gpu.0.fabric_health_mask=0x211",
            "gpu.0.recovery_action=4",
            "gpu.1.fabric_state=1",
            "gpu.1.recovery_action=",
        ],
    )
    r = run_child(
        libdir,
        state,
        """
        import time
        N.nvmlInit()
        h0, h1 = N.nvmlDeviceGetHandleByIndex(0), N.nvmlDeviceGetHandleByIndex(1)
        c0 = N.nvmlDeviceGetNvLinkErrorCounter(h0, 2, N.NVML_NVLINK_ERROR_DL_CRC_FLIT)
        time.sleep(0.25)
        c1 = N.nvmlDeviceGetNvLinkErrorCounter(h0, 2, N.NVML_NVLINK_ERROR_DL_CRC_FLIT)
        fab = N.c_nvmlGpuFabricInfoV_t()
        N.nvmlDeviceGetGpuFabricInfoV(h0, ctypes.byref(fab))
        fab1 = N.c_nvmlGpuFabricInfoV_t()
        N.nvmlDeviceGetGpuFabricInfoV(h1, ctypes.byref(fab1))
        bad = N.c_nvmlGpuFabricInfoV_t()
        bad.version = 0x01000024
        fv0 = N.nvmlDeviceGetFieldValues(h0, [N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0]
        fv1 = N.nvmlDeviceGetFieldValues(h1, [N.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])[0]
        out({
            "replay_link1": N.nvmlDeviceGetNvLinkErrorCounter(h0, 1, N.NVML_NVLINK_ERROR_DL_REPLAY),
            "crc_rise": c1 - c0,
            "pcie": N.nvmlDeviceGetPcieReplayCounter(h0),
            "fabric0": [fab.state, fab.status, fab.healthMask],
            "fabric1": [fab1.state, fab1.status],
            "bad_version": res(N.nvmlDeviceGetGpuFabricInfoV, h0, ctypes.byref(bad)),
            "rec": [fv0.nvmlReturn, fv0.value.uiVal, fv1.nvmlReturn],
            "bad_link": res(N.nvmlDeviceGetNvLinkErrorCounter, h0, 18, 0),
            "bad_counter": res(N.nvmlDeviceGetNvLinkErrorCounter, h0, 0, 9),
            "short_vbios": ctypes.CDLL("libnvidia-ml.so.1").nvmlDeviceGetVbiosVersion(
                h0, ctypes.create_string_buffer(4), 4),
        })
    """,
    )
    assert r["replay_link1"] == 7
    assert 60 <= r["crc_rise"] <= 200  # 400/s over ~0.25 s
    assert r["pcie"] < 4294967290  # 32-bit: wrapped past 2^32 within the first 60 ms
    assert r["fabric0"] == [3, 3, 0x211] and r["fabric1"] == [1, 0]
    assert r["bad_version"] == "!NVMLError_ArgumentVersionMismatch"
    assert r["rec"] == [0, 4, 3]
    assert r["bad_link"] == r["bad_counter"] == "!NVMLError_InvalidArgument"
    assert r["short_vbios"] == 7  # InsufficientSize


# ---------------------------------------------------------------------------------------------------------------------
# Setters: persistence, locking, permissions

SETS = """
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex({gpu})
    N.nvmlDeviceSetPersistenceMode(h, 0)
    N.nvmlDeviceSetPowerManagementLimit(h, 450000)
    N.nvmlDeviceSetComputeMode(h, 3)
    N.nvmlDeviceSetApplicationsClocks(h, 2619, 1755)
    N.nvmlDeviceSetGpuLockedClocks(h, 1200, 1755)
    N.nvmlDeviceSetEccMode(h, 0)
    out(N.nvmlDeviceSetMigMode(h, 1))
"""


def test_sets_persist_across_processes(libdir, sdir):
    state = sdir / "nvml.state"
    text = profiles.format_state(profiles.build_state("h100", 2)).replace(
        "gpu_count=2\n", "gpu_count=2\n# a comment the library must keep\nsome_unknown_key = kept\n"
    )
    state.write_text(text)
    state.chmod(0o640)
    assert run_child(libdir, state, SETS.format(gpu=1)) == 0

    saved = profiles.read_state(state)
    assert "# a comment the library must keep\nsome_unknown_key = kept\n" in state.read_text()
    assert state.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in sdir.iterdir() if ".tmp." in p.name] == []
    expected = dict(profiles.build_state("h100", 2), some_unknown_key="kept")
    expected.update(
        {
            f"gpu.1.{k}": v
            for k, v in {
                "persistence_mode": "0",
                "power_limit_mw": "450000",
                "enforced_power_limit_mw": "450000",
                "compute_mode": "3",
                "app_clock_mem": "2619",
                "app_clock_graphics": "1755",
                "locked_clock_min": "1200",
                "locked_clock_max": "1755",
                "ecc_pending": "0",
                "mig_pending": "1",
            }.items()
        }
    )
    assert saved == expected

    r = run_child(
        libdir,
        state,
        """
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(1)
        r = [N.nvmlDeviceGetPersistenceMode(h), N.nvmlDeviceGetPowerManagementLimit(h),
             N.nvmlDeviceGetEnforcedPowerLimit(h), N.nvmlDeviceGetComputeMode(h),
             N.nvmlDeviceGetApplicationsClock(h, N.NVML_CLOCK_MEM), N.nvmlDeviceGetApplicationsClock(h, 0),
             N.nvmlDeviceGetEccMode(h), N.nvmlDeviceGetMigMode(h)]
        N.nvmlDeviceResetApplicationsClocks(h)
        N.nvmlDeviceResetGpuLockedClocks(h)
        r += [N.nvmlDeviceGetApplicationsClock(h, N.NVML_CLOCK_MEM), N.nvmlDeviceGetApplicationsClock(h, 0)]
        out(r)
    """,
    )
    assert r == [0, 450000, 450000, 3, 2619, 1755, [1, 0], [0, 1], 2619, 1980]
    saved = profiles.read_state(state)
    assert saved["gpu.1.locked_clock_min"] == saved["gpu.1.locked_clock_max"] == "0"
    assert saved["gpu.0.power_limit_mw"] == "700000"


def test_parallel_writers(libdir, sdir):
    n = 20
    state = make_state(sdir, "h100", n)
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir), FAKE_NVML_STATE=str(state))
    writer = PRELUDE + textwrap.dedent("""
        gpu = int(sys.argv[1])
        N.nvmlInit()
        h = N.nvmlDeviceGetHandleByIndex(gpu)
        for k in range(15):
            N.nvmlDeviceSetPowerManagementLimit(h, 200000 + gpu * 1000 + k)
            N.nvmlDeviceSetGpuLockedClocks(h, 100 + gpu, 1000 + k)
        N.nvmlDeviceSetPersistenceMode(h, 0)
        N.nvmlDeviceSetComputeMode(h, 2)
    """)
    reader = PRELUDE + textwrap.dedent("""
        N.nvmlInit()
        hs = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
        seen = 0
        for _ in range(40):
            for h in hs:
                N.nvmlDeviceGetPowerManagementLimit(h); N.nvmlDeviceGetName(h)
                seen += 1
        out(seen)
    """)
    procs = [
        subprocess.Popen([sys.executable, "-c", writer, str(i)], env=env, stderr=subprocess.PIPE, text=True)
        for i in range(n)
    ]
    readers = [
        subprocess.Popen(
            [sys.executable, "-c", reader], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    for p in procs + readers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err

    text = state.read_text()
    for line in text.splitlines():
        assert line.startswith("#") or "=" in line, line
    saved = profiles.read_state(state)
    assert len(text.splitlines()) == len(profiles.format_state(saved).splitlines())
    for i in range(n):
        p = f"gpu.{i}."
        assert saved[p + "power_limit_mw"] == saved[p + "enforced_power_limit_mw"] == str(200000 + i * 1000 + 14)
        assert (saved[p + "locked_clock_min"], saved[p + "locked_clock_max"]) == (str(100 + i), "1014")
        assert saved[p + "persistence_mode"] == "0" and saved[p + "compute_mode"] == "2"
    assert [p.name for p in sdir.iterdir() if ".tmp." in p.name] == []


SETTERS_AS_USER = """
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    sets = [res(f, h, *a) for f, a in [
        (N.nvmlDeviceSetPersistenceMode, (0,)), (N.nvmlDeviceSetPowerManagementLimit, (300000,)),
        (N.nvmlDeviceSetComputeMode, (2,)), (N.nvmlDeviceSetApplicationsClocks, (2619, 1500)),
        (N.nvmlDeviceResetApplicationsClocks, ()), (N.nvmlDeviceSetGpuLockedClocks, (1000, 1500)),
        (N.nvmlDeviceResetGpuLockedClocks, ()), (N.nvmlDeviceSetEccMode, (0,)), (N.nvmlDeviceSetMigMode, (1,))]]
    reads = [N.nvmlDeviceGetName(h), N.nvmlDeviceGetPowerManagementLimit(h), N.nvmlDeviceGetPersistenceMode(h)]
    out({"uid": os.geteuid(), "sets": sets, "reads": reads})
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a child as another user")
def test_require_root(libdir, sdir, nobody_python):
    state = make_state(sdir, "h100", 1)  # require_root=1 is the default
    before = state.read_text()
    r = run_child(libdir, state, SETTERS_AS_USER, user=NOBODY, python=nobody_python)
    assert r["uid"] == NOBODY
    assert r["sets"] == ["!NVMLError_NoPermission"] * 9
    assert r["reads"] == ["NVIDIA H100 80GB HBM3", 700000, 1]
    assert state.read_text() == before

    # the same calls as root succeed
    r = run_child(libdir, state, SETTERS_AS_USER)
    assert r["uid"] == 0 and r["sets"][1:] == [None] * 7 + [0] and r["sets"][0] is None

    # require_root=0: an unprivileged user may set (given write access to the state directory)
    open_dir = sdir / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    state2 = make_state(open_dir, "h100", 1, ["require_root=0"])
    r = run_child(libdir, state2, SETTERS_AS_USER, user=NOBODY, python=nobody_python)
    assert r["sets"] == [None] * 8 + [0]
    assert profiles.read_state(state2)["gpu.0.power_limit_mw"] == "300000"


# ---------------------------------------------------------------------------------------------------------------------
# profiles.py


def test_profiles_overrides():
    s = profiles.build_state(
        "h100",
        4,
        overrides={
            "gpu.*.persistence_mode": "0",
            "gpu.2.power_limit_mw": "250000",
            "error.nvmlDeviceGetPowerUsage": "NotSupported",
            "gpu.3.error.nvmlDeviceGetName": "13",
            "missing": "nvmlFoo",
            "gpu.1.lost": "1",
            "gpu.0.mig_current": None,
            "driver_version": "550.54.15",
        },
    )
    assert [s[f"gpu.{i}.persistence_mode"] for i in range(4)] == ["0"] * 4
    assert s["gpu.2.power_limit_mw"] == "250000" and s["gpu.1.lost"] == "1"
    assert s["error.nvmlDeviceGetPowerUsage"] == "NotSupported" and s["gpu.3.error.nvmlDeviceGetName"] == "13"
    assert "gpu.0.mig_current" not in s and s["driver_version"] == "550.54.15"
    assert profiles.build_state("h100", 2, overrides=["gpu.*.processes=1:2,3:4"])["gpu.1.processes"] == "1:2,3:4"
    for bad in (
        ["gpu.0.power_limt_mw=1"],
        ["gpu.5.power_limit_mw=1"],
        ["gpu.0.power_limit_mw=250W"],
        ["error.nvmlDeviceGetName=NotSuported"],
        ["powerlimit=3"],
        ["gpu.0.pci_bus_id=18:00"],
        ["noequals"],
    ):
        with pytest.raises(ValueError):
            profiles.build_state("h100", 4, overrides=bad)
    for bad_args in ({"profile": "v100"}, {"profile": "h100", "gpus": 0}, {"profile": "h100", "driver": "999"}):
        with pytest.raises(ValueError):
            profiles.build_state(**bad_args)
    again = profiles.apply_overrides(s, ["gpu.*.temperature=80"])
    assert again["gpu.3.temperature"] == "80" and s["gpu.3.temperature"] != "80"


def test_profiles_cli(tmp_path):
    cli = [sys.executable, str(NVML_DIR / "profiles.py")]
    listing = subprocess.run(cli + ["--list"], capture_output=True, text=True, check=True).stdout
    assert all(name in listing for name in profiles.PROFILES)
    out = tmp_path / "sub" / "nvml.state"
    printed = subprocess.run(
        cli
        + [
            "--profile",
            "a100",
            "--gpus",
            "2",
            "--driver",
            "535",
            "--set",
            "gpu.1.power_limit_mw=250000",
            "--unset",
            "gpu.0.nvlink_count",
            "-o",
            str(out),
            "--print",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert profiles.parse_state(printed) == profiles.read_state(out)
    saved = profiles.read_state(out)
    assert saved["driver_version"] == "535.183.01" and saved["gpu.1.power_limit_mw"] == "250000"
    assert "gpu.0.nvlink_count" not in saved and out.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in out.parent.iterdir()] == ["nvml.state"]
    bad = subprocess.run(cli + ["--profile", "a100", "--set", "gpu.0.typo=1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown state key" in bad.stderr


def test_read_state_rules(tmp_path):
    p = tmp_path / "s"
    p.write_text("# c\n a = 1 \nb=x=y\nnoequals\na=2\n\n")
    assert profiles.read_state(p) == {"a": "2", "b": "x=y"}
