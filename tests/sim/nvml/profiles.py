#!/usr/bin/env python3
"""GPU profiles -> state files for the fake NVML library (fake_nvml.c).

Library use (import this file, or put tests/sim/nvml on sys.path)::

    state = build_state("h100", gpus=8, driver="550", overrides=["gpu.3.power_limit_mw=250000"])
    write_state(path, state)
    read_state(path)  # -> dict[str, str]

Command line::

    profiles.py --list
    profiles.py --profile h100 --gpus 8 --driver 550 [--seed S] [--set KEY=VALUE ...] [--unset KEY ...]
                [-o PATH] [--print]

Keys, units and error injection are described in README.md next to this file.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import tempfile
import uuid
from collections.abc import Iterable, Mapping

MIB = 1024 * 1024

# NVML error names (as in pynvml's NVMLError_<Name> classes) accepted in error.* values.
ERROR_CODES: dict[str, int] = {
    "Uninitialized": 1,
    "InvalidArgument": 2,
    "NotSupported": 3,
    "NoPermission": 4,
    "AlreadyInitialized": 5,
    "NotFound": 6,
    "InsufficientSize": 7,
    "InsufficientPower": 8,
    "DriverNotLoaded": 9,
    "Timeout": 10,
    "IrqIssue": 11,
    "LibraryNotFound": 12,
    "FunctionNotFound": 13,
    "CorruptedInforom": 14,
    "GpuIsLost": 15,
    "ResetRequired": 16,
    "OperatingSystem": 17,
    "LibRmVersionMismatch": 18,
    "InUse": 19,
    "Memory": 20,
    "NoData": 21,
    "ArgumentVersionMismatch": 25,
    "Unknown": 999,
}

# Driver branch -> (full version, CUDA driver version as major*1000 + minor*10).
DRIVERS: dict[str, dict[str, str]] = {
    "535": {"driver_version": "535.183.01", "cuda_driver_version": "12020"},
    "550": {"driver_version": "550.90.07", "cuda_driver_version": "12040"},
    "570": {"driver_version": "570.86.15", "cuda_driver_version": "12080"},
}
CUDA_BY_BRANCH: dict[str, str] = {"535": "12020", "550": "12040", "560": "12060", "570": "12080", "580": "13000"}

SYSTEM_KEYS = ("driver_version", "nvml_version", "cuda_driver_version", "require_root", "gpu_count", "missing")

# Cumulative counters: "<key>" is a comma list (item i = NVLink link i; one item for pcie_replay) and
# "<key>_per_s" the same list of increases per second since nvmlInit, so that two reads apart see it rise.
COUNTER_KEYS = (
    "pcie_replay", "nvlink_replay", "nvlink_recovery", "nvlink_crc_flit", "nvlink_crc_data", "nvlink_ecc_data",
)  # fmt: skip

# Per-GPU keys, in file order.  "lost" is never written by a profile (absent = not lost).
GPU_KEYS = (
    "index", "name", "uuid", "serial", "pci_bus_id", "pci_device_id", "pci_subsystem_id", "architecture",
    "memory_total", "memory_used", "persistence_mode",
    "power_usage_mw", "utilization_gpu", "utilization_memory",
    "power_limit_mw", "power_default_limit_mw", "power_min_limit_mw", "power_max_limit_mw",
    "enforced_power_limit_mw",
    "ecc_current", "ecc_pending", "ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected",
    "ecc_aggregate_uncorrected",
    "remapped_corrected", "remapped_uncorrected", "remapped_pending", "remapped_failure",
    "retired_sbe", "retired_dbe", "retired_pending",
    "clock_graphics", "clock_sm", "clock_mem", "clock_video",
    "max_clock_graphics", "max_clock_sm", "max_clock_mem", "max_clock_video",
    "app_clock_graphics", "app_clock_mem", "default_app_clock_graphics", "default_app_clock_mem",
    "supported_mem_clocks", "supported_graphics_clocks", "locked_clock_min", "locked_clock_max",
    "clocks_event_reasons",
    "temperature", "temp_slowdown", "temp_shutdown", "temp_gpu_max", "temp_mem_max",
    "pcie_gen_current", "pcie_width_current", "pcie_gen_max", "pcie_width_max",
    "compute_mode", "mig_current", "mig_pending", "nvlink_count", "nvlink_count_field", "nvlink_down",
    "nvlink_remote",
    *(k + rate for k in COUNTER_KEYS for rate in ("", "_per_s")),
    "fabric_state", "fabric_status", "fabric_clique_id", "fabric_health_mask", "fabric_health_summary",
    "recovery_action", "vbios_version",
    "cpu_affinity", "numa_node", "processes", "lost",
)  # fmt: skip

_STRING_KEYS = {"name", "uuid", "serial", "driver_version", "nvml_version", "missing", "vbios_version"}
_NUM = r"(?:0[xX][0-9a-fA-F]+|\d+)"
_BUS_ID = r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7]"
_FORMATS = {
    "pci_bus_id": re.compile(r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}\.[0-7]"),
    "supported_mem_clocks": re.compile(r"(?:\d+(?:\s*,\s*\d+)*)?"),
    "supported_graphics_clocks": re.compile(r"(?:\d+(?:\s*,\s*\d+)*)?"),
    "nvlink_down": re.compile(r"(?:\d+(?:\s*,\s*\d+)*)?"),
    # item i: the bus id at the far end of NVLink i (an NVSwitch or the peer GPU); an empty item: not known
    "nvlink_remote": re.compile(rf"(?:{_BUS_ID})?(?:\s*,\s*(?:{_BUS_ID})?)*"),
    "processes": re.compile(r"(?:\d+:\d+(?:\s*,\s*\d+:\d+)*)?"),
    "cpu_affinity": re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*"),
    **{k + rate: re.compile(r"\d+(?:\s*,\s*\d+)*") for k in COUNTER_KEYS for rate in ("", "_per_s")},
}
_INT = re.compile(_NUM)

# 8-GPU HGX board: PCI buses and the host's NUMA layout (2 sockets x 56 cores, SMT).
HGX_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
NUMA_CPUS = ("0-55,112-167", "56-111,168-223")

GPU_IDLE = 0x1  # nvmlClocksEventReasonGpuIdle


def _clock_list(top: int, bottom: int, step: int = 15) -> str:
    return ",".join(str(c) for c in range(top, bottom - 1, -step))


# Static per-GPU values of each profile (NVML units: bytes, mW, MHz, C).  Per-index values (uuid, serial, bus id,
# affinity, small variations of temperature and power draw) are added by build_state().
PROFILES: dict[str, dict[str, str]] = {
    "a100": {
        "name": "NVIDIA A100-SXM4-80GB",
        "pci_device_id": "0x20B210DE",
        "pci_subsystem_id": "0x147F10DE",
        "architecture": "7",
        "memory_total": str(81920 * MIB),
        "memory_used": str(512 * MIB),
        "power_default_limit_mw": "400000",
        "power_min_limit_mw": "100000",
        "power_max_limit_mw": "400000",
        "clock_graphics": "210",
        "clock_sm": "210",
        "clock_mem": "1593",
        "clock_video": "585",
        "max_clock_graphics": "1410",
        "max_clock_sm": "1410",
        "max_clock_mem": "1593",
        "max_clock_video": "1290",
        "default_app_clock_graphics": "1410",
        "default_app_clock_mem": "1593",
        "supported_mem_clocks": "1593",
        "supported_graphics_clocks": _clock_list(1410, 210),
        "temp_slowdown": "89",
        "temp_shutdown": "92",
        "temp_gpu_max": "85",
        "temp_mem_max": "95",
        "pcie_gen_max": "4",
        "pcie_width_max": "16",
        "mig_current": "0",
        "mig_pending": "0",
        "nvlink_count": "12",
        "nvlink_down": "",
        **{k: "0" for k in COUNTER_KEYS if k.startswith("nvlink_")},
        # A100 has no GPU fabric probe (nvmlDeviceGetGpuFabricInfo is Hopper+): fabric_* absent = NotSupported.
        "vbios_version": "92.00.45.00.06",
        "remapped_corrected": "0",
        "remapped_uncorrected": "0",
        "remapped_pending": "0",
        "remapped_failure": "0",
        "_idle_power_mw": "58000",
        "_idle_temp": "34",
        "_serial_prefix": "1322",
    },
    "h100": {
        "name": "NVIDIA H100 80GB HBM3",
        "pci_device_id": "0x233010DE",
        "pci_subsystem_id": "0x16C110DE",
        "architecture": "9",
        "memory_total": str(81559 * MIB),
        "memory_used": str(512 * MIB),
        "power_default_limit_mw": "700000",
        "power_min_limit_mw": "200000",
        "power_max_limit_mw": "700000",
        "clock_graphics": "345",
        "clock_sm": "345",
        "clock_mem": "2619",
        "clock_video": "765",
        "max_clock_graphics": "1980",
        "max_clock_sm": "1980",
        "max_clock_mem": "2619",
        "max_clock_video": "1545",
        "default_app_clock_graphics": "1980",
        "default_app_clock_mem": "2619",
        "supported_mem_clocks": "2619",
        "supported_graphics_clocks": _clock_list(1980, 345),
        "temp_slowdown": "89",
        "temp_shutdown": "92",
        "temp_gpu_max": "87",
        "temp_mem_max": "95",
        "pcie_gen_max": "5",
        "pcie_width_max": "16",
        "mig_current": "0",
        "mig_pending": "0",
        "nvlink_count": "18",
        "nvlink_down": "",
        **{k: "0" for k in COUNTER_KEYS if k.startswith("nvlink_")},
        # HGX H100 with NVSwitch and a running fabric manager: probe completed, status success. Health mask 0:
        # every health field "not supported", as drivers report that predate the mask bits.
        "fabric_state": "3",
        "fabric_status": "0",
        "fabric_health_mask": "0",
        "vbios_version": "96.00.5E.00.01",
        "remapped_corrected": "0",
        "remapped_uncorrected": "0",
        "remapped_pending": "0",
        "remapped_failure": "0",
        "_idle_power_mw": "72000",
        "_idle_temp": "32",
        "_serial_prefix": "1652",
    },
    # L40S: no NVLink and no MIG (keys absent -> NotSupported); GDDR6 has no memory max temperature.
    "l40s": {
        "name": "NVIDIA L40S",
        "pci_device_id": "0x26B910DE",
        "pci_subsystem_id": "0x185110DE",
        "architecture": "8",
        "memory_total": str(46068 * MIB),
        "memory_used": str(512 * MIB),
        "power_default_limit_mw": "350000",
        "power_min_limit_mw": "100000",
        "power_max_limit_mw": "350000",
        "clock_graphics": "210",
        "clock_sm": "210",
        "clock_mem": "405",
        "clock_video": "765",
        "max_clock_graphics": "2520",
        "max_clock_sm": "2520",
        "max_clock_mem": "9001",
        "max_clock_video": "1965",
        "default_app_clock_graphics": "2520",
        "default_app_clock_mem": "9001",
        "supported_mem_clocks": "9001,5001,810,405",
        "supported_graphics_clocks": _clock_list(2520, 210),
        "temp_slowdown": "91",
        "temp_shutdown": "94",
        "temp_gpu_max": "89",
        "pcie_gen_max": "4",
        "pcie_width_max": "16",
        "remapped_corrected": "0",
        "remapped_uncorrected": "0",
        "remapped_pending": "0",
        "remapped_failure": "0",
        # No NVLink (nvlink_* absent: NotSupported) and no GPU fabric (fabric_* absent: NotSupported).
        "vbios_version": "95.02.66.00.02",
        "_idle_power_mw": "34000",
        "_idle_temp": "30",
        "_serial_prefix": "1324",
    },
}

_UUID_NAMESPACE = uuid.UUID("6b0c7f0e-5d1a-4a53-9a3e-2f4d8c1b9e70")


def resolve_driver(driver: str) -> dict[str, str]:
    """'550' or a full version like '550.54.15' -> driver_version, nvml_version, cuda_driver_version."""
    driver = str(driver).strip()
    if driver in DRIVERS:
        info = dict(DRIVERS[driver])
    elif re.fullmatch(r"\d{3}\.\d+(\.\d+)?", driver):
        branch = driver.split(".")[0]
        if branch not in CUDA_BY_BRANCH:
            raise ValueError(f"unknown driver branch {branch!r} (known: {', '.join(CUDA_BY_BRANCH)})")
        info = {"driver_version": driver, "cuda_driver_version": CUDA_BY_BRANCH[branch]}
    else:
        raise ValueError(f"unknown driver {driver!r}: use one of {', '.join(DRIVERS)} or a full version string")
    info["nvml_version"] = "12." + info["driver_version"]
    return info


def _gpu_values(profile: str, spec: Mapping[str, str], i: int, gpus: int, seed: str) -> dict[str, str]:
    digest = hashlib.sha256(f"{seed}/{profile}/{i}".encode()).hexdigest()
    node = i * 2 // gpus
    limit = spec["power_default_limit_mw"]
    values = {
        "index": str(i),
        "uuid": "GPU-" + str(uuid.uuid5(_UUID_NAMESPACE, f"{seed}/{profile}/{i}")),
        "serial": spec["_serial_prefix"] + str(int(digest[:12], 16) % 10**9).zfill(9),
        "pci_bus_id": f"{i // len(HGX_BUSES):08X}:{HGX_BUSES[i % len(HGX_BUSES)]}:00.0",
        "persistence_mode": "1",
        "power_usage_mw": str(int(spec["_idle_power_mw"]) + (i * 1373) % 4000),
        "utilization_gpu": "0",
        "utilization_memory": "0",
        "power_limit_mw": limit,
        "enforced_power_limit_mw": limit,
        "ecc_current": "1",
        "ecc_pending": "1",
        "ecc_volatile_corrected": "0",
        "ecc_volatile_uncorrected": "0",
        "ecc_aggregate_corrected": "0",
        "ecc_aggregate_uncorrected": "0",
        "app_clock_graphics": spec["default_app_clock_graphics"],
        "app_clock_mem": spec["default_app_clock_mem"],
        "locked_clock_min": "0",
        "locked_clock_max": "0",
        "clocks_event_reasons": hex(GPU_IDLE),
        "temperature": str(int(spec["_idle_temp"]) + (i * 3) % 4),
        "pcie_gen_current": "1",  # idle GPUs train down; not a fault
        "pcie_width_current": spec["pcie_width_max"],
        "compute_mode": "0",
        "pcie_replay": "0",
        "recovery_action": "0",  # NVML_GPU_RECOVERY_ACTION_NONE
        "cpu_affinity": NUMA_CPUS[node],
        "numa_node": str(node),
        "processes": "",
    }
    values.update({k: v for k, v in spec.items() if not k.startswith("_")})
    return values


def _is_error_key(key: str) -> bool:
    return bool(re.fullmatch(r"(gpu\.\d+\.)?error\..+", key))


def _check_value(key: str, value: str) -> None:
    if "\n" in value or "\r" in value:
        raise ValueError(f"{key}: value must be one line")
    if value == "":
        return  # present but empty: NotSupported for numbers, "none" for lists
    if _is_error_key(key):
        if value not in ERROR_CODES and not value.isdigit():
            raise ValueError(f"{key}: unknown error {value!r} (use one of {', '.join(ERROR_CODES)} or a number)")
        return
    base = key.rsplit(".", 1)[-1] if key.startswith("gpu.") else key
    if base == "nvlink_count_field" and value in ERROR_CODES:
        return  # the link-count field's slot fails with this error
    if base == "fabric_status":  # an NVML return code: 0 (success), a number or an error name
        if value not in ERROR_CODES and not value.isdigit():
            raise ValueError(f"{key}: unknown status {value!r} (use 0, a number or one of {', '.join(ERROR_CODES)})")
        return
    if base in _STRING_KEYS:
        return
    pattern = _FORMATS.get(base, _INT)
    if not pattern.fullmatch(value):
        raise ValueError(f"{key}: bad value {value!r}")


def _expand_key(key: str, gpus: int) -> list[str]:
    """Validates a key; 'gpu.*.x' -> one key per GPU."""
    if key in SYSTEM_KEYS or re.fullmatch(r"error\..+", key):
        return [key]
    m = re.fullmatch(r"gpu\.(\*|\d+)\.(.+)", key)
    if m:
        idx, rest = m.groups()
        if rest in GPU_KEYS or re.fullmatch(r"error\..+", rest):
            if idx == "*":
                return [f"gpu.{i}.{rest}" for i in range(gpus)]
            if int(idx) < gpus:
                return [f"gpu.{int(idx)}.{rest}"]
            raise ValueError(f"{key}: no GPU {idx} (state has {gpus})")
    raise ValueError(f"unknown state key: {key!r}")


def _override_items(overrides: Mapping[str, str | None] | Iterable[str]) -> list[tuple[str, str | None]]:
    if isinstance(overrides, Mapping):
        return [(str(k), None if v is None else str(v)) for k, v in overrides.items()]
    if isinstance(overrides, str):
        overrides = [overrides]
    items = []
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} is not KEY=VALUE")
        k, v = item.split("=", 1)
        items.append((k.strip(), v.strip()))
    return items


def apply_overrides(
    state: Mapping[str, str], overrides: Mapping[str, str | None] | Iterable[str] = ()
) -> dict[str, str]:
    """Returns a copy of state with overrides applied.

    overrides: {"KEY": "VALUE"} (None deletes the key) or ["KEY=VALUE", ...].  'gpu.*.KEY' means every GPU.
    Unknown keys raise ValueError, except error.<fn> / gpu.N.error.<fn> (any function name)."""
    new = dict(state)
    gpus = _gpu_blocks(state)
    for key, value in _override_items(overrides):
        for k in _expand_key(key, gpus):
            if value is None:
                new.pop(k, None)
            else:
                _check_value(k, value)
                new[k] = value
    return new


def _gpu_blocks(state: Mapping[str, str]) -> int:
    idx = [int(m.group(1)) for k in state if (m := re.match(r"gpu\.(\d+)\.", k))]
    return max(idx) + 1 if idx else 0


def build_state(
    profile: str,
    gpus: int = 8,
    driver: str = "550",
    overrides: Mapping[str, str | None] | Iterable[str] = (),
    seed: str = "",
) -> dict[str, str]:
    """State for a host with `gpus` identical GPUs of `profile`.  seed varies UUIDs/serials between hosts."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
    if not 1 <= int(gpus) <= 64:
        raise ValueError("gpus must be between 1 and 64")
    gpus = int(gpus)
    state: dict[str, str] = resolve_driver(driver)
    state.update({"require_root": "1", "gpu_count": str(gpus), "missing": ""})
    for i in range(gpus):
        for k, v in _gpu_values(profile, PROFILES[profile], i, gpus, seed).items():
            state[f"gpu.{i}.{k}"] = v
    return apply_overrides(state, overrides)


def _sort_key(key: str) -> tuple:
    m = re.fullmatch(r"gpu\.(\d+)\.(.+)", key)
    if m:
        rest = m.group(2)
        pos = GPU_KEYS.index(rest) if rest in GPU_KEYS else len(GPU_KEYS)
        return (2, int(m.group(1)), pos, rest)
    if key in SYSTEM_KEYS:
        return (0, SYSTEM_KEYS.index(key), 0, key)
    return (1, 0, 0, key)


def format_state(state: Mapping[str, str]) -> str:
    lines = ["# fake NVML state: one key=value per line (tests/sim/nvml/README.md)"]
    for key in sorted(state, key=_sort_key):
        value = str(state[key])
        if "\n" in value or "\n" in key or "=" in key:
            raise ValueError(f"bad state entry {key!r}")
        lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def write_state(path: str | os.PathLike, state: Mapping[str, str]) -> None:
    """Atomically writes the state file (temp file in the same directory + os.replace), mode 0644."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    text = format_state(state)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            os.fchmod(f.fileno(), 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def parse_state(text: str) -> dict[str, str]:
    """Same rules as the C library: '#' comments and lines without '=' are ignored, the last duplicate wins."""
    state: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, v = line.split("=", 1)
        state[k.strip()] = v.strip()
    return state


def read_state(path: str | os.PathLike) -> dict[str, str]:
    with open(path, encoding="utf-8") as f:
        return parse_state(f.read())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate a state file for the fake NVML library.")
    ap.add_argument("--list", action="store_true", help="list profiles and drivers")
    ap.add_argument("--profile", choices=sorted(PROFILES))
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--driver", default="550", help=f"{', '.join(DRIVERS)} or a full version (default 550)")
    ap.add_argument("--seed", default="", help="varies UUIDs and serials (one seed per simulated host)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--unset", dest="unsets", action="append", default=[], metavar="KEY")
    ap.add_argument("-o", "--output", help="state file to write (atomically)")
    ap.add_argument("--print", dest="print_", action="store_true", help="print the state to stdout")
    args = ap.parse_args(argv)

    if args.list:
        for name, spec in PROFILES.items():
            print(f"{name:6} {spec['name']} (architecture {spec['architecture']})")
        for branch, info in DRIVERS.items():
            print(f"driver {branch}: {info['driver_version']} CUDA {info['cuda_driver_version']}")
        return 0
    if not args.profile:
        ap.error("--profile is required (or --list)")
    try:
        overrides: dict[str, str | None] = dict(_override_items(args.sets))
        overrides.update({k: None for k in args.unsets})
        state = build_state(args.profile, args.gpus, args.driver, overrides, seed=args.seed)
    except ValueError as e:
        ap.error(str(e))
    if args.output:
        write_state(args.output, state)
    if args.print_ or not args.output:
        sys.stdout.write(format_state(state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
