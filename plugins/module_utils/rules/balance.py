# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the balance probe (HOST-BAL-*): a running GPU job against its CPUs, its NUMA node and host memory.

They read ``facts["probe"]``, the sample M(gpufleet.tuning.gpu_probe) takes over a few seconds (module_utils/probe.py
documents its shape). An audit does not take that sample: there they skip, saying how to get one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import Rule, result, skip, swap_verdict

NO_SAMPLE = "no probe sample: run gpufleet probe"


def _sample(facts):
    """(probe facts, None) or (None, a skip result)."""
    probe = facts.get("probe")
    if not probe:
        return None, skip(NO_SAMPLE)
    if not probe.get("available"):
        return None, skip("the probe could not read the GPUs: %s" % (probe.get("error") or "NVML unavailable"))
    return probe, None


def _gpu_processes(probe):
    """Processes NVML listed on a GPU that were still in /proc at the end of the sample."""
    return [p for p in probe.get("processes") or [] if p.get("visible") and p.get("gpus")]


def _sampled_processes(facts):
    """(probe facts, its GPU processes, None), or (probe or None, None, the skip result) when there is nothing to
    judge: no sample, NVML unreadable, or no process held a GPU."""
    probe, skipped = _sample(facts)
    if skipped:
        return None, None, skipped
    procs = _gpu_processes(probe)
    if not procs:
        return probe, None, skip("no process held a GPU during the sample")
    return probe, procs, None


def _verdict(items, observed, expected, line, passing, prefix=""):
    """Fail with ``prefix`` and one ``line(item)`` per item joined by "; ", else pass with ``passing``."""
    if items:
        return result("fail", observed, expected, prefix + "; ".join(line(i) for i in items), items=items)
    return result("pass", observed, expected, passing)


def _gpus_by_index(probe):
    return dict((g["index"], g) for g in probe.get("gpus") or [] if not g.get("lost"))


def check_input_bound(facts, pol):
    probe, procs, skipped = _sampled_processes(facts)
    if skipped:
        return skipped
    idle, saturated = pol["probe"]["gpu_idle_pct"], pol["probe"]["cpu_saturated_pct"]
    gpus = _gpus_by_index(probe)
    expected = "no GPU under %s%% busy while its process's allowed CPUs are >= %s%% busy" % (idle, saturated)
    observed, items = {}, []
    for p in procs:
        utils = [
            gpus[i]["utilization"]["gpu_pct"]
            for i in p["gpus"]
            if i in gpus and gpus[i]["utilization"].get("gpu_pct") is not None
        ]
        if not utils or p.get("saturation_pct") is None:
            continue
        gpu_pct = round(sum(utils) / len(utils), 1)
        seen = {
            "gpus": p["gpus"],
            "gpu_pct": gpu_pct,
            "cpu_saturation_pct": p["saturation_pct"],
            "allowed_cpus": p["allowed_cpus"],
            "cpu_pct": p["cpu_pct"],
            "threads": p["threads"],
        }
        observed[str(p["pid"])] = seen
        if gpu_pct < idle and p["saturation_pct"] >= saturated:
            items.append(dict(pid=p["pid"], name=p.get("name"), **seen))
    if not observed:
        return skip("GPU utilization or CPU time of the GPU processes not readable")
    return _verdict(
        items,
        observed,
        expected,
        lambda i: "PID %s (%s) on GPU(s) %s: GPU %s%% busy, its CPUs (%s) %s%% busy"
        % (i["pid"], i["name"], i["gpus"], i["gpu_pct"], i["allowed_cpus"], i["cpu_saturation_pct"]),
        "no GPU process is starved by saturated CPUs",
        prefix="input-bound: ",
    )


def check_far_numa(facts, pol):
    probe, procs, skipped = _sampled_processes(facts)
    if skipped:
        return skipped
    node_cpus = {}
    for node, text in (probe.get("numa_nodes") or {}).items():
        cpus = set(decoders.parse_cpulist(text or ""))
        if cpus:
            node_cpus[int(node)] = cpus
    limit = pol["probe"]["far_numa_pct"]
    expected = "under %s%% of a GPU process's CPU time on a NUMA node other than its GPU's" % limit
    if not node_cpus:
        return skip("the host's NUMA nodes are not readable (/sys/devices/system/node)")
    if len(node_cpus) < 2:
        return result("pass", {"numa_nodes": len(node_cpus)}, expected, "one NUMA node: no far node to run on")
    gpus = _gpus_by_index(probe)
    observed, items = {}, []
    for p in procs:
        allowed = set(decoders.parse_cpulist(p.get("allowed_cpus") or ""))
        for index in p["gpus"]:
            node = (gpus.get(index) or {}).get("numa_node")
            if node not in node_cpus:
                continue
            near = node_cpus[node]
            # Weighted by CPU time in the sample; a process that used none is judged by where its threads sit.
            weight = "cpu_pct" if sum(v["cpu_pct"] for v in p["last_cpu"].values()) > 0 else "threads"
            total = sum(v[weight] for v in p["last_cpu"].values())
            far = sum(v[weight] for cpu, v in p["last_cpu"].items() if int(cpu) not in near)
            far_pct = round(100.0 * far / total, 1) if total else 0.0
            seen = {
                "gpu": index,
                "gpu_numa_node": node,
                "far_pct": far_pct,
                "allowed_cpus": p["allowed_cpus"],
                "ran_on": decoders.cpus_to_cpulist(int(c) for c in p["last_cpu"]),
            }
            observed["%s/%s" % (p["pid"], index)] = seen
            no_near_cpu = bool(allowed) and not allowed & near
            if far_pct >= limit or no_near_cpu:
                items.append(dict(pid=p["pid"], name=p.get("name"), allowed_has_no_local_cpu=no_near_cpu, **seen))
    if not observed:
        return skip("the GPUs' NUMA nodes are not known")
    return _verdict(
        items,
        observed,
        expected,
        lambda i: "PID %s (%s) runs %s%% on CPUs %s, off GPU %s's NUMA node %s"
        % (i["pid"], i["name"], i["far_pct"], i["ran_on"], i["gpu"], i["gpu_numa_node"]),
        "GPU processes run on their GPU's NUMA node",
    )


def check_pinned_too_narrow(facts, pol):
    probe, procs, skipped = _sampled_processes(facts)
    if skipped:
        return skipped
    minimum = pol["cpu"]["min_cpus_per_gpu"]
    expected = "a pinned GPU process allowed >= %d CPUs per GPU it holds" % minimum
    observed, items = {}, []
    for p in procs:
        per_gpu = round(float(p["allowed_count"]) / len(p["gpus"]), 1)
        seen = {"gpus": p["gpus"], "allowed_cpus": p["allowed_cpus"], "cpus_per_gpu": per_gpu, "pinned": p["pinned"]}
        observed[str(p["pid"])] = seen
        # Not pinned: the process may use every CPU, and a host with too few of them is HOST-CPU-002's finding.
        if p["pinned"] and per_gpu < minimum:
            items.append(dict(pid=p["pid"], name=p.get("name"), **seen))
    return _verdict(
        items,
        observed,
        expected,
        lambda i: "PID %s (%s) pinned to CPUs %s: %s per GPU"
        % (i["pid"], i["name"], i["allowed_cpus"], i["cpus_per_gpu"]),
        "no GPU process is pinned to fewer CPUs than policy asks",
    )


def check_swapping_under_gpu_jobs(facts, pol):
    probe, skipped = _sample(facts)
    if skipped:
        return skipped
    swapping, observed = swap_verdict({"memory": probe.get("memory") or {}}, pol)
    procs = _gpu_processes(probe)
    observed["gpu_processes"] = [p["pid"] for p in procs]
    expected = "no swapping (< %s pages/s, PSI some avg10 < %s) while GPU processes run" % (
        pol["memory"]["swap_rate_pages_per_s"],
        pol["memory"]["psi_some_avg10"],
    )
    if swapping is None:
        return skip("swap rates and memory pressure not sampled")
    if not procs:
        return result(
            "pass", observed, expected, "no GPU process ran during the sample (HOST-MEM-001 judges swapping on its own)"
        )
    if swapping:
        return result(
            "fail",
            observed,
            expected,
            "the host swapped during the sample while GPU process(es) %s ran: their data loaders and pageable "
            "staging buffers wait on the swap device" % observed["gpu_processes"],
            items=[{"pid": p["pid"], "name": p.get("name"), "gpus": p["gpus"]} for p in procs],
        )
    return result("pass", observed, expected, "no swapping while GPU processes ran")


_PROBE_NOTE = " Judged on a probe sample (gpufleet probe); an audit alone skips it."

RULES = (
    Rule(
        "HOST-BAL-001",
        "cpu",
        "high",
        "GPU idles while its process's CPUs are saturated (input-bound)",
        "A GPU that is mostly idle while the CPUs its process may run on are saturated waits for its input: data "
        "loading, decoding and augmentation on the CPU do not keep up (NVIDIA DALI's documentation names this "
        "CPU bottleneck). More loader workers (PyTorch DataLoader num_workers), more cores for the job, or moving "
        "preprocessing to the GPU give the GPU its work back. The allowed CPUs are judged as a whole (/proc/stat), not "
        "the GPU process alone: a DataLoader's workers are processes of their own that NVML does not list, and they "
        "inherit the parent's allowed CPUs." + _PROBE_NOTE,
        check_input_bound,
        manual="Give the job more CPUs (scheduler --cpus-per-gpu, a wider taskset/cpuset), raise the data loader's "
        "worker count (PyTorch DataLoader num_workers), or move decoding/augmentation to the GPU (NVIDIA DALI).",
        policy_keys=("probe.cpu_saturated_pct", "probe.gpu_idle_pct"),
        references=(sources.NVIDIA_DALI, sources.PYTORCH_DATALOADER, sources.NVML_QUERIES, sources.PROC_PID_STAT),
    ),
    Rule(
        "HOST-BAL-002",
        "cpu",
        "medium",
        "GPU process runs on the far NUMA node",
        "A process whose threads run on another NUMA node than its GPU sends every copy, launch and pinned host "
        "buffer across the inter-socket link; the GPU's local CPUs (sysfs local_cpulist, NVML CPU affinity) are "
        "where its process belongs." + _PROBE_NOTE,
        check_far_numa,
        manual="Bind the job to its GPU's NUMA node: numactl --cpunodebind=N --membind=N, taskset -c <the GPU's "
        "local CPUs>, or the scheduler's GPU-CPU binding (Slurm gres.conf Cores=, --gpu-bind).",
        policy_keys=("probe.far_numa_pct",),
        references=(sources.KERNEL_SYSFS_PCI, sources.NVML_QUERIES, sources.KERNEL_NUMA_POLICY, sources.PROC_PID_STAT),
    ),
    Rule(
        "HOST-BAL-003",
        "cpu",
        "medium",
        "GPU process pinned to fewer CPUs than policy asks",
        "A GPU job pinned (taskset, numactl, a cgroup cpuset) to fewer CPUs per GPU than cpu.min_cpus_per_gpu "
        "cannot run enough loader and launch threads, whatever the host has; an unpinned process is judged by "
        "HOST-CPU-002 instead." + _PROBE_NOTE,
        check_pinned_too_narrow,
        manual="Widen the job's CPU set (taskset -c / numactl --physcpubind, the scheduler's --cpus-per-gpu or "
        "cpuset) to at least cpu.min_cpus_per_gpu CPUs per GPU, on the GPU's NUMA node.",
        policy_keys=("cpu.min_cpus_per_gpu",),
        references=(sources.SCHED_SETAFFINITY, sources.PROC_PID_STATUS, sources.AZURE_ND_H100_V5),
    ),
    Rule(
        "HOST-BAL-004",
        "memory",
        "high",
        "Host swaps while GPU processes run",
        "The case study caught in the act: while a GPU job runs, the host pages to disk, so its data loaders, "
        "pageable staging copies and offloaded tensors wait on the swap device and the GPU with them (cf. "
        "GPU-MEM-001, HOST-MEM-001, which judge the audit's one-second sample without knowing whether a job "
        "ran)." + _PROBE_NOTE,
        check_swapping_under_gpu_jobs,
        manual="Stop the host swapping under the job: lower vm.swappiness (role host_tuning, tag HOST-MEM-002), "
        "give the job fewer loader workers or smaller prefetch buffers, add RAM, or move co-located jobs.",
        policy_keys=("memory.psi_some_avg10", "memory.swap_rate_pages_per_s"),
        references=(sources.PROC_VMSTAT, sources.KERNEL_PSI, sources.CUDA_BEST_PRACTICES_PINNED),
    ),
)
