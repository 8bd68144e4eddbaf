# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the health area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import pci as pci_bus
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import SEVERITIES
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    _host,
    _log_unreadable,
    _per_gpu,
    _severity_rank,
    result,
    skip,
)


def check_remapped_rows(facts, pol):
    def bad(g):
        rows = g.get("remapped_rows")
        return None if rows is None else bool(rows.get("failure") or rows.get("pending"))

    res = _per_gpu(
        facts,
        bad,
        lambda g: g.get("remapped_rows"),
        {"failure": False, "pending": False},
        "no row-remapping failure or pending remap",
        "row remapping",
    )
    if res["status"] == "fail" and not any(i.get("failure") for i in res["items"]):
        res["severity"] = "high"  # pending only: a GPU reset or reboot applies the remap
        res["message"] += ": row remap pending, reset the GPU to apply it"
    elif res["status"] == "fail":
        res["message"] += ": row remapping failed, the GPU needs service"
    return res


def check_lost_gpus(facts, pol):
    gpu = facts.get("gpu") or {}
    if not (gpu.get("nvml") or {}).get("available"):
        return skip("no NVIDIA GPUs could be read")
    lost = [g["index"] for g in gpu.get("gpus") or [] if g.get("lost") or g.get("error")]
    if lost:
        return result("fail", {"lost": lost}, {"lost": []}, "GPU(s) %s fell off the bus or cannot be opened" % lost)
    return result("pass", {"lost": []}, {"lost": []}, "every GPU answers")


def check_xid(facts, pol):
    log = _host(facts, "kernel_log")
    if _log_unreadable(log):
        return skip(_log_unreadable(log))
    floor = _severity_rank(pol["health"]["xid_min_severity"])
    events = [x for x in log.get("xid") or [] if _severity_rank(x.get("severity")) <= floor]
    observed = {
        "lines_scanned": log.get("lines_scanned"),
        "xid": [{"code": x["code"], "count": x.get("count"), "meaning": x.get("meaning")} for x in events],
    }
    if not events:
        return result("pass", observed, "no Xid events", "no Xid events in the window")
    worst = min(events, key=lambda x: _severity_rank(x.get("severity")))
    return result(
        "fail",
        observed,
        "no Xid events",
        "Xid %s in the kernel log (%s)" % (", ".join(str(x["code"]) for x in events), worst.get("meaning")),
        items=events,
        severity=worst.get("severity") if worst.get("severity") in SEVERITIES else None,
    )


def check_aer(facts, pol):
    log = _host(facts, "kernel_log")
    if _log_unreadable(log):
        return skip(_log_unreadable(log))
    aer = log.get("aer") or {}
    observed = {k: aer.get(k, 0) for k in ("corrected", "uncorrected", "fatal")}
    limit = pol["health"]["aer_corrected_max"]
    expected = {"uncorrected": 0, "fatal": 0, "corrected": "<= %d" % limit}
    if observed["fatal"] or observed["uncorrected"]:
        return result(
            "fail",
            observed,
            expected,
            "uncorrected PCIe errors: %s" % (aer.get("last") or ""),
            severity="critical" if observed["fatal"] else None,
        )
    if observed["corrected"] > limit:
        return result(
            "warn", observed, expected, "%d corrected PCIe errors (a marginal link or riser)" % observed["corrected"]
        )
    return result("pass", observed, expected, "no PCIe AER errors of concern")


# GPUs given away on purpose: bound to vfio-pci/pci-stub for a VM, or SR-IOV virtual functions (vGPU).
_NOT_THIS_HOSTS = ("vfio-pci", "pci-stub")


def check_gpu_count(facts, pol):
    """GPU-HLT-003: NVIDIA GPUs on the PCI bus that NVML does not list, and fewer usable GPUs than expected."""
    gpu = facts.get("gpu")
    if not gpu:
        return skip("GPU facts not gathered")
    expected = pol["health"]["expected_gpu_count"]
    nvml_ok = bool((gpu.get("nvml") or {}).get("available"))
    listed = (gpu.get("gpus") or []) if nvml_ok else []
    usable = [g for g in listed if not g.get("lost") and not g.get("error")]
    in_nvml = set(pci_bus.sysfs_address(g.get("pci_bus_id")) for g in listed) - {None}
    bus = gpu.get("pci") or {}
    on_bus = [
        f
        for f in (bus.get("gpus") or [])
        if bus.get("available") and not f.get("virtual") and f.get("driver") not in _NOT_THIS_HOSTS
    ]
    missing = [f for f in on_bus if f.get("address") not in in_nvml]
    observed = {
        "nvml": len(usable) if nvml_ok else None,
        "pci": len(on_bus) if bus.get("available") else None,
        "not_in_nvml": [f.get("address") for f in missing],
        "nvml_error": None if nvml_ok else (gpu.get("nvml") or {}).get("error"),
    }
    want = {"count": expected, "not_in_nvml": []}
    count = len(usable)
    why = "" if nvml_ok else " (NVML: %s)" % (observed["nvml_error"] or "not available")
    if expected is not None and count < expected:
        return result(
            "fail",
            observed,
            want,
            "%d usable GPU(s), the policy expects %d%s%s"
            % (
                count,
                expected,
                why,
                "; on the PCI bus but not in NVML: %s" % observed["not_in_nvml"] if missing else "",
            ),
            items=missing,
        )
    if missing:
        return result(
            "fail",
            observed,
            want,
            "GPU(s) %s are on the PCI bus but NVML does not list them%s: the driver did not bring them up (look for "
            "RmInitAdapter or Xid lines from boot)" % (observed["not_in_nvml"], why),
            items=missing,
            severity="high",
        )
    if not nvml_ok and not on_bus:
        return skip("no NVIDIA GPUs could be read")
    if expected is not None and count > expected:
        return result("warn", observed, want, "%d GPUs, the policy expects %d" % (count, expected), severity="low")
    return result("pass", observed, want, "%d GPU(s); every NVIDIA GPU on the PCI bus is listed by NVML" % count)


def check_sxid(facts, pol):
    """HOST-HLT-003: NVSwitch SXid errors in the kernel log."""
    log = _host(facts, "kernel_log")
    if _log_unreadable(log):
        return skip(_log_unreadable(log))
    if log.get("sxid") is None:
        return skip("the kernel log scan did not look for SXid lines")
    floor = _severity_rank(pol["health"]["xid_min_severity"])
    events = [x for x in log["sxid"] if _severity_rank(x.get("severity")) <= floor]
    observed = {
        "lines_scanned": log.get("lines_scanned"),
        "sxid": [{"code": x["code"], "count": x.get("count"), "fatal": x.get("fatal")} for x in events],
    }
    if not events:
        return result("pass", observed, "no SXid errors", "no NVSwitch SXid errors in the window")
    worst = min(events, key=lambda x: _severity_rank(x.get("severity")))
    fatal = [x["code"] for x in events if x.get("fatal")]
    return result(
        "fail",
        observed,
        "no SXid errors",
        "NVSwitch SXid %s in the kernel log%s"
        % (
            ", ".join(str(x["code"]) for x in events),
            " (fatal: %s; reset the GPUs and NVSwitches before the next multi-GPU job)" % fatal if fatal else "",
        ),
        items=events,
        severity=worst.get("severity") if worst.get("severity") in SEVERITIES else None,
    )


RULES = (
    Rule(
        "GPU-HLT-001",
        "health",
        "critical",
        "Row remapping failed or pending",
        "A pending row remap needs a GPU reset to take effect; a remapping failure means the memory has run out "
        "of spare rows and the GPU should be serviced.",
        check_remapped_rows,
        manual="Drain the node, reset the GPU; on a failure open an RMA.",
        references=(sources.GPU_MEMORY_ERRORS, sources.NVML_QUERIES),
    ),
    Rule(
        "GPU-HLT-002",
        "health",
        "critical",
        "GPU lost",
        "A GPU that fell off the bus (Xid 79) or cannot be opened is unusable until the node is reset.",
        check_lost_gpus,
        manual="Drain the node and reboot; repeated loss needs hardware service.",
        references=(sources.XID_CATALOG, sources.NVML_QUERIES),
    ),
    Rule(
        "HOST-HLT-001",
        "health",
        "high",
        "NVIDIA Xid errors in the kernel log",
        "Xid events are the driver's error reports; the codes tell application faults from hardware faults "
        "that need a reset or service.",
        check_xid,
        manual="Look up each Xid in NVIDIA's Xid catalog; drain the node for hardware Xids (48, 63, 64, 74, 79, 95).",
        references=(sources.XID_CATALOG,),
    ),
    Rule(
        "HOST-HLT-002",
        "health",
        "medium",
        "PCIe AER errors in the kernel log",
        "Uncorrected PCIe errors crash GPU jobs; many corrected ones point at a marginal link, riser or slot.",
        check_aer,
        manual="Reseat GPUs and risers; check firmware and BIOS PCIe settings.",
        references=(sources.KERNEL_AER,),
    ),
    Rule(
        "GPU-HLT-003",
        "health",
        "critical",
        "GPUs missing: fewer than expected, or on the PCI bus but not in NVML",
        "A GPU the driver failed to bring up at boot never appears in NVML, so it is never reported lost; only the "
        "PCI bus (NVIDIA functions of class 0x0300/0x0302 in /sys/bus/pci/devices) or the expected count "
        "(health.expected_gpu_count) shows that the host runs short.",
        check_gpu_count,
        manual="Drain the node; check the boot log for the missing GPUs (Xid 79, RmInitAdapter), reseat or service "
        "them.",
        references=(sources.NVIDIA_PCI_TABLE, sources.KERNEL_SYSFS_PCI, sources.NVML_QUERIES),
    ),
    Rule(
        "HOST-HLT-003",
        "health",
        "high",
        "NVSwitch SXid errors in the kernel log",
        "SXid lines are the NVSwitch driver's error reports: a fatal one stops NVLink traffic through the switch and "
        "the GPUs need a reset before multi-GPU jobs run again; non-fatal ones point at a degrading link.",
        check_sxid,
        manual="Look up each SXid in the fabric manager guide; drain the node and reset the GPUs and NVSwitches after "
        "a fatal SXid.",
        references=(sources.FABRIC_MANAGER, sources.XID_CATALOG),
    ),
)
