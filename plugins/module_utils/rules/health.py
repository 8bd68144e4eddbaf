# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the health area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
)
