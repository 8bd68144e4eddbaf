# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the health area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders, nvlink_platform
from ansible_collections.gpufleet.tuning.plugins.module_utils import pci as pci_bus
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import SEVERITIES
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    RoleVar,
    get_in,
    host_fact,
    log_unreadable,
    mode_pending,
    per_gpu_check,
    readable_gpus,
    result,
    severity_rank,
    skip,
)


def check_remapped_rows(facts, pol):
    def bad(g):
        rows = g.get("remapped_rows")
        return None if rows is None else bool(rows.get("failure") or rows.get("pending"))

    res = per_gpu_check(
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
    bad = [g for g in gpu.get("gpus") or [] if g.get("lost") or g.get("error")]
    lost = [g["index"] for g in bad]
    if lost:
        # Why, where the reader says: NVML's or nvidia-smi's error, or nvidia-smi's "[GPU requires reset]" values.
        why = []
        for g in bad:
            reset = [r for r in (g.get("unsupported") or {}).values() if "requires reset" in str(r).lower()]
            reason = g.get("error") or (reset[0] if reset else None)
            if reason:
                why.append("GPU %s: %s" % (g["index"], reason))
        return result(
            "fail",
            {"lost": lost},
            {"lost": []},
            "GPU(s) %s fell off the bus or cannot be opened%s" % (lost, " (%s)" % "; ".join(why) if why else ""),
            items=[{"gpu": g["index"], "pci_bus_id": g.get("pci_bus_id"), "error": g.get("error")} for g in bad],
        )
    return result("pass", {"lost": []}, {"lost": []}, "every GPU answers")


def check_xid(facts, pol):
    log = host_fact(facts, "kernel_log")
    if log_unreadable(log):
        return skip(log_unreadable(log))
    floor = severity_rank(pol["health"]["xid_min_severity"])
    events = [x for x in log.get("xid") or [] if severity_rank(x.get("severity")) <= floor]
    observed = {
        "lines_scanned": log.get("lines_scanned"),
        "xid": [{"code": x["code"], "count": x.get("count"), "meaning": x.get("meaning")} for x in events],
    }
    if not events:
        return result("pass", observed, "no Xid events", "no Xid events in the window")
    worst = min(events, key=lambda x: severity_rank(x.get("severity")))
    return result(
        "fail",
        observed,
        "no Xid events",
        "Xid %s in the kernel log (%s)" % (", ".join(str(x["code"]) for x in events), worst.get("meaning")),
        items=events,
        severity=worst.get("severity") if worst.get("severity") in SEVERITIES else None,
    )


def check_aer(facts, pol):
    log = host_fact(facts, "kernel_log")
    if log_unreadable(log):
        return skip(log_unreadable(log))
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


# NVML start-up errors whose cause another rule reports (a driver upgrade without a reboot: the loaded kernel module
# and the library differ, NVML_ERROR_LIB_RM_VERSION_MISMATCH): GPU-HLT-003 is then unknown, not a second finding.
_CAUSE_REPORTED_BY = {"LibRmVersionMismatch": "SW-KMOD-001"}
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
    by_count = len(in_nvml) < len(listed)
    if by_count:
        # Some GPUs came without a PCI bus id (an nvidia-smi without the field): compare counts, not addresses.
        missing = []
    observed = {
        "nvml": len(usable) if nvml_ok else None,
        "pci": len(on_bus) if bus.get("available") else None,
        "not_in_nvml": [f.get("address") for f in missing],
        "nvml_error": None if nvml_ok else (gpu.get("nvml") or {}).get("error"),
    }
    want = {"count": expected, "not_in_nvml": []}
    count = len(usable)
    why = "" if nvml_ok else " (NVML: %s)" % (observed["nvml_error"] or "not available")
    if not nvml_ok and (on_bus or expected is not None):
        # NVML did not start: no GPU is listed, so "on the bus but not in NVML" would name every GPU for one cause.
        code = (gpu.get("nvml") or {}).get("error_code")
        cause = observed["nvml_error"] or code or "not available"
        seen = "the %d NVIDIA GPU(s) on the PCI bus" % len(on_bus) if on_bus else "the GPUs"
        if code in _CAUSE_REPORTED_BY:
            return result(
                "skip",
                observed,
                want,
                "unknown: NVML could not start (%s), which %s reports; whether %s are usable cannot be judged until "
                "it does" % (cause, _CAUSE_REPORTED_BY[code], seen),
            )
        # No other rule names this cause (the module not loaded, the library missing): said here, once.
        return result(
            "fail",
            observed,
            want,
            "NVML could not start (%s): none of %s can be used%s"
            % (cause, seen, "; the policy expects %d" % expected if expected is not None else ""),
            items=on_bus,
            severity=None if expected is not None else "high",
        )
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
    if missing or (by_count and len(on_bus) > len(listed)):
        what = (
            "GPU(s) %s are on the PCI bus but NVML does not list them" % observed["not_in_nvml"]
            if missing
            else "%d GPUs on the PCI bus, NVML lists %d" % (len(on_bus), len(listed))
        )
        return result(
            "fail",
            observed,
            want,
            "%s%s: the driver did not bring them up (look for RmInitAdapter or Xid lines from boot)" % (what, why),
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
    log = host_fact(facts, "kernel_log")
    if log_unreadable(log):
        return skip(log_unreadable(log))
    if log.get("sxid") is None:
        return skip("the kernel log scan did not look for SXid lines")
    floor = severity_rank(pol["health"]["xid_min_severity"])
    events = [x for x in log["sxid"] if severity_rank(x.get("severity")) <= floor]
    observed = {
        "lines_scanned": log.get("lines_scanned"),
        "sxid": [{"code": x["code"], "count": x.get("count"), "fatal": x.get("fatal")} for x in events],
    }
    if not events:
        return result("pass", observed, "no SXid errors", "no NVSwitch SXid errors in the window")
    worst = min(events, key=lambda x: severity_rank(x.get("severity")))
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


# ---------------------------------------------------------------------------------------------------------------------
# NVLink, GPU fabric, ECC, recovery action, PCIe replays, VBIOS: the judgements of NVIDIA's DCGM health watches
# (modules/health/DcgmHealthWatch.cpp and common/DcgmGPUHardwareLimits.h in github.com/NVIDIA/DCGM, read at commit
# 72fa3feaa67d716a75323a8f47c34ff3ee73f824). DCGM judges cumulative counters by how much they rose in its watch
# window (the last minute), not by their lifetime totals; gpu_info reads them twice (nvml.SAMPLE_SECONDS apart).

# DCGM_LIMIT_MAX_NVLINK_ERROR: one replay or recovery error in the window fails, one CRC error warns.
DCGM_LIMIT_MAX_NVLINK_ERROR = 1
# DCGM_LIMIT_MAX_NVLINK_CRC_ERROR: CRC errors fail at 100 per second and more ("RM has informed us...").
DCGM_LIMIT_MAX_NVLINK_CRC_ERROR = 100.0
# DCGM_LIMIT_MAX_RETIRED_PAGES: single + double bit retired pages at or above this fail.
DCGM_LIMIT_MAX_RETIRED_PAGES = 63
# DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT: DBE retired pages above this fail when more than one retired in a week.
DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT = 15
# GetExpectedPcieReplayRate: replays per minute per lane, by PCIe generation (a 1e-12 bit error rate at the line rate).
PCIE_REPLAYS_PER_MIN_PER_LANE = (
    2.5 * 60 / 1000,
    5.0 * 60 / 1000,
    8.0 * 60 / 1000,
    16.0 * 60 / 1000,
    32.0 * 60 / 1000,
    64.0 * 60 / 1000,
)


def _ceil(x):
    n = int(x)
    return n if n == x else n + 1


def check_nvlink_down(facts, pol):
    """GPU-NVL-001: a GPU with some NVLink links down (DCGM MonitorNVLinkStatus fails any down link)."""
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    linked = [g for g in gpus if g.get("nvlink") and g["nvlink"].get("total")]
    if not linked:
        return skip("no GPU reports NVLink (PCIe cards such as L40S answer NotSupported)")
    if any(get_in(g, "mig", "current") for g in gpus):
        # DCGM (DcgmTopology.cpp, bug 200682374): NVML reports links down while any GPU is in MIG mode.
        return skip("a GPU is in MIG mode, where NVML reports NVLink links down (DCGM treats them as disabled)")
    observed = {
        str(g["index"]): {"up": g["nvlink"]["up"], "total": g["nvlink"]["total"], "down": g["nvlink"].get("down")}
        for g in linked
    }
    any_up = any(g["nvlink"]["up"] for g in linked)
    items = []
    for g in linked:
        up, total = g["nvlink"]["up"], g["nvlink"]["total"]
        down = g["nvlink"].get("down")
        if down is None:
            down = "%d link(s)" % (total - up)
        if 0 < up < total:
            items.append({"gpu": g["index"], "up": up, "total": total, "down": down, "problem": "links partly down"})
        elif up == 0 and any_up:
            items.append(
                {
                    "gpu": g["index"],
                    "up": 0,
                    "total": total,
                    "down": down,
                    "problem": "every link down while the other GPUs' links are up",
                }
            )
    expected = "every NVLink link up (or none: a GPU with no bridge or fabric)"
    if items:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s: NVLink links down (%s)"
            % ([i["gpu"] for i in items], "; ".join("GPU %s links %s" % (i["gpu"], i["down"]) for i in items)),
            items=items,
        )
    if not any_up:
        return result("pass", observed, expected, "no NVLink link is up on any GPU (no NVLink bridge or fabric)")
    return result("pass", observed, expected, "every NVLink link is up")


NVLINK_ERROR_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


def _unread_text(unread):
    """'replay, recovery on GPU 0, 1 (NotSupported); crc_data on GPU 3 (NoPermission)' from unread counters."""
    groups = {}
    for u in unread:
        groups.setdefault(u["reason"], {}).setdefault(u["gpu"], []).append(u["counter"])
    parts = []
    for reason in sorted(groups, key=str):
        by_counters = {}
        for index, counters in groups[reason].items():
            by_counters.setdefault(tuple(counters), []).append(str(index))
        for counters, indexes in sorted(by_counters.items()):
            parts.append("%s on GPU %s (%s)" % (", ".join(counters), ", ".join(indexes), reason))
    return "; ".join(parts)


def check_nvlink_errors(facts, pol):
    """GPU-NVL-002: NVLink replay/recovery/CRC errors that rose while sampled, judged as DCGM MonitorNVLink4Fields.
    A counter NVML does not return (NotSupported, NoPermission: null in the facts) is not a zero: with no error in
    the counters it did return, the check is unknown (skip) and names the counters it could not read."""
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    sampled = [g for g in gpus if get_in(g, "nvlink", "errors_increase") and get_in(g, "nvlink", "sample_seconds")]
    if not sampled:
        return skip("no GPU reports NVLink error counters sampled over time")
    observed, items, unread, worst = {}, [], [], "pass"
    for g in sampled:
        rise, seconds = g["nvlink"]["errors_increase"], g["nvlink"]["sample_seconds"]
        observed[str(g["index"])] = {"increase": rise, "seconds": seconds, "totals": g["nvlink"].get("errors")}
        for name in NVLINK_ERROR_COUNTERS:
            n = rise.get(name)
            if n is None:
                reason = (g.get("unsupported") or {}).get("nvlink.errors." + name) or "not returned by NVML"
                unread.append({"gpu": g["index"], "counter": name, "reason": reason})
                continue
            if n < DCGM_LIMIT_MAX_NVLINK_ERROR:
                continue
            if name in ("replay", "recovery"):
                verdict = "fail"  # DCGM: "Replay and recovery errors are failures, not warnings."
            else:
                verdict = "fail" if n / seconds >= DCGM_LIMIT_MAX_NVLINK_CRC_ERROR else "warn"
            items.append(
                {
                    "gpu": g["index"],
                    "counter": name,
                    "increase": n,
                    "per_second": round(n / seconds, 1),
                    "verdict": verdict,
                }
            )
            worst = "fail" if "fail" in (worst, verdict) else "warn"
    expected = {"replay": 0, "recovery": 0, "crc_per_second": "< %d, none to pass" % DCGM_LIMIT_MAX_NVLINK_CRC_ERROR}
    not_read = "; not read: %s" % _unread_text(unread) if unread else ""
    if unread:
        observed["unread"] = unread
    if not items:
        if unread:
            read = len(sampled) * len(NVLINK_ERROR_COUNTERS) - len(unread)
            return result(
                "skip",
                observed,
                expected,
                "unknown: NVML does not return NVLink error counters: %s%s"
                % (
                    _unread_text(unread),
                    "; no errors in the %d counter(s) it returns" % read if read else "",
                ),
            )
        return result("pass", observed, expected, "no NVLink errors while sampled")
    text = "; ".join("GPU %s %s +%d (%.1f/s)" % (i["gpu"], i["counter"], i["increase"], i["per_second"]) for i in items)
    if worst == "fail":
        return result("fail", observed, expected, "NVLink errors rising: %s%s" % (text, not_read), items=items)
    return result(
        "warn",
        observed,
        expected,
        "NVLink CRC errors below DCGM's failure rate: %s%s" % (text, not_read),
        items=items,
        severity="medium",
    )


def _fabric_services_down(facts):
    """The fabric services this host needs (nvlink_platform) that are known not to run."""
    platform = nvlink_platform.classify(facts)
    drv = (facts.get("gpu") or {}).get("driver") or {}
    down = []
    if platform and platform["fabricmanager_needed"] and drv.get("fabricmanager_running") is False:
        down.append("nv-fabricmanager")
    if platform and platform["nvlsm_needed"] and drv.get("nvlsm_running") is False:
        down.append("nvlsm")
    return down


def _fabric_training(facts, grace, observed, expected, training):
    """GPUs whose fabric registration is in progress: normal just after boot; past the boot grace with the fabric
    manager (or NVLSM) that must train it not running, it never completes."""
    ids = [i["gpu"] for i in training]
    uptime = (facts.get("gpu") or {}).get("uptime_s")
    if uptime is None or uptime <= grace:
        return result(
            "warn",
            observed,
            expected,
            "GPU(s) %s: fabric registration in progress (normal for a few minutes after boot)" % ids,
            items=training,
            severity="medium",
        )
    down = _fabric_services_down(facts)
    if down:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s: fabric registration still in progress %d s after boot (grace %d s, "
            "health.fabric_boot_grace_s) and %s not running: it will not complete, and CUDA returns "
            "cudaErrorSystemNotReady on these GPUs" % (ids, uptime, grace, " and ".join(down)),
            items=training,
            severity="high",
        )
    return result(
        "warn",
        observed,
        expected,
        "GPU(s) %s: fabric registration still in progress %d s after boot (grace %d s): read the fabric manager's "
        "log" % (ids, uptime, grace),
        items=training,
        severity="medium",
    )


def check_fabric(facts, pol):
    """GPU-FAB-001: the GPU's NVLink fabric probe (NVSwitch systems), judged as DCGM MonitorFabricFields."""
    grace = pol["health"]["fabric_boot_grace_s"]
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    fabric = [g for g in gpus if g.get("fabric")]
    if not fabric:
        return skip("no GPU reports a fabric state (not an NVSwitch system, or a GPU before Hopper)")
    observed = {str(g["index"]): g["fabric"] for g in fabric}
    expected = {"state": "completed", "status": "Success", "health_problems": []}
    failed, training, unhealthy = [], [], []
    for g in fabric:
        f = g["fabric"]
        item = {"gpu": g["index"], "state": f.get("state"), "status": f.get("status")}
        if f.get("state") == "in_progress":
            training.append(item)
        elif f.get("state") != "completed" or f.get("status") != "Success":
            failed.append(item)
        elif f.get("health_problems"):
            unhealthy.append(dict(item, health_problems=f["health_problems"]))
    if failed:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s not registered in the NVLink fabric (%s): CUDA cannot use them for peer traffic; is "
            "nvidia-fabricmanager running?"
            % ([i["gpu"] for i in failed], ", ".join("%s/%s" % (i["state"], i["status"]) for i in failed)),
            items=failed + unhealthy,
        )
    if unhealthy:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s: fabric health %s"
            % ([i["gpu"] for i in unhealthy], sorted({p for i in unhealthy for p in i["health_problems"]})),
            items=unhealthy,
            severity="high",
        )
    if training:
        return _fabric_training(facts, grace, observed, expected, training)
    return result("pass", observed, expected, "every GPU is registered in the NVLink fabric")


def check_ecc_uncorrected(facts, pol):
    """GPU-ECC-003: uncorrectable ECC errors (DCGM MonitorMemVolatileDbes fails any volatile one)."""
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    known = [
        g
        for g in gpus
        if get_in(g, "ecc", "volatile_uncorrected") is not None or get_in(g, "ecc", "aggregate_uncorrected") is not None
    ]
    if not known:
        return skip("the GPUs do not report ECC error counts (ECC off or not supported)")
    observed = {
        str(g["index"]): {
            "volatile": get_in(g, "ecc", "volatile_uncorrected"),
            "aggregate": get_in(g, "ecc", "aggregate_uncorrected"),
        }
        for g in known
    }
    expected = {"volatile": 0, "aggregate": 0}

    def counted(kind):
        """One item per GPU whose ``kind`` (volatile: since the driver loaded; aggregate: lifetime) count is > 0."""
        return [
            {"gpu": g["index"], kind: g["ecc"][kind + "_uncorrected"]}
            for g in known
            if (get_in(g, "ecc", kind + "_uncorrected") or 0) > 0
        ]

    volatile = counted("volatile")
    if volatile:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s: uncorrectable ECC errors since the driver loaded (%s): the jobs that hit them got bad data "
            "or died; see the GPU's recovery action and row remapping"
            % ([i["gpu"] for i in volatile], ", ".join("GPU %s: %d" % (i["gpu"], i["volatile"]) for i in volatile)),
            items=volatile,
        )
    history = counted("aggregate")
    if history:
        return result(
            "warn",
            observed,
            expected,
            "GPU(s) %s: uncorrectable ECC errors in the lifetime count but none since the driver loaded (DCGM does "
            "not judge the lifetime count; row remapping or retired pages show whether the memory was repaired)"
            % [i["gpu"] for i in history],
            items=history,
            severity="low",
        )
    return result("pass", observed, expected, "no uncorrectable ECC errors")


def check_retired_pages(facts, pol):
    """GPU-ECC-004: retired pages at DCGM's limits, or a retirement pending (DCGM MonitorMemSbeDbeRetiredPages and
    MonitorMemRetiredPending)."""
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    known = [g for g in gpus if g.get("retired_pages")]
    if not known:
        if any(g.get("remapped_rows") is not None for g in gpus):
            # Ampere and later repair memory by row remapping instead; GPU-HLT-001 judges it.
            return result(
                "pass", None, "no retired pages", "the GPUs remap rows instead of retiring pages (GPU-HLT-001)"
            )
        return skip("the GPUs report neither retired pages nor row remapping")
    observed = {str(g["index"]): g["retired_pages"] for g in known}
    expected = {"single_bit + double_bit": "< %d" % DCGM_LIMIT_MAX_RETIRED_PAGES, "pending": False}
    over, pending, soft = [], [], []
    for g in known:
        rp = g["retired_pages"]
        total = (rp.get("single_bit") or 0) + (rp.get("double_bit") or 0)
        if total >= DCGM_LIMIT_MAX_RETIRED_PAGES:
            over.append({"gpu": g["index"], "retired": total})
        elif (rp.get("double_bit") or 0) > DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT:
            soft.append({"gpu": g["index"], "double_bit": rp["double_bit"]})
        if rp.get("pending"):
            pending.append({"gpu": g["index"], "pending": True})
    if over:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s retired %s pages, DCGM's limit is %d: the GPU should be serviced"
            % ([i["gpu"] for i in over], [i["retired"] for i in over], DCGM_LIMIT_MAX_RETIRED_PAGES),
            items=over + pending,
        )
    if pending:
        return result(
            "warn",
            observed,
            expected,
            "GPU(s) %s have a page retirement pending: it takes effect at the next GPU reset or reboot"
            % [i["gpu"] for i in pending],
            items=pending,
            severity="medium",
        )
    if soft:
        return result(
            "warn",
            observed,
            expected,
            "GPU(s) %s retired more than %d pages for double-bit errors; DCGM fails this only when more than one "
            "more retires within a week, which one audit cannot see: compare with last week's audit"
            % ([i["gpu"] for i in soft], DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT),
            items=soft,
            severity="low",
        )
    return result("pass", observed, expected, "retired pages below DCGM's limits, none pending")


# NVML recovery action -> (status, severity, what to do), after DCGM MonitorGpuRecoveryAction (reset, reboot and
# drain-and-reset fail; drain P2P warns) and NVIDIA's "error recovery and response flags" documentation.
RECOVERY = {
    "gpu_reset": ("fail", "critical", "stop its processes and reset the GPU (nvidia-smi -r)"),
    "node_reboot": ("fail", "critical", "reboot the node: the OS may be in an inconsistent state"),
    "drain_p2p": ("warn", "high", "drain peer-to-peer (NVLink) traffic, then the GPU recovers without a reset"),
    "drain_and_reset": ("fail", "critical", "drain peer-to-peer traffic, then reset the GPU"),
    "recover_imex_domain": ("fail", "high", "recover the IMEX domain the GPU belongs to"),
    "bus_reset": ("fail", "critical", "reset the GPU's PCIe bus"),
    "system_reboot": ("fail", "critical", "reboot the system"),
}


def check_recovery_action(facts, pol):
    """GPU-RCV-001: the recovery action NVML asks for (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)."""
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    known = [g for g in gpus if g.get("recovery_action")]
    if not known:
        return skip("the driver does not report a GPU recovery action (older drivers answer NotSupported)")
    observed = {str(g["index"]): g["recovery_action"] for g in known}
    items = []
    for g in known:
        action = g["recovery_action"]
        if action == "none":
            continue
        status, severity, todo = RECOVERY.get(action, ("fail", "high", "see NVIDIA's documentation"))
        items.append({"gpu": g["index"], "action": action, "status": status, "severity": severity, "todo": todo})
    if not items:
        return result("pass", observed, "none", "no GPU asks for a recovery action")
    worst = min(items, key=lambda i: (i["status"] != "fail", severity_rank(i["severity"])))
    return result(
        worst["status"],
        observed,
        "none",
        "; ".join("GPU %s asks for %s: %s" % (i["gpu"], i["action"].replace("_", " "), i["todo"]) for i in items),
        items=items,
        severity=worst["severity"],
    )


def pcie_replay_limit(gen, width):
    """DCGM's expected PCIe replays per minute for a link (GetExpectedPcieReplayRate): ceil(rate per lane x lanes);
    generations past the table use its last entry."""
    if not gen or not width:
        return None
    rate = PCIE_REPLAYS_PER_MIN_PER_LANE[min(int(gen), len(PCIE_REPLAYS_PER_MIN_PER_LANE)) - 1]
    return _ceil(round(rate * int(width), 9))


def check_pcie_replays(facts, pol):
    """GPU-PCI-002: PCIe replays over DCGM's per-generation rate (MonitorPcie: replays in the last minute against
    GetExpectedPcieReplayRate). Sampled over less than a minute, an increase above the per-minute limit is one that
    any minute containing the sample exceeds as well: DCGM would warn too."""
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    sampled = [
        g for g in gpus if get_in(g, "pcie", "replay_increase") is not None and get_in(g, "pcie", "sample_seconds")
    ]
    if not sampled:
        return skip("no GPU reports its PCIe replay counter sampled over time")
    observed, items = {}, []
    for g in sampled:
        p = g["pcie"]
        limit = pcie_replay_limit(p.get("gen_current"), p.get("width_current"))
        observed[str(g["index"])] = {
            "increase": p["replay_increase"],
            "seconds": p["sample_seconds"],
            "link": "gen%s x%s" % (p.get("gen_current"), p.get("width_current")),
            "limit_per_minute": limit,
            "total": p.get("replay_count"),
        }
        if limit is not None and p["replay_increase"] > limit:
            items.append(
                {
                    "gpu": g["index"],
                    "increase": p["replay_increase"],
                    "seconds": p["sample_seconds"],
                    "limit_per_minute": limit,
                }
            )
    expected = "at most DCGM's replays per minute for the link's generation and width"
    # A GPU sampled whose counter NVML did not return (NotSupported, NoPermission) is unknown, not "within rate".
    unread = [g for g in gpus if get_in(g, "pcie", "sample_seconds") and get_in(g, "pcie", "replay_increase") is None]
    not_read = "; ".join(
        "GPU %s (%s)" % (g["index"], (g.get("unsupported") or {}).get("pcie.replay_count") or "not returned by NVML")
        for g in unread
    )
    if items:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s: PCIe replays above DCGM's rate (%s): a marginal link, riser or slot"
            % (
                [i["gpu"] for i in items],
                "; ".join(
                    "GPU %s: +%d in %.1f s, limit %d/min"
                    % (i["gpu"], i["increase"], i["seconds"], i["limit_per_minute"])
                    for i in items
                ),
            ),
            items=items,
        )
    if unread:
        return result(
            "skip",
            observed,
            expected,
            "unknown: NVML does not return the PCIe replay counter of %s; within DCGM's rate on GPU(s) %s"
            % (not_read, [g["index"] for g in sampled]),
        )
    return result("pass", observed, expected, "PCIe replays within DCGM's rate")


def check_vbios(facts, pol):
    """GPU-FW-001: VBIOS versions that differ across one host's GPUs of the same model."""
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    known = [g for g in gpus if g.get("vbios_version")]
    if not known:
        return skip("the GPUs do not report their VBIOS version")
    by_model = {}
    for g in known:
        by_model.setdefault(g.get("name") or "?", {}).setdefault(g["vbios_version"], []).append(g["index"])
    observed = dict(by_model)
    mixed = {model: versions for model, versions in by_model.items() if len(versions) > 1}
    expected = "one VBIOS version per GPU model"
    if mixed:
        return result(
            "fail",
            observed,
            expected,
            "VBIOS versions differ: %s"
            % "; ".join(
                "%s: %s" % (m, ", ".join("%s on GPU(s) %s" % (v, i) for v, i in sorted(vs.items())))
                for m, vs in sorted(mixed.items())
            ),
            items=[{"model": m, "versions": vs} for m, vs in sorted(mixed.items())],
        )
    return result("pass", observed, expected, "one VBIOS version per GPU model")


def check_pcie_link(facts, pol):
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    busy_pct = pol["power"]["busy_util_pct"]
    items, idle_down, observed = [], [], {}
    for g in gpus:
        p = g.get("pcie") or {}
        down = decoders.pcie_downtrained(
            p.get("gen_current"), p.get("width_current"), p.get("gen_max"), p.get("width_max")
        )
        if down is None:
            continue
        util = get_in(g, "utilization", "gpu_pct")
        observed[str(g["index"])] = {
            "link": decoders.pcie_link(p["gen_current"], p["width_current"]),
            "max": decoders.pcie_link(p["gen_max"], p["width_max"]),
            "utilization_pct": util,
        }
        if not down:
            continue
        if util is None or util < busy_pct:
            idle_down.append(g["index"])
            continue
        items.append(
            {
                "gpu": g["index"],
                "link": observed[str(g["index"])]["link"],
                "max": observed[str(g["index"])]["max"],
                "utilization_pct": util,
            }
        )
    if not observed:
        return skip("the GPUs do not report their PCIe link")
    expected = "maximum generation and width while busy (>= %d%% utilization)" % busy_pct
    if items:
        return result(
            "fail",
            observed,
            expected,
            "busy GPU(s) %s run below their PCIe maximum" % [i["gpu"] for i in items],
            items=items,
        )
    note = " (idle GPU(s) %s trained down, which is normal)" % idle_down if idle_down else ""
    return result("pass", observed, expected, "busy GPUs run at full PCIe link" + note)


def ecc_wanted(pol):
    """The ECC mode GPU-ECC-001 asks for: on when power.ecc, else None (not judged, left as it is)."""
    return True if pol["power"]["ecc"] else None


def target_ecc_mode(facts, pol, given):
    """GPU-ECC-001/002's fix: the ECC mode gpu_runtime sets (pending until a reboot); None leaves it alone.
    gpu_runtime_ecc_mode takes the place of power.ecc."""
    return {"ecc_mode": given["ecc_mode"] if "ecc_mode" in given else ecc_wanted(pol)}


def check_ecc_mode(facts, pol):
    if ecc_wanted(pol) is None:
        return skip("policy does not require ECC")
    return per_gpu_check(
        facts,
        lambda g: None if get_in(g, "ecc", "current") is None else not g["ecc"]["current"],
        lambda g: get_in(g, "ecc", "current"),
        True,
        "ECC is on",
        "ECC off",
    )


def check_ecc_pending(facts, pol):
    return mode_pending(facts, "ecc", "reboot or GPU reset")


# GPU-ECC-001 and 002 share their fix (target_ecc_mode) and its role variable.
ECC_VARS = (RoleVar("gpu_runtime_ecc_mode", "ecc_mode", "power.ecc"),)


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
        policy_keys=("health.xid_min_severity",),
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
        policy_keys=("health.aer_corrected_max",),
        references=(sources.KERNEL_AER,),
    ),
    Rule(
        "GPU-HLT-003",
        "health",
        "critical",
        "GPUs missing: fewer than expected, or on the PCI bus but not in NVML",
        "A GPU the driver failed to bring up at boot never appears in NVML, so it is never reported lost; only the "
        "PCI bus (NVIDIA functions of class 0x0300/0x0302 in /sys/bus/pci/devices) or the expected count "
        "(health.expected_gpu_count) shows that the host runs short. When NVML itself cannot start, the cause is "
        "one finding: a driver/library mismatch is SW-KMOD-001's and this check is unknown (skip); any other "
        "start-up error (the module not loaded, the library missing) is reported here once, not per GPU.",
        check_gpu_count,
        manual="Drain the node; check the boot log for the missing GPUs (Xid 79, RmInitAdapter), reseat or service "
        "them.",
        policy_keys=("health.expected_gpu_count",),
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
        policy_keys=("health.xid_min_severity",),
        references=(sources.FABRIC_MANAGER, sources.XID_CATALOG),
    ),
    Rule(
        "GPU-NVL-001",
        "health",
        "high",
        "NVLink links down",
        "A GPU with some NVLink links down moves peer-to-peer and collective traffic over fewer links or falls back "
        "to PCIe; DCGM's health watch fails any link reported down. GPUs without NVLink (PCIe cards such as L40S) "
        "and hosts where no GPU has a link up (no bridge or fabric) are not findings; in MIG mode NVML reports "
        "links down and DCGM ignores them, as this rule does.",
        check_nvlink_down,
        manual="Drain the node; reset the GPUs (or reboot) and check the NVLink bridge or baseboard; a link that "
        "stays down needs hardware service.",
        references=(sources.NVML_NVLINK, sources.DCGM_HEALTH_WATCH),
    ),
    Rule(
        "GPU-NVL-002",
        "health",
        "high",
        "NVLink errors rising",
        "DCGM's health watch fails a GPU whose NVLink replay or recovery error counters rose at all in its window "
        "and whose CRC error counters rose at 100 per second or more, and warns (medium here) on fewer CRC errors. "
        "The counters are cumulative, so the audit reads them twice and judges the increase, as DCGM does, not the "
        "lifetime total. A counter NVML does not return (NotSupported, NoPermission) is not a zero: without an "
        "error in the counters it does return, the check is unknown and names the counters it could not read.",
        check_nvlink_errors,
        manual="Drain the node; reset the GPUs and watch the counters again; errors that keep rising need the "
        "NVLink bridge, baseboard or NVSwitch serviced.",
        references=(sources.DCGM_HEALTH_WATCH, sources.DCGM_HW_LIMITS, sources.NVML_NVLINK),
    ),
    Rule(
        "GPU-FAB-001",
        "health",
        "critical",
        "GPU not registered in the NVLink fabric",
        "On NVSwitch systems (HGX H100 and later) a GPU joins the NVLink fabric only when the fabric manager has "
        "trained it: until its fabric state is 'completed' with status success, CUDA cannot use it for peer "
        "traffic and multi-GPU jobs fail, so DCGM fails 'not started' and 'failed' (critical here) and the fabric "
        "health bits (degraded bandwidth, unhealthy route; high), and warns while training is in progress. Training "
        "that has not completed after the boot grace (health.fabric_boot_grace_s) while the fabric manager (on HGX "
        "B200 and later: or NVLSM) that must train it is not running never completes (CUDA returns "
        "cudaErrorSystemNotReady): high. GPUs that report no fabric (PCIe cards, non-NVSwitch boards) are not "
        "findings.",
        check_fabric,
        manual="Start nvidia-fabricmanager (same version as the driver; on HGX B200 and later with nvlsm) and check "
        "its log; reset the GPUs and NVSwitches if registration failed.",
        references=(sources.FABRIC_MANAGER, sources.NVML_QUERIES, sources.DCGM_HEALTH_WATCH),
        policy_keys=("health.fabric_boot_grace_s",),
    ),
    Rule(
        "GPU-PCI-001",
        "health",
        "medium",
        "PCIe link below maximum while busy",
        "A busy GPU on a degraded PCIe link (lower generation or width) moves data at a fraction of the speed; "
        "idle GPUs lower their link speed on purpose and are not flagged.",
        check_pcie_link,
        manual="Reseat the GPU or riser, check the slot and BIOS PCIe settings.",
        policy_keys=("power.busy_util_pct",),
        references=(sources.NVML_QUERIES, sources.NVIDIA_SMI),
    ),
    Rule(
        "GPU-ECC-001",
        "health",
        "medium",
        "ECC off",
        "Without ECC, memory bit flips silently corrupt results and can crash long jobs.",
        check_ecc_mode,
        role="gpu_runtime",
        target=target_ecc_mode,
        role_vars=ECC_VARS,
        policy_keys=("power.ecc",),
        references=(sources.NVML_QUERIES, sources.GPU_MEMORY_ERRORS),
    ),
    Rule(
        "GPU-ECC-002",
        "health",
        "low",
        "ECC mode change pending a reboot",
        "An ECC mode change only takes effect after a reboot or GPU reset; until then the GPU runs with the old "
        "setting.",
        check_ecc_pending,
        role="gpu_runtime",
        target=target_ecc_mode,
        role_vars=ECC_VARS,
        references=(sources.NVML_QUERIES, sources.NVML_COMMANDS),
    ),
    Rule(
        "GPU-ECC-003",
        "health",
        "high",
        "Uncorrectable ECC errors",
        "An uncorrectable (double-bit) ECC error since the driver loaded means a job read corrupted memory or was "
        "killed; DCGM's health watch fails any. An uncorrectable error only in the lifetime count is history, "
        "reported at low severity.",
        check_ecc_uncorrected,
        manual="Drain the node; follow the GPU's recovery action (GPU-RCV-001) and row remapping (GPU-HLT-001); "
        "repeated errors need an RMA.",
        references=(sources.GPU_MEMORY_ERRORS, sources.DCGM_HEALTH_WATCH, sources.NVML_QUERIES),
    ),
    Rule(
        "GPU-ECC-004",
        "health",
        "high",
        "Retired pages at DCGM's limit or pending",
        "GPUs before Ampere retire memory pages that had errors; DCGM fails a GPU with 63 or more retired pages "
        "(DCGM_LIMIT_MAX_RETIRED_PAGES) and warns (medium here) while a retirement is pending, which takes effect "
        "only at the next GPU reset or reboot.",
        check_retired_pages,
        manual="Reset the GPU or reboot to apply a pending retirement; at the limit, drain the node and open an RMA.",
        references=(sources.GPU_MEMORY_ERRORS, sources.DCGM_HEALTH_WATCH, sources.DCGM_HW_LIMITS),
    ),
    Rule(
        "GPU-RCV-001",
        "health",
        "critical",
        "GPU asks for a recovery action",
        "After an uncorrectable error NVML tells what the GPU needs (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): a GPU "
        "reset, a node reboot or a drain and reset leave the GPU unusable until done, so DCGM fails them (critical "
        "here); draining peer-to-peer traffic is a warning (high).",
        check_recovery_action,
        manual="Do what the finding names: reset the GPU (nvidia-smi -r) after stopping its processes, drain "
        "peer-to-peer traffic, or reboot the node.",
        references=(sources.GPU_RECOVERY_ACTION, sources.DCGM_HEALTH_WATCH, sources.NVML_QUERIES),
    ),
    Rule(
        "GPU-PCI-002",
        "health",
        "medium",
        "PCIe replays above DCGM's rate",
        "A PCIe replay is a packet resent after a link error; DCGM warns when a GPU's replays in a minute exceed "
        "what a 1e-12 bit error rate gives at the link's generation and width (0.96 per lane per minute at gen 4, "
        "so 16 for x16). Replays slow transfers and point at a marginal link, riser or slot.",
        check_pcie_replays,
        manual="Reseat the GPU or riser, check the slot and the BIOS PCIe settings; see HOST-HLT-002 for AER errors.",
        references=(sources.DCGM_HEALTH_WATCH, sources.NVML_QUERIES),
    ),
    Rule(
        "GPU-FW-001",
        "health",
        "medium",
        "VBIOS versions differ across GPUs of one model",
        "GPUs of one model on one host normally run one VBIOS; a different version on one of them points at a "
        "partial firmware update or a replaced board, and the GPUs may then behave differently under the same job "
        "(Meta's GCM health checks fail the host on it).",
        check_vbios,
        manual="Update every GPU of the host to the same firmware bundle from the server vendor.",
        references=(sources.NVML_QUERIES, sources.GCM_HEALTH_CHECKS),
    ),
)
