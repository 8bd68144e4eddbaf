# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the memory area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    _get,
    _gpus,
    _host,
    _indexes,
    _swapping,
    result,
    skip,
)


def check_gpu_memory_full_and_swapping(facts, pol):
    gpus = _gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    full = [
        g
        for g in gpus
        if _get(g, "memory", "used_pct") is not None and g["memory"]["used_pct"] >= pol["memory"]["gpu_full_pct"]
    ]
    swapping, observed = _swapping(facts.get("host"), pol)
    observed["gpus_full"] = _indexes(full)
    observed["max_gpu_memory_pct"] = (
        max([g["memory"]["used_pct"] for g in gpus if _get(g, "memory", "used_pct") is not None] or [None])
        if gpus
        else None
    )
    expected = "GPU memory below %s%% or no host swapping" % pol["memory"]["gpu_full_pct"]
    if not full:
        return result("pass", observed, expected, "no GPU has its memory nearly full")
    if swapping is None:
        return result(
            "warn", observed, expected, "GPU(s) %s nearly full; host swap activity unknown" % observed["gpus_full"]
        )
    if swapping:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s at >= %s%% memory while the host swaps: spills to host memory hit the disk"
            % (observed["gpus_full"], pol["memory"]["gpu_full_pct"]),
            items=[{"gpu": g["index"], "memory_used_pct": g["memory"]["used_pct"]} for g in full],
        )
    return result("pass", observed, expected, "GPU memory is nearly full but the host does not swap")


def check_swap_activity(facts, pol):
    if not facts.get("host"):
        return skip("host facts not gathered")
    swapping, observed = _swapping(facts["host"], pol)
    expected = "< %s pages/s swapped and PSI some avg10 < %s" % (
        pol["memory"]["swap_rate_pages_per_s"],
        pol["memory"]["psi_some_avg10"],
    )
    if swapping is None:
        return skip("swap rates and memory pressure not available")
    if swapping:
        return result("fail", observed, expected, "the host is swapping")
    return result("pass", observed, expected, "no swap activity")


def check_swappiness(facts, pol):
    value = _host(facts, "vm", "swappiness")
    if value is None:
        return skip("vm.swappiness not readable")
    # Without swap no anonymous page can be swapped out, whatever vm.swappiness says (most cloud GPU VMs have none;
    # kernel Documentation/admin-guide/sysctl/vm.rst: swappiness weighs swapping against page-cache reclaim).
    limit = pol["memory"]["max_swappiness"]
    if _host(facts, "memory", "swap_total_mib") == 0:
        return result(
            "pass",
            {"swappiness": value, "swap_total_mib": 0},
            "<= %d where swap exists" % limit,
            "no swap configured: vm.swappiness (%d) has no effect" % value,
        )
    limit = pol["memory"]["max_swappiness"]
    status = "fail" if value > limit else "pass"
    return result(status, value, "<= %d" % limit, "vm.swappiness is %d" % value)


def check_thp(facts, pol):
    # Kernel Documentation/admin-guide/mm/transhuge.rst: defrag "always" makes an allocation that wants a huge page
    # stall in direct reclaim and compaction; "madvise" (RHEL's default, with enabled=always) does so only for
    # regions that asked. The stalls come from defrag, not from enabled.
    mode, defrag = _host(facts, "thp", "enabled"), _host(facts, "thp", "defrag")
    if mode is None and defrag is None:
        return skip("transparent hugepage settings not readable")
    allowed = {"enabled": pol["memory"]["thp_enabled"], "defrag": pol["memory"]["thp_defrag"]}
    observed = {"enabled": mode, "defrag": defrag}
    bad = [k for k in ("enabled", "defrag") if observed[k] is not None and observed[k] not in allowed[k]]
    if bad:
        return result(
            "fail", observed, allowed, "transparent hugepages: %s" % ", ".join("%s=%s" % (k, observed[k]) for k in bad)
        )
    return result("pass", observed, allowed, "transparent hugepages: enabled=%s, defrag=%s" % (mode, defrag))


def _memlock_ok(value_kb, required_kb):
    if value_kb is None:  # unlimited
        return True
    return required_kb is not None and value_kb >= required_kb


def check_memlock(facts, pol):
    memlock = _host(facts, "memlock")
    if memlock is None:
        return skip("memlock limits not readable")
    required = pol["memory"]["min_memlock_kb"]
    configured = memlock.get("configured") or []
    soft = [c for c in configured if c.get("type") in ("soft", "-")]
    configured_ok = any(_memlock_ok(c.get("value_kb"), required) for c in soft)
    process_ok = "process_soft_kb" in memlock and _memlock_ok(memlock.get("process_soft_kb"), required)
    observed = {
        "process_soft_kb": memlock.get("process_soft_kb"),
        "process_hard_kb": memlock.get("process_hard_kb"),
        "configured": configured,
    }
    expected = "unlimited" if required is None else ">= %d KiB" % required
    if configured_ok or process_ok:
        return result("pass", observed, expected, "memlock limit allows pinned GPU memory")
    return result(
        "fail",
        observed,
        expected,
        "memlock limit too low for pinned (page-locked) host memory used by CUDA, NCCL and RDMA",
    )


def check_overcommit(facts, pol):
    value = _host(facts, "vm", "overcommit_memory")
    if value is None:
        return skip("vm.overcommit_memory not readable")
    allowed = pol["memory"]["overcommit_memory"]
    status = "pass" if value in allowed else "fail"
    return result(status, value, allowed, "vm.overcommit_memory is %d" % value)


_SWAP_FIX = (
    "Leave GPU memory headroom (smaller batch or model shards) and stop host swapping: lower "
    "vm.swappiness (role host_tuning, tag HOST-MEM-002), add RAM or move co-located jobs."
)


RULES = (
    Rule(
        "GPU-MEM-001",
        "memory",
        "critical",
        "GPU memory nearly full while the host swaps",
        "When GPU memory is nearly full, frameworks spill to pinned host memory; if the host is swapping at the "
        "same time those spills go to disk and training or inference slows by orders of magnitude.",
        check_gpu_memory_full_and_swapping,
        manual=_SWAP_FIX,
        references=(sources.CUDA_BEST_PRACTICES_PINNED, sources.KERNEL_PSI, sources.PROC_VMSTAT),
    ),
    Rule(
        "HOST-MEM-001",
        "memory",
        "high",
        "Host is swapping",
        "A GPU server that swaps stalls data loaders and CUDA host allocations; the GPUs wait for the disk.",
        check_swap_activity,
        manual=_SWAP_FIX,
        references=(sources.PROC_VMSTAT, sources.KERNEL_PSI),
    ),
    Rule(
        "HOST-MEM-002",
        "memory",
        "medium",
        "vm.swappiness too high",
        "A high swappiness lets the kernel swap out data-loader memory to keep page cache, which causes stalls "
        "under memory pressure.",
        check_swappiness,
        role="host_tuning",
        references=(sources.KERNEL_VM_SYSCTL,),
    ),
    Rule(
        "HOST-MEM-003",
        "memory",
        "medium",
        "Transparent hugepage defrag set to always",
        "THP defrag 'always' makes every allocation that wants a huge page stall in direct reclaim and compaction "
        "(kernel admin-guide/mm/transhuge), adding latency spikes to pinned-memory and data-loader allocations; "
        "'madvise' (RHEL's default, with enabled=always) keeps the benefit where asked for.",
        check_thp,
        role="host_tuning",
        references=(sources.KERNEL_THP,),
    ),
    Rule(
        "HOST-MEM-004",
        "memory",
        "high",
        "memlock limit too low for pinned memory",
        "CUDA, NCCL and RDMA pin (page-lock) host memory; a low memlock limit makes them fall back to pageable "
        "copies or fail to register buffers.",
        check_memlock,
        role="host_tuning",
        references=(sources.MLOCK, sources.LIMITS_CONF, sources.SYSTEMD_EXEC),
    ),
    Rule(
        "HOST-MEM-005",
        "memory",
        "medium",
        "Strict memory overcommit",
        "vm.overcommit_memory=2 refuses the large virtual reservations CUDA makes at start-up, so jobs fail with "
        "out-of-memory errors while RAM is free.",
        check_overcommit,
        role="host_tuning",
        references=(sources.KERNEL_VM_SYSCTL,),
    ),
)
