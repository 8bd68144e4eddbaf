# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The balance probe: is a running GPU job starved by its CPUs, on the wrong NUMA node, or swapping?

For ``sample_seconds`` (default 5) it samples:

* each GPU's utilization and memory (bandwidth) utilization through NVML, read ``reads`` times over the window and
  averaged (``nvmlDeviceGetUtilizationRates`` reports the share of its last sample period, 1/6 s to 1 s, in which a
  kernel ran or memory was read or written: one read is a glimpse, several make a window);
* the processes NVML lists on each GPU (``nvmlDeviceGetComputeRunningProcesses``) and, from ``/proc/<pid>/stat`` and
  ``/proc/<pid>/task/*/stat`` (proc_pid_stat(5): utime, stime, num_threads, processor), their CPU time over the
  window, their threads and the CPU each thread last ran on; ``/proc/<pid>/status`` ``Cpus_allowed_list`` (the
  affinity ``taskset``/``numactl``/the scheduler's cgroup gave them);
* the busy share of every CPU (``/proc/stat``), so that the GPU's local CPUs and each process's allowed CPUs have a
  figure of their own;
* host swap rates (``/proc/vmstat`` pswpin/pswpout) and memory pressure (``/proc/pressure/memory``).

The GPU's NUMA node and local CPUs come from sysfs (``/sys/bus/pci/devices/<bus>/numa_node`` and ``local_cpulist``,
kernel Documentation/ABI/testing/sysfs-bus-pci), else from NVML (``nvmlDeviceGetNumaNodeId``,
``nvmlDeviceGetCpuAffinity``); the NUMA nodes' CPUs from ``/sys/devices/system/node/node*/cpulist``.

Two file roots: ``sys_fs`` (a HostFS; the module's ``root``) for ``/sys``, the layout of the hardware, which a test
may replace with a fixture tree; ``proc_fs`` for ``/proc`` (the module's ``proc_root``), which on a real host must be
the live ``/``: the PIDs NVML lists are PIDs of the running kernel, and their CPU time, the CPUs' busy time and the
swap counters only mean something read from that same kernel, at the same moments as the GPUs.

A ``/proc`` that no kernel writes (a simulated host's fixture tree, as the demo fleet's) does not move over the
window: no CPU of ``/proc/stat`` counts a tick, which a running kernel always does (idle time is counted too). The
sample then says ``proc_static`` and gives the figures the counters hold since boot instead of none: each CPU's busy
share since boot, each process's CPU time since it started (``starttime``, ``/proc/uptime``); swap rates are unknown.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders, host, nvml
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.nvml_session import NvmlInitError, nvml_session

SAMPLE_SECONDS = 5.0
READS = 5
MAX_SAMPLE_SECONDS = 60.0
MIB = 1024 * 1024


# ---------------------------------------------------------------- parsers (pure)


def parse_proc_stat_cpus(text):
    """/proc/stat -> {cpu id: (busy jiffies, total jiffies)} for each "cpuN" line (proc_stat(5)).

    Idle is idle + iowait; guest and guest_nice are already inside user and nice, so they are not added twice."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if not parts or not parts[0].startswith("cpu") or parts[0] == "cpu":
            continue
        try:
            cpu = int(parts[0][3:])
            values = [int(v) for v in parts[1:9]]
        except ValueError:
            continue
        values += [0] * (8 - len(values))
        user, nice, system, idle, iowait, irq, softirq, steal = values
        busy = user + nice + system + irq + softirq + steal
        out[cpu] = (busy, busy + idle + iowait)
    return out


def parse_pid_stat(text):
    """/proc/<pid>/stat (or a task's) -> {name, state, ticks (utime + stime), threads, processor}; None when
    unreadable. The name (field 2) is in parentheses and may itself hold spaces and parentheses: the fields after
    it are split from the last ')' (proc_pid_stat(5))."""
    if not text:
        return None
    left, sep, rest = text.rpartition(")")
    if not sep:
        return None
    name = left.partition("(")[2]
    fields = rest.split()
    # fields[0] is field 3 (state): field N is fields[N - 3].
    try:
        return {
            "name": name,
            "state": fields[0],
            "ticks": int(fields[11]) + int(fields[12]),  # utime (14) + stime (15)
            "threads": int(fields[17]),  # num_threads (20)
            "processor": int(fields[36]),  # processor (39): the CPU it last ran on
            "start": int(fields[19]),  # starttime (22): clock ticks after boot
        }
    except (IndexError, ValueError):
        return None


def parse_status_field(text, field):
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == field:
            return value.strip()
    return None


def busy_pct(before, after, cpus):
    """Busy percent of ``cpus`` together between two parse_proc_stat_cpus() readings; None when unknown."""
    busy = total = 0
    for cpu in cpus:
        if cpu not in before or cpu not in after:
            continue
        busy += after[cpu][0] - before[cpu][0]
        total += after[cpu][1] - before[cpu][1]
    if total <= 0:
        return None
    return round(100.0 * max(0, busy) / total, 1)


def _cpulist(cpus):
    return decoders.cpus_to_cpulist(cpus) if cpus else ""


def _parse_cpus(text):
    try:
        return decoders.parse_cpulist(text)
    except ValueError:
        return None


# ---------------------------------------------------------------- /proc readers


def read_process(proc_fs, pid):
    """One snapshot of a process: its own stat, each thread's, its allowed CPUs. None when it is not in /proc."""
    stat = parse_pid_stat(proc_fs.read("/proc/%d/stat" % pid))
    if stat is None:
        return None
    tasks = {}
    for path in proc_fs.glob("/proc/%d/task/*/stat" % pid):
        task = parse_pid_stat(proc_fs.read(path))
        if task is not None:
            tasks[path.split("/")[-2]] = task
    allowed = parse_status_field(proc_fs.read("/proc/%d/status" % pid), "Cpus_allowed_list")
    return {"stat": stat, "tasks": tasks, "allowed": allowed}


def process_facts(pid, before, after, seconds, hz, cpu_before, cpu_after, online):
    """What the rules need of one process, from two read_process() snapshots ``seconds`` apart."""
    if before is None or after is None:
        return {
            "pid": pid,
            "visible": False,
            "error": "not in /proc%s (exited, or in another PID namespace)" % ("" if before else " at the start"),
        }
    stat = after["stat"]
    scale = 100.0 / (hz * seconds) if seconds > 0 else 0.0
    allowed = _parse_cpus(after["allowed"]) if after["allowed"] else None
    if allowed is None:
        allowed = sorted(online)
    last_cpu = {}
    busiest = 0.0
    for tid, task in after["tasks"].items():
        prior = before["tasks"].get(tid)
        pct = round(max(0, task["ticks"] - (prior["ticks"] if prior else 0)) * scale, 1) if prior else 0.0
        busiest = max(busiest, pct)
        entry = last_cpu.setdefault(str(task["processor"]), {"threads": 0, "cpu_pct": 0.0})
        entry["threads"] += 1
        entry["cpu_pct"] = round(entry["cpu_pct"] + pct, 1)
    if not last_cpu:
        last_cpu[str(stat["processor"])] = {"threads": stat["threads"], "cpu_pct": 0.0}
    cpu_pct = round(max(0, stat["ticks"] - before["stat"]["ticks"]) * scale, 1)
    allowed_busy = busy_pct(cpu_before, cpu_after, allowed)
    own_share = round(cpu_pct / len(allowed), 1) if allowed else None
    return {
        "pid": pid,
        "visible": True,
        "name": stat["name"],
        "state": stat["state"],
        "threads": stat["threads"],
        "cpu_pct": cpu_pct,
        "busiest_thread_pct": busiest,
        "allowed_cpus": _cpulist(allowed),
        "allowed_count": len(allowed),
        "pinned": len(allowed) < len(online),
        "allowed_busy_pct": allowed_busy,
        "own_share_pct": own_share,
        # The allowed CPUs are as busy as the busier of: everything on them (/proc/stat), or this process alone.
        "saturation_pct": max([v for v in (allowed_busy, own_share) if v is not None] or [None]),
        "last_cpu": last_cpu,
    }


def static_proc(cpu_before, cpu_after):
    """True when /proc/stat did not move over the window: a /proc no kernel writes (see the module docstring)."""
    return bool(cpu_after) and cpu_before == cpu_after


def since_start(snapshot, uptime, hz):
    """(a read_process() snapshot of the process at its start - no CPU time -, seconds since it started), for a
    static /proc; (None, None) when the start or the uptime is unknown."""
    if snapshot is None or not uptime:
        return None, None
    seconds = uptime - snapshot["stat"]["start"] / float(hz)
    if seconds <= 0:
        return None, None
    zero = dict(snapshot)
    zero["stat"] = dict(snapshot["stat"], ticks=0)
    zero["tasks"] = dict((tid, dict(task, ticks=0)) for tid, task in snapshot["tasks"].items())
    return zero, seconds


def _uptime(proc_fs):
    try:
        return float((proc_fs.read("/proc/uptime") or "").split()[0])
    except (IndexError, ValueError):
        return None


def read_numa_nodes(sys_fs):
    nodes = {}
    for path in sys_fs.glob("/sys/devices/system/node/node*/cpulist"):
        name = path.split("/")[-2][len("node") :]
        if name.isdigit():
            nodes[name] = (sys_fs.read(path) or "").strip()
    return nodes


def _gpu_locality(nv, handle, sys_fs, bus_id, unsupported):
    """(numa_node, local_cpus): sysfs first, NVML second."""
    node = cpus = None
    if bus_id:
        text = sys_fs.read("/sys/bus/pci/devices/%s/numa_node" % bus_id)
        if text is not None and text.strip().lstrip("-").isdigit():
            node = int(text.strip())
            node = node if node >= 0 else None
        text = sys_fs.read("/sys/bus/pci/devices/%s/local_cpulist" % bus_id)
        if text is not None and _parse_cpus(text) is not None:
            cpus = text.strip()
    if node is None:
        try:
            node = int(nv.nvmlDeviceGetNumaNodeId(handle))
        except (nv.NVMLError, AttributeError) as exc:
            unsupported["numa_node"] = nvml.error_name(exc) if isinstance(exc, nv.NVMLError) else "FunctionNotFound"
    if cpus is None:
        try:
            cpus = _cpulist(decoders.mask_words_to_cpus(nv.nvmlDeviceGetCpuAffinity(handle, nvml.CPU_SET_WORDS)))
        except nv.NVMLError as exc:
            unsupported["local_cpus"] = nvml.error_name(exc)
    return node, cpus


def _gpu_processes(nv, handle, unsupported):
    try:
        procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
    except nv.NVMLError as exc:
        unsupported["processes"] = nvml.error_name(exc)
        return []
    out = []
    for p in procs or []:
        used = getattr(p, "usedGpuMemory", None)
        out.append({"pid": int(p.pid), "used_memory_mib": None if used is None else int(used) // MIB})
    return out


def _utilization(nv, gpu):
    if gpu["lost"]:
        return
    try:
        rates = nv.nvmlDeviceGetUtilizationRates(gpu["handle"])
    except nv.NVMLError as exc:
        name = nvml.error_name(exc)
        gpu["unsupported"]["utilization"] = name
        gpu["lost"] = name == "GpuIsLost"
        return
    gpu["gpu_reads"].append(int(rates.gpu))
    gpu["memory_reads"].append(int(rates.memory))


def _mean(values):
    return round(sum(values) / float(len(values)), 1) if values else None


def collect(
    nv,
    sys_fs=None,
    proc_fs=None,
    sample_seconds=SAMPLE_SECONDS,
    reads=READS,
    sleep=time.sleep,
    clock=time.monotonic,
    hz=None,
):
    """The probe's sample (see the module docstring); ``available`` false (and ``error``) when NVML cannot start."""
    sys_fs = sys_fs or HostFS("/")
    proc_fs = proc_fs or HostFS("/")
    hz = hz or os.sysconf("SC_CLK_TCK")
    try:
        with nvml_session(nv):
            return _collect(nv, sys_fs, proc_fs, sample_seconds, max(1, int(reads)), sleep, clock, hz)
    except NvmlInitError as exc:
        return {
            "available": False,
            "error": "NVML could not be initialised: %s (%s)" % (nvml.error_name(exc.error), exc.error),
            "gpus": [],
            "processes": [],
        }


def _collect(nv, sys_fs, proc_fs, sample_seconds, reads, sleep, clock, hz):
    try:
        count = int(nv.nvmlDeviceGetCount())
    except nv.NVMLError as exc:
        return {
            "available": False,
            "error": "NVML could not count GPUs: %s" % nvml.error_name(exc),
            "gpus": [],
            "processes": [],
        }
    gpus = []
    for index in range(count):
        gpu = {"index": index, "handle": None, "lost": False, "unsupported": {}, "gpu_reads": [], "memory_reads": []}
        gpus.append(gpu)
        try:
            gpu["handle"] = nv.nvmlDeviceGetHandleByIndex(index)
            bus = nvml.sysfs_bus_id(nvml.as_text(nv.nvmlDeviceGetPciInfo(gpu["handle"]).busId))
        except nv.NVMLError as exc:
            gpu["lost"] = True
            gpu["error"] = nvml.error_name(exc)
            continue
        gpu["bus_id"] = bus
        gpu["numa_node"], gpu["local_cpus"] = _gpu_locality(nv, gpu["handle"], sys_fs, bus, gpu["unsupported"])
        gpu["processes"] = _gpu_processes(nv, gpu["handle"], gpu["unsupported"])

    pids = sorted(set(p["pid"] for g in gpus for p in g.get("processes") or []))
    vmstat_before = host.parse_vmstat(proc_fs.read("/proc/vmstat"))
    cpu_before = parse_proc_stat_cpus(proc_fs.read("/proc/stat"))
    procs_before = dict((pid, read_process(proc_fs, pid)) for pid in pids)
    started = clock()
    for n in range(reads):
        # Reads spread over the window, the last at its end.
        sleep(max(0.0, started + sample_seconds * (n + 1) / reads - clock()))
        for gpu in gpus:
            _utilization(nv, gpu)
    elapsed = max(clock() - started, 1e-6)
    cpu_after = parse_proc_stat_cpus(proc_fs.read("/proc/stat"))
    vmstat_after = host.parse_vmstat(proc_fs.read("/proc/vmstat"))
    procs_after = dict((pid, read_process(proc_fs, pid)) for pid in pids)
    online = sorted(cpu_after)
    static = static_proc(cpu_before, cpu_after)
    seconds = dict((pid, elapsed) for pid in pids)
    if static:
        # Figures since boot (the module docstring says why): every counter from zero.
        cpu_before = dict((cpu, (0, 0)) for cpu in cpu_after)
        uptime = _uptime(proc_fs)
        for pid in pids:
            start, since = since_start(procs_after[pid], uptime, hz)
            if start is not None:
                procs_before[pid], seconds[pid] = start, since

    processes = []
    for pid in pids:
        facts = process_facts(pid, procs_before[pid], procs_after[pid], seconds[pid], hz, cpu_before, cpu_after, online)
        held = [g for g in gpus for p in g.get("processes") or [] if p["pid"] == pid]
        facts["gpus"] = [g["index"] for g in held]
        used = [p["used_memory_mib"] for g in held for p in g["processes"] if p["pid"] == pid]
        facts["used_memory_mib"] = sum(u for u in used if u is not None) if used else None
        processes.append(facts)

    out_gpus = []
    for gpu in gpus:
        local = _parse_cpus(gpu.get("local_cpus")) if gpu.get("local_cpus") else None
        out_gpus.append(
            {
                "index": gpu["index"],
                "bus_id": gpu.get("bus_id"),
                "lost": gpu["lost"],
                "error": gpu.get("error"),
                "numa_node": gpu.get("numa_node"),
                "local_cpus": gpu.get("local_cpus"),
                "local_cpus_busy_pct": busy_pct(cpu_before, cpu_after, local) if local else None,
                "utilization": {
                    "gpu_pct": _mean(gpu["gpu_reads"]),
                    "memory_pct": _mean(gpu["memory_reads"]),
                    "reads": len(gpu["gpu_reads"]),
                },
                "processes": [p["pid"] for p in gpu.get("processes") or []],
                "unsupported": gpu["unsupported"],
            }
        )

    swap_in, swap_out = host.swap_rates(vmstat_before, vmstat_after, None if static else elapsed)
    meminfo = host.parse_meminfo(proc_fs.read("/proc/meminfo"))
    total, free = meminfo.get("SwapTotal"), meminfo.get("SwapFree")
    psi = host.parse_psi(proc_fs.read("/proc/pressure/memory"))
    return {
        "available": True,
        "error": None,
        "sample_seconds": round(elapsed, 2),
        "reads": reads,
        "proc_static": static,
        "cpus_online": len(online),
        "numa_nodes": read_numa_nodes(sys_fs),
        "gpus": out_gpus,
        "processes": processes,
        "memory": {
            "swap_in_per_s": swap_in,
            "swap_out_per_s": swap_out,
            "swap_total_mib": host.kib_to_mib(total),
            "swap_used_mib": None if total is None or free is None else (total - free) // 1024,
            "psi_some_avg10": (psi.get("some") or {}).get("avg10"),
        },
    }
