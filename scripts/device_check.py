#!/usr/bin/env python3
"""The real-GPU check (`make device-check`, docs/device-check.md): gpufleet against nvidia-smi on this machine.

On a Linux host with an NVIDIA driver and GPU, read-only:

1. ``nvidia-smi -q -x`` (before), ``nvidia-smi topo -m``;
2. module ``gpu_info`` on localhost through Ansible (the CLI's runner), ``nvidia-smi -q -x`` again (after);
3. the time of gpufleet's NVML facts (``nvml.collect``, one reading of every GPU) against ``nvidia-smi -q`` and
   ``nvidia-smi -q -x`` for the same GPUs, each the median of a few runs;
4. ``gpufleet audit``, ``gpufleet topology --json`` and the probe (playbooks/probe.yml, a short sample) on
   ``inventories/local/hosts.yml``, and the watch checker (the zipapp ``watch_install`` would install, built here
   into the output directory) with ``--print``: no file outside the output directory is written, no Slurm call;
5. one table - field, gpufleet, nvidia-smi, match - printed and written to ``<out>/table.md`` and
   ``<out>/table.json``; exit 0 when nothing mismatches, 1 when something does (or a step failed), 2 when the
   machine cannot run the check (no nvidia-smi, no GPU).

The parsing and comparison functions (``parse_smi_xml``, ``parse_topo``, ``compare_gpus``, ``compare_topology``,
``render_markdown``) are pure and importable; tests/unit/test_device_check.py feeds them recorded public outputs.

Live values (temperature, power draw, clocks, utilization, used memory, clock event reasons) change between two
readings: they are compared against nvidia-smi's readings taken before and after gpufleet's, within a tolerance,
and a difference is reported as ``live`` (shown, not a failure). Everything else must be equal.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess  # nosec B404  # runs nvidia-smi and gpufleet's own CLI with argv lists
import sys
import time
import xml.etree.ElementTree as ET  # nosec B405  # parses nvidia-smi's own output on this machine, not foreign XML
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "build" / "device-check"
DEFAULT_INVENTORY = REPO / "inventories" / "local" / "hosts.yml"
GPU_INFO_ACTION = "gpufleet.tuning.gpu_info"
PROBE_ACTION = "gpufleet.tuning.gpu_probe"

MATCH, MISMATCH, LIVE, SKIP = "match", "MISMATCH", "live", "skip"
TIME_BUDGET_S = 300  # the whole check, venv set up before it not counted

# nvidia-smi's words for "no value" (its N/A forms, an unsupported or deprecated query, an error in brackets).
_NA = re.compile(
    r"^(?:|n/a|\[n/a\]|none|not supported|\[not supported\]|requested functionality has been deprecated|"
    r"\[[^\]]*\]|unknown error|insufficient permissions)$",
    re.IGNORECASE,
)
_UNIT = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:w|mib|mhz|c|%|x|kb/s)?\s*$", re.IGNORECASE)

# (gpufleet field, kind, tolerance). kind: strict (must be equal), counter (cumulative: between the two readings),
# live (within the tolerance of the two readings, else "live"). Tolerance: absolute, or a fraction when < 1.
FIELDS: tuple[tuple[str, str, float], ...] = (
    ("name", "strict", 0),
    ("uuid", "strict", 0),
    ("pci_bus_id", "strict", 0),
    ("pci_device_id", "strict", 0),
    ("vbios_version", "strict", 0),
    ("persistence_mode", "strict", 0),
    ("compute_mode", "strict", 0),
    ("memory.total_mib", "strict", 0),
    ("memory.used_mib", "live", 0.02),
    ("power.limit_w", "strict", 0),
    ("power.enforced_limit_w", "strict", 0),
    ("power.default_limit_w", "strict", 0),
    ("power.min_limit_w", "strict", 0),
    ("power.max_limit_w", "strict", 0),
    ("power.usage_w", "live", 0.15),
    ("ecc.current", "strict", 0),
    ("ecc.pending", "strict", 0),
    ("ecc.volatile_corrected", "counter", 0),
    ("ecc.volatile_uncorrected", "counter", 0),
    ("ecc.aggregate_corrected", "counter", 0),
    ("ecc.aggregate_uncorrected", "counter", 0),
    ("remapped_rows.corrected", "counter", 0),
    ("remapped_rows.uncorrected", "counter", 0),
    ("remapped_rows.pending", "strict", 0),
    ("remapped_rows.failure", "strict", 0),
    ("retired_pages.single_bit", "counter", 0),
    ("retired_pages.double_bit", "counter", 0),
    ("retired_pages.pending", "strict", 0),
    ("clocks.graphics", "live", 0),
    ("clocks.sm", "live", 0),
    ("clocks.mem", "live", 0),
    ("clocks.max_graphics", "strict", 0),
    ("clocks.max_sm", "strict", 0),
    ("clocks.max_mem", "strict", 0),
    ("clocks.app_graphics", "strict", 0),
    ("clocks.app_mem", "strict", 0),
    ("clocks.default_app_graphics", "strict", 0),
    ("clocks.default_app_mem", "strict", 0),
    ("clock_event_reasons.active", "live", 0),
    ("temperature.gpu", "live", 3),
    ("temperature.slowdown", "strict", 0),
    ("temperature.shutdown", "strict", 0),
    ("temperature.gpu_max", "strict", 0),
    ("pcie.gen_current", "live", 0),
    ("pcie.width_current", "live", 0),
    ("pcie.gen_max", "strict", 0),
    ("pcie.width_max", "strict", 0),
    ("pcie.replay_count", "counter", 0),
    ("utilization.gpu_pct", "live", 10),
    ("utilization.memory_pct", "live", 10),
    ("mig.current", "strict", 0),
    ("mig.pending", "strict", 0),
    ("fabric.state", "strict", 0),
    ("fabric.status", "strict", 0),
    ("recovery_action", "strict", 0),
)

# nvidia-smi's clock event reason element names (after the clocks_event_reason_ / clocks_throttle_reason_ prefix)
# that differ from gpufleet's (module_utils/decoders.CLOCK_EVENT_REASONS).
_REASON_NAMES = {"display_clocks_setting": "display_clock_setting"}
# nvidia-smi's GPU recovery action words -> gpufleet's (module_utils/nvml.RECOVERY_ACTIONS).
_RECOVERY = {"none": "none", "reset": "gpu_reset", "gpu reset": "gpu_reset", "reboot": "node_reboot",
             "node reboot": "node_reboot", "drain p2p": "drain_p2p", "drain and reset": "drain_and_reset"}  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# nvidia-smi -q -x


def _text(el: ET.Element | None, path: str) -> str | None:
    """The stripped text at ``path`` below ``el``; None when the element is absent (not offered by this version)."""
    if el is None:
        return None
    found = el.find(path)
    if found is None:
        return None
    return (found.text or "").strip()


def na(text: str | None) -> bool:
    return text is not None and bool(_NA.match(text.strip()))


def number(text: str | None) -> float | int | None:
    """"700.00 W" -> 700.0, "81559 MiB" -> 81559, "16x" -> 16, "33 C" -> 33; None for N/A or anything else."""
    if text is None or na(text):
        return None
    m = _UNIT.match(text)
    if not m:
        return None
    value = float(m.group(1))
    return int(value) if value.is_integer() and "." not in m.group(1) else value


def enabled(text: str | None) -> bool | None:
    low = (text or "").strip().lower()
    if low in ("enabled", "yes", "on"):
        return True
    if low in ("disabled", "no", "off"):
        return False
    return None


_ABSENT = object()  # the element is not in this nvidia-smi's output: nothing to compare


def _put(out: dict[str, Any], field: str, raw: str | None, convert) -> None:
    """``out[field]``: converted value, None for an N/A value; left out when the element is absent."""
    if raw is None:
        return
    out[field] = None if na(raw) else convert(raw)


def _first(gpu: ET.Element, *paths: str) -> str | None:
    """The first of ``paths`` that is present (a field that moved or was renamed between nvidia-smi versions)."""
    for path in paths:
        value = _text(gpu, path)
        if value is not None:
            return value
    return None


def _sum(gpu: ET.Element, base: str, names: tuple[str, ...]) -> tuple[bool, int | None]:
    """(present, total) of the counters ``names`` under ``base``; total None when any present one is N/A."""
    values = [_text(gpu, f"{base}/{n}") for n in names]
    present = [v for v in values if v is not None]
    if not present:
        return False, None
    total = 0
    for v in present:
        n = number(v)
        if n is None:
            return True, None
        total += int(n)
    return True, total


def _ecc_counts(gpu: ET.Element, out: dict[str, Any]) -> None:
    """NVML's total corrected/uncorrected counts (nvmlDeviceGetTotalEccErrors: every memory location) from the
    per-location counters of nvidia-smi: sram_* and dram_* (r525 and later; r570+ splits the SRAM uncorrectable
    count into _parity and _secded), or single_bit/double_bit totals (older drivers)."""
    for scope in ("volatile", "aggregate"):
        base = f"ecc_errors/{scope}"
        present, corrected = _sum(gpu, base, ("sram_correctable", "dram_correctable"))
        if present:
            _p, uncorrected = _sum(gpu, base, ("sram_uncorrectable", "sram_uncorrectable_parity",
                                                 "sram_uncorrectable_secded", "dram_uncorrectable"))
        else:
            present, corrected = _sum(gpu, base, ("single_bit/total",))
            _p, uncorrected = _sum(gpu, base, ("double_bit/total",))
        if present:
            out[f"ecc.{scope}_corrected"] = corrected
            out[f"ecc.{scope}_uncorrected"] = uncorrected


def _reasons(gpu: ET.Element) -> list[str] | None | object:
    for tag, prefix in (("clocks_event_reasons", "clocks_event_reason_"),
                        ("clocks_throttle_reasons", "clocks_throttle_reason_")):
        el = gpu.find(tag)
        if el is None:
            continue
        active, seen = [], False
        for child in el:
            if not child.tag.startswith(prefix):
                continue
            seen = True
            if (child.text or "").strip().lower() == "active":
                name = child.tag[len(prefix):]
                active.append(_REASON_NAMES.get(name, name))
        return sorted(active) if seen else None
    return _ABSENT


def parse_gpu(gpu: ET.Element) -> dict[str, Any]:
    """One ``<gpu>`` element -> {gpufleet field: value in gpufleet's units and words}. None: nvidia-smi says N/A;
    a field that is not a key: this nvidia-smi does not report it."""
    out: dict[str, Any] = {}
    _put(out, "name", _text(gpu, "product_name"), str)
    _put(out, "uuid", _text(gpu, "uuid"), str)
    _put(out, "pci_bus_id", _text(gpu, "pci/pci_bus_id") or gpu.get("id"), lambda s: s.upper())
    _put(out, "pci_device_id", _text(gpu, "pci/pci_device_id"), lambda s: "0x" + s.upper().removeprefix("0X"))
    _put(out, "vbios_version", _text(gpu, "vbios_version"), lambda s: s.upper())
    _put(out, "persistence_mode", _text(gpu, "persistence_mode"), enabled)
    _put(out, "compute_mode", _text(gpu, "compute_mode"), lambda s: s.lower().replace(" ", "_"))

    _put(out, "memory.total_mib", _text(gpu, "fb_memory_usage/total"), number)
    used, reserved = _text(gpu, "fb_memory_usage/used"), _text(gpu, "fb_memory_usage/reserved")
    if used is not None:
        # NVML's (v1) "used" is reserved + allocated (nvml.h, nvmlMemory_t); nvidia-smi shows the two apart.
        value = number(used)
        if value is not None and number(reserved) is not None:
            value += number(reserved)
        out["memory.used_mib"] = value

    power = gpu.find("gpu_power_readings")
    power = power if power is not None else gpu.find("power_readings")
    if power is not None:
        # r530+: requested (nvmlDeviceGetPowerManagementLimit) and current (enforced); before: power_limit and
        # enforced_power_limit. r560+: average and instant draw instead of power_draw.
        _put(out, "power.limit_w", _first(power, "requested_power_limit", "power_limit"), number)
        _put(out, "power.enforced_limit_w", _first(power, "current_power_limit", "enforced_power_limit"), number)
        _put(out, "power.default_limit_w", _text(power, "default_power_limit"), number)
        _put(out, "power.min_limit_w", _text(power, "min_power_limit"), number)
        _put(out, "power.max_limit_w", _text(power, "max_power_limit"), number)
        _put(out, "power.usage_w", _first(power, "power_draw", "average_power_draw", "instant_power_draw"), number)

    _put(out, "ecc.current", _text(gpu, "ecc_mode/current_ecc"), enabled)
    _put(out, "ecc.pending", _text(gpu, "ecc_mode/pending_ecc"), enabled)
    _ecc_counts(gpu, out)

    rows = _text(gpu, "remapped_rows")
    if rows is not None:
        if gpu.find("remapped_rows/remapped_row_corr") is None:
            for key in ("corrected", "uncorrected", "pending", "failure"):
                out["remapped_rows." + key] = None  # "N/A": no row remapping on this GPU (or in MIG mode)
        else:
            _put(out, "remapped_rows.corrected", _text(gpu, "remapped_rows/remapped_row_corr"), number)
            _put(out, "remapped_rows.uncorrected", _text(gpu, "remapped_rows/remapped_row_unc"), number)
            _put(out, "remapped_rows.pending", _text(gpu, "remapped_rows/remapped_row_pending"), enabled)
            _put(out, "remapped_rows.failure", _text(gpu, "remapped_rows/remapped_row_failure"), enabled)
    _put(out, "retired_pages.single_bit",
         _text(gpu, "retired_pages/multiple_single_bit_retirement/retired_count"), number)
    _put(out, "retired_pages.double_bit", _text(gpu, "retired_pages/double_bit_retirement/retired_count"), number)
    _put(out, "retired_pages.pending",
         _first(gpu, "retired_pages/pending_retirement", "retired_pages/pending_blacklist"), enabled)

    for ours, theirs in (("graphics", "graphics_clock"), ("sm", "sm_clock"), ("mem", "mem_clock")):
        _put(out, "clocks." + ours, _text(gpu, "clocks/" + theirs), number)
        _put(out, "clocks.max_" + ours, _text(gpu, "max_clocks/" + theirs), number)
    for ours, theirs in (("graphics", "graphics_clock"), ("mem", "mem_clock")):
        _put(out, "clocks.app_" + ours, _text(gpu, "applications_clocks/" + theirs), number)
        _put(out, "clocks.default_app_" + ours, _text(gpu, "default_applications_clocks/" + theirs), number)
    reasons = _reasons(gpu)
    if reasons is not _ABSENT:
        out["clock_event_reasons.active"] = reasons

    _put(out, "temperature.gpu", _text(gpu, "temperature/gpu_temp"), number)
    _put(out, "temperature.slowdown", _text(gpu, "temperature/gpu_temp_slow_threshold"), number)
    _put(out, "temperature.shutdown", _text(gpu, "temperature/gpu_temp_max_threshold"), number)
    _put(out, "temperature.gpu_max", _text(gpu, "temperature/gpu_temp_max_gpu_threshold"), number)

    link = "pci/pci_gpu_link_info/"
    _put(out, "pcie.gen_current", _text(gpu, link + "pcie_gen/current_link_gen"), number)
    _put(out, "pcie.gen_max", _text(gpu, link + "pcie_gen/max_link_gen"), number)
    _put(out, "pcie.width_current", _text(gpu, link + "link_widths/current_link_width"), number)
    _put(out, "pcie.width_max", _text(gpu, link + "link_widths/max_link_width"), number)
    _put(out, "pcie.replay_count", _text(gpu, "pci/replay_counter"), number)

    _put(out, "utilization.gpu_pct", _text(gpu, "utilization/gpu_util"), number)
    _put(out, "utilization.memory_pct", _text(gpu, "utilization/memory_util"), number)

    _put(out, "mig.current", _text(gpu, "mig_mode/current_mig"), enabled)
    _put(out, "mig.pending", _text(gpu, "mig_mode/pending_mig"), enabled)

    _put(out, "fabric.state", _text(gpu, "fabric/state"), lambda s: s.lower().replace(" ", "_"))
    _put(out, "fabric.status", _text(gpu, "fabric/status"), str)
    recovery = _text(gpu, "gpu_recovery_action")
    if recovery is not None:
        # "None" is an answer here (no recovery needed), not nvidia-smi's "no value".
        low = recovery.lower()
        out["recovery_action"] = None if low in ("n/a", "[n/a]") else _RECOVERY.get(low, low.replace(" ", "_"))
    return out


def bus_key(bus_id: str | None) -> str:
    """"00000000:18:00.0" / "0000:18:00.0" -> "0000:18:00.0" (the key GPUs are matched by)."""
    text = (bus_id or "").strip().lower()
    domain, sep, rest = text.partition(":")
    return f"{domain[-4:].rjust(4, '0')}:{rest}" if sep else text


def parse_smi_xml(text: str) -> dict[str, Any]:
    """``nvidia-smi -q -x`` -> {driver_version, cuda_version, attached_gpus, gpus: {bus key: fields}}.

    The DOCTYPE line names a DTD file that is not read (ElementTree resolves no external entity)."""
    root = ET.fromstring(text)  # nosec B314  # our own nvidia-smi's output; ElementTree loads no external entity
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi -q -x output: root element <{root.tag}>")
    gpus = {}
    for gpu in root.findall("gpu"):
        fields = parse_gpu(gpu)
        gpus[bus_key(fields.get("pci_bus_id") or gpu.get("id"))] = fields
    cuda = _text(root, "cuda_version")
    return {
        "driver_version": _text(root, "driver_version"),
        "cuda_version": None if cuda is None or na(cuda) else cuda,
        "attached_gpus": number(_text(root, "attached_gpus")),
        "gpus": gpus,
    }


# ----------------------------------------------------------------------------------------------------------------
# nvidia-smi topo -m

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SPLIT = re.compile(r"\t| {2,}")
EXTRA_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")


def parse_topo(text: str) -> dict[str, Any]:
    """``nvidia-smi topo -m`` -> {columns, rows: {name: {column: cell}}, affinity: {name: {CPU Affinity, ...}},
    nic_legend: {NICn: device}}. Cells are separated by tabs (as nvidia-smi prints them) or, in copies that lost
    the tabs, by runs of two or more spaces; the header's colour codes are dropped."""
    lines = [_ANSI.sub("", line).rstrip("\n") for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if re.search(r"(^|\s)GPU0(\s|$)", line)
                      and "Affinity" in line), None)  # fmt: skip
    if header_at is None:
        raise ValueError("no topo -m header (a line with GPU0 and CPU Affinity)")
    header = [c.strip() for c in _SPLIT.split(lines[header_at].strip()) if c.strip()]
    columns = [c for c in header if c not in EXTRA_COLUMNS]
    extras = [c for c in header if c in EXTRA_COLUMNS]
    rows: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str]] = {}
    for line in lines[header_at + 1:]:
        if not line.strip() or line.strip().startswith("Legend"):
            break
        cells = [c.strip() for c in _SPLIT.split(line.strip())]
        name, rest = cells[0], cells[1:]
        if not re.match(r"^(GPU|NIC)\d+$|^[A-Za-z][\w.-]*$", name):
            raise ValueError(f"topo -m: not a matrix row: {line.strip()[:80]!r}")
        # A row shorter than the header (a copy cut at the margin) keeps the cells it has.
        rows[name] = dict(zip(columns, rest[: len(columns)], strict=False))
        values = [c for c in rest[len(columns):] if c]
        affinity[name] = dict(zip(extras, values, strict=False))
    legend = {}
    for line in lines:
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if m:
            legend[m.group(1)] = m.group(2)
    return {"columns": columns, "rows": rows, "affinity": affinity, "nic_legend": legend}


# ----------------------------------------------------------------------------------------------------------------
# comparison


def dig(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _norm(field: str, value: Any) -> Any:
    """gpufleet's value in the form nvidia-smi's is parsed into."""
    if value is None:
        return None
    if field in ("pci_bus_id", "vbios_version", "pci_device_id"):
        text = str(value).upper()
        return "0x" + text[2:] if field == "pci_device_id" and text.startswith("0X") else text
    if field == "clock_event_reasons.active":
        return sorted(str(v) for v in value if not str(v).startswith("unknown_"))
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _close(ours: Any, theirs: Any, tolerance: float) -> bool:
    if isinstance(ours, bool) or isinstance(theirs, bool) or not isinstance(ours, (int, float)):
        return ours == theirs
    if not isinstance(theirs, (int, float)):
        return False
    slack = tolerance * max(abs(theirs), 1) if 0 < tolerance < 1 else tolerance
    return abs(ours - theirs) <= slack + 1e-9


def _judge(kind: str, tolerance: float, ours: Any, readings: list[Any]) -> str:
    if all(r is None for r in readings) and ours is None:
        return MATCH
    if kind == "strict":
        return MATCH if all(_close(ours, r, 0) for r in readings) else MISMATCH
    if kind == "counter":
        # Cumulative: gpufleet read between nvidia-smi's two readings, so its value lies between them.
        values = [r for r in readings if r is not None]
        if ours is None or len(values) != len(readings):
            return MISMATCH
        return MATCH if min(values) <= ours <= max(values) else MISMATCH
    if ours is None or any(r is None for r in readings):
        return MISMATCH
    if isinstance(ours, list):
        return MATCH if any(ours == r for r in readings) else LIVE
    low, high = min(readings), max(readings)
    if low - (tolerance * max(abs(low), 1) if 0 < tolerance < 1 else tolerance) <= ours <= high + (
        tolerance * max(abs(high), 1) if 0 < tolerance < 1 else tolerance
    ):
        return MATCH
    return LIVE


def show(value: Any, reason: str | None = None) -> str:
    if value is None:
        return f"n/a ({reason})" if reason else "n/a"
    if isinstance(value, bool):
        return "Enabled" if value else "Disabled"
    if isinstance(value, list):
        return ",".join(str(v) for v in value) or "(none)"
    return str(value)


def compare_gpus(facts: dict[str, Any], smi: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows {scope, field, gpufleet, nvidia_smi, status, kind} comparing gpu_info's result (``facts``: its
    ``driver`` and ``gpus``) with one or more parsed ``nvidia-smi -q -x`` readings (before and after gpufleet's).
    GPUs are matched by PCI bus id; a GPU on one side only is a mismatch."""
    rows: list[dict[str, Any]] = []
    first = smi[0]
    driver = facts.get("driver") or {}
    rows.append(_row("host", "driver.version", "strict", 0, driver.get("version"), [s["driver_version"] for s in smi]))
    rows.append(_row("host", "driver.cuda_driver_version", "strict", 0, driver.get("cuda_driver_version"),
                     [s["cuda_version"] for s in smi]))
    gpus = {bus_key(g.get("pci_bus_id")): g for g in facts.get("gpus") or []}
    rows.append(_row("host", "gpu_count", "strict", 0, len(gpus), [len(s["gpus"]) for s in smi]))
    for key in sorted(set(gpus) | set(first["gpus"])):
        ours = gpus.get(key)
        theirs = [s["gpus"].get(key) for s in smi]
        scope = f"GPU {ours.get('index') if ours else '?'} {key}"
        if ours is None or any(t is None for t in theirs):
            rows.append({"scope": scope, "field": "present", "gpufleet": show(ours is not None),
                         "nvidia_smi": show(all(t is not None for t in theirs)), "status": MISMATCH,
                         "kind": "strict"})  # fmt: skip
            continue
        unsupported = ours.get("unsupported") or {}
        for field, kind, tolerance in FIELDS:
            if not all(field in t for t in theirs):
                rows.append({"scope": scope, "field": field, "gpufleet": show(_norm(field, dig(ours, field))),
                             "nvidia_smi": "(not in this nvidia-smi)", "status": SKIP, "kind": kind})  # fmt: skip
                continue
            value = _norm(field, dig(ours, field))
            reason = unsupported.get(field) or next((v for k, v in unsupported.items()
                                                     if field.startswith(k + ".")), None)  # fmt: skip
            row = _row(scope, field, kind, tolerance, value, [t[field] for t in theirs], reason)
            rows.append(row)
    return rows


def _row(scope, field, kind, tolerance, ours, readings, reason=None) -> dict[str, Any]:
    readings = [_norm(field, r) for r in readings]
    distinct = []
    for r in readings:
        if r not in distinct:
            distinct.append(r)
    return {
        "scope": scope,
        "field": field,
        "gpufleet": show(ours, reason),
        "nvidia_smi": " .. ".join(show(r) for r in distinct),
        "status": _judge(kind, tolerance, ours, readings),
        "kind": kind,
    }


def _cpuset(text: Any) -> frozenset[int] | None:
    if text is None:
        return None
    items: set[int] = set()
    for part in str(text).replace(" ", "").split(","):
        if not part or part.upper() == "N/A":
            continue
        lo, _sep, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return None
        items.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(items) if items else None


def compare_topology(topology: dict[str, Any], topo: dict[str, Any], gpus: list[dict[str, Any]] | None = None
                     ) -> list[dict[str, Any]]:  # fmt: skip
    """Rows comparing gpufleet's topology facts (module gpu_topology / ``gpufleet topology --json``) with
    ``nvidia-smi topo -m``: every matrix row nvidia-smi prints (its cells in nvidia-smi's column order; NICn named
    through the NIC legend), and per GPU its CPU and NUMA affinity (also gpu_info's ``cpu_affinity``/``numa_node``
    when ``gpus`` is given)."""
    rows: list[dict[str, Any]] = []
    legend = topo.get("nic_legend") or {}
    matrix = topology.get("matrix") or {}

    def ours_name(name: str) -> str:
        return legend.get(name, name)

    for name, cells in topo["rows"].items():
        mine = matrix.get(ours_name(name))
        shown = [c for c in topo["columns"] if c in cells]
        theirs = [cells[c] for c in shown]
        if mine is None:
            rows.append({"scope": "topology", "field": "row " + name, "gpufleet": "(no such row)",
                         "nvidia_smi": " ".join(theirs), "status": MISMATCH, "kind": "strict"})  # fmt: skip
            continue
        ours = [str(mine.get(ours_name(c), "?")) for c in shown]
        label = name if ours_name(name) == name else f"{name} ({ours_name(name)})"
        rows.append({"scope": "topology", "field": "row " + label, "gpufleet": " ".join(ours),
                     "nvidia_smi": " ".join(theirs), "status": MATCH if ours == theirs else MISMATCH,
                     "kind": "strict"})  # fmt: skip
    by_index = {f"GPU{g.get('index')}": g for g in topology.get("gpus") or []}
    info = {f"GPU{g.get('index')}": g for g in gpus or []}
    for name, extra in topo["affinity"].items():
        if not name.startswith("GPU"):
            continue
        cpu, numa = extra.get("CPU Affinity"), extra.get("NUMA Affinity")
        sources = [("topology", by_index.get(name), "local_cpus", "numa_node")]
        if gpus is not None:
            sources.append(("gpu_info", info.get(name), "cpu_affinity", "numa_node"))
        for source, g, cpu_key, numa_key in sources:
            if cpu is not None:
                mine = (g or {}).get(cpu_key)
                ok = _cpuset(mine) == _cpuset(cpu) or (_cpuset(cpu) is None and mine in (None, ""))
                rows.append({"scope": name, "field": f"{source} {cpu_key}", "gpufleet": show(mine),
                             "nvidia_smi": cpu, "status": MATCH if ok else MISMATCH, "kind": "strict"})  # fmt: skip
            if numa is not None:
                mine = (g or {}).get(numa_key)
                if numa.isdigit():
                    ok = mine == int(numa)
                elif numa.upper() == "N/A":
                    ok = mine is None
                else:  # a range: the GPU is close to several nodes
                    nodes = _cpuset(numa)
                    ok = nodes is not None and mine in nodes
                rows.append({"scope": name, "field": f"{source} {numa_key}", "gpufleet": show(mine),
                             "nvidia_smi": numa, "status": MATCH if ok else MISMATCH, "kind": "strict"})  # fmt: skip
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, int]:
    out = {MATCH: 0, MISMATCH: 0, LIVE: 0, SKIP: 0}
    for row in rows:
        out[row["status"]] = out.get(row["status"], 0) + 1
    return out


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _line(*cells: Any) -> str:
    """One markdown table row; a value's own | and newlines cannot break the table."""
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def render_markdown(rows: list[dict[str, Any]], timings: list[dict[str, Any]], steps: list[dict[str, Any]],
                    title: str) -> str:  # fmt: skip
    counts = summarize(rows)
    out = [f"# {title}", ""]
    out.append(f"{len(rows)} rows: {counts[MATCH]} match, {counts[MISMATCH]} mismatch, {counts[LIVE]} live (a live "
               f"value that moved between readings: shown, not a failure), {counts[SKIP]} skipped (not in this "
               "nvidia-smi).")
    if steps:
        out += ["", "## Steps", "", "| step | result | seconds | detail |", "|---|---|---|---|"]
        for st in steps:
            out.append(_line(st["step"], "ok" if st["ok"] else "FAILED", st.get("seconds", ""), st.get("detail", "")))
    if timings:
        out += ["", "## Time to read the same GPUs", "", "| reader | median s | runs (s) |", "|---|---|---|"]
        for t in timings:
            out.append(_line(t["reader"], f"{t['median_s']:.3f}", ", ".join(f"{x:.3f}" for x in t["runs_s"])))
    out += ["", "## Fields", "", "| scope | field | gpufleet | nvidia-smi | match |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(_line(r["scope"], r["field"], r["gpufleet"], r["nvidia_smi"], r["status"]))
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# the run on a GPU host (not used by the unit tests)


def _run(argv: list[str], timeout: float = 60) -> tuple[int, str, str, float]:
    """(exit status, stdout, stderr, seconds); 124 when it ran past ``timeout`` (the check must end in minutes)."""
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)  # nosec B603  # argv
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer after {timeout} s", round(time.monotonic() - started, 3)
    except OSError as exc:
        return 127, "", f"{argv[0]}: {exc}", round(time.monotonic() - started, 3)
    return proc.returncode, proc.stdout, proc.stderr, round(time.monotonic() - started, 3)


def _median_runs(fn, repeat: int) -> list[float]:
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        runs.append(round(time.perf_counter() - started, 4))
    return runs


GPU_INFO_PLAY = """---
# Written by scripts/device_check.py: module gpu_info on the check's inventory (read-only).
- name: Read the GPUs for the device check
  hosts: all
  gather_facts: false
  tasks:
    - name: Read every GPU through NVML
      gpufleet.tuning.gpu_info:
      register: gpufleet_gpu_info
"""


def _watch_config(out: Path) -> Path:
    config = {
        "host": "localhost",
        "policy": {"watch": {"textfile_dir": str(out / "watch-textfile"), "state_file": str(out / "watch-state.json")}},
    }
    path = out / "watch.json"
    path.write_text(json.dumps(config, indent=1) + "\n")
    return path


def run_check(args: argparse.Namespace) -> int:
    begun = time.monotonic()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        print("device-check: nvidia-smi not found: this machine has no NVIDIA driver (nothing to compare)",
              file=sys.stderr)  # fmt: skip
        return 2
    steps: list[dict[str, Any]] = []

    def step(name: str, ok: bool, seconds: float | str = "", detail: str = "") -> None:
        steps.append({"step": name, "ok": bool(ok), "seconds": seconds, "detail": detail})
        print(f"device-check: {name:<24} {'ok' if ok else 'FAILED'} {seconds} {detail}", file=sys.stderr)

    def smi_xml(label: str) -> dict[str, Any] | None:
        rc, text, err, secs = _run([smi, "-q", "-x"])
        (out / f"nvidia-smi-q-x-{label}.xml").write_text(text)
        parsed, detail = None, err.strip()[:200]
        if rc == 0:
            try:
                parsed = parse_smi_xml(text)
            except (ET.ParseError, ValueError) as exc:
                detail = f"cannot parse: {exc}"
        step(f"nvidia-smi -q -x ({label})", parsed is not None, secs, detail)
        return parsed

    before = smi_xml("before")
    if before is None or not before["gpus"]:
        print("device-check: nvidia-smi lists no GPU", file=sys.stderr)
        return 2
    rc, topo_text, err, secs = _run([smi, "topo", "-m"])
    (out / "nvidia-smi-topo-m.txt").write_text(topo_text)
    step("nvidia-smi topo -m", rc == 0, secs, err.strip()[:200])

    sys.path.insert(0, str(REPO / "src"))
    from gpufleet import paths
    from gpufleet.runner import run_playbook

    paths.import_collection()
    inventory = str(Path(args.inventory).resolve())
    play = out / "gpu_info.yml"
    play.write_text(GPU_INFO_PLAY)
    started = time.monotonic()
    result = run_playbook(str(play), inventory)
    host = next(iter(result.hosts.values()), None)
    facts = host.actions.get(GPU_INFO_ACTION) if host is not None else None
    ok = bool(facts) and host.status == "ok" and (facts.get("nvml") or {}).get("available")
    step("gpu_info (Ansible)", ok, round(time.monotonic() - started, 3),
         "" if ok else (host.message if host else "no result"))  # fmt: skip
    (out / "gpu_info.json").write_text(json.dumps(facts, indent=1, sort_keys=True, default=str) + "\n")
    after = smi_xml("after")

    rows: list[dict[str, Any]] = []
    if facts:
        rows += compare_gpus(facts, [before] + ([after] if after else []))

    # Timing: one NVML reading of every GPU (nvmlInit .. nvmlShutdown, no counter sample) against nvidia-smi.
    timings = []
    from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml
    from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

    try:
        nv = nvml.load_pynvml()
        timings.append({"reader": f"gpufleet nvml.collect (gpu_info's NVML facts, {len(before['gpus'])} GPUs)",
                        "runs_s": _median_runs(lambda: nvml.collect(nv, HostFS("/"), sample_seconds=0), args.repeat)})
    except (ImportError, OSError, nvml.NvmlUnavailable) as exc:
        step("time NVML facts", False, "", f"{type(exc).__name__}: {exc}")
    for label, argv in (("nvidia-smi -q", [smi, "-q"]), ("nvidia-smi -q -x", [smi, "-q", "-x"])):
        timings.append({"reader": label, "runs_s": _median_runs(lambda a=argv: _run(a), args.repeat)})
    for t in timings:
        t["median_s"] = statistics.median(t["runs_s"])

    gpufleet = str(Path(sys.executable).parent / "gpufleet")
    rc, text, err, secs = _run([gpufleet, "audit", "-i", inventory, "--out", str(out / "audit")], timeout=240)
    report = out / "audit" / "latest" / "report.json"
    audit = json.loads(report.read_text()) if report.is_file() else {}
    audit_host = (audit.get("hosts") or {}).get("localhost") or {}
    audit_gpus = ((audit_host.get("facts") or {}).get("gpu") or {}).get("gpus") or []
    step("gpufleet audit", rc in (0, 1) and audit_host.get("status") == "ok", secs,
         f"exit {rc}, {len(audit_gpus)} GPUs, hosts {(audit.get('summary') or {}).get('hosts', '')}")
    rows.append(_row("audit", "audit GPU UUIDs", "strict", 0, sorted(str(g.get("uuid")) for g in audit_gpus),
                     [sorted(str(g.get("uuid")) for g in before["gpus"].values())]))  # fmt: skip

    rc, text, err, secs = _run([gpufleet, "topology", "-i", inventory, "--json", str(out / "topology.json")],
                               timeout=240)
    (out / "topology.txt").write_text(text)
    topo_hosts = json.loads((out / "topology.json").read_text()) if (out / "topology.json").is_file() else {}
    topology = (topo_hosts.get("localhost") or {}).get("topology") or {}
    step("gpufleet topology", rc == 0 and bool(topology.get("available")), secs, f"exit {rc}")
    if topo_text.strip() and topology:
        try:
            rows += compare_topology(topology, parse_topo(topo_text), (facts or {}).get("gpus"))
        except ValueError as exc:
            step("parse topo -m", False, "", str(exc))

    started = time.monotonic()
    probe = run_playbook("probe.yml", inventory, extravars={"gpufleet_probe_seconds": args.probe_seconds})
    phost = next(iter(probe.hosts.values()), None)
    sample = ((phost.actions.get(PROBE_ACTION) or {}) if phost else {}).get("probe") or {}
    step("gpufleet probe", bool(sample.get("available")), round(time.monotonic() - started, 3),
         f"{args.probe_seconds} s sample, {len(sample.get('gpus') or [])} GPUs")
    rows.append(_row("probe", "probe GPU bus ids", "strict", 0,
                     sorted(bus_key(g.get("bus_id")) for g in sample.get("gpus") or []), [sorted(before["gpus"])]))

    from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import bundle

    data, _version = bundle.build(python=sys.executable)
    checker = out / "gpufleet-watch"
    checker.write_bytes(data)
    checker.chmod(0o755)
    rc, text, err, secs = _run([str(checker), "--config", str(_watch_config(out)), "--print"], timeout=240)
    (out / "watch-print.prom").write_text(text)
    complete = re.search(r"^gpufleet_audit_complete\s+1\s*$", text, re.MULTILINE) is not None
    step("watch checker --print", rc == 0 and complete, secs, f"exit {rc}, audit_complete {complete}")

    total = round(time.monotonic() - begun, 1)
    step("whole check", total <= TIME_BUDGET_S, total, f"budget {TIME_BUDGET_S} s (issue 25: under 5 minutes)")
    gpu_name = next(iter(before["gpus"].values())).get("name") or "GPU"
    title = f"gpufleet device check: {len(before['gpus'])} x {gpu_name}, driver {before['driver_version']}"
    text = render_markdown(rows, timings, steps, title)
    (out / "table.md").write_text(text)
    counts = summarize(rows)
    (out / "table.json").write_text(json.dumps({"title": title, "summary": counts, "steps": steps,
                                                "timings": timings, "rows": rows}, indent=1) + "\n")  # fmt: skip
    print(text)
    failed = [s["step"] for s in steps if not s["ok"]]
    print(f"device-check: {counts[MATCH]} match, {counts[MISMATCH]} mismatch, {counts[LIVE]} live, {counts[SKIP]} "
          f"skipped; failed steps: {', '.join(failed) or 'none'}; table: {out / 'table.md'}", file=sys.stderr)
    return 1 if counts[MISMATCH] or failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default: %(default)s)")
    parser.add_argument("--inventory", default=str(DEFAULT_INVENTORY), help="inventory with localhost")
    parser.add_argument("--probe-seconds", type=float, default=2.0, help="probe sample (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="timing runs per reader (default: %(default)s)")
    parser.add_argument("--compare", nargs=2, metavar=("GPU_INFO_JSON", "SMI_XML"),
                        help="only compare a saved gpu_info result with a saved nvidia-smi -q -x output")
    args = parser.parse_args(argv)
    if args.compare:
        facts = json.loads(Path(args.compare[0]).read_text())
        rows = compare_gpus(facts, [parse_smi_xml(Path(args.compare[1]).read_text())])
        print(render_markdown(rows, [], [], "gpufleet vs nvidia-smi (saved outputs)"))
        return 1 if summarize(rows)[MISMATCH] else 0
    return run_check(args)


if __name__ == "__main__":
    sys.exit(main())
