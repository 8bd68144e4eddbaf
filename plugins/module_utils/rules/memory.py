# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the memory area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    RoleVar,
    get_in,
    gpu_indexes,
    host_fact,
    network_fact,
    readable_gpus,
    result,
    skip,
    swap_verdict,
)


def check_gpu_memory_full_and_swapping(facts, pol):
    gpus = readable_gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    full = [
        g
        for g in gpus
        if get_in(g, "memory", "used_pct") is not None and g["memory"]["used_pct"] >= pol["memory"]["gpu_full_pct"]
    ]
    swapping, observed = swap_verdict(facts.get("host"), pol)
    observed["gpus_full"] = gpu_indexes(full)
    observed["max_gpu_memory_pct"] = (
        max([g["memory"]["used_pct"] for g in gpus if get_in(g, "memory", "used_pct") is not None] or [None])
        if gpus
        else None
    )
    # GPU memory at the brim is normal on its own: PyTorch's caching allocator keeps freed blocks reserved,
    # TensorFlow maps nearly all GPU memory and JAX preallocates 75% of it by default. Only the combination with a
    # host that swaps or stalls on memory is a finding.
    expected = "no GPU at >= %s%% memory while the host swaps or stalls on memory" % pol["memory"]["gpu_full_pct"]
    if not full:
        return result("pass", observed, expected, "no GPU has its memory nearly full")
    if swapping is None:
        return skip(
            "GPU(s) %s nearly full, which alone is normal (frameworks reserve GPU memory up front); host swapping "
            "and memory pressure unknown" % observed["gpus_full"]
        )
    if swapping:
        return result(
            "fail",
            observed,
            expected,
            "GPU(s) %s at >= %s%% memory while the host swaps: the jobs' host side (data loaders, pageable "
            "staging copies, offloaded tensors) waits on the disk, and the GPUs have no memory left to absorb it"
            % (observed["gpus_full"], pol["memory"]["gpu_full_pct"]),
            items=[{"gpu": g["index"], "memory_used_pct": g["memory"]["used_pct"]} for g in full],
        )
    return result(
        "pass", observed, expected, "GPU memory nearly full (normal: frameworks reserve it) and the host does not swap"
    )


def check_swap_activity(facts, pol):
    if not facts.get("host"):
        return skip("host facts not gathered")
    swapping, observed = swap_verdict(facts["host"], pol)
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
    value = host_fact(facts, "vm", "swappiness")
    if value is None:
        return skip("vm.swappiness not readable")
    # Without swap no anonymous page can be swapped out, whatever vm.swappiness says (most cloud GPU VMs have none;
    # kernel Documentation/admin-guide/sysctl/vm.rst: swappiness weighs swapping against page-cache reclaim).
    limit = pol["memory"]["max_swappiness"]
    if host_fact(facts, "memory", "swap_total_mib") == 0:
        return result(
            "pass",
            {"swappiness": value, "swap_total_mib": 0},
            "<= %d where swap exists" % limit,
            "no swap configured: vm.swappiness (%d) has no effect" % value,
        )
    limit = pol["memory"]["max_swappiness"]
    status = "fail" if value > limit else "pass"
    return result(status, value, "<= %d" % limit, "vm.swappiness is %d" % value)


def target_swappiness(facts, pol, given):
    """HOST-MEM-002's fix: vm.swappiness at most the policy's maximum (host_tuning keeps an owner's lower value)."""
    return {"swappiness": given.get("swappiness", pol["memory"]["max_swappiness"])}


def accepts(allowed, value):
    """Whether a setting's running ``value`` is one of the policy's acceptable values (``allowed``, a list): what the
    check passes and what the fix keeps."""
    return value is not None and value in allowed


def kept_or_first(running, allowed):
    """What the fix sets for a setting the policy gives a list of acceptable values for: the running value when the
    policy accepts it (an owner's choice is kept), else the policy's first (None when the list is empty)."""
    if accepts(allowed, running):
        return running
    return allowed[0] if allowed else None


def check_thp(facts, pol):
    # Kernel Documentation/admin-guide/mm/transhuge.rst: defrag "always" makes an allocation that wants a huge page
    # stall in direct reclaim and compaction; "madvise" (RHEL's default, with enabled=always) does so only for
    # regions that asked. The stalls come from defrag, not from enabled.
    mode, defrag = host_fact(facts, "thp", "enabled"), host_fact(facts, "thp", "defrag")
    if mode is None and defrag is None:
        return skip("transparent hugepage settings not readable")
    allowed = {"enabled": pol["memory"]["thp_enabled"], "defrag": pol["memory"]["thp_defrag"]}
    observed = {"enabled": mode, "defrag": defrag}
    bad = [k for k in ("enabled", "defrag") if observed[k] is not None and not accepts(allowed[k], observed[k])]
    if bad:
        return result(
            "fail", observed, allowed, "transparent hugepages: %s" % ", ".join("%s=%s" % (k, observed[k]) for k in bad)
        )
    return result("pass", observed, allowed, "transparent hugepages: enabled=%s, defrag=%s" % (mode, defrag))


def target_thp(facts, pol, given):
    """HOST-MEM-003's fix: transparent hugepages ``thp_enabled`` and ``thp_defrag``, each the running mode when the
    policy accepts it, else the policy's first acceptable mode (None: leave it)."""
    out = {}
    for key in ("enabled", "defrag"):
        name = "thp_" + key
        out[name] = given[name] if name in given else kept_or_first(host_fact(facts, "thp", key), pol["memory"][name])
    return out


# systemd-system.conf(5) DefaultLimitMEMLOCK=: what a unit without LimitMEMLOCK= gets (8M on current systemd; the
# kernel's own default was 64 KiB before Linux 5.16). Either is far below what RDMA registration of GPU buffers needs.
SYSTEMD_DEFAULT_MEMLOCK_KB = 8192


def _memlock_ok(value_kb, required_kb):
    if value_kb is None:  # unlimited
        return True
    return required_kb is not None and value_kb >= required_kb


def _kb_text(value_kb):
    if value_kb is None:
        return "unlimited"
    if value_kb and value_kb % 1024 == 0:
        return "%d MiB" % (value_kb // 1024)
    return "%d KiB" % value_kb


def _applies_to_users(domain):
    """limits.conf(5): group and wildcard lines are not applied to root; only a line naming root (or uid 0) is."""
    return domain not in ("root", "0", ":0", "0:0", "0:")


# Why a job daemon's own limit is not judged, by unit. dockerd: `docker run --ulimit memlock=-1` sets a container's
# limit whatever dockerd has (NVIDIA's NGC containers are run that way for RDMA). containerd and CRI-O: judged only
# where kubelet runs, since a Kubernetes pod has no per-pod ulimit and inherits the runtime's.
def _not_judged(svc, units):
    if svc.get("starts_jobs") is False:
        return "starts no job itself (pods run under the container runtime): not judged"
    if svc.get("process") == "dockerd":
        return "containers get their limit from docker run --ulimit memlock=-1 (as NGC containers are run): not judged"
    if svc.get("process") in ("containerd", "crio") and "kubelet.service" not in units:
        return "no kubelet: containers get their limit from the tool that runs them, not from the runtime: not judged"
    return None


def _judge_services(memlock, required):
    """Items for each job-running unit whose jobs get less than ``required``: a running daemon by its own
    /proc/<pid>/limits (what its children inherit now), an installed one by its unit's LimitMEMLOCK (else
    DefaultLimitMEMLOCK, else systemd's default)."""
    default = memlock.get("systemd_default")
    items, observed = [], {}
    units = {s.get("unit") for s in memlock.get("services") or []}
    for svc in memlock.get("services") or []:
        unit = svc.get("unit")
        limit = svc.get("limit")
        if limit is not None:
            unit_kb, source = limit.get("soft_kb"), "LimitMEMLOCK in %s" % limit.get("source")
        elif default is not None:
            unit_kb, source = default.get("soft_kb"), "DefaultLimitMEMLOCK in %s" % default.get("source")
        else:
            unit_kb, source = SYSTEMD_DEFAULT_MEMLOCK_KB, "no LimitMEMLOCK: systemd's default"
        procs = [p for p in svc.get("processes") or [] if not p.get("error")]
        observed[unit] = {
            "unit_limit": _kb_text(unit_kb),
            "source": source,
            "running": [{"pid": p["pid"], "limit": _kb_text(p.get("soft_kb"))} for p in procs],
        }
        note = _not_judged(svc, units)
        if note:
            observed[unit]["note"] = note
            continue
        unit_ok = _memlock_ok(unit_kb, required)
        short = [p for p in procs if not _memlock_ok(p.get("soft_kb"), required)]
        for p in short:
            problem = "%s (pid %d) runs with memlock %s" % (svc.get("process"), p["pid"], _kb_text(p.get("soft_kb")))
            if unit_ok:
                problem += "; its unit now gives %s: restart %s" % (_kb_text(unit_kb), unit)
            items.append({"unit": unit, "pid": p["pid"], "limit": _kb_text(p.get("soft_kb")), "problem": problem})
        if not unit_ok and not short:
            what = "at its next start" if procs else "when started"
            items.append(
                {
                    "unit": unit,
                    "limit": _kb_text(unit_kb),
                    "problem": "%s gives %s %s" % (source, _kb_text(unit_kb), what),
                }
            )
    return items, observed


def check_memlock(facts, pol):
    # Judge the limit where GPU jobs run. A service's jobs inherit the daemon's RLIMIT_MEMLOCK, set by its unit's
    # LimitMEMLOCK= (systemd.exec(5)); pam_limits (limits.conf) never reaches them. Users' shells and batch jobs
    # started through PAM get limits.conf, whose group and wildcard lines do not apply to root (limits.conf(5)).
    # A process with CAP_IPC_LOCK (root) is not bound by RLIMIT_MEMLOCK at all (mlock(2)), so the audit's own limit
    # counts only when it runs unprivileged.
    memlock = host_fact(facts, "memlock")
    if memlock is None:
        return skip("memlock limits not readable")
    required = pol["memory"]["min_memlock_kb"]
    expected = "unlimited" if required is None else ">= %d KiB" % required
    # RLIMIT_MEMLOCK bounds RDMA memory registration (ibv_reg_mr: NCCL over InfiniBand, RoCE or EFA, GPUDirect
    # RDMA, MPI). CUDA's own pinned host memory (cudaHostAlloc) is pinned by the driver and is not bound by it, so
    # on a host without an RDMA device the limit changes nothing for GPU jobs.
    rdma = network_fact(facts, "infiniband")
    if rdma is not None and not rdma:
        return result(
            "pass",
            {"rdma_devices": []},
            expected + " where RDMA devices exist",
            "no RDMA device (InfiniBand, RoCE, EFA in /sys/class/infiniband): the memlock limit does not "
            "bound GPU jobs here",
        )
    units = {s.get("unit") for s in memlock.get("services") or []}
    services = [s for s in memlock.get("services") or [] if not _not_judged(s, units)]
    if services:
        expected += " for the daemons that start GPU jobs"
        items, observed = _judge_services(memlock, required)
        units = [s["unit"] for s in services]
        if items:
            names = sorted({i["unit"] for i in items})
            return result(
                "fail",
                observed,
                expected,
                "jobs of %s get too little locked memory for RDMA/NCCL buffer registration: %s"
                % (", ".join(names), "; ".join(i["problem"] for i in items)),
                items=items,
            )
        return result("pass", observed, expected, "%s give jobs enough locked memory" % ", ".join(units))

    privileged = memlock.get("process_cap_ipc_lock")
    configured = memlock.get("configured") or []
    user_lines = [
        c for c in configured if c.get("type") in ("soft", "-") and _applies_to_users(str(c.get("domain", "")))
    ]
    good = [c for c in user_lines if _memlock_ok(c.get("value_kb"), required)]
    process_ok = (
        privileged is False and "process_soft_kb" in memlock and _memlock_ok(memlock.get("process_soft_kb"), required)
    )
    observed = {
        "users": [
            {"domain": c.get("domain"), "limit": _kb_text(c.get("value_kb")), "path": c.get("path")} for c in user_lines
        ],
        "audit_process": {
            "limit": _kb_text(memlock.get("process_soft_kb")),
            "cap_ipc_lock": privileged,
            "counted": privileged is False,
        },
    }
    expected += " for users' jobs (limits.conf soft memlock)"
    if good or process_ok:
        source = (
            "%s in %s" % (good[0].get("domain"), good[0].get("path"))
            if good
            else "the audit's unprivileged session (%s)" % _kb_text(memlock.get("process_soft_kb"))
        )
        return result("pass", observed, expected, "users' jobs may lock enough memory: %s" % source)
    if user_lines:
        why = "limits.conf gives users %s" % ", ".join(
            "%s: %s" % (c.get("domain"), _kb_text(c.get("value_kb"))) for c in user_lines
        )
    else:
        why = "no soft memlock line for users in limits.conf (they get the default)"
    if privileged is False:
        why += "; the audit's unprivileged session has %s" % _kb_text(memlock.get("process_soft_kb"))
    return result(
        "fail",
        observed,
        expected,
        "memlock limit too low for RDMA/NCCL buffer registration: %s" % why,
        items=[{"domain": c.get("domain"), "limit": _kb_text(c.get("value_kb"))} for c in user_lines],
    )


# What a memlock limit is written as for "no limit": limits.conf(5) takes "unlimited", "infinity" and -1;
# systemd.exec(5) LimitMEMLOCK= takes "infinity" (else bytes, with a base-1024 suffix: "<KiB>K").
UNLIMITED_WORDS = ("unlimited", "infinity", "-1")


def memlock_limit(value):
    """``(text, kb)`` of a memlock limit given as KiB (an integer or its digits) or one of ``UNLIMITED_WORDS``:
    ``text`` as limits.conf takes it, ``kb`` None for unlimited. ValueError names what is accepted."""
    text = str(value)
    if text.lower() in UNLIMITED_WORDS:
        return text, None
    if isinstance(value, bool) or not text.isdigit():
        raise ValueError(
            "host_tuning_memlock: %r is not a memlock limit (KiB as digits, or one of %s)"
            % (value, ", ".join(UNLIMITED_WORDS))
        )
    return text, int(text)


def job_units(memlock):
    """The job daemons' units HOST-MEM-004 judges (``_not_judged``) that have a unit file to take a drop-in, in the
    order host_info lists them: slurmd, and containerd or CRI-O where kubelet is installed."""
    services = (memlock or {}).get("services") or []
    units = {s.get("unit") for s in services}
    return [s["unit"] for s in services if s.get("fragment") and not _not_judged(s, units)]


def target_memlock(facts, pol, given):
    """HOST-MEM-004's fix: the memlock limit for users' jobs (``memlock``, as limits.conf takes it) and for the job
    daemons' units (``memlock_systemd``, LimitMEMLOCK's form; ``memlock_kb``, None for unlimited), the units that
    get the drop-in (``memlock_services``) and those of them whose running daemon has less than the limit and keeps
    it until restarted (``memlock_restart``, judged as the check judges a running daemon). The limit is the
    policy's ``memory.min_memlock_kb``, unlimited when it is null (its default)."""
    required = pol["memory"]["min_memlock_kb"]
    text, kb = memlock_limit(given.get("memlock", "unlimited" if required is None else required))
    memlock = host_fact(facts, "memlock") or {}
    units = list(given["memlock_services"]) if "memlock_services" in given else job_units(memlock)
    restart = []
    for svc in memlock.get("services") or []:
        if svc.get("unit") not in units or svc["unit"] in restart:
            continue
        procs = [p for p in svc.get("processes") or [] if not p.get("error") and p.get("soft_kb") is not None]
        if any(not _memlock_ok(p["soft_kb"], kb) for p in procs):
            restart.append(svc["unit"])
    return {
        "memlock": text,
        "memlock_kb": kb,
        "memlock_systemd": "infinity" if kb is None else "%dK" % kb,
        "memlock_services": units,
        "memlock_restart": restart,
    }


def check_overcommit(facts, pol):
    value = host_fact(facts, "vm", "overcommit_memory")
    if value is None:
        return skip("vm.overcommit_memory not readable")
    allowed = pol["memory"]["overcommit_memory"]
    status = "pass" if accepts(allowed, value) else "fail"
    return result(status, value, allowed, "vm.overcommit_memory is %d" % value)


def target_overcommit(facts, pol, given):
    """HOST-MEM-005's fix: vm.overcommit_memory, the running value when the policy accepts it, else the policy's
    first acceptable value (None: leave it)."""
    if "overcommit_memory" in given:
        return {"overcommit_memory": given["overcommit_memory"]}
    running = host_fact(facts, "vm", "overcommit_memory")
    return {"overcommit_memory": kept_or_first(running, pol["memory"]["overcommit_memory"])}


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
        "A full GPU alone is normal: PyTorch's caching allocator keeps freed memory reserved, TensorFlow maps nearly "
        "all GPU memory and JAX preallocates 75% of it. It is a finding when the host swaps or stalls on memory at "
        "the same time: pinned (page-locked) buffers cannot be swapped, so the pageable rest of the job (data-loader "
        "workers, staging copies, tensors offloaded to host memory) pages to disk and new pinned allocations "
        "compete for the RAM that is left, while the GPUs have no memory to spare to hold more data themselves; "
        "training or inference then runs at the speed of the swap device.",
        check_gpu_memory_full_and_swapping,
        manual=_SWAP_FIX,
        policy_keys=("memory.gpu_full_pct", "memory.psi_some_avg10", "memory.swap_rate_pages_per_s"),
        references=(
            sources.CUDA_BEST_PRACTICES_PINNED,
            sources.PYTORCH_CUDA_MEMORY,
            sources.TENSORFLOW_GPU_MEMORY,
            sources.JAX_GPU_MEMORY,
            sources.KERNEL_PSI,
            sources.PROC_VMSTAT,
        ),
    ),
    Rule(
        "HOST-MEM-001",
        "memory",
        "high",
        "Host is swapping",
        "A GPU server that swaps stalls data loaders and CUDA host allocations; the GPUs wait for the disk.",
        check_swap_activity,
        manual=_SWAP_FIX,
        policy_keys=("memory.psi_some_avg10", "memory.swap_rate_pages_per_s"),
        references=(sources.PROC_VMSTAT, sources.KERNEL_PSI),
    ),
    Rule(
        "HOST-MEM-002",
        "memory",
        "low",
        "vm.swappiness too high",
        "Where swap exists, a high swappiness (the distributions' 60) lets the kernel swap out data-loader memory "
        "to keep page cache, which causes stalls under memory pressure. It is preventive: actual swapping is "
        "HOST-MEM-001 (high), and a host without swap passes.",
        check_swappiness,
        role="host_tuning",
        target=target_swappiness,
        role_vars=(RoleVar("host_tuning_swappiness", "swappiness", "memory.max_swappiness"),),
        policy_keys=("memory.max_swappiness",),
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
        target=target_thp,
        role_vars=(
            RoleVar("host_tuning_thp_enabled", "thp_enabled", "memory.thp_enabled"),
            RoleVar("host_tuning_thp_defrag", "thp_defrag", "memory.thp_defrag"),
        ),
        policy_keys=("memory.thp_defrag", "memory.thp_enabled"),
        references=(sources.KERNEL_THP,),
    ),
    Rule(
        "HOST-MEM-004",
        "memory",
        "high",
        "memlock limit too low where GPU jobs run",
        "RDMA memory registration (NCCL over InfiniBand/RoCE, GPUDirect RDMA, MPI) and mlock'ed staging buffers "
        "count against RLIMIT_MEMLOCK; with a low limit registration fails or jobs fall back to slower paths. The "
        "limit that counts is the one jobs inherit: a Slurm, Kubernetes or container daemon's LimitMEMLOCK (PAM "
        "limits never reach systemd services), or limits.conf for users' own jobs (its group and wildcard lines do "
        "not apply to root). A root process with CAP_IPC_LOCK is not bound by the limit at all.",
        check_memlock,
        role="host_tuning",
        target=target_memlock,
        role_vars=(
            RoleVar("host_tuning_memlock", "memlock", "memory.min_memlock_kb"),
            RoleVar(
                "host_tuning_memlock_services",
                "memlock_services",
                "the job daemons HOST-MEM-004 judges (host facts memlock.services)",
            ),
        ),
        policy_keys=("memory.min_memlock_kb",),
        references=(sources.MLOCK, sources.LIMITS_CONF, sources.SYSTEMD_EXEC, sources.SLURM_FAQ_MEMLOCK),
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
        target=target_overcommit,
        role_vars=(RoleVar("host_tuning_overcommit_memory", "overcommit_memory", "memory.overcommit_memory"),),
        policy_keys=("memory.overcommit_memory",),
        references=(sources.KERNEL_VM_SYSCTL,),
    ),
)
