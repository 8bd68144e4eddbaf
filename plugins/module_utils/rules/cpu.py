# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the cpu area: each check next to its catalog entry."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (
    Rule,
    RoleVar,
    host_fact,
    network_fact,
    readable_gpus,
    result,
    skip,
)


# What a governor name means depends on the scaling driver (kernel admin-guide/pm/cpufreq, intel_pstate, amd-pstate).
# intel_pstate (active mode) and amd-pstate-epp (amd-pstate's active mode) have their own "powersave" algorithm:
# with HWP the hardware picks the clock, steered by the energy-performance preference; intel_pstate without HWP
# (no energy_performance_preference file) picks P-states in proportion to CPU utilization. Every other driver
# (acpi-cpufreq, intel_cpufreq = intel_pstate's passive mode, amd-pstate passive/guided, cppc_cpufreq on Arm) runs
# the generic governors, whose "powersave" sets the lowest frequency of the policy (scaling_min_freq).
HWP_DRIVERS = ("intel_pstate", "amd-pstate-epp")
# Generic governors that follow the load (cpufreq.rst: ondemand and conservative from the CPU load, schedutil from
# the scheduler's utilization signal): the clock ramps up under work and drops between bursts. Ubuntu sets ondemand
# on bare metal (its ondemand.service); schedutil is the kernel's default on arm64 (Grace boots with it).
LOAD_FOLLOWING = ("ondemand", "conservative", "schedutil")


def _governor_verdict(gov, driver, epp, accepted, userspace):
    """(severity of the finding: "low" or "high", what the governor does) for CPUs on ``gov`` that is not the
    policy's governor."""
    if gov == "powersave" and driver in HWP_DRIVERS:
        if not epp:
            if driver == "intel_pstate":
                return "low", "intel_pstate's powersave without HWP picks P-states in proportion to CPU utilization"
            return "high", "%s's powersave with no energy-performance preference readable" % driver
        if accepted and set(epp) <= set(accepted):
            return "low", (
                "%s's powersave with energy-performance preference %s: the hardware picks the clock, the "
                "distributions' balanced default" % (driver, ", ".join(sorted(epp)))
            )
        return "high", "%s's powersave with energy-performance preference %s (saves power over speed)" % (
            driver,
            ", ".join(sorted(epp)),
        )
    if gov == "powersave":
        return "high", "%s's powersave pins the lowest frequency (scaling_min_freq)" % (driver or "the driver")
    if gov == "performance":  # a policy that asks for another governor (power budget): the clock is not slower
        return "low", "performance holds the highest frequency (more power than the policy's governor)"
    if gov in LOAD_FOLLOWING:
        return "low", "%s raises the clock with the load and lowers it between bursts" % gov
    if gov == "userspace":
        # userspace holds the frequency a program wrote to scaling_setspeed: judged by that value.
        below = (userspace or {}).get("below_max")
        speed = (userspace or {}).get("setspeed_mhz") or {}
        if below is None or speed.get("min") is None:
            return "high", "userspace holds whatever frequency a program set (scaling_setspeed not readable)"
        if below:
            return "high", "userspace holds CPUs %s below their highest frequency (%s-%s MHz set)" % (
                below,
                speed["min"],
                speed["max"],
            )
        return "low", (
            "userspace holds the highest frequency (%s MHz), as performance would, until the program that set it "
            "changes it" % speed["max"]
        )
    return "high", "%s is not a governor whose clock behaviour is known" % gov


def check_governor(facts, pol):
    governors = host_fact(facts, "cpu", "governors")
    if governors is None:
        return skip("CPU facts not gathered")
    if not governors:
        return skip("no cpufreq governor exposed (virtual machine or cpufreq disabled)")
    wanted = pol["cpu"]["governor"]
    expected = "%s on every CPU" % wanted
    others = {g: cpus for g, cpus in governors.items() if g != wanted}
    if not others:
        return result("pass", governors, expected, "every CPU uses %s" % wanted)
    driver = host_fact(facts, "cpu", "scaling_driver")
    epp = host_fact(facts, "cpu", "epp") or {}
    accepted = pol["cpu"]["hwp_epp"]
    userspace = host_fact(facts, "cpu", "userspace")
    observed = {"governors": governors, "scaling_driver": driver}
    if epp:
        observed["epp"] = epp
    if userspace:
        observed["userspace"] = userspace
    items, worst = [], "low"
    for gov, cpus in sorted(others.items()):
        severity, meaning = _governor_verdict(gov, driver, epp, accepted, userspace)
        items.append({"governor": gov, "cpus": cpus, "severity": severity, "meaning": meaning})
        if severity == "high":
            worst = "high"
    text = "; ".join("CPUs %s on %s: %s" % (i["cpus"], i["governor"], i["meaning"]) for i in items)
    if worst == "high":
        return result("fail", observed, expected, "CPUs not on %s: %s" % (wanted, text), items=items)
    return result(
        "warn",
        observed,
        expected,
        "%s; %s still shortens frequency ramps for launch and data-loading threads" % (text, wanted),
        items=items,
        severity="low",
    )


def target_governor(facts, pol, given):
    """HOST-CPU-001's fix: the policy's ``governor`` on every CPU, and the active TuneD profile (``tuned_profile``,
    None without one): TuneD sets the governor itself, so host_tuning leaves it to TuneD unless
    host_tuning_override_tuned."""
    return {
        "governor": given.get("governor", pol["cpu"]["governor"]),
        "tuned_profile": host_fact(facts, "tuned", "profile"),
    }


def check_cores_per_gpu(facts, pol):
    # Counted in logical CPUs, what the clouds sell (a vCPU is a hardware thread): their standard 8-GPU shapes give
    # 12 (Azure ND H100 v5, 96 vCPUs), 24 (AWS p5.48xlarge, 192) and 26 (Google Cloud a3-highgpu-8g, 208) per GPU,
    # and the policy's default (12) is the least of them, so a finding means fewer CPUs than any such shape.
    gpus = readable_gpus(facts)
    threads, cores = host_fact(facts, "cpu", "threads"), host_fact(facts, "cpu", "cores")
    if not gpus:
        return skip("no NVIDIA GPUs could be read")
    if not threads and not cores:
        return skip("CPU count not available")
    minimum, core_minimum = pol["cpu"]["min_cpus_per_gpu"], pol["cpu"]["min_cores_per_gpu"]
    observed = {"cpus": threads, "cores": cores, "gpus": len(gpus)}
    expected = ">= %d logical CPUs per GPU" % minimum
    short = []
    if threads:
        observed["cpus_per_gpu"] = round(float(threads) / len(gpus), 1)
        if observed["cpus_per_gpu"] < minimum:
            short.append("%s logical CPUs per GPU" % observed["cpus_per_gpu"])
    if cores and core_minimum is not None:
        expected += " and >= %d physical cores per GPU" % core_minimum
        observed["cores_per_gpu"] = round(float(cores) / len(gpus), 1)
        if observed["cores_per_gpu"] < core_minimum:
            short.append("%s physical cores per GPU" % observed["cores_per_gpu"])
    if short:
        return result("fail", observed, expected, "too few CPUs for %d GPUs: %s" % (len(gpus), ", ".join(short)))
    per = observed.get("cpus_per_gpu")
    return result(
        "pass",
        observed,
        expected,
        "%s logical CPUs per GPU" % per if per is not None else "%s cores per GPU" % observed.get("cores_per_gpu"),
    )


def _gpu_numa_nodes(gpus, node_cpus):
    """{gpu index: NUMA node} and the GPUs whose node is unknown. NVML's (or sysfs's) node where read; else the
    host's only node with CPUs; else the one node whose CPUs hold the GPU's whole CPU affinity (NVML's
    nvmlDeviceGetCpuAffinity, which every binding has: nvidia-smi topo -m shows the same "NUMA Affinity"). A GPU
    whose affinity spans nodes, or that has none, stays unknown on a multi-node host."""
    placed, unknown = {}, []
    for g in gpus:
        node = g.get("numa_node")
        if node is None and len(node_cpus) == 1:
            node = next(iter(node_cpus))
        elif node is None and g.get("cpu_affinity"):
            try:
                cpus = set(decoders.parse_cpulist(g["cpu_affinity"]))
            except ValueError:
                cpus = set()
            holders = [n for n, held in node_cpus.items() if cpus and cpus <= held]
            node = holders[0] if len(holders) == 1 else None
        if node is None and g.get("numa_node") is None:
            unknown.append(g["index"])
        placed[g["index"]] = node
    return placed, unknown


def _unknown_note(gpus, unknown):
    """'; NUMA node of GPU 2, 3 unknown (binding lacks nvmlDeviceGetNumaNodeId)': the GPUs not judged, and why."""
    if not unknown:
        return ""
    reasons = sorted({str((g.get("unsupported") or {}).get("numa_node") or "not reported")
                      for g in gpus if g["index"] in unknown})
    return "; NUMA node of GPU %s unknown (%s): not judged" % (", ".join(str(i) for i in unknown), "; ".join(reasons))


def check_numa_locality(facts, pol):
    gpus = readable_gpus(facts)
    nodes = host_fact(facts, "numa", "nodes")
    if not gpus:
        return skip("no NVIDIA GPUs could be read")
    if not nodes:
        return skip("NUMA topology not available")
    # NUMA nodes without CPUs are memory only: on coherent platforms (Grace Hopper) the GPU's own memory is such a
    # node and NVML reports it as the GPU's NUMA node (nvmlDeviceGetNumaNodeId: "platforms where the GPUs are NUMA
    # nodes"). They hold no CPUs to be local to, so they neither judge affinity nor count as sockets.
    node_cpus = {}
    for node in nodes:
        try:
            cpus = set(decoders.parse_cpulist(node.get("cpus") or ""))
        except ValueError:
            continue
        if cpus:
            node_cpus[node["id"]] = cpus
    items = []
    placed, unknown = _gpu_numa_nodes(gpus, node_cpus)
    for g in gpus:
        node, affinity = placed.get(g["index"]), g.get("cpu_affinity")
        if node is None or not affinity or node not in node_cpus or g.get("numa_node") is None:
            continue
        cpus = set(decoders.parse_cpulist(affinity))
        if not cpus <= node_cpus[node]:
            items.append(
                {
                    "gpu": g["index"],
                    "numa_node": node,
                    "cpu_affinity": affinity,
                    "problem": "CPU affinity reaches outside the GPU's NUMA node",
                }
            )
    fabric = []
    for nic in network_fact(facts, "nics") or []:
        if (
            nic.get("present", True)
            and (nic.get("speed_mbps") or 0) >= pol["cpu"]["fabric_nic_min_mbps"]
            and nic.get("numa_node") is not None
        ):
            fabric.append(nic)
    nic_nodes = {n["numa_node"] for n in fabric}
    gpu_nodes = {node for node in placed.values() if node is not None}
    if len(node_cpus) > 1 and fabric:
        for node in sorted(gpu_nodes - nic_nodes):
            items.append(
                {
                    "numa_node": node,
                    "gpus": [index for index, at in sorted(placed.items()) if at == node],
                    "problem": "no fabric NIC on this NUMA node (NICs on %s)" % sorted(nic_nodes),
                }
            )
    observed = {"gpu_nodes": sorted(gpu_nodes), "fabric_nic_nodes": sorted(nic_nodes)}
    inferred = sorted(g["index"] for g in gpus if g.get("numa_node") is None and placed.get(g["index"]) is not None)
    if inferred:
        observed["numa_node_from_cpu_affinity"] = inferred
    if unknown:
        observed["numa_node_unknown"] = unknown
    if items:
        affinity = [i for i in items if "gpu" in i]
        return result(
            "fail",
            observed,
            "GPU affinity, GPU and fabric NIC on the same NUMA node",
            "%d NUMA locality problem(s)%s" % (len(items), _unknown_note(gpus, unknown)),
            items=items,
            # Only the NIC layout (no GPU's affinity crosses a socket): a board property, low.
            severity=None if affinity else "low",
        )
    if unknown:
        # Unknown is not healthy: a GPU whose node cannot be read is not judged NUMA-local (issue 25: old bindings
        # without nvmlDeviceGetNumaNodeId on a host whose sysfs says -1 passed here without a judgement).
        return skip("unknown: %s" % _unknown_note(gpus, unknown).lstrip("; "))
    return result(
        "pass",
        observed,
        "GPU affinity, GPU and fabric NIC on the same NUMA node",
        "GPUs, their CPUs and fabric NICs are NUMA-local",
    )


def check_numa_balancing(facts, pol):
    value = host_fact(facts, "numa", "balancing")
    if value is None:
        return skip("kernel.numa_balancing not readable")
    allowed = pol["cpu"]["numa_balancing"]
    status = "fail" if value and not allowed else "pass"
    return result(status, value, allowed, "automatic NUMA balancing is %s" % ("on" if value else "off"))


def target_numa_balancing(facts, pol, given):
    """HOST-CPU-003's fix: kernel.numa_balancing 0 when the policy forbids balancing; where it allows it, the running
    value (1 or 0; None when unreadable: leave it)."""
    if "numa_balancing" in given:
        return {"numa_balancing": given["numa_balancing"]}
    if not pol["cpu"]["numa_balancing"]:
        return {"numa_balancing": 0}
    running = host_fact(facts, "numa", "balancing")
    return {"numa_balancing": None if running is None else int(bool(running))}


def pinned_summary(pinned):
    """ "ens1f0 (IRQs 120-123), 0000:18:00.0 (IRQ 200)": hand-pinned IRQs grouped by device, for messages."""
    by_device = {}
    for item in pinned or []:
        by_device.setdefault(item.get("device"), []).append(int(item["irq"]))
    parts = []
    for device in sorted(by_device, key=str):
        irqs = by_device[device]
        parts.append("%s (IRQ%s %s)" % (device, "s" if len(irqs) > 1 else "", decoders.cpus_to_cpulist(irqs)))
    return ", ".join(parts)


def irqs_kept_from_irqbalance(facts, wanted):
    """The IRQs pinned by hand that keep irqbalance from being started where ``wanted`` (cpu.irqbalance's form) is
    "running" and it does not run: pinning NIC and GPU interrupts by hand is the other way to spread them, and
    irqbalance would move them. [] otherwise. The check passes such a host; the fix does not start irqbalance."""
    if wanted != "running" or (host_fact(facts, "irqbalance") or {}).get("running"):
        return []
    return host_fact(facts, "irq", "pinned") or []


# The irqbalance service state (ansible.builtin.systemd_service) for each cpu.irqbalance value; "any" leaves the
# service alone (None).
IRQBALANCE_SERVICE_STATES = {"running": "started", "stopped": "stopped"}


def target_irqbalance(facts, pol, given):
    """HOST-CPU-004's fix: the irqbalance service state (``irqbalance_state``: started, stopped, or None to leave
    it), whether it runs (``irqbalance_running``), the IRQs pinned by hand (``irq_pinned``) and whether they keep
    it from being started (``irqbalance_blocked``; host_tuning_irqbalance_override_pinned starts it anyway)."""
    state = given.get("irqbalance_state", IRQBALANCE_SERVICE_STATES.get(pol["cpu"]["irqbalance"]))
    wanted = dict((v, k) for k, v in IRQBALANCE_SERVICE_STATES.items()).get(state)
    return {
        "irqbalance_state": state,
        "irqbalance_running": bool((host_fact(facts, "irqbalance") or {}).get("running")),
        "irq_pinned": host_fact(facts, "irq", "pinned") or [],
        "irqbalance_blocked": bool(irqs_kept_from_irqbalance(facts, wanted)),
    }


def check_irqbalance(facts, pol):
    irq = host_fact(facts, "irqbalance")
    if irq is None:
        return skip("irqbalance state not gathered")
    wanted = pol["cpu"]["irqbalance"]
    state = "running" if irq.get("running") else "stopped"
    if wanted == "any" or state == wanted:
        return result("pass", state, wanted, "irqbalance is %s" % state)
    pinned = irqs_kept_from_irqbalance(facts, wanted)
    if pinned:
        # Pinning NIC and GPU interrupts by hand is the other way to spread them (the rationale says so), and
        # irqbalance would move them: a deliberate choice, kept.
        return result(
            "pass",
            {"state": state, "pinned": len(pinned)},
            wanted,
            "irqbalance is stopped; IRQs pinned by hand: %s" % pinned_summary(pinned),
            items=pinned,
        )
    return result("fail", {"state": state, "installed": irq.get("installed")}, wanted, "irqbalance is %s" % state)


RULES = (
    Rule(
        "HOST-CPU-001",
        "cpu",
        "high",
        "CPU governor is not performance",
        "Power-saving governors lower CPU clocks between bursts; kernel launches, data loading and NCCL progress "
        "threads then wait for the CPU and the GPUs idle. What a governor does depends on the scaling driver: "
        "the generic powersave (acpi-cpufreq, intel_cpufreq, amd-pstate passive, cppc_cpufreq) pins the lowest "
        "frequency and fails; governors that follow the load (ondemand - Ubuntu's bare-metal default - "
        "conservative, schedutil - the arm64 default, Grace) are a low warning, as is a hardware-managed P-state "
        "driver's powersave (intel_pstate, amd-pstate-epp) with a balanced energy-performance preference "
        "(cpu.hwp_epp) or intel_pstate's without HWP; userspace is judged by the frequency it holds "
        "(scaling_setspeed): the highest is a low warning, anything lower fails.",
        check_governor,
        role="host_tuning",
        target=target_governor,
        role_vars=(RoleVar("host_tuning_governor", "governor", "cpu.governor"),),
        policy_keys=("cpu.governor", "cpu.hwp_epp"),
        references=(sources.KERNEL_CPUFREQ, sources.KERNEL_INTEL_PSTATE, sources.KERNEL_AMD_PSTATE),
    ),
    Rule(
        "HOST-CPU-002",
        "cpu",
        "low",
        "Too few CPUs per GPU",
        "Each GPU needs CPUs for data loading, augmentation and kernel-launch threads; with too few, the GPUs wait. "
        "Counted in logical CPUs, as the clouds sell them; the default floor (cpu.min_cpus_per_gpu: 12) is the "
        "least that the big clouds' standard 8-GPU shapes give (Azure ND H100 v5: 96 vCPUs for 8 GPUs; AWS "
        "p5.48xlarge 192, Google Cloud a3-highgpu-8g 208), so only hosts leaner than any of them are flagged.",
        check_cores_per_gpu,
        manual="Choose an instance or server with more CPUs per GPU, or move preprocessing off the node.",
        policy_keys=("cpu.min_cores_per_gpu", "cpu.min_cpus_per_gpu"),
        references=(sources.AZURE_ND_H100_V5, sources.AWS_P5, sources.GCP_A3),
    ),
    Rule(
        "GPU-NUMA-001",
        "cpu",
        "medium",
        "GPU, its CPUs and its NIC on different NUMA nodes",
        "A GPU whose CPU affinity reaches another socket sends its copies and kernel launches across the "
        "inter-socket link (medium). A GPU with no fabric NIC on its NUMA node is a property of the board and slot "
        "layout that matters for GPUDirect RDMA across nodes; many dual-socket PCIe servers have one NIC for all "
        "GPUs, so that case is reported at low severity.",
        check_numa_locality,
        manual="Check BIOS NUMA settings and PCIe slot placement; bind jobs with numactl or your scheduler's "
        "topology awareness.",
        policy_keys=("cpu.fabric_nic_min_mbps",),
        references=(sources.GPUDIRECT_RDMA, sources.NVML_QUERIES),
    ),
    Rule(
        "HOST-CPU-003",
        "cpu",
        "low",
        "Automatic NUMA balancing is on",
        "NUMA balancing periodically unmaps the pages of long-running processes to see where they are used and "
        "migrates them, which adds latency spikes; GPU jobs that bind their CPUs and memory (numactl, the "
        "scheduler's topology) gain nothing from it. Distributions (Ubuntu, the clouds' images) turn it on for "
        "multi-socket machines, so it is a tuning, not a fault: low.",
        check_numa_balancing,
        role="host_tuning",
        target=target_numa_balancing,
        role_vars=(RoleVar("host_tuning_numa_balancing", "numa_balancing", "cpu.numa_balancing"),),
        policy_keys=("cpu.numa_balancing",),
        references=(sources.KERNEL_SYSCTL_KERNEL,),
    ),
    Rule(
        "HOST-CPU-004",
        "cpu",
        "low",
        "irqbalance state differs from policy",
        "Without irqbalance (or explicit IRQ pinning) all NIC and NVMe interrupts land on one CPU, which then "
        "limits network and storage throughput.",
        check_irqbalance,
        role="host_tuning",
        target=target_irqbalance,
        role_vars=(RoleVar("host_tuning_irqbalance_state", "irqbalance_state", "cpu.irqbalance"),),
        policy_keys=("cpu.irqbalance",),
        references=(sources.KERNEL_IRQ_AFFINITY,),
    ),
)
