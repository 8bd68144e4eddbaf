# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Which findings drain a Slurm node, and the kernel-log position that keeps an old event from draining it twice.

Only the health rules of ``DRAIN_RULES`` drain, when they fail at or above ``watch.slurm.drain_severity`` (default
high): the states in which a GPU cannot run the next job correctly. Workload states (GPU-MEM-001 GPU memory full
while the host swaps, the HOST-BAL balance rules) and every tuning finding (power, clocks, CPU governor, network)
never drain, whatever their severity: they slow jobs down or describe what a job does, and draining for them takes
a working node away. Operators still see them in the textfile, the journal and node-problem-detector.

Kernel-log rules judge a 24 h window (``kernel_log_since_hours``), so the line that drained a node is still in the
window after a person reset the GPU and resumed the node. For those rules only the events that no resume followed
drain (``findings_that_drain``):

- The checker remembers, while the node is drained by gpufleet, the newest kernel-log events its drain was for
  (``drained_for``: the newest event time and, for lines without a time stamp, the lines themselves).
- When a later run finds the node taking jobs again although ``drained_for`` is set, someone (a person, or the
  watch's own resume) resumed it: those events become ``acknowledged`` and never drain again. Slurm tells no resume
  time, so an event the watch had not seen before that run counts as new (it may be the reason for the next drain).
  A node drained by someone else in the meantime keeps ``drained_for`` until it is resumed.
- An event is new when its time stamp is later than the acknowledged position of the same boot (boot id from
  ``/proc/sys/kernel/random/boot_id``): dmesg and ``journalctl -k`` show only the running boot, so after a reboot
  every event they show is new; a log file (``kernel_log: file``) spans boots, and there the position is compared
  by time alone. A line without a time stamp is new unless the very line was acknowledged.

References: NVIDIA Xid catalog (docs.nvidia.com/deploy/xid-errors/, "Resolution Bucket (Immediate Action)": Xid 48
DBE, 79 fallen off the bus and 95 uncontained ECC need a GPU reset or a reboot before the GPU runs work again), the
A100/H100 GPU memory error management guides (a contained error kills only the affected process: no drain), the
fabric manager user guide (a fatal SXid needs the GPUs and NVSwitches reset), NVSentinel's syslog monitor (keeps a
cursor so a line is judged once).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import SEVERITIES

# rule id -> what it means for the node. tests/unit/test_watch_drain.py holds every id to the catalog.
DRAIN_RULES = {
    "GPU-HLT-002": "a GPU fell off the bus, cannot be opened or needs a reset",
    "GPU-HLT-003": "fewer GPUs than expected, or a GPU on the PCI bus that NVML does not list",
    "GPU-RCV-001": "the driver asks for a recovery action (GPU reset, node reboot)",
    "HOST-HLT-001": "a fatal Xid (DRAIN_XID_CODES) in the kernel log",
    "HOST-HLT-003": "a fatal NVSwitch SXid in the kernel log",
    "GPU-ECC-003": "uncorrectable ECC errors",
    "GPU-HLT-001": "row remapping failed (a remap that only waits for the next reset does not drain)",
    "GPU-ECC-004": "retired pages at DCGM's limit, or a retirement waiting for a reset",
    "GPU-NVL-001": "NVLink links down",
    "GPU-FAB-001": "the GPU is not registered in the NVLink fabric",
}
# Rules whose milder failures never drain, whatever watch.slurm.drain_severity says. GPU-HLT-001 fails at critical
# for a remapping failure and at high for a remap pending: NVIDIA's A100/H100 memory error management guide - the
# faulty page is offlined at once, new work runs on the GPU, and the pending remap is applied by the next GPU reset
# at a convenient time - so a pending remap alone does not take the node away.
RULE_MIN_SEVERITY = {"GPU-HLT-001": "critical"}
# Rules that judge kernel-log events: their items carry ``last``/``last_time`` (kernel_log.scan).
KERNEL_LOG_RULES = ("HOST-HLT-001", "HOST-HLT-003")
# Xids whose immediate action in NVIDIA's Xid catalog is a GPU reset or a reboot: the GPU lost data or is gone.
# Others (13, 31, 43, 45: the application; 63, 92, 94: recorded or contained by the hardware) never drain.
DRAIN_XID_CODES = (48, 79, 95)
ACK_LINES_MAX = 50  # acknowledged lines without a time stamp that are kept (the newest)


def _rank(severity):
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def _drain_items(finding):
    """The events of a kernel-log finding that may drain: fatal Xid classes, fatal SXids."""
    items = [i for i in finding.get("items") or [] if isinstance(i, dict)]
    if finding.get("rule") == "HOST-HLT-001":
        return [i for i in items if i.get("code") in DRAIN_XID_CODES]
    return [i for i in items if i.get("fatal")]


def applies(acknowledged, boot_id, source):
    """The acknowledged position that holds for this run's log: the same boot, or a log file (which spans boots)."""
    if not isinstance(acknowledged, dict):
        return None
    if source == "file" or (boot_id and acknowledged.get("boot_id") == boot_id):
        return acknowledged
    return None


def is_new(item, acknowledged):
    """Whether a kernel-log event group (kernel_log.scan's entry) has an event newer than ``acknowledged``."""
    if not acknowledged:
        return True
    when, seen = item.get("last_time"), acknowledged.get("time")
    if when is not None:
        return seen is None or when > seen
    return item.get("last") not in (acknowledged.get("lines") or [])


def _message(rule, items):
    """``Xid 79 at 0000:3b:00 in the kernel log (GPU has fallen off the bus)``: the events that drain, where."""
    parts = []
    for i in items:
        where = ", ".join(i.get("pci") or [])
        parts.append("%s%s" % (i.get("code"), " at %s" % where if where else ""))
    if rule == "HOST-HLT-001":
        meanings = "; ".join(sorted(set(str(i.get("meaning") or "") for i in items) - {""}))
        return "Xid %s in the kernel log%s" % ("; ".join(parts), " (%s)" % meanings if meanings else "")
    return "fatal NVSwitch SXid %s in the kernel log" % "; ".join(parts)


def findings_that_drain(findings, severity, acknowledged=None):
    """The failing findings that drain the node: rules of DRAIN_RULES at or above ``severity``; for kernel-log rules
    a copy that keeps only the drain-class events not ``acknowledged`` (dropped when none is left)."""
    out = []
    for f in findings or []:
        rule = f.get("rule")
        if rule not in DRAIN_RULES or f.get("status") != "fail" or _rank(f.get("severity")) > _rank(severity):
            continue
        if _rank(f.get("severity")) > _rank(RULE_MIN_SEVERITY.get(rule, "info")):
            continue
        if rule in KERNEL_LOG_RULES:
            items = [i for i in _drain_items(f) if is_new(i, acknowledged)]
            if not items:
                continue
            f = dict(f, items=items, message=_message(rule, items))
        out.append(f)
    return out


def events(findings):
    """The kernel-log position of these (drain) findings: {time: newest event time or None, lines: [untimed]}."""
    times, lines = [], []
    for f in findings or []:
        if f.get("rule") not in KERNEL_LOG_RULES:
            continue
        for item in f.get("items") or []:
            if item.get("last_time") is not None:
                times.append(float(item["last_time"]))
            elif item.get("last"):
                lines.append(item["last"])
    if not times and not lines:
        return None
    return {"time": max(times) if times else None, "lines": lines}


def merge(position, more):
    """The later of two positions ({time, lines, ...}); None when both are."""
    if not position:
        return copy.deepcopy(more) if more else None
    if not more:
        return copy.deepcopy(position)
    times = [t for t in (position.get("time"), more.get("time")) if t is not None]
    lines = list(position.get("lines") or [])
    lines += [ln for ln in more.get("lines") or [] if ln not in lines]
    out = dict(position)
    out.update({"time": max(times) if times else None, "lines": lines[-ACK_LINES_MAX:]})
    return out
