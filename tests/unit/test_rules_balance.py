"""The rules of rules/balance.py: HOST-BAL-001..004, judged on the sample ``gpufleet probe`` gathers (facts
``probe``), a passing and a failing case each (CASES). Their probe-side tests are in test_probe.py."""

from __future__ import annotations

import rule_cases
from rule_cases import probe


def _starved(f):
    """GPU 0 waits for its input: 12 % busy while the 14 CPUs its process may use are saturated."""
    probe(f)["gpus"][0]["utilization"].update(gpu_pct=12.0, memory_pct=3.0)
    probe(f)["processes"][0].update(cpu_pct=1372.0, allowed_busy_pct=99.1, own_share_pct=98.0, saturation_pct=99.1)


def _gpu_busy_cpus_saturated(f):
    """Saturated CPUs with a busy GPU: the GPU is the bottleneck, as it should be."""
    probe(f)["processes"][0].update(cpu_pct=1372.0, allowed_busy_pct=99.1, own_share_pct=98.0, saturation_pct=99.1)


def _far_node(f):
    """GPU 0 is on node 0; its process is bound to node 1's CPUs 56-69."""
    probe(f)["processes"][0].update(
        allowed_cpus="56-69", last_cpu={str(56 + t): {"threads": 2, "cpu_pct": 51.6} for t in range(12)}
    )


def _one_thread_strays(f):
    """One of 12 busy CPUs is off the node (a migration caught mid-way): under far_numa_pct."""
    probe(f)["processes"][0]["last_cpu"]["60"] = probe(f)["processes"][0]["last_cpu"].pop("11")


def _pinned_to(cpus, count, pinned=True):
    return lambda f: probe(f)["processes"][0].update(allowed_cpus=cpus, allowed_count=count, pinned=pinned)


def _probe_swapping(f):
    probe(f)["memory"].update(swap_total_mib=8192, swap_used_mib=6000, swap_in_per_s=420.0, swap_out_per_s=610.0)


def _swapping_without_gpu_jobs(f):
    _probe_swapping(f)
    for p in probe(f)["processes"]:
        p.update(visible=False)


# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    "HOST-BAL-001": (_gpu_busy_cpus_saturated, _starved),
    "HOST-BAL-002": (_one_thread_strays, _far_node),
    # Unpinned on a small host is HOST-CPU-002's finding, not a pinning one.
    "HOST-BAL-003": (_pinned_to("0-7", 8, pinned=False), _pinned_to("0-3", 4)),
    "HOST-BAL-004": (_swapping_without_gpu_jobs, _probe_swapping),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)
