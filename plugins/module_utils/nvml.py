# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Read the state of a host's NVIDIA GPUs through NVML (pynvml from nvidia-ml-py).

Design rules, from NVML's documented behaviour rather than any one driver:

* any single query may fail with NotSupported, NoPermission, FunctionNotFound (an older
  driver without the symbol) or another NVML error: the field becomes ``None`` and the
  reason goes into the GPU's ``unsupported`` map, the rest is still read;
* the binding (pynvml, from nvidia-ml-py, nvidia-ml-py3 or the pynvml package) may be older than the driver: a
  function it lacks is a field it cannot read, recorded as ``"binding lacks <function>"`` (``binding_lacks``), never
  an AttributeError. Constants and structures come from nvml.h through this file, not from the binding: old bindings
  lack some, and some have them wrong (nvidia-ml-py3 7.352 swaps the two page-retirement causes; every binding before
  12.570 lays out nvmlGpuFabricInfo_t with an 80-byte cluster UUID where nvml.h has 16, so the state reads 0);
* a GPU that reports GpuIsLost is marked ``lost`` and left alone; other GPUs are still read;
* a host without a usable library or driver is a fact (``nvml.available: false``), not a failure;
* cumulative error counters (PCIe replays, NVLink replay/recovery/CRC) are read twice, ``sample_seconds``
  apart: DCGM's health watches judge how much a counter rose in a window, not its lifetime total
  (modules/health/DcgmHealthWatch.cpp in github.com/NVIDIA/DCGM), so the increase is a fact of its own.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import os
import time

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.nvml_session import NvmlInitError, nvml_session

MIB = 1024 * 1024
# Enough 64-bit words for 4096 logical CPUs; NVML fills only what the host has.
CPU_SET_WORDS = 64
# Seconds between the two reads of the cumulative error counters (see the module docstring).
SAMPLE_SECONDS = 1.0

# Values from NVIDIA's nvml.h (the nvidia-nvml-dev wheel); fixed by NVML's ABI, so the binding's copies are not used.
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0
NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1
NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3
NVML_FEATURE_ENABLED = 1
NVML_SUCCESS = 0
# "Number of NVLinks present on the device": DCGM reads the link count from this field.
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
# Links probed one by one when the link-count field is not supported: NVML_NVLINK_MAX_LINKS of the 11.x and 12.x
# bindings (nvml.h 13.x says 36, for parts whose drivers answer the field).
PROBE_NVLINK_LINKS = 18

# The reason recorded for a field whose getter the installed binding does not have.
LACKS = "binding lacks "


def binding_lacks(function):
    """The ``unsupported`` reason of a field the binding cannot read: ``"binding lacks nvmlDeviceGetNumaNodeId"``."""
    return LACKS + function


# nvmlNvLinkErrorCounter_t -> our name; DCGM's NVLink health watch judges these four
# (DCGM_FI_DEV_NVLINK_{REPLAY,RECOVERY,CRC_FLIT,CRC_DATA}_ERROR_TOTAL, summed over the links).
NVLINK_COUNTERS = (("replay", 0), ("recovery", 1), ("crc_flit", 2), ("crc_data", 3))

# nvmlGpuFabricState_t
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}

# nvmlDeviceGpuRecoveryAction_t: exactly the values nvml.h defines (NVML_GPU_RECOVERY_ACTION_*; NVIDIA GPU memory
# error management: recovery action flag; 6 and 7 arrived with the 615 driver, NVML change log); any other value is
# "unknown (N)". tests/integration/test_nvml_reader.py holds this table equal to the header's enum.
RECOVERY_ACTIONS = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
    5: "recover_imex_domain",
    6: "bus_reset",
    7: "system_reboot",
}
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230

# NVML_GPU_FABRIC_HEALTH_MASK_*: (name, shift, width, values that mean trouble). DCGM fails each of these
# (DcgmHealthWatch::MonitorFabricFields); "incorrect_configuration" is trouble unless 0 (not supported) or 1 (none).
FABRIC_HEALTH_BITS = (
    ("degraded_bandwidth", 0, 0x3, (1,)),
    ("route_recovery", 2, 0x3, (1,)),
    ("route_unhealthy", 4, 0x3, (1,)),
    ("access_timeout_recovery", 6, 0x3, (1,)),
    ("incorrect_configuration", 8, 0xF, tuple(range(2, 16))),
)


class NvmlUnavailable(Exception):
    """NVML cannot be used on this host (library missing, driver not loaded, ...)."""


def error_name(exc):
    """Short, stable name of an NVML error: NVMLError_NotSupported -> "NotSupported"."""
    name = type(exc).__name__
    if name.startswith("NVMLError_"):
        return name[len("NVMLError_"):]
    if name == "NVMLLibraryMismatchError":
        return "FunctionNotFound"
    return "%s: %s" % (name, exc)


class _NoSuchError(Exception):
    """Stands in for an exception class the binding does not define (never raised)."""


def _mismatch_error(nv):
    """pynvml's NVMLLibraryMismatchError (nvidia-ml-py 12.560 has it, 12.535 and older bindings not)."""
    return getattr(nv, "NVMLLibraryMismatchError", None) or _NoSuchError


# The distributions that ship a ``pynvml`` module, in the order binding_info asks; their wheel directory names.
BINDING_DISTRIBUTIONS = ("nvidia-ml-py", "nvidia-ml-py3", "pynvml")


def binding_info(nv):
    """Which binding the ``pynvml`` module is: {module, distribution, version}.

    nvidia-ml-py and nvidia-ml-py3 have no ``__version__``: the installed distribution that owns the module's file
    says; the pynvml package (11.x carries its own copy, 12.x/13.x wrap nvidia-ml-py) is found the same way. First
    the wheels' ``*.dist-info`` beside the module (their RECORD lists the file), which spares every audit the import
    of importlib.metadata and the parsing of every candidate's RECORD; then, for eggs and distro packages,
    importlib.metadata. ``version`` is None when no distribution's record lists the file (e.g. a
    copy on PYTHONPATH)."""
    path = os.path.realpath(getattr(nv, "__file__", "") or "")
    out = {"module": path or None, "distribution": None, "version": getattr(nv, "__version__", None)}
    if path:
        found = _wheel_owner(path)
        if found:
            out["distribution"], out["version"] = found
            return out
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return out
    for name in BINDING_DISTRIBUTIONS:
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        try:
            files = [os.path.realpath(str(dist.locate_file(f))) for f in (dist.files or ())]
        except Exception:  # nosec B112  # a broken RECORD: try the next candidate
            continue
        if path in files:
            out["distribution"] = name
            out["version"] = dist.version
            return out
    return out


def _wheel_owner(path):
    """(distribution, version) of the wheel whose ``*.dist-info/RECORD`` beside ``path`` lists it, or None."""
    import csv

    here = os.path.dirname(path)
    for site in (here, os.path.dirname(here)):  # pynvml.py, or the package pynvml/__init__.py
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        infos = {}
        for entry in entries:
            if entry.endswith(".dist-info") and "-" in entry:
                infos.setdefault(entry.split("-", 1)[0].lower().replace(".", "_"), []).append(entry)
        for name in BINDING_DISTRIBUTIONS:
            for info in sorted(infos.get(name.replace("-", "_"), ())):
                base = os.path.join(site, info)
                try:
                    with open(os.path.join(base, "RECORD")) as f:
                        listed = set(os.path.realpath(os.path.join(site, row[0])) for row in csv.reader(f) if row)
                    if path not in listed:
                        continue
                    with open(os.path.join(base, "METADATA")) as f:
                        for line in f:
                            if not line.strip():
                                break
                            if line.lower().startswith("version:"):
                                return name, line.split(":", 1)[1].strip()
                except (OSError, ValueError, csv.Error):  # unreadable: importlib.metadata decides
                    continue
    return None


def load_pynvml(library=None):
    """Import pynvml and bind it to ``library`` (a path) when given.

    Raises ImportError when nvidia-ml-py is not installed, and OSError when ``library``
    cannot be loaded.
    """
    import pynvml  # noqa: F401  (imported here so that hosts without it can fall back)

    if library:
        import ctypes

        # pynvml only ever loads "libnvidia-ml.so.1"; point it at the library the operator named.
        pynvml.nvmlLib = ctypes.CDLL(library)
        cache = getattr(pynvml, "_nvmlGetFunctionPointer_cache", None)
        if isinstance(cache, dict):
            cache.clear()
    return pynvml


class _Gpu:
    """Collects one GPU's fields, recording every field NVML cannot give."""

    def __init__(self, nv, handle, index):
        self.nv = nv
        self.handle = handle
        self.unsupported = {}
        self.lost = False
        self.data = {"index": index}
        self.links = []  # NVLink links whose state NVML reported
        self.nvlink = None  # the link states (_nvlink), read with the first counters
        self.first = None  # first read of the error counters
        self.first_at = None

    def call(self, field, function, *args):
        """Run the binding's getter named ``function`` for ``field``; None (and a recorded reason) on any error,
        ``binding lacks <function>`` when the binding has no such getter."""
        if self.lost:
            return None
        fn = getattr(self.nv, function, None)
        if fn is None:
            self.unsupported[field] = binding_lacks(function)
            return None
        try:
            return fn(self.handle, *args)
        except self.nv.NVMLError as exc:
            reason = error_name(exc)
            if reason == "GpuIsLost":
                self.lost = True
            self.unsupported[field] = reason
        except _mismatch_error(self.nv):
            self.unsupported[field] = "FunctionNotFound"
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            self.unsupported[field] = "bad value from NVML: %s" % exc
        return None

    def missing(self, field):
        """True when ``field`` could not be read because the driver or the binding lacks its function."""
        reason = self.unsupported.get(field) or ""
        return reason == "FunctionNotFound" or reason.startswith(LACKS)


def as_text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _watts(milliwatts):
    return None if milliwatts is None else round(int(milliwatts) / 1000.0, 3)


def _mib(nbytes):
    return None if nbytes is None else int(nbytes) // MIB


def _bool(value):
    return None if value is None else bool(int(value))


def _pair(value):
    """(current, pending) lists from NVML -> two booleans or (None, None)."""
    if value is None:
        return None, None
    return bool(int(value[0])), bool(int(value[1]))


def _nvml_bus_id(bus_id):
    """NVML's bus id with the 8-digit domain of nvmlPciInfo_t since the _v3 call: bindings that call
    nvmlDeviceGetPciInfo_v2 (nvidia-ml-py3 7.352) read the legacy 16-byte "0000:18:00.0" form."""
    if not bus_id:
        return bus_id
    domain, sep, rest = bus_id.partition(":")
    return "%s%s%s" % (domain.rjust(8, "0"), sep, rest) if sep else bus_id


def sysfs_bus_id(pci_bus_id):
    """NVML "00000000:18:00.0" -> sysfs "0000:18:00.0" (lower case, 4-digit domain)."""
    if not pci_bus_id:
        return None
    domain, _sep, rest = pci_bus_id.lower().partition(":")
    return "%s:%s" % (domain[-4:].rjust(4, "0"), rest)


def _first_counters(nv, handle, index):
    """A GPU's links and the first read of its error counters: what the sample window is timed from. Taken before
    the GPU's other facts, so that those (``_read_gpu``) are read inside the window rather than before it."""
    g = _Gpu(nv, handle, index)
    g.nvlink = _nvlink(g, nv)  # the links the NVLink counters are summed over
    g.first = _counters(g, nv)
    g.first_at = time.monotonic()
    return g


def _read_gpu(g, nv, fs):
    """One GPU's facts, section by section, in the order NVML is asked (once the GPU is lost, nothing after it is
    read); its links and first counters are already in (``_first_counters``)."""
    d = g.data
    _identity(g)
    d["memory"] = _memory(g)
    d["persistence_mode"] = _bool(g.call("persistence_mode", "nvmlDeviceGetPersistenceMode"))
    util = g.call("utilization", "nvmlDeviceGetUtilizationRates")
    d["utilization"] = None if util is None else {"gpu_pct": int(util.gpu), "memory_pct": int(util.memory)}
    d["power"] = _power(g)
    d["ecc"] = _ecc(g)
    d["remapped_rows"] = _remapped_rows(g)
    d["retired_pages"] = _retired_pages(g)
    d["clocks"] = _clocks(g)
    d["clock_event_reasons"] = _clock_event_reasons(g, nv)
    d["temperature"] = _temperature(g)
    d["pcie"] = _pcie(g)
    d["compute_mode"] = decoders.compute_mode_name(g.call("compute_mode", "nvmlDeviceGetComputeMode"))
    d["mig"] = _mig(g)
    d["nvlink"] = g.nvlink
    d["fabric"] = _fabric(g, nv)
    d["recovery_action"] = _recovery_action(g, nv)
    d["vbios_version"] = as_text(g.call("vbios_version", "nvmlDeviceGetVbiosVersion"))
    words = g.call("cpu_affinity", "nvmlDeviceGetCpuAffinity", CPU_SET_WORDS)
    d["cpu_affinity"] = decoders.cpus_to_cpulist(decoders.mask_words_to_cpus(words)) if words is not None else None
    d["numa_node"] = _numa_node(g, nv, fs, d["pci_bus_id"])
    d["processes"] = _processes(g)
    return g


def _identity(g):
    """name, uuid, PCI bus and device id, architecture."""
    d = g.data
    d["name"] = as_text(g.call("name", "nvmlDeviceGetName"))
    d["uuid"] = as_text(g.call("uuid", "nvmlDeviceGetUUID"))
    pci = g.call("pci_bus_id", "nvmlDeviceGetPciInfo")
    d["pci_bus_id"] = _nvml_bus_id(as_text(pci.busId)) if pci is not None else None
    d["pci_device_id"] = ("0x%08X" % pci.pciDeviceId) if pci is not None else None
    d["architecture"] = decoders.architecture_name(g.call("architecture", "nvmlDeviceGetArchitecture"))


def _memory(g):
    mem = g.call("memory", "nvmlDeviceGetMemoryInfo")
    if mem is None:
        return None
    total, used = int(mem.total), int(mem.used)
    return {
        "total_mib": _mib(total),
        "used_mib": _mib(used),
        "free_mib": _mib(mem.free),
        "used_pct": round(100.0 * used / total, 1) if total else None,
    }


def _power(g):
    """Draw and limits in watts; the min/max limits come from one call (both unsupported when it fails)."""
    constraints = g.call("power.min_limit_w", "nvmlDeviceGetPowerManagementLimitConstraints")
    if constraints is None and "power.min_limit_w" in g.unsupported:
        g.unsupported["power.max_limit_w"] = g.unsupported["power.min_limit_w"]
    return {
        "usage_w": _watts(g.call("power.usage_w", "nvmlDeviceGetPowerUsage")),
        "limit_w": _watts(g.call("power.limit_w", "nvmlDeviceGetPowerManagementLimit")),
        "default_limit_w": _watts(g.call("power.default_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit")),
        "min_limit_w": _watts(constraints[0]) if constraints is not None else None,
        "max_limit_w": _watts(constraints[1]) if constraints is not None else None,
        "enforced_limit_w": _watts(g.call("power.enforced_limit_w", "nvmlDeviceGetEnforcedPowerLimit")),
    }


def _ecc(g):
    """ECC mode (current, pending) and the volatile and aggregate error counts."""
    ecc_current, ecc_pending = _pair(g.call("ecc.current", "nvmlDeviceGetEccMode"))
    if "ecc.current" in g.unsupported:
        g.unsupported["ecc.pending"] = g.unsupported["ecc.current"]
    unc = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    cor = NVML_MEMORY_ERROR_TYPE_CORRECTED
    return {
        "current": ecc_current,
        "pending": ecc_pending,
        "volatile_uncorrected": g.call("ecc.volatile_uncorrected", "nvmlDeviceGetTotalEccErrors",
                                       unc, NVML_VOLATILE_ECC),
        "aggregate_uncorrected": g.call("ecc.aggregate_uncorrected", "nvmlDeviceGetTotalEccErrors",
                                        unc, NVML_AGGREGATE_ECC),
        "volatile_corrected": g.call("ecc.volatile_corrected", "nvmlDeviceGetTotalEccErrors",
                                     cor, NVML_VOLATILE_ECC),
        "aggregate_corrected": g.call("ecc.aggregate_corrected", "nvmlDeviceGetTotalEccErrors",
                                      cor, NVML_AGGREGATE_ECC),
    }


def _remapped_rows(g):
    rows = g.call("remapped_rows", "nvmlDeviceGetRemappedRows")
    return None if rows is None else {
        "corrected": int(rows[0]),
        "uncorrected": int(rows[1]),
        "pending": bool(int(rows[2])),
        "failure": bool(int(rows[3])),
    }


def _retired_pages(g):
    """Pages retired for single- and double-bit errors (GPUs before Ampere; row remapping replaced it)."""
    sbe = g.call("retired_pages", "nvmlDeviceGetRetiredPages",
                 NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    dbe = None
    pending = None
    if sbe is not None:
        dbe = g.call("retired_pages", "nvmlDeviceGetRetiredPages", NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        pending = g.call("retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus")
    return None if sbe is None or dbe is None else {
        # list(): nvidia-ml-py3 7.352 returns a map object
        "single_bit": len(list(sbe)),
        "double_bit": len(list(dbe)),
        "pending": _bool(pending),
    }


def _clocks(g):
    """Current and maximum graphics, SM and memory clocks; application clocks and their defaults."""
    clocks = {}
    for kind, const in (("graphics", NVML_CLOCK_GRAPHICS), ("sm", NVML_CLOCK_SM), ("mem", NVML_CLOCK_MEM)):
        clocks[kind] = g.call("clocks." + kind, "nvmlDeviceGetClockInfo", const)
        clocks["max_" + kind] = g.call("clocks.max_" + kind, "nvmlDeviceGetMaxClockInfo", const)
    for kind, const in (("graphics", NVML_CLOCK_GRAPHICS), ("mem", NVML_CLOCK_MEM)):
        clocks["app_" + kind] = g.call("clocks.app_" + kind, "nvmlDeviceGetApplicationsClock", const)
        clocks["default_app_" + kind] = g.call("clocks.default_app_" + kind,
                                               "nvmlDeviceGetDefaultApplicationsClock", const)
    return clocks


def _temperature(g):
    return {
        "gpu": g.call("temperature.gpu", "nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU),
        "slowdown": g.call("temperature.slowdown", "nvmlDeviceGetTemperatureThreshold",
                           NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        "shutdown": g.call("temperature.shutdown", "nvmlDeviceGetTemperatureThreshold",
                           NVML_TEMPERATURE_THRESHOLD_SHUTDOWN),
        "gpu_max": g.call("temperature.gpu_max", "nvmlDeviceGetTemperatureThreshold",
                          NVML_TEMPERATURE_THRESHOLD_GPU_MAX),
    }


def _pcie(g):
    """The PCIe link's current and maximum generation and width (the replay counter is read with the counters)."""
    return {
        "gen_current": g.call("pcie.gen_current", "nvmlDeviceGetCurrPcieLinkGeneration"),
        "width_current": g.call("pcie.width_current", "nvmlDeviceGetCurrPcieLinkWidth"),
        "gen_max": g.call("pcie.gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
        "width_max": g.call("pcie.width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
    }


def _mig(g):
    """MIG mode (current, pending); None where MIG is not supported."""
    mig_current, mig_pending = _pair(g.call("mig.current", "nvmlDeviceGetMigMode"))
    if "mig.current" in g.unsupported:
        g.unsupported["mig.pending"] = g.unsupported["mig.current"]
    return None if mig_current is None else {"current": mig_current, "pending": mig_pending}


def _processes(g):
    procs = g.call("processes", "nvmlDeviceGetComputeRunningProcesses")
    return None if procs is None else [
        {"pid": int(p.pid), "used_memory_mib": _mib(p.usedGpuMemory)} for p in procs
    ]


def _finish(g, second=None, seconds=None):
    """Store the counters (and their increase when a second read was taken) and the bookkeeping."""
    d = g.data
    first = g.first
    last = second or first
    if d.get("pcie") is not None:
        d["pcie"]["replay_count"] = last["pcie_replay"]
        d["pcie"]["replay_increase"] = _increase(first["pcie_replay"], second and second["pcie_replay"], 32)
        d["pcie"]["sample_seconds"] = seconds if second else None
    if d.get("nvlink") is not None:
        d["nvlink"]["errors"] = last["nvlink"]
        d["nvlink"]["errors_increase"] = None if not second or first["nvlink"] is None else {
            k: _increase(first["nvlink"].get(k), (second["nvlink"] or {}).get(k), 64) for k in first["nvlink"]
        }
        d["nvlink"]["sample_seconds"] = seconds if second else None
    d["lost"] = g.lost
    if g.lost:
        # Whatever was read before the GPU fell off the bus is kept; the rest is unknown.
        g.unsupported = {k: v for k, v in g.unsupported.items() if v != "GpuIsLost"}
    d["unsupported"] = g.unsupported
    return d


def _increase(before, after, bits):
    """How much a cumulative counter rose; a counter that wrapped (NVML's PCIe replay counter is 32-bit)
    counts from zero again, as DCGM takes the absolute difference."""
    if before is None or after is None:
        return None
    if after >= before:
        return after - before
    return after + (1 << bits) - before if bits else before - after


def _counters(g, nv):
    """One read of the cumulative error counters: PCIe replays and NVLink errors summed over the links."""
    out = {"pcie_replay": None, "nvlink": None}
    if g.lost:
        return out
    replay = g.call("pcie.replay_count", "nvmlDeviceGetPcieReplayCounter")
    out["pcie_replay"] = None if replay is None else int(replay)
    links = g.links
    if links:
        sums = {}
        for name, counter in NVLINK_COUNTERS:
            total = 0
            for link in links:
                value = g.call("nvlink.errors." + name, "nvmlDeviceGetNvLinkErrorCounter", link, counter)
                if value is None:
                    total = None
                    break
                total += int(value)
            sums[name] = total
        out["nvlink"] = sums
    return out


class _FabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t as nvml.h lays it out (the bindings before 12.570 give clusterUuid 80 bytes, not 16)."""

    _fields_ = [
        ("clusterUuid", ctypes.c_ubyte * 16),  # NVML_GPU_FABRIC_UUID_LEN
        ("status", ctypes.c_int),  # nvmlReturn_t
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),  # nvmlGpuFabricState_t
    ]


class _FabricInfoV2(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t (nvml.h): what nvmlDeviceGetGpuFabricInfoV fills when ``version`` says v2."""

    _fields_ = [
        ("version", ctypes.c_uint),
        ("clusterUuid", ctypes.c_ubyte * 16),
        ("status", ctypes.c_int),
        ("cliqueId", ctypes.c_uint),
        ("state", ctypes.c_ubyte),
        ("healthMask", ctypes.c_uint),
    ]


# NVML_STRUCT_VERSION(GpuFabricInfo, 2): the structure's size | 2 << 24 (nvml.h: nvmlGpuFabricInfo_v2 = 0x02000024).
FABRIC_INFO_V2 = ctypes.sizeof(_FabricInfoV2) | (2 << 24)


def _fabric(g, nv):
    """GPU fabric probe (Hopper and later on NVSwitch systems); None where NVML does not support it.

    The binding's function is called with this file's structures (pynvml hands a pointer to C as given)."""
    info = _FabricInfoV2()
    info.version = FABRIC_INFO_V2
    if g.call("fabric", "nvmlDeviceGetGpuFabricInfoV", ctypes.byref(info)) is None:
        info = None
    if info is None and g.missing("fabric"):
        # Drivers before the versioned call (and bindings without it) only have the plain one.
        lacked = g.unsupported.pop("fabric")
        info = _FabricInfo()
        if g.call("fabric", "nvmlDeviceGetGpuFabricInfo", ctypes.byref(info)) is None:
            info = None
            if g.missing("fabric") and lacked != g.unsupported["fabric"]:
                g.unsupported["fabric"] = "%s; %s" % (lacked, g.unsupported["fabric"])
    if info is None:
        return None
    state = int(info.state) & 0xFF
    if state == 0:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: no NVSwitch fabric for this GPU
        g.unsupported["fabric"] = "NotSupported"
        return None
    status = int(info.status)
    mask = int(getattr(info, "healthMask", 0) or 0)
    health = []
    for name, shift, width, bad in FABRIC_HEALTH_BITS:
        if ((mask >> shift) & width) in bad:
            health.append(name)
    return {
        "state": FABRIC_STATES.get(state, "unknown (%d)" % state),
        # The status is meaningful only once the state is "completed" (nvml.h).
        "status": None if state != 3 else ("Success" if status == 0 else _return_name(nv, status)),
        "health_mask": "0x%08x" % mask,
        "health_problems": health,
    }


def _return_name(nv, code):
    """NVML return code -> the error name pynvml gives it (NotSupported, GpuIsLost, ...)."""
    try:
        return error_name(nv.NVMLError(code))
    except Exception:  # pragma: no cover - pynvml maps every code to a class or the base class
        return "error %d" % code


def _field_uint(g, nv, field, field_id):
    """One unsigned-int NVML field (nvmlDeviceGetFieldValues); None with the reason when the call or the field's
    own slot fails (drivers without the field answer NotSupported in its slot)."""
    values = g.call(field, "nvmlDeviceGetFieldValues", [field_id])
    if values is None:
        return None
    value = values[0]
    if int(value.nvmlReturn) != NVML_SUCCESS:
        g.unsupported[field] = _return_name(nv, int(value.nvmlReturn))
        return None
    return int(value.value.uiVal)


def _recovery_action(g, nv):
    """NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; a value nvml.h does not define is "unknown (N)"."""
    code = _field_uint(g, nv, "recovery_action", NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
    if code is None:
        return None
    return RECOVERY_ACTIONS.get(code, "unknown (%d)" % code)


def _clock_event_reasons(g, nv):
    mask = g.call("clock_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons")
    if mask is None and g.missing("clock_event_reasons"):
        # Drivers before 535 (and bindings before 12.535) only have the deprecated "throttle reasons" name for the
        # same bits.
        del g.unsupported["clock_event_reasons"]
        mask = g.call("clock_event_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
    if mask is None:
        return None
    names = decoders.decode_clock_event_reasons(mask)
    return {
        "mask": "0x%016x" % int(mask),
        "active": names,
        "throttling": decoders.throttling_reasons(names),
    }


def _link_call(g, nv, fn, link):
    """``fn(handle, link)`` for one NVLink link: (its value, None), or (None, the NVML error's name); GpuIsLost also
    marks the GPU lost. Unlike ``_Gpu.call`` nothing is recorded: the callers judge a link's error by the links."""
    try:
        return fn(g.handle, link), None
    except nv.NVMLError as exc:
        reason = error_name(exc)
        if reason == "GpuIsLost":
            g.lost = True
        return None, reason


def _nvlink(g, nv):
    """Link states. The number of links is NVML's link-count field (NVML_FI_DEV_NVLINK_LINK_COUNT, as DCGM reads
    it); only where that field is not supported are links 0..PROBE_NVLINK_LINKS-1 probed one by one, and the
    result says so (``count_source``: "field" or "probe"; the field's reason stays in ``unsupported``)."""
    count = _field_uint(g, nv, "nvlink.link_count", NVML_FI_DEV_NVLINK_LINK_COUNT)
    if g.lost:
        return None
    if count == 0:
        # The field answers: this GPU has no NVLink.
        g.unsupported["nvlink"] = "NotSupported"
        return None
    source = "field" if count is not None else "probe"
    total = 0
    up = 0
    down = []
    g.links = []
    first_error = None
    state_fn = getattr(nv, "nvmlDeviceGetNvLinkState", None)
    if state_fn is None:
        g.unsupported["nvlink"] = binding_lacks("nvmlDeviceGetNvLinkState")
        return None
    for link in range(count if count is not None else PROBE_NVLINK_LINKS):
        state, reason = _link_call(g, nv, state_fn, link)
        if g.lost:
            return None
        if reason is not None:
            if first_error is None:
                first_error = reason
            if reason in ("FunctionNotFound", "NoPermission"):
                break
            continue
        total += 1
        g.links.append(link)
        if int(state) == NVML_FEATURE_ENABLED:
            up += 1
        else:
            down.append(link)
    if total == 0:
        g.unsupported["nvlink"] = first_error or "NotSupported"
        return None
    if count is not None and total < count:
        # Links the field counts but whose state NVML did not give: unknown, neither up nor down.
        g.unsupported["nvlink.state"] = "%s on %d of %d links" % (first_error, count - total, count)
    remote = _nvlink_remote(g, nv, [link for link in g.links if link not in down])
    if g.lost:
        return None
    return {"up": up, "total": total, "down": down, "remote": remote, "count_source": source}


def _nvlink_remote(g, nv, links):
    """{link (str): sysfs bus id} of the PCI function at the far end of each link that is up - an NVSwitch or the
    peer GPU (nvmlDeviceGetNvLinkRemotePciInfo_v2); None when NVML cannot say (the first link answers NotSupported,
    FunctionNotFound or NoPermission: not asked again for the other links). The topology reader pairs GPUs with it."""
    fn = getattr(nv, "nvmlDeviceGetNvLinkRemotePciInfo", None)
    if fn is None:
        if links:
            g.unsupported["nvlink.remote"] = binding_lacks("nvmlDeviceGetNvLinkRemotePciInfo")
        return None
    out = {}
    for link in links:
        try:
            info, reason = _link_call(g, nv, fn, link)
        except _mismatch_error(nv):
            return None
        if g.lost:
            return None
        if reason is not None:
            if not out and reason in ("NotSupported", "FunctionNotFound", "NoPermission"):
                return None
            continue
        bus = sysfs_bus_id(as_text(info.busId))
        if bus:
            out[str(link)] = bus
    return out or None


def _numa_node(g, nv, fs, pci_bus_id):
    """NVML's answer when it has one, else the kernel's view of the GPU's PCI device."""
    node = g.call("numa_node", "nvmlDeviceGetNumaNodeId")
    if node is not None:
        return int(node)
    bus = sysfs_bus_id(pci_bus_id)
    text = fs.read("/sys/bus/pci/devices/%s/numa_node" % bus) if bus else None
    if text is not None and text.strip().lstrip("-").isdigit():
        value = int(text.strip())
        g.unsupported.pop("numa_node", None)
        # -1: the platform has no NUMA information for this device.
        return value if value >= 0 else None
    g.unsupported.setdefault("numa_node", "NotSupported")
    return None


def read_driver(nv, fs):
    """Host-wide driver facts: driver, NVML and CUDA driver versions."""
    unsupported = {}

    def sys_call(field, function):
        fn = getattr(nv, function, None)
        if fn is None:
            unsupported[field] = binding_lacks(function)
            return None
        try:
            return as_text(fn())
        except nv.NVMLError as exc:
            unsupported[field] = error_name(exc)
        except _mismatch_error(nv):
            unsupported[field] = "FunctionNotFound"
        return None

    cuda = sys_call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        # The _v2 call needs libcuda.so.1; the plain one only needs the driver.
        first = unsupported.pop("cuda_driver_version")
        cuda = sys_call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
        if cuda is None and first.startswith(LACKS):
            unsupported["cuda_driver_version"] = "%s; %s" % (first, unsupported["cuda_driver_version"])
    return {
        "version": sys_call("version", "nvmlSystemGetDriverVersion"),
        "nvml_version": sys_call("nvml_version", "nvmlSystemGetNVMLVersion"),
        "cuda_driver_version": decoders.cuda_version_string(cuda) if cuda else None,
        "cuda_driver_version_int": int(cuda) if cuda else None,
        "unsupported": unsupported,
    }


def collect(nv, fs=None, sample_seconds=SAMPLE_SECONDS, meanwhile=None):
    """Everything NVML says about this host. Raises NvmlUnavailable when NVML cannot start.

    Each GPU's links and error counters are read first, and the counters again at least ``sample_seconds`` later
    (0: a single read, no increase). In between, inside that window, every GPU's other facts are read and then
    ``meanwhile`` (a callable, optional) is called once: those reads share the wait instead of preceding or
    following it."""
    fs = fs or HostFS("/")
    try:
        with nvml_session(nv):
            return _collect(nv, fs, sample_seconds, meanwhile)
    except NvmlInitError as exc:
        # The NVML error stays the cause: its name (LibRmVersionMismatch, DriverNotLoaded...) is a finding of its own.
        raise NvmlUnavailable("NVML could not be initialised: %s (%s)" % (error_name(exc.error), exc.error)) \
            from exc.error


def _collect(nv, fs, sample_seconds, meanwhile=None):
    driver = read_driver(nv, fs)
    try:
        count = int(nv.nvmlDeviceGetCount())
    except nv.NVMLError as exc:
        raise NvmlUnavailable("NVML could not count GPUs: %s" % error_name(exc)) from exc
    read = []
    for index in range(count):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            reason = error_name(exc)
            read.append({"index": index, "lost": reason == "GpuIsLost", "error": reason,
                         "unsupported": {}})
            continue
        read.append(_first_counters(nv, handle, index))
    firsts = [g.first_at for g in read if isinstance(g, _Gpu) and not g.lost]
    # Inside the window: every GPU's other facts, then the caller's reads.
    for g in read:
        if isinstance(g, _Gpu):
            _read_gpu(g, nv, fs)
    if meanwhile is not None:
        meanwhile()
    if sample_seconds and firsts:
        # Every GPU's counters get at least sample_seconds between their two reads.
        time.sleep(max(0.0, max(firsts) + sample_seconds - time.monotonic()))
    gpus = []
    for g in read:
        if not isinstance(g, _Gpu):
            gpus.append(g)
        elif sample_seconds and not g.lost:
            second = _counters(g, nv)
            gpus.append(_finish(g, second, round(time.monotonic() - g.first_at, 3)))
        else:
            gpus.append(_finish(g))
    return driver, gpus
