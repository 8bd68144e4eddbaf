#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_info
short_description: Gather the host settings that decide how fast a GPU server runs
version_added: "0.1.0"
description:
  - Reads, from C(/proc), C(/sys) and C(/etc), the CPU model and topology, CPU frequency governors, scaling
    driver, frequency limits and turbo boost; NUMA nodes and automatic NUMA balancing; memory, swap, the swap-in
    and swap-out rates over a short sample and memory pressure (PSI); the VM sysctls that matter for GPU hosts;
    transparent huge pages; huge pages; memlock limits (of the module's own process and whether it holds
    CAP_IPC_LOCK, as configured for pam_limits, the systemd manager's default, and of the daemons GPU jobs run
    under, that is the C(LimitMEMLOCK) of the slurmd, kubelet, containerd, docker and crio units with their
    drop-ins and the limits of those daemons' running processes); whether irqbalance is installed and running;
    the active TuneD profile; the interrupt affinity of the NICs' and NVIDIA GPUs' MSI/MSI-X vectors and which of
    them are pinned by hand; the kernel and OS release.
  - Scans the kernel log for NVIDIA Xid events (grouped by code, with meaning and severity) and PCIe AER errors.
  - A value that cannot be read is V(null) and its dotted name is a key of C(host.unsupported) with the reason.
    An unreadable kernel log is reported in C(host.kernel_log.error); it never fails the module.
  - This module never changes anything.
author:
  - gpufleet contributors (@gpufleet)
options:
  root:
    description:
      - Root of the file system that C(/proc), C(/sys), C(/etc) and the kernel log file are read from.
      - Useful to inspect a mounted image or a fixture tree. With a root other than C(/) no command runs, and
        O(kernel_log=auto) reads O(kernel_log_file).
    type: path
    default: /
  sample_seconds:
    description:
      - How long to sample C(/proc/vmstat) for the swap-in and swap-out rates, from V(0) to V(10) seconds.
      - V(0) disables sampling; the rates are then V(null).
      - The other reads happen during the sample, so the module takes about this long, not longer.
    type: float
    default: 1.0
  kernel_log:
    description:
      - Where to read the kernel log from.
      - V(auto) on a live host (O(root=/)) tries C(dmesg --kernel --time-format iso), then
        C(journalctl -k); when neither works, C(host.kernel_log.source) is V(none) and C(error) says why.
        With another O(root), V(auto) means V(file).
      - V(file) reads the last O(kernel_log_lines) lines of O(kernel_log_file).
      - V(none) skips the kernel log.
    type: str
    choices: [auto, dmesg, journal, file, none]
    default: auto
  kernel_log_file:
    description:
      - Kernel log file for O(kernel_log=file), as a path inside O(root).
    type: path
    default: /var/log/kern.log
  kernel_log_lines:
    description:
      - How many of the most recent kernel log lines to scan, from V(1) to V(100000).
    type: int
    default: 5000
  kernel_log_since_hours:
    description:
      - Only scan lines from the last this many hours (C(dmesg) and C(journal); a log file is not filtered by time).
      - V(0) means no time limit.
    type: int
    default: 24
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
notes:
  - Memory is in MiB unless a key says otherwise, frequencies in MHz, swap rates in pages per second.
  - C(memlock.process_*) are the limits of the module's own process (the Ansible connection's session), a fair
    stand-in for a user's job started the same way only when the process lacks CAP_IPC_LOCK (a root process is not
    bound by RLIMIT_MEMLOCK, mlock(2)); jobs started by systemd services get their unit's LimitMEMLOCK instead,
    reported in C(memlock.services).
  - On arm64 C(/proc/cpuinfo) has no model name; C(cpu.model) is named from C(CPU implementer) and C(CPU part)
    (or C(cpu*/regs/identification/midr_el1)) as lscpu does, e.g. V(ARM Neoverse-V2) for NVIDIA Grace.
  - Reading C(dmesg) needs root where C(kernel.dmesg_restrict=1); use C(become=true) on such hosts.
seealso:
  - name: NVIDIA Xid errors
    description: NVIDIA's catalog of Xid codes.
    link: https://docs.nvidia.com/deploy/xid-errors/
  - module: gpufleet.tuning.gpu_info
"""

EXAMPLES = r"""
- name: Read host settings
  gpufleet.tuning.host_info:
  register: host_info

- name: Warn about CPUs that are not on the performance governor
  ansible.builtin.debug:
    msg: "Governors: {{ host_info.host.cpu.governors }}"
  when: host_info.host.cpu.governors | dict2items | rejectattr('key', 'eq', 'performance') | list | length > 0

- name: Audit a mounted image, without sampling and without the kernel log
  gpufleet.tuning.host_info:
    root: /mnt/image
    sample_seconds: 0
    kernel_log: none

- name: Read the journal only, last 6 hours
  gpufleet.tuning.host_info:
    kernel_log: journal
    kernel_log_since_hours: 6
  become: true
"""

RETURN = r"""
host:
  description: The host's state. Every key is always present; a value that cannot be read is V(null).
  returned: always
  type: dict
  contains:
    cpu:
      description:
        - C(model), C(sockets), C(cores) (physical, all sockets), C(threads) (logical CPUs online).
        - C(model) on arm64 is the vendor and part from the CPU's MIDR (V(ARM Neoverse-V2)).
        - C(governors) maps a governor to the CPUs using it in cpulist form; V({}) without cpufreq.
        - C(scaling_driver), C(freq_mhz) (C(min) and C(max) of the scaling limits, C(current_avg)),
          C(boost) (turbo enabled).
        - C(epp) maps an energy-performance preference (HWP) to its CPUs.
        - C(userspace), for CPUs on the userspace governor, C(setspeed_mhz) (C(min), C(max) of the frequencies it
          holds, from C(scaling_setspeed)) and C(below_max) (cpulist of those held below their C(scaling_max_freq));
          V(null) when no CPU uses it.
      type: dict
      sample:
        model: Intel(R) Xeon(R) Platinum 8480+
        sockets: 2
        cores: 112
        threads: 224
        governors: {performance: "0-223"}
        scaling_driver: intel_pstate
        freq_mhz: {min: 800, max: 3800, current_avg: 2000}
        boost: true
    numa:
      description: >-
        C(nodes), a list of C(id), C(cpus) (cpulist; empty for a node without CPUs, such as a Grace Hopper GPU's
        memory), C(memory_total_mib), C(memory_free_mib); C(balancing), whether automatic NUMA balancing is on.
      type: dict
    memory:
      description: >-
        C(total_mib), C(available_mib), C(swap_total_mib), C(swap_used_mib); C(swap_in_per_s) and C(swap_out_per_s)
        in pages per second over C(sample_seconds) (the measured interval); C(psi_some_avg10) and C(psi_full_avg10),
        percent of time tasks stalled on memory over the last 10 seconds.
      type: dict
    vm:
      description: >-
        C(swappiness), C(overcommit_memory), C(overcommit_ratio), C(min_free_kbytes), C(zone_reclaim_mode),
        C(max_map_count) from C(/proc/sys/vm).
      type: dict
    thp:
      description: Transparent huge pages C(enabled) and C(defrag), the selected value (V(always), V(madvise), ...).
      type: dict
    hugepages:
      description: Huge pages C(total), C(free) and C(size_kb).
      type: dict
    memlock:
      description:
        - C(process_soft_kb), C(process_hard_kb) from C(/proc/self/limits); V(null) means unlimited.
        - C(process_uid) and C(process_cap_ipc_lock) (whether the module's process holds CAP_IPC_LOCK, from CapEff in
          C(/proc/self/status)).
        - C(configured), the memlock lines of C(/etc/security/limits.conf) and C(limits.d/*.conf), each with
          C(path), C(domain), C(type) (V(soft), V(hard) or V(-)) and C(value_kb) (V(null) = unlimited).
        - C(systemd_default), C(DefaultLimitMEMLOCK) of C(/etc/systemd/system.conf) and its drop-ins as
          C({soft_kb, hard_kb, source}), V(null) when not set.
        - C(services), one entry per job-running daemon present (unit file found in the unit directories, or process
          running), with C(unit), C(process), C(starts_jobs) (V(false) for kubelet, whose pods run under the
          container runtime), C(fragment) (unit file), C(dropins), C(limit) (the effective
          C(LimitMEMLOCK) as C({soft_kb, hard_kb, source}), V(null) when the unit does not set it) and
          C(processes) (C(pid), C(soft_kb), C(hard_kb), C(error) from C(/proc/<pid>/limits)).
      type: dict
      sample:
        process_soft_kb: 8192
        process_hard_kb: 8192
        process_uid: 0
        process_cap_ipc_lock: true
        configured: [{path: /etc/security/limits.d/90-gpufleet.conf, domain: "*", type: soft, value_kb: null}]
        systemd_default: null
        services:
          - unit: containerd.service
            process: containerd
            starts_jobs: true
            fragment: /lib/systemd/system/containerd.service
            dropins: []
            limit: null
            processes: [{pid: 812, soft_kb: 8192, hard_kb: 8192, error: null}]
    irqbalance:
      description: C(installed) (binary in /usr/sbin or /usr/bin) and C(running) (a process named irqbalance).
      type: dict
    tuned:
      description:
        - C(profile), the active TuneD profile (C(/etc/tuned/active_profile)); V(null) when TuneD has no profile
          active (no file, or emptied by C(tuned-adm off)). A TuneD profile sets the CPU governor and sysctls itself.
      type: dict
      sample: {profile: throughput-performance}
    irq:
      description:
        - Interrupts of the NICs (C(/sys/class/net/<nic>/device/msi_irqs)) and NVIDIA GPUs (PCI vendor 0x10de, class
          0x03xxxx; C(/sys/bus/pci/devices/<pci>/msi_irqs)) and their allowed CPUs
          (C(/proc/irq/<n>/smp_affinity_list)).
        - C(devices) and C(irqs), how many were found; C(pinned), the vectors pinned by hand, each with C(irq),
          C(device) (interface name or GPU PCI address), C(cpus) (cpulist) and C(numa_node); C(driver_set), vectors
          whose narrow mask is the driver's own (equal to C(/proc/irq/<n>/affinity_hint)); C(unreadable).
        - A vector is pinned by hand when its CPUs do not cover its device's NUMA node (every online CPU when
          C(numa_node) is -1). While irqbalance runs, narrow masks are usually its own work.
      type: dict
      sample:
        devices: 2
        irqs: 9
        pinned: [{irq: 120, device: ens1f0np0, cpus: "2", numa_node: 0}]
        driver_set: 0
        unreadable: 0
    kernel:
      description: C(release) (uname -r) and C(version) (uname -v).
      type: dict
    os:
      description: C(id), C(version_id) and C(pretty_name) from os-release.
      type: dict
    kernel_log:
      description:
        - C(source) (V(dmesg), V(journal), V(file) or V(none)), C(error) (why the log could not be read, else
          V(null)), C(lines_scanned).
        - C(xid), one entry per Xid code seen, sorted by code, with C(code), C(meaning), C(severity)
          (V(critical), V(high), V(medium), V(low) or V(info)), C(count), C(pci) (bus ids as logged),
          C(last) (the last such line, at most 300 characters) and C(last_time) (its time stamp in epoch seconds,
          V(null) for a line without an ISO-8601 one).
        - C(sxid), one entry per NVSwitch SXid code seen, with C(code), C(fatal), C(severity), C(count), C(pci),
          C(last) and C(last_time).
        - C(aer), PCIe AER error counts C(corrected), C(uncorrected) (non-fatal), C(fatal), and C(last) line.
      type: dict
    unsupported:
      description: Dotted name of each value that could not be read, to the reason.
      type: dict
      sample: {cpu.governors: "no cpufreq under /sys/devices/system/cpu/cpu*/cpufreq (VM, or no cpufreq driver)"}
"""

import os

from ansible.module_utils.basic import AnsibleModule
# First: every module_utils file below is then compiled once per run, not twice (zipimport_once.py says why).
from ansible_collections.gpufleet.tuning.plugins.module_utils import zipimport_once  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpufleet.tuning.plugins.module_utils import host, kernel_log, programs
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/"),
            sample_seconds=dict(type="float", default=1.0),
            kernel_log=dict(type="str", default="auto", choices=list(kernel_log.KERNEL_LOG_MODES)),
            kernel_log_file=dict(type="path", default=kernel_log.DEFAULT_KERNEL_LOG_FILE),
            kernel_log_lines=dict(type="int", default=5000),
            kernel_log_since_hours=dict(type="int", default=24),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not os.path.isdir(params["root"]):
        module.fail_json(msg="root: not a directory: %s" % params["root"])
    if not 0 <= params["sample_seconds"] <= 10:
        module.fail_json(
            msg="sample_seconds: must be from 0 to 10 (0 disables sampling), got %s" % params["sample_seconds"]
        )
    if not 1 <= params["kernel_log_lines"] <= 100000:
        module.fail_json(msg="kernel_log_lines: must be from 1 to 100000, got %s" % params["kernel_log_lines"])
    if params["kernel_log_since_hours"] < 0:
        module.fail_json(
            msg="kernel_log_since_hours: must be 0 (no limit) or more, got %s" % params["kernel_log_since_hours"]
        )
    if not params["kernel_log_file"].startswith("/"):
        module.fail_json(
            msg="kernel_log_file: must be an absolute path inside root, got %s" % params["kernel_log_file"]
        )

    fs = HostFS(params["root"])
    facts = host.collect(
        fs,
        run=programs.runner(module) if fs.root == "/" else None,
        sample_seconds=params["sample_seconds"],
        kernel_log=params["kernel_log"],
        kernel_log_lines=params["kernel_log_lines"],
        kernel_log_since_hours=params["kernel_log_since_hours"],
        kernel_log_file=params["kernel_log_file"],
    )
    module.exit_json(changed=False, host=facts)


if __name__ == "__main__":
    main()
