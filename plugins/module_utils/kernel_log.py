# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Find NVIDIA Xid events and PCIe AER errors in kernel log lines.

The parsers are pure functions of text, so every form of line can be unit-tested; ``read_kernel_log`` fetches the
lines (dmesg, journalctl or a log file, commands only through the ``run`` callable the module hands in) and scans
them.

Lines look like::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
    NVRM: Xid (0000:01:00): 79, GPU has fallen off the bus.                 (older drivers)
    pcieport 0000:00:03.1: AER: Corrected error received: 0000:3b:00.0
    pcieport 0000:00:03.1: AER: Uncorrected (Non-Fatal) error received: 0000:3b:00.0
    pcieport 0000:00:03.1: AER: Correctable error message received from 0000:3b:00.0   (newer kernels)
    nvidia 0000:3b:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)
    nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up
    nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 19084, Non-fatal, Link 10 AN1 Heartbeat Timeout Error (First)
    nvidia-nvswitch3: SXid (PCI:0000:c5:00.0): 19084, Severity 5 Engine instance 10 Sub-engine instance 00
    nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data {0x000001c0, 0x00bd5c8a, ...}

SXid lines are the NVSwitch driver's error reports (NVIDIA fabric manager user guide, "NVSwitch errors"): one
error prints a line that says ``Fatal`` or ``Non-fatal`` and detail lines (``Severity ...``, ``Data {...}``) with
the same code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import os
import re
import time

KERNEL_LOG_MODES = ("auto", "dmesg", "journal", "file", "none")
DEFAULT_KERNEL_LOG_FILE = "/var/log/kern.log"
LAST_MAX = 300

# Xid code -> (meaning, severity). Meanings follow NVIDIA's Xid catalog
# (https://docs.nvidia.com/deploy/xid-errors/); severity is gpufleet's operational judgement:
#   critical  the GPU lost data or is gone: drain the node, reset or RMA
#   high      hardware or firmware fault: the GPU needs a reset or a closer look
#   medium    may be hardware, driver or application: watch the trend
#   low       usually the application (bad memory access, killed process)
#   info      informational
XID_CODES = {
    8: ("GPU stopped processing (channel idle timeout)", "medium"),
    13: ("Graphics Engine Exception", "low"),
    31: ("GPU memory page fault", "low"),
    32: ("Invalid or corrupted push buffer stream", "medium"),
    43: ("GPU stopped processing", "low"),
    45: ("Preemptive cleanup, due to previous errors", "low"),
    48: ("Double Bit ECC Error (DBE)", "critical"),
    61: ("Internal micro-controller breakpoint/warning", "medium"),
    62: ("Internal micro-controller halt", "high"),
    63: ("ECC page retirement or row remapping recording event", "medium"),
    64: ("ECC page retirement or row remapper recording failure", "high"),
    68: ("NVDEC0 Exception (video decoder)", "medium"),
    69: ("Graphics Engine class error", "medium"),
    74: ("NVLink Error", "high"),
    79: ("GPU has fallen off the bus", "critical"),
    92: ("High single-bit ECC error rate", "medium"),
    94: ("Contained ECC error", "high"),
    95: ("Uncontained ECC error", "critical"),
    109: ("Context Switch Timeout Error", "medium"),
    119: ("GSP RPC Timeout", "high"),
    120: ("GSP Error", "high"),
    121: ("C2C Link corrected error", "low"),
    140: ("Unrecovered ECC Error", "high"),
    143: ("GPU Initialization Failure", "high"),
    154: ("GPU Recovery Action Changed", "high"),
}

UNKNOWN_SEVERITY = "medium"

_XID = re.compile(r"NVRM: Xid \(([^)]*)\):\s*(\d+)\b")
_PCI = re.compile(r"(?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)")

_AER_HEADER = re.compile(
    r"AER: (?:Multiple )?(Correct(?:ed|able)|Uncorrect(?:ed|able))(?: \((Non-Fatal|Fatal)\))?"
    r" error (?:message )?received"
)
_AER_BUS = re.compile(r"PCIe Bus Error: severity=(Correct(?:ed|able)|Uncorrect(?:ed|able))(?: \((Non-Fatal|Fatal)\))?")
# A "PCIe Bus Error" line this close after an "error received" line of the same class is its detail.
AER_DETAIL_WINDOW = 10

# nvidia-nvswitchN: SXid (PCI:dddd:bb:dd.f): CODE, Fatal|Non-fatal|Severity N|Data {...}, text
_SXID = re.compile(r"SXid \(([^)]*)\):\s*(\d+)\s*,\s*(.*)$")

# SXid severities (gpufleet's judgement from the fabric manager user guide's SXid error handling): a fatal SXid
# stops NVLink traffic through the switch port; the GPUs on it (the whole baseboard for a trunk or switch error)
# need a reset before multi-GPU jobs run again. A non-fatal one is corrected or contained by the hardware: watch the
# trend. Detail lines alone (no Fatal/Non-fatal line in the window) are judged as non-fatal.
SXID_FATAL_SEVERITY = "critical"
SXID_NONFATAL_SEVERITY = "medium"

# 2024-05-31T09:35:42,123456+00:00 (dmesg --time-format iso), 2024-05-31T09:35:42+0000 (journalctl -o short-iso)
_ISO = re.compile(r"^\s*(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:?\d{2})")


def xid_info(code):
    """(meaning, severity) of an Xid code; codes not in XID_CODES get a pointer to NVIDIA's catalog."""
    code = int(code)
    if code in XID_CODES:
        return XID_CODES[code]
    return ("Xid %d (not in gpufleet's table; see NVIDIA's Xid catalog)" % code, UNKNOWN_SEVERITY)


def truncate(line, limit=LAST_MAX):
    line = line.rstrip("\n")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def parse_xid(line):
    """{"code": int, "pci": str|None} for an Xid line, else None. The PCI id is lower-case, as logged."""
    m = _XID.search(line)
    if not m:
        return None
    pci = _PCI.match(m.group(1).strip())
    return {"code": int(m.group(2)), "pci": pci.group(1).lower() if pci else None}


def parse_sxid(line):
    """{"code": int, "pci": str|None, "kind": "fatal"|"non-fatal"|"detail"} for an NVSwitch SXid line, else None."""
    m = _SXID.search(line)
    if not m:
        return None
    pci = _PCI.match(m.group(1).strip())
    rest = m.group(3).strip().lower()
    if rest.startswith("fatal"):
        kind = "fatal"
    elif rest.startswith("non-fatal") or rest.startswith("nonfatal"):
        kind = "non-fatal"
    else:
        kind = "detail"
    return {"code": int(m.group(2)), "pci": pci.group(1).lower() if pci else None, "kind": kind}


def _aer_class(severity, fatal):
    if severity.startswith("Correct"):
        return "corrected"
    return "fatal" if fatal == "Fatal" else "uncorrected"


def parse_aer(line):
    """("header"|"detail", "corrected"|"uncorrected"|"fatal") for a PCIe AER line, else None."""
    m = _AER_HEADER.search(line)
    if m:
        return "header", _aer_class(m.group(1), m.group(2))
    m = _AER_BUS.search(line)
    if m:
        return "detail", _aer_class(m.group(1), m.group(2))
    return None


def scan(lines):
    """Xid events grouped by code and PCIe AER counts found in ``lines``.

    Returns {"xid": [{code, meaning, severity, count, pci, last, last_time}], "aer": {corrected, uncorrected, fatal,
    last}, "sxid": [{code, fatal, severity, count, pci, last, last_time}]}: ``last`` is the newest line of that code
    and ``last_time`` its time stamp (epoch seconds; None for a line without an ISO-8601 one), which lets the watch
    tell an event it already acted on from a new one (watch/drain.py).
    An AER error is logged as an "error received" line followed by "PCIe Bus Error" detail lines; the detail
    lines of an error already counted are not counted again, a detail line alone (no header near) is.
    """
    xids = {}
    aer = {"corrected": 0, "uncorrected": 0, "fatal": 0, "last": None}
    header = None  # (class, index) of the last AER header line
    sxids = {}
    for index, line in enumerate(lines):
        if "SXid" in line:
            found = parse_sxid(line)
            if found:
                _add_sxid(sxids, found, line)
                continue
        if "NVRM" in line:
            found = parse_xid(line)
            if found:
                entry = xids.get(found["code"])
                if entry is None:
                    meaning, severity = xid_info(found["code"])
                    entry = xids[found["code"]] = {
                        "code": found["code"],
                        "meaning": meaning,
                        "severity": severity,
                        "count": 0,
                        "pci": [],
                        "last": None,
                        "last_time": None,
                    }
                entry["count"] += 1
                if found["pci"] and found["pci"] not in entry["pci"]:
                    entry["pci"].append(found["pci"])
                entry["last"] = truncate(line)
                entry["last_time"] = line_time(line)
                continue
        if "AER" in line or "PCIe Bus Error" in line:
            found = parse_aer(line)
            if found is None:
                continue
            kind, cls = found
            aer["last"] = truncate(line)
            if kind == "header":
                header = (cls, index)
                aer[cls] += 1
            elif header and header[0] == cls and index - header[1] <= AER_DETAIL_WINDOW:
                continue
            else:
                aer[cls] += 1
    result = []
    for code in sorted(xids):
        entry = xids[code]
        entry["pci"] = sorted(entry["pci"])
        result.append(entry)
    return {"xid": result, "aer": aer, "sxid": _sxid_result(sxids)}


def _add_sxid(sxids, found, line):
    entry = sxids.get(found["code"])
    if entry is None:
        entry = sxids[found["code"]] = {
            "code": found["code"],
            "fatal": False,
            "events": 0,
            "details": 0,
            "pci": [],
            "last": None,
            "last_time": None,
        }
    if found["kind"] == "detail":
        entry["details"] += 1
    else:
        entry["events"] += 1
        entry["fatal"] = entry["fatal"] or found["kind"] == "fatal"
    if found["pci"] and found["pci"] not in entry["pci"]:
        entry["pci"].append(found["pci"])
    if found["kind"] != "detail" or entry["last"] is None:
        entry["last"] = truncate(line)
        entry["last_time"] = line_time(line)


def _sxid_result(sxids):
    out = []
    for code in sorted(sxids):
        entry = sxids[code]
        out.append(
            {
                "code": code,
                "fatal": entry["fatal"],
                "severity": SXID_FATAL_SEVERITY if entry["fatal"] else SXID_NONFATAL_SEVERITY,
                # one error logs one Fatal/Non-fatal line and detail lines; detail lines alone count as one error
                "count": entry["events"] or 1,
                "pci": sorted(entry["pci"]),
                "last": entry["last"],
                "last_time": entry["last_time"],
            }
        )
    return out


def tail(text, count):
    """The last ``count`` non-empty lines of ``text``, without journalctl's "-- ... --" markers."""
    if not text:
        return []
    lines = [ln for ln in text.splitlines() if ln.strip() and not (ln.startswith("-- ") and ln.rstrip().endswith("--"))]
    return lines[-count:] if count > 0 else []


def line_time(line):
    """Epoch seconds of an ISO-8601 timestamp at the start of ``line`` (dmesg iso, journalctl short-iso)."""
    m = _ISO.match(line)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    frac = float("0." + m.group(7)) if m.group(7) else 0.0
    try:
        epoch = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) + frac
    except (ValueError, OverflowError):
        return None
    zone = m.group(8)
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        epoch -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return epoch


def since(lines, now, hours):
    """Lines not older than ``hours`` before ``now`` (epoch); lines without a timestamp are kept.

    ``hours`` 0 keeps everything.
    """
    if not hours:
        return list(lines)
    cutoff = now - hours * 3600
    kept = []
    for line in lines:
        when = line_time(line)
        if when is None or when >= cutoff:
            kept.append(line)
    return kept


# ---------------------------------------------------------------- reading the log

def tail_file(path, count, block=65536, max_bytes=64 * 1024 * 1024):
    """The last ``count`` lines of the file at ``path`` (a real path), reading backwards in blocks."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        data = b""
        pos = size
        while pos > 0 and data.count(b"\n") <= count and size - pos < max_bytes:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
    return tail(data.decode("utf-8", "replace"), count)


def _first_line(text, default):
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return default


def _from_dmesg(run, count, hours, now):
    rc, out, err = run(["dmesg", "--kernel", "--time-format", "iso"])
    if rc != 0:
        return None, "dmesg: %s" % _first_line(err or out, "rc=%s" % rc)
    return tail("\n".join(since(tail(out, 10 ** 9), now, hours)), count), None


def _from_journal(run, count, hours):
    argv = ["journalctl", "-k", "--no-pager", "-o", "short-iso", "-n", str(count)]
    if hours:
        argv.append("--since=-%dh" % hours)
    rc, out, err = run(argv)
    lines = tail(out, count)
    if rc != 0 or (not lines and (err or "").strip()):
        return None, "journalctl: %s" % _first_line(err or out, "rc=%s" % rc)
    return lines, None


def read_kernel_log(fs, run, mode="auto", path=DEFAULT_KERNEL_LOG_FILE, count=5000, hours=24, now=None):
    """Scan the kernel log for Xid and AER errors. Never raises for an unreadable log: ``error`` says why."""
    if mode not in KERNEL_LOG_MODES:
        raise ValueError("kernel_log must be one of %s, got %r" % (", ".join(KERNEL_LOG_MODES), mode))
    now = time.time() if now is None else now
    result = {"source": mode, "error": None, "lines_scanned": 0}
    lines = []
    if mode == "auto" and fs.root != "/":
        mode = result["source"] = "file"
    if mode == "file":
        try:
            lines = tail_file(fs.path(path), count)
        except (IOError, OSError) as exc:
            result["error"] = "%s: %s" % (path, exc.strerror or exc)
    elif mode in ("auto", "dmesg", "journal"):
        errors = []
        for source in (("dmesg", "journal") if mode == "auto" else (mode,)):
            if run is None:
                errors.append("%s: commands cannot run here (root is not /)" % source)
                continue
            if source == "dmesg":
                got, error = _from_dmesg(run, count, hours, now)
            else:
                got, error = _from_journal(run, count, hours)
            if error is None:
                lines, result["source"] = got, source
                break
            errors.append(error)
        else:
            result["error"] = "; ".join(errors)
            if mode == "auto":
                result["source"] = "none"
    result["lines_scanned"] = len(lines)
    result.update(scan(lines))
    return result
