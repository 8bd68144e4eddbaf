#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_probe
short_description: Sample running GPU jobs against their CPUs, NUMA node and host memory (the balance probe)
version_added: "0.2.0"
description:
  - Samples the host for O(sample_seconds) and judges it with the balance rules of the catalog (HOST-BAL-001 to
    HOST-BAL-004) - a GPU idle while its process's CPUs are saturated (input-bound), a GPU process on the far NUMA
    node, GPU processes pinned to fewer CPUs than C(cpu.min_cpus_per_gpu), the host swapping while GPU processes run.
  - "What it samples: each GPU's utilization and memory (bandwidth) utilization through NVML, read O(reads) times
    over the window and averaged; the processes NVML lists on each GPU and, from C(/proc/<pid>/stat) and
    C(/proc/<pid>/task/*/stat), their CPU time over the window, their threads and the CPU each last ran on;
    C(Cpus_allowed_list) of C(/proc/<pid>/status); the busy time of every CPU (C(/proc/stat)); swap rates
    (C(/proc/vmstat)) and memory pressure (C(/proc/pressure/memory)). The GPU's NUMA node and local CPUs come from
    sysfs (C(numa_node), C(local_cpulist) of its PCI device), else NVML."
  - The audit (M(gpufleet.tuning.audit)) does not take this sample; there the balance rules skip.
  - This module never changes anything. It needs C(pynvml) (the probe reads NVML's utilization several times and
    its process list; C(nvidia-smi) is not used).
author:
  - gpufleet contributors (@gpufleet)
options:
  policy:
    description:
      - Partial policy merged over the defaults, or the list of policy layers first to last, as
        M(gpufleet.tuning.audit) takes it. The balance rules read C(probe.*), C(cpu.min_cpus_per_gpu),
        C(memory.swap_rate_pages_per_s) and C(memory.psi_some_avg10).
    type: raw
    default: {}
  sample_seconds:
    description: How long to sample, in seconds (0.5 to 60).
    type: float
    default: 5.0
  reads:
    description: How many times each GPU's utilization is read over the window (1 to 60).
    type: int
    default: 5
  root:
    description:
      - Root of the file system that C(/sys) (the GPUs' NUMA nodes and local CPUs, the NUMA nodes' CPUs) is read
        from; a test or a mounted image may give a fixture tree.
      - C(/proc) is read from O(proc_root), not from O(root).
    type: path
    default: /
  proc_root:
    description:
      - Root of the file system that C(/proc) (the GPU processes, the CPUs' busy time, swap counters and memory
        pressure) is read from. On a real host keep V(/) - the PIDs NVML lists, their CPU time, the CPUs' busy time
        and the swap counters belong to the running kernel, as NVML itself does.
      - A simulated host (the demo fleet, tests) gives its fixture tree. Such a C(/proc) does not change over the
        window; the sample then says RV(probe.proc_static) and gives the CPU figures since boot (processes since
        they started), swap rates unknown.
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
  - gpufleet.tuning.gpu_reader
requirements:
  - nvidia-ml-py (import name C(pynvml)) on the target.
notes:
  - Run it while the job to judge runs; a host without GPU processes passes or skips the balance rules.
  - Reading another user's C(/proc/<pid>/task/*/stat) works unprivileged; a process in another PID namespace (a
    container, as NVML lists host PIDs) is invisible from inside that namespace and reported with C(visible=false).
seealso:
  - name: NVML API reference
    description: nvmlDeviceGetUtilizationRates, nvmlDeviceGetComputeRunningProcesses.
    link: https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
  - name: proc_pid_stat(5)
    description: utime, stime, num_threads and processor of a process or thread.
    link: https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html
"""

EXAMPLES = r"""
- name: Sample the GPU jobs for 5 seconds
  gpufleet.tuning.gpu_probe:
  register: probe

- name: Show the input-bound processes
  ansible.builtin.debug:
    msg: "{{ probe.findings | selectattr('rule', 'equalto', 'HOST-BAL-001') | map(attribute='items') | list }}"

- name: A longer window, with the fleet's policy layers
  gpufleet.tuning.gpu_probe:
    sample_seconds: 15
    reads: 15
    policy: "{{ [gpufleet_policy | default({}), gpufleet_policy_host | default({})] }}"
"""

RETURN = r"""
probe:
  description: The sample.
  returned: always
  type: dict
  contains:
    available: {description: Whether NVML could be read., type: bool}
    error: {description: Why not; V(null) otherwise., type: str}
    sample_seconds: {description: The window actually sampled., type: float}
    reads: {description: Utilization reads per GPU., type: int}
    proc_static:
      description: >-
        C(/proc) did not change over the window (a fixture tree given as O(proc_root)): the CPU figures are since
        boot (a process's since it started), the swap rates V(null).
      type: bool
    cpus_online: {description: CPUs in C(/proc/stat)., type: int}
    numa_nodes: {description: NUMA node id to its cpulist., type: dict, sample: {"0": "0-55,112-167"}}
    gpus:
      description: >-
        Per GPU C(index), C(bus_id), C(numa_node), C(local_cpus), C(local_cpus_busy_pct), C(utilization)
        (C(gpu_pct), C(memory_pct) averaged, C(reads)), C(processes) (PIDs), C(lost), C(error), C(unsupported).
      type: list
      elements: dict
    processes:
      description: >-
        Per PID NVML listed - C(pid), C(visible) (in /proc at both ends of the window), C(name), C(state),
        C(threads), C(cpu_pct) (percent of one CPU), C(busiest_thread_pct), C(allowed_cpus), C(allowed_count),
        C(pinned) (fewer allowed CPUs than online), C(allowed_busy_pct), C(own_share_pct), C(saturation_pct),
        C(last_cpu) (CPU to its C(threads) and their C(cpu_pct)), C(gpus), C(used_memory_mib).
      type: list
      elements: dict
    memory:
      description: C(swap_in_per_s), C(swap_out_per_s) (pages), C(swap_total_mib), C(swap_used_mib), C(psi_some_avg10).
      type: dict
findings:
  description: The balance rules' findings, shaped as M(gpufleet.tuning.audit) returns them.
  returned: always
  type: list
  elements: dict
summary:
  description: Counts by status, severity and area of the findings.
  returned: always
  type: dict
policy:
  description: The effective policy.
  returned: always
  type: dict
"""

import traceback

from ansible.module_utils.basic import AnsibleModule
# First: every module_utils file below is then compiled once per run, not twice (zipimport_once.py says why).
from ansible_collections.gpufleet.tuning.plugins.module_utils import zipimport_once  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu, nvml, probe, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import balance


def main():
    argument_spec = dict(gpu.READER_SPEC)
    argument_spec.update(
        policy=dict(type="raw", default={}),
        sample_seconds=dict(type="float", default=probe.SAMPLE_SECONDS),
        reads=dict(type="int", default=probe.READS),
        proc_root=dict(type="path", default="/"),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params
    policy = rules.policy_from_module(module)
    if not 0.5 <= params["sample_seconds"] <= probe.MAX_SAMPLE_SECONDS:
        module.fail_json(
            msg="sample_seconds: must be between 0.5 and %d, got %s"
            % (probe.MAX_SAMPLE_SECONDS, params["sample_seconds"])
        )
    if not 1 <= params["reads"] <= 60:
        module.fail_json(msg="reads: must be between 1 and 60, got %s" % params["reads"])
    if params["backend"] == "nvidia-smi":
        module.fail_json(
            msg="backend: nvidia-smi cannot be used by the probe (it reads NVML's utilization several "
            "times and its process list); use auto or pynvml"
        )
    gpu.check_reader_params(module)

    try:
        nv = nvml.load_pynvml(params["nvml_library"])
    except ImportError:
        if params["backend"] == "pynvml":
            module.fail_json(
                msg="backend=pynvml but pynvml cannot be imported on the target (install nvidia-ml-py)",
                exception=traceback.format_exc(),
            )
        nv = None
    except OSError as exc:
        module.fail_json(msg="nvml_library: cannot load %s: %s" % (params["nvml_library"], exc))
    if nv is None:
        sample = {
            "available": False,
            "error": "pynvml not importable (install nvidia-ml-py)",
            "gpus": [],
            "processes": [],
        }
    else:
        sample = probe.collect(
            nv,
            sys_fs=HostFS(params["root"]),
            proc_fs=HostFS(params["proc_root"]),
            sample_seconds=params["sample_seconds"],
            reads=params["reads"],
        )
    findings = rules.evaluate({"probe": sample}, policy, rules=balance.RULES)
    module.exit_json(changed=False, probe=sample, findings=findings, summary=rules.summarize(findings), policy=policy)


if __name__ == "__main__":
    main()
