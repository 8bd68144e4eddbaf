# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Fallback reader: ``nvidia-smi --query-gpu`` for hosts where pynvml cannot be imported.

It yields the same per-GPU shape as module_utils.nvml, with every field nvidia-smi does not
offer set to None and listed in ``unsupported``, and ``source: nvidia-smi``.

A GPU in trouble does not cost the others: a ``[GPU requires reset]`` (or ``[GPU is lost]``) value marks that
GPU ``lost`` (as NVML's GpuIsLost does), and nvidia-smi's per-GPU error line ("Unable to determine the device
handle for GPU...") becomes an entry with ``lost`` and ``error``, while the other GPUs' lines are read as usual.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import csv
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders

# (query field, our dotted path, converter)
FIELDS = (
    ("index", "index", "int"),
    ("name", "name", "str"),
    ("uuid", "uuid", "str"),
    ("pci.bus_id", "pci_bus_id", "str"),
    ("driver_version", "driver_version", "str"),
    ("memory.total", "memory.total_mib", "int"),
    ("memory.used", "memory.used_mib", "int"),
    ("memory.free", "memory.free_mib", "int"),
    ("persistence_mode", "persistence_mode", "enabled"),
    ("utilization.gpu", "utilization.gpu_pct", "int"),
    ("utilization.memory", "utilization.memory_pct", "int"),
    ("power.draw", "power.usage_w", "float"),
    ("power.limit", "power.limit_w", "float"),
    ("power.default_limit", "power.default_limit_w", "float"),
    ("power.min_limit", "power.min_limit_w", "float"),
    ("power.max_limit", "power.max_limit_w", "float"),
    ("enforced.power.limit", "power.enforced_limit_w", "float"),
    ("ecc.mode.current", "ecc.current", "enabled"),
    ("ecc.mode.pending", "ecc.pending", "enabled"),
    ("ecc.errors.uncorrected.volatile.total", "ecc.volatile_uncorrected", "int"),
    ("ecc.errors.uncorrected.aggregate.total", "ecc.aggregate_uncorrected", "int"),
    ("ecc.errors.corrected.volatile.total", "ecc.volatile_corrected", "int"),
    ("ecc.errors.corrected.aggregate.total", "ecc.aggregate_corrected", "int"),
    ("clocks.current.graphics", "clocks.graphics", "int"),
    ("clocks.current.sm", "clocks.sm", "int"),
    ("clocks.current.memory", "clocks.mem", "int"),
    ("clocks.max.graphics", "clocks.max_graphics", "int"),
    ("clocks.max.sm", "clocks.max_sm", "int"),
    ("clocks.max.memory", "clocks.max_mem", "int"),
    ("clocks.applications.graphics", "clocks.app_graphics", "int"),
    ("clocks.applications.memory", "clocks.app_mem", "int"),
    ("clocks.default_applications.graphics", "clocks.default_app_graphics", "int"),
    ("clocks.default_applications.memory", "clocks.default_app_mem", "int"),
    ("clocks_event_reasons.active", "clock_event_reasons", "hex"),
    ("temperature.gpu", "temperature.gpu", "int"),
    ("pcie.link.gen.current", "pcie.gen_current", "int"),
    ("pcie.link.gen.max", "pcie.gen_max", "int"),
    ("pcie.link.width.current", "pcie.width_current", "int"),
    ("pcie.link.width.max", "pcie.width_max", "int"),
    ("compute_mode", "compute_mode", "lower"),
    ("mig.mode.current", "mig.current", "enabled"),
    ("mig.mode.pending", "mig.pending", "enabled"),
)

# Drivers before 535 call the clock event reasons "throttle reasons".
LEGACY_NAMES = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}

# Fields of the pynvml shape that nvidia-smi --query-gpu cannot give.
NOT_OFFERED = (
    "architecture", "remapped_rows", "retired_pages", "temperature.slowdown", "temperature.shutdown",
    "temperature.gpu_max", "nvlink", "cpu_affinity", "numa_node", "processes", "pci_device_id",
)

_MISSING = ("", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]")
# Values nvidia-smi prints for every live field of a GPU that needs a reset or fell off the bus.
_LOST = ("[gpu requires reset]", "[gpu is lost]")

# nvidia-smi's line for a GPU it cannot open, in the forms drivers print it:
#   "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
#   "Unable to determine the device handle for GPU1: 0000:34:00.0: Unknown Error"
#   "Unable to determine the device handle for gpu 0000:1b:00.0: GPU is lost.  Reboot the system to recover this GPU"
_BUS = r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
_HANDLE_ERROR = re.compile(
    r"unable to determine the device handle for gpu\s*(?:(%s)|(\d+)(?::\s*(%s))?)\s*:\s*(.*)$" % (_BUS, _BUS),
    re.IGNORECASE | re.MULTILINE,
)


class NvidiaSmiError(Exception):
    pass


# Fields the pynvml reader takes from nvidia-smi when the Python binding has no NVML function for them (an old
# binding on a newer driver: nvidia-ml-py3 7.352 has no row remapping and no MIG mode, no binding before 11.525 the
# fabric probe). Each is a health fact a rule fails on (GPU-HLT-001, GPU-MIG-001, GPU-FAB-001); nvidia-smi reads them
# through the driver's own NVML.
#   our field -> (nvidia-smi query option, [(query field, converter)] after the bus id)
ESSENTIAL = {
    "remapped_rows": ("--query-remapped-rows", "gpu_bus_id",
                      (("remapped_rows.correctable", "int"), ("remapped_rows.uncorrectable", "int"),
                       ("remapped_rows.pending", "enabled"), ("remapped_rows.failure", "enabled"))),
    "mig": ("--query-gpu", "pci.bus_id", (("mig.mode.current", "enabled"), ("mig.mode.pending", "enabled"))),
    "fabric": ("--query-gpu", "pci.bus_id", (("fabric.state", "fabric_state"), ("fabric.status", "str"))),
}

# What essential_fields gives for a GPU nvidia-smi says has no fabric: the field is NotSupported, as NVML says.
NO_FABRIC = "NotSupported"

# nvidia-smi's words for nvmlGpuFabricState_t (nvidia-smi -q, "Fabric: State").
FABRIC_STATES = {"not started": "not_started", "in progress": "in_progress", "completed": "completed"}


def bus_key(text):
    """Any bus id form ("0000:18:00.0", "00000000:18:00.0") -> NVML's upper-case 8-digit-domain form."""
    text = (text or "").strip()
    return _nvml_bus_id(text) if ":" in text else text.upper()


def _fabric(state, status):
    """The pynvml reader's fabric dict from nvidia-smi's fabric.state and fabric.status; NO_FABRIC for a GPU without
    one ("N/A", "[Not Supported]"), None for a word this code does not know. nvidia-smi's CSV has no health mask:
    ``health_mask`` is None."""
    word = state.strip().lower()
    if word in _MISSING or word == "n/a":
        return NO_FABRIC
    name = FABRIC_STATES.get(word)
    if name is None:
        return None
    status = status.strip()
    return {
        "state": name,
        # Meaningful only once the state is "completed", as in the NVML reader.
        "status": (status if status.lower() not in _MISSING else None) if name == "completed" else None,
        "health_mask": None,
        "health_problems": [],
    }


_NVLINK_GPU = re.compile(r"^GPU\s+\d+:.*\(UUID:\s*([^)\s]+)\)\s*$")
_NVLINK_LINK = re.compile(r"^\s*Link\s+(\d+):\s*(.*?)\s*$")


def parse_nvlink_status(text):
    """``nvidia-smi nvlink --status`` -> {GPU UUID: {up, total, down}}: a link with a speed above 0 is up,
    ``<inactive>`` (or 0 GB/s) down. A GPU with no link lines is left out (no NVLink, as NVML's NotSupported)."""
    out = {}
    current = None
    for line in (text or "").splitlines():
        gpu = _NVLINK_GPU.match(line.strip())
        if gpu:
            current = gpu.group(1)
            continue
        link = _NVLINK_LINK.match(line)
        if current is None or not link:
            continue
        speed = re.match(r"^([0-9.]+)\s*GB/s$", link.group(2))
        entry = out.setdefault(current, {"up": 0, "total": 0, "down": []})
        entry["total"] += 1
        if speed and float(speed.group(1)) > 0:
            entry["up"] += 1
        else:
            entry["down"].append(int(link.group(1)))
    return out


def nvlink_status(module, binary):
    """parse_nvlink_status of ``nvidia-smi nvlink --status``; {} when nvidia-smi cannot say."""
    rc, text, _err = module.run_command([binary, "nvlink", "--status"])
    return parse_nvlink_status(text) if rc == 0 else {}


def essential_fields(module, binary, fields):
    """{bus id (NVML form): {field: value}} for ``fields`` (keys of ESSENTIAL) from nvidia-smi; ``remapped_rows``
    is the pynvml reader's dict, ``mig`` its {current, pending}. A field nvidia-smi cannot give (not supported, an
    error, a driver without the query) is left out."""
    out = {}
    for field in fields:
        option, bus_query, columns = ESSENTIAL[field]
        names = [bus_query] + [c[0] for c in columns]
        query = "%s=%s" % (option, ",".join(names))
        rc, text, _err = module.run_command([binary, query, "--format=csv,noheader,nounits"])
        if rc != 0:
            continue
        for line in (text or "").splitlines():
            row = next(csv.reader([line], skipinitialspace=True), [])
            if len(row) != len(names) or not re.match(r"^[0-9a-fA-F]{4,8}:", row[0].strip()):
                continue
            if field == "fabric":
                value = _fabric(row[1], row[2])
                if value is not None:
                    out.setdefault(bus_key(row[0]), {})[field] = value
                continue
            values = [_convert(raw, kind)[0] for raw, (_name, kind) in zip(row[1:], columns, strict=True)]
            if any(v is None for v in values):
                continue
            if field == "remapped_rows":
                value = dict(zip(("corrected", "uncorrected", "pending", "failure"), values, strict=True))
            else:
                value = {"current": values[0], "pending": values[1]}
            out.setdefault(bus_key(row[0]), {})[field] = value
    return out


def query_args(binary, legacy=False):
    names = [LEGACY_NAMES.get(f[0], f[0]) if legacy else f[0] for f in FIELDS]
    return [binary, "--query-gpu=" + ",".join(names), "--format=csv,noheader,nounits"]


def _convert(raw, kind):
    value = raw.strip()
    if value.lower() in _MISSING or value.lower() in _LOST:
        return None, value or "empty"
    try:
        if kind == "int":
            return int(float(value)), None
        if kind == "float":
            return round(float(value), 3), None
        if kind == "enabled":
            low = value.lower()
            if low in ("enabled", "on", "1", "yes"):
                return True, None
            if low in ("disabled", "off", "0", "no"):
                return False, None
            return None, "unexpected value %r" % value
        if kind == "hex":
            return int(value, 16), None
        if kind == "lower":
            return value.lower(), None
    except ValueError:
        return None, "unexpected value %r" % value
    return value, None


def _set(d, dotted, value):
    parts = dotted.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    d[parts[-1]] = value


def _nvml_bus_id(text):
    """"0000:3b:00.0" -> NVML's "00000000:3B:00.0"."""
    domain, rest = text.split(":", 1)
    return "%s:%s" % (domain.rjust(8, "0").upper(), rest.upper())


def _handle_error(line):
    """The entry for a GPU nvidia-smi could not open, or None when the line is not such an error."""
    m = _HANDLE_ERROR.search(line.strip())
    if not m:
        return None
    bus = m.group(1) or m.group(3)
    return {
        "index": int(m.group(2)) if m.group(2) is not None else None,
        "pci_bus_id": _nvml_bus_id(bus) if bus else None,
        "lost": True,
        "error": "nvidia-smi: %s" % (m.group(4).strip() or "unable to determine the device handle"),
        "unsupported": {},
        "source": "nvidia-smi",
    }


def parse(output):
    """Parse ``--format=csv,noheader,nounits`` output of query_args() into (driver_version, gpus).

    A per-GPU error line becomes that GPU's entry (lost, with the error); any other line that is not a GPU's
    CSV row is an error only when no GPU could be read at all."""
    gpus = []
    driver = None
    stray = None
    for lineno, line in enumerate(output.splitlines(), 1):
        if not line.strip():
            continue
        failed = _handle_error(line)
        if failed is not None:
            gpus.append(failed)
            continue
        row = next(csv.reader([line], skipinitialspace=True))
        if len(row) != len(FIELDS):
            stray = stray or NvidiaSmiError("nvidia-smi line %d has %d fields, expected %d: %r"
                                            % (lineno, len(row), len(FIELDS), line[:200]))
            continue
        gpu = {}
        unsupported = {}
        lost = False
        for (_query, dotted, kind), raw in zip(FIELDS, row, strict=False):
            value, reason = _convert(raw, kind)
            if reason is not None:
                unsupported[dotted] = "nvidia-smi: %s" % reason
                lost = lost or reason.lower() in _LOST
            _set(gpu, dotted, value)
        driver = driver or gpu.pop("driver_version", None)
        gpu.pop("driver_version", None)
        unsupported.pop("driver_version", None)
        mem = gpu["memory"]
        mem["used_pct"] = (round(100.0 * mem["used_mib"] / mem["total_mib"], 1)
                           if mem.get("total_mib") and mem.get("used_mib") is not None else None)
        mask = gpu.pop("clock_event_reasons")
        if mask is None:
            gpu["clock_event_reasons"] = None
        else:
            names = decoders.decode_clock_event_reasons(mask)
            gpu["clock_event_reasons"] = {"mask": "0x%016x" % mask, "active": names,
                                          "throttling": decoders.throttling_reasons(names)}
        if gpu["mig"].get("current") is None:
            gpu["mig"] = None
        if gpu["utilization"].get("gpu_pct") is None:
            gpu["utilization"] = None
        for dotted in NOT_OFFERED:
            _set(gpu, dotted, None)
            unsupported[dotted] = "not available from nvidia-smi"
        gpu["lost"] = lost
        gpu["unsupported"] = unsupported
        gpu["source"] = "nvidia-smi"
        gpus.append(gpu)
    if stray is not None and not gpus:
        raise stray
    # Older drivers' error line names the GPU by bus id only. nvidia-smi numbers GPUs in PCI bus order, so its
    # index is the number of GPUs on lower buses.
    for g in gpus:
        if g.get("index") is None and g.get("pci_bus_id"):
            g["index"] = sum(1 for o in gpus if o is not g and (o.get("pci_bus_id") or "") < g["pci_bus_id"])
    return driver, sorted(gpus, key=lambda g: (g.get("index") is None, g.get("index") or 0))


def collect(module, binary):
    """Run nvidia-smi (retrying with pre-535 field names) and parse it. Raises NvidiaSmiError."""
    last = ""
    for legacy in (False, True):
        rc, out, err = module.run_command(query_args(binary, legacy))
        # A GPU nvidia-smi cannot open is reported by a line of its own (on stdout or stderr, and the exit status
        # is then not 0): read what is there so that the other GPUs are not lost with it.
        text = "\n".join(part for part in (out, err) if part)
        if rc == 0:
            # stderr may carry a failed GPU's line next to the good GPUs' rows; other stderr text is not data.
            text = "\n".join([out] + [x for x in (err or "").splitlines() if _HANDLE_ERROR.search(x)])
        if rc == 0 or _HANDLE_ERROR.search(text or ""):
            try:
                return parse(text)
            except NvidiaSmiError:
                if rc == 0:
                    raise
        last = (err or out or "").strip()
        if "not a valid field" not in last:
            break
    raise NvidiaSmiError("nvidia-smi failed: %s" % (last.splitlines()[0] if last else "no output"))
