#!/usr/bin/env python3
"""Build a fixture host root: the subset of /proc, /sys, /etc and /var/log that host_info reads.

The default is a healthy 2-socket GPU server (the host side of the simulated HGX boards in
tests/sim/nvml/profiles.py): 2 x Intel Xeon Platinum 8480+, 56 cores per socket, SMT, 224 logical
CPUs (node0 = 0-55,112-167, node1 = 56-111,168-223), every CPU on the performance governor with
intel_pstate and turbo on, 2 TiB RAM split across the two NUMA nodes, no swap, no memory pressure,
swappiness 10, THP madvise, NUMA balancing off, memlock unlimited (limits.d/90-gpu.conf), irqbalance
running, Ubuntu 22.04 with kernel 5.15.0-105-generic, a few benign kernel log lines.

Library use (load this file with importlib, or put tests/sim/host on sys.path)::

    root = build_root(tmp / "h1", {"governor": "powersave", "swap_total_mib": 8192, "swap_used_mib": 6000})
    # then: gpufleet.tuning.host_info with root: <root>

Command line::

    mkroot.py PATH [--set KEY=VALUE ...] [--overrides FILE.json] [--replace] [--print-settings]
    mkroot.py --list-keys

VALUE is parsed as JSON when it is valid JSON (8192, true, null, "x", [..], {..}), else taken as a string.
Output is deterministic: the same overrides give byte-identical files.

Override keys (flat; DEFAULTS below holds the default of each):

CPU
  sockets, cores_per_socket, threads_per_core   topology; logical CPU n = thread*(sockets*cores) + socket*cores + core
  numa_nodes            NUMA nodes (default: one per socket); physical cores are split evenly, in order
  cpu_model             /proc/cpuinfo "model name"
  cpu_mhz               /proc/cpuinfo "cpu MHz"
  cpufreq               false: no cpu*/cpufreq directories at all (a VM); governors are then {}
  governor              governor of every CPU
  governors             {cpulist: governor} on top of `governor`, e.g. {"0-55,112-167": "powersave"}
  scaling_driver        intel_pstate (writes intel_pstate/no_turbo), or e.g. acpi-cpufreq / amd-pstate
  epp                   energy_performance_preference of every CPU under intel_pstate / amd-pstate-epp (HWP);
                        null: what the kernel shows - performance under the performance governor, else
                        balance_performance (the default most firmware and distributions leave)
                        (writes cpufreq/boost)
  boost                 turbo on (true), off (false), or null (no boost file)
  freq_min_mhz, freq_max_mhz, freq_cur_mhz      scaling_min_freq, scaling_max_freq, scaling_cur_freq
Memory
  mem_total_mib, mem_available_mib              /proc/meminfo (and split evenly over the node meminfo files)
  swap_total_mib, swap_used_mib                 SwapTotal, SwapTotal - SwapFree
  pswpin, pswpout       /proc/vmstat counters (static files: sampled rates are always 0 on a fixture root)
  psi                   false: no /proc/pressure/memory
  psi_memory_some_avg10, psi_memory_full_avg10  /proc/pressure/memory avg10 values
  hugepages_total, hugepages_free, hugepage_size_kb
VM and kernel settings
  swappiness, overcommit_memory, overcommit_ratio, min_free_kbytes, zone_reclaim_mode, max_map_count
  thp_enabled, thp_defrag                       the selected word of the THP files (always / madvise / never, ...)
  numa_balancing        /proc/sys/kernel/numa_balancing (null: file absent)
Limits and services
  memlock_kb            value in /etc/security/limits.d/90-gpu.conf ("* soft/hard memlock"); an int (KiB),
                        "unlimited", or null (no such file)
  process_memlock_kb    "Max locked memory" soft limit of /proc/self/limits, in KiB or "unlimited"
  process_memlock_hard_kb   its hard limit (null: same as process_memlock_kb)
  irqbalance            irqbalance running (a /proc/<pid>/comm "irqbalance")
  irqbalance_installed  /usr/sbin/irqbalance present
  irq_devices           NICs and GPUs with MSI-X vectors, [] by default; each a dict:
                        kind ("nic" or "gpu"), pci ("0000:18:00.0"), name (the NIC's interface), numa_node (0;
                        -1: none), irqs (list of IRQ numbers), affinity ("all" (default), "node", a cpulist, or a
                        list of those, one per IRQ), hint (null (default): no driver hint, or the same forms).
                        Writes /sys/devices/pci0000:00/<pci>/{vendor,class,numa_node,msi_irqs/<irq>}, the links
                        /sys/bus/pci/devices/<pci> and /sys/class/net/<name>/device, and /proc/irq/<irq>/
                        {smp_affinity_list,smp_affinity,affinity_hint}. Helper: irq_device(...).
  process_uid, process_cap_ipc_lock   /proc/self/status Uid and CapEff of the reading process (default root with
                        every capability, as an audit run with become; false: CapEff without CAP_IPC_LOCK)
  job_services          daemons GPU jobs run under, [] by default; each a dict (helper: job_service(...)):
                        unit (slurmd.service, kubelet.service, containerd.service, docker.service, crio.service),
                        limit_memlock (LimitMEMLOCK= value in the unit file: "infinity", "64M", ...; null: no such
                        line, as containerd's and docker's upstream units), unit_dir (/lib/systemd/system), dropins
                        ({file name: text} under /etc/systemd/system/<unit>.d/), running (a /proc/<pid> with comm,
                        status and limits), pid, process_memlock_kb (its "Max locked memory" in KiB or "unlimited";
                        null: what the unit gives it: limit_memlock, else systemd_default_memlock, else 8 MiB)
  systemd_default_memlock   DefaultLimitMEMLOCK= in /etc/systemd/system.conf (null: not set)
CPU architecture
  arch                  x86_64 (default) or aarch64: Arm /proc/cpuinfo (no "model name"; CPU implementer and part,
                        from arm_implementer/arm_part) and cpu*/regs/identification/midr_el1
  arm_implementer, arm_part   MIDR fields, default 0x41 / 0xd4f (Arm Neoverse V2, the Grace CPU)
  memory_only_numa_nodes    sizes in MiB of NUMA nodes without CPUs, after the CPU nodes (Grace Hopper: the GPU's
                        HBM is NUMA node 1, and the driver adds empty nodes for MIG); helper: grace_hopper()
OS and kernel
  os                    ubuntu22.04, ubuntu24.04, debian12, rhel9 or rocky9
  kernel_release, kernel_version                /proc/sys/kernel/osrelease and version, /proc/version
  hostname
NVIDIA driver stack and PCI bus (what gpu_info reads from files; all off by default)
  nvidia_kernel_module  version of the loaded nvidia.ko: writes /proc/driver/nvidia/version ("NVRM version: NVIDIA
                        UNIX x86_64 Kernel Module  550.90.07 ..."); null (default): module not loaded, no file
  nvidia_kernel_module_open   true: the open flavour's line ("NVIDIA UNIX Open Kernel Module for x86_64  ...")
  nvidia_library_version  installed user-space driver: writes /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<version>
                        (an empty file) and the libnvidia-ml.so.1 link to it; null (default): none
  nvidia_pci            NVIDIA PCI functions, [] by default; each a dict (helpers: nvidia_gpus(...),
                        nvswitches(...)): address ("0000:18:00.0"), kind (gpu: class 0x030200, vga: 0x030000,
                        nvswitch: 0x068000, audio: 0x040300), device ("0x2330"), driver (bound driver, "nvidia";
                        null: none), physfn (address of the physical function: an SR-IOV virtual function).
                        Writes /sys/devices/pci0000:00/<address>/{vendor,class,device}, the driver and physfn links
                        and /sys/bus/pci/devices/<address>
  fabricmanager         nvidia-fabricmanager version: writes /usr/share/doc/nvidia-fabricmanager/changelog.Debian;
                        null (default): not installed
  fabricmanager_running an nv-fabricmanager process (/proc/<pid>/comm "nv-fabricmanage")
  cuda_compat           cuda-compat packages, [] by default: [{cuda: "12.4", driver: "550.54.15"}] writes
                        /usr/local/cuda-<cuda>/compat/libcuda.so.<driver>
  mellanox_pci          Mellanox (0x15b3) PCI functions, [] by default (helper: nvswitch_bridge(...), the HGX B200
                        baseboard's ConnectX-7 bridge): address, device ("0x1021"), driver ("mlx5_core"; null: none),
                        vpd (hex of the bytes of /sys/bus/pci/devices/<address>/vpd; null: no vpd file; "unreadable": a
                        directory in its place, so that reading it fails as it does for a non-root reader)
  nvlsm, nvlsm_running  NVLSM installed (/opt/nvidia/nvlsm/sbin/nvlsm) and running (/proc/<pid>/comm "nvlsm")
  imex                  null (default): no IMEX; else {running, nodes (text of the node list; null: no file),
                        config (text of /etc/nvidia-imex/config.cfg; null: none), nodes_path}: /usr/bin/nvidia-imex,
                        the files, and /proc/<pid>/comm "nvidia-imex" when running
  local_addresses       the host's IPv4 addresses: /proc/net/fib_trie with a "/32 host LOCAL" leaf each (null: none)
  uptime_s              /proc/uptime (seconds since boot; null: no file)
Kernel log
  kern_log              false: no /var/log/kern.log
  kern_log_lines        the lines of /var/log/kern.log (replaces the benign default lines)
  kern_log_extra        lines appended after the default (or given) lines
  Helpers for realistic lines: xid_line(code, ...) and aer_lines(severity, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MARKER = ".gpufleet-mkroot.json"
# The settings written as /proc/sys/vm/<key> (host_info reads them back as facts["vm"]).
VM_KEYS = (
    "swappiness",
    "overcommit_memory",
    "overcommit_ratio",
    "min_free_kbytes",
    "zone_reclaim_mode",
    "max_map_count",
)
MIB_KB = 1024

DEFAULTS: dict[str, Any] = {
    # CPU
    "sockets": 2,
    "cores_per_socket": 56,
    "threads_per_core": 2,
    "numa_nodes": None,
    "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
    "cpu_mhz": 2000.0,
    "cpufreq": True,
    "governor": "performance",
    "governors": {},
    "scaling_driver": "intel_pstate",
    "epp": None,
    "boost": True,
    "freq_min_mhz": 800,
    "freq_max_mhz": 3800,
    "freq_cur_mhz": 2000,
    # memory
    "mem_total_mib": 2 * 1024 * 1024,
    "mem_available_mib": 1950000,
    "swap_total_mib": 0,
    "swap_used_mib": 0,
    "pswpin": 0,
    "pswpout": 0,
    "psi": True,
    "psi_memory_some_avg10": 0.0,
    "psi_memory_full_avg10": 0.0,
    "hugepages_total": 0,
    "hugepages_free": 0,
    "hugepage_size_kb": 2048,
    # vm / kernel
    "swappiness": 10,
    "overcommit_memory": 0,
    "overcommit_ratio": 50,
    "min_free_kbytes": 185364,
    "zone_reclaim_mode": 0,
    "max_map_count": 262144,
    "thp_enabled": "madvise",
    "thp_defrag": "madvise",
    "numa_balancing": 0,
    # limits and services
    "memlock_kb": "unlimited",
    "process_memlock_kb": "unlimited",
    "process_memlock_hard_kb": None,
    "irqbalance": True,
    "irqbalance_installed": True,
    "irq_devices": [],
    "process_uid": 0,
    "process_cap_ipc_lock": True,
    "job_services": [],
    "systemd_default_memlock": None,
    # CPU architecture
    "arch": "x86_64",
    "arm_implementer": "0x41",
    "arm_part": "0xd4f",
    "memory_only_numa_nodes": [],
    # OS
    "os": "ubuntu22.04",
    "kernel_release": "5.15.0-105-generic",
    "kernel_version": "#115-Ubuntu SMP Mon Apr 15 09:52:04 UTC 2024",
    "hostname": "gpu-node",
    # NVIDIA driver stack and PCI bus
    "nvidia_kernel_module": None,
    "nvidia_kernel_module_open": False,
    "nvidia_library_version": None,
    "nvidia_pci": [],
    "fabricmanager": None,
    "fabricmanager_running": False,
    "cuda_compat": [],
    "mellanox_pci": [],
    "nvlsm": False,
    "nvlsm_running": False,
    "imex": None,
    "local_addresses": None,
    "uptime_s": None,
    # kernel log
    "kern_log": True,
    "kern_log_lines": None,
    "kern_log_extra": [],
}

OS_PROFILES: dict[str, dict[str, str]] = {
    "ubuntu22.04": {
        "PRETTY_NAME": "Ubuntu 22.04.4 LTS",
        "NAME": "Ubuntu",
        "VERSION_ID": "22.04",
        "VERSION": "22.04.4 LTS (Jammy Jellyfish)",
        "VERSION_CODENAME": "jammy",
        "ID": "ubuntu",
        "ID_LIKE": "debian",
    },
    "ubuntu24.04": {
        "PRETTY_NAME": "Ubuntu 24.04 LTS",
        "NAME": "Ubuntu",
        "VERSION_ID": "24.04",
        "VERSION": "24.04 LTS (Noble Numbat)",
        "VERSION_CODENAME": "noble",
        "ID": "ubuntu",
        "ID_LIKE": "debian",
    },
    "debian12": {
        "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)",
        "NAME": "Debian GNU/Linux",
        "VERSION_ID": "12",
        "VERSION": "12 (bookworm)",
        "VERSION_CODENAME": "bookworm",
        "ID": "debian",
    },
    "rhel9": {
        "NAME": "Red Hat Enterprise Linux",
        "VERSION": "9.4 (Plow)",
        "ID": "rhel",
        "ID_LIKE": "fedora",
        "VERSION_ID": "9.4",
        "PRETTY_NAME": "Red Hat Enterprise Linux 9.4 (Plow)",
    },
    "rocky9": {
        "NAME": "Rocky Linux",
        "VERSION": "9.4 (Blue Onyx)",
        "ID": "rocky",
        "ID_LIKE": "rhel centos fedora",
        "VERSION_ID": "9.4",
        "PRETTY_NAME": "Rocky Linux 9.4 (Blue Onyx)",
    },
}

THP_ENABLED = ("always", "madvise", "never")
THP_DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")
GOVERNORS = ("performance", "powersave")  # intel_pstate offers only these two
ACPI_GOVERNORS = ("conservative", "ondemand", "userspace", "powersave", "performance", "schedutil")

PID_SYSTEMD, PID_SSHD, PID_IRQBALANCE = 1, 1187, 1422
# unit -> (process name, default pid, ExecStart) of the daemons GPU jobs run under.
JOB_UNITS: dict[str, tuple[str, int, str]] = {
    "slurmd.service": ("slurmd", 2101, "/usr/sbin/slurmd --systemd $SLURMD_OPTIONS"),
    "kubelet.service": ("kubelet", 2202, "/usr/bin/kubelet"),
    "containerd.service": ("containerd", 2303, "/usr/bin/containerd"),
    "docker.service": ("dockerd", 2404, "/usr/bin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock"),
    "crio.service": ("crio", 2505, "/usr/bin/crio $CRIO_CONFIG_OPTIONS"),
}


def job_service(
    unit: str,
    limit_memlock: str | None = None,
    running: bool = True,
    process_memlock_kb: Any = None,
    dropins: Mapping[str, str] | None = None,
    unit_dir: str = "/lib/systemd/system",
) -> dict[str, Any]:
    """A job_services entry: the unit file (with LimitMEMLOCK= when given) and, when running, its process."""
    return {
        "unit": unit,
        "limit_memlock": limit_memlock,
        "running": running,
        "process_memlock_kb": process_memlock_kb,
        "dropins": dict(dropins or {}),
        "unit_dir": unit_dir,
    }


def grace_hopper(**extra: Any) -> dict[str, Any]:
    """Overrides for an NVIDIA GH200 host: one 72-core Grace CPU (Arm Neoverse V2, no SMT) with 480 GiB LPDDR5X on
    NUMA node 0, the Hopper GPU's 96 GiB HBM3 as NUMA node 1 without CPUs, and empty NUMA nodes 2-8 that the driver
    keeps for MIG; cppc_cpufreq with no boost file."""
    return {
        "arch": "aarch64",
        "sockets": 1,
        "cores_per_socket": 72,
        "threads_per_core": 1,
        "cpu_mhz": 3400.0,
        "scaling_driver": "cppc_cpufreq",
        "boost": None,
        "freq_min_mhz": 81,
        "freq_max_mhz": 3429,
        "freq_cur_mhz": 3300,
        "mem_total_mib": 480 * 1024,
        "mem_available_mib": 450 * 1024,
        "memory_only_numa_nodes": [96 * 1024] + [0] * 7,
        "os": "ubuntu22.04",
        "kernel_release": "6.5.0-1019-nvidia-64k",
        **extra,
    }


def xid_line(
    code: int,
    pci: str = "0000:18:00",
    text: str | None = None,
    pid: int | str | None = 4242,
    name: str | None = "python",
    stamp: str = "Nov 29 10:15:02",
    hostname: str = "gpu-node",
) -> str:
    """A kern.log line of an NVIDIA Xid, as the driver prints it (pid=None: the older form without pid)."""
    from_table = {
        48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6.",
        63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
        64: "Row Remapper: Failed to remap row",
        74: "NVLink: fatal error detected on link 3",
        79: "GPU has fallen off the bus.",
        94: "Contained: SM (0x1). RST: No, D-RST: No",
        95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
        13: "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
        31: "Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2c_00000000.",
    }
    message = text if text is not None else from_table.get(code, f"Xid event {code}")
    who = "" if pid is None else f"pid={pid}, name={name}, "
    return f"{stamp} {hostname} kernel: [ 8123.456789] NVRM: Xid (PCI:{pci}): {code}, {who}{message}"


def aer_lines(
    severity: str = "corrected",
    port: str = "0000:17:01.0",
    device: str = "0000:18:00.0",
    stamp: str = "Nov 29 10:20:11",
    hostname: str = "gpu-node",
) -> list[str]:
    """The lines one PCIe AER error logs (header, detail, status), severity corrected, uncorrected or fatal."""
    header, detail, status, bit = {
        "corrected": ("Corrected", "Corrected", "Physical Layer, (Receiver ID)", "[ 0] RxErr"),
        "uncorrected": (
            "Uncorrected (Non-Fatal)",
            "Uncorrected (Non-Fatal)",
            "Transaction Layer, (Requester ID)",
            "[14] CmpltTO",
        ),
        "fatal": ("Uncorrected (Fatal)", "Uncorrected (Fatal)", "Transaction Layer, (Receiver ID)", "[18] MalfTLP"),
    }[severity]
    prefix = f"{stamp} {hostname} kernel: [ 9001.000001]"
    return [
        f"{prefix} pcieport {port}: AER: {header} error received: {device}",
        f"{prefix} nvidia {device}: PCIe Bus Error: severity={detail}, type={status}",
        f"{prefix} nvidia {device}:   device [10de:2330] error status/mask=00000001/0000e000",
        f"{prefix} nvidia {device}:    {bit}",
    ]


def benign_kern_log(s: Mapping[str, Any]) -> list[str]:
    release, version = s["kernel_release"], s["kernel_version"]
    messages = [
        (
            "0.000000",
            f"Linux version {release} (buildd@lcy02-amd64-079) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, "
            f"GNU ld (GNU Binutils for Ubuntu) 2.38) {version}",
        ),
        ("1.234567", "pcieport 0000:17:01.0: AER: enabled with IRQ 122"),
        ("5.678901", "nvidia: loading out-of-tree module taints kernel."),
        ("5.912345", "nvidia-nvlink: Nvlink Core is being initialized, major device number 508"),
        ("6.012345", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024"),
        ("7.345678", "nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.90.07"),
        ("9.876543", "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode. Quota mode: none."),
    ]
    return [f"Nov 29 08:00:0{i} {s['hostname']} kernel: [    {ts}] {msg}" for i, (ts, msg) in enumerate(messages)]


def settings(overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """DEFAULTS with ``overrides`` applied and checked; raises ValueError on an unknown key or a bad value."""
    s = json.loads(json.dumps(DEFAULTS))
    for key, value in (overrides or {}).items():
        if key not in DEFAULTS:
            raise ValueError(f"unknown override {key!r}; known keys: {', '.join(sorted(DEFAULTS))}")
        s[key] = value
    for key in ("sockets", "cores_per_socket", "threads_per_core"):
        if not isinstance(s[key], int) or s[key] < 1:
            raise ValueError(f"{key} must be a positive integer, got {s[key]!r}")
    if s["numa_nodes"] is None:
        s["numa_nodes"] = s["sockets"]
    if not isinstance(s["numa_nodes"], int) or not 1 <= s["numa_nodes"] <= s["sockets"] * s["cores_per_socket"]:
        raise ValueError(f"numa_nodes must be from 1 to the number of physical cores, got {s['numa_nodes']!r}")
    if s["swap_used_mib"] > s["swap_total_mib"]:
        raise ValueError(f"swap_used_mib ({s['swap_used_mib']}) exceeds swap_total_mib ({s['swap_total_mib']})")
    if s["mem_available_mib"] > s["mem_total_mib"]:
        raise ValueError("mem_available_mib exceeds mem_total_mib")
    if s["thp_enabled"] not in THP_ENABLED:
        raise ValueError(f"thp_enabled must be one of {', '.join(THP_ENABLED)}, got {s['thp_enabled']!r}")
    if s["thp_defrag"] not in THP_DEFRAG:
        raise ValueError(f"thp_defrag must be one of {', '.join(THP_DEFRAG)}, got {s['thp_defrag']!r}")
    if s["os"] not in OS_PROFILES:
        raise ValueError(f"os must be one of {', '.join(OS_PROFILES)}, got {s['os']!r}")
    if s["hugepages_free"] > s["hugepages_total"]:
        raise ValueError("hugepages_free exceeds hugepages_total")
    if not isinstance(s["governors"], dict):
        raise ValueError("governors must be a mapping of cpulist to governor")
    if not isinstance(s["irq_devices"], list) or not all(
        isinstance(d, dict) and d.get("kind") in ("nic", "gpu") and d.get("pci") and isinstance(d.get("irqs"), list)
        for d in s["irq_devices"]
    ):
        raise ValueError("irq_devices must be a list of {kind: nic|gpu, pci, irqs: [..], ...}")
    if not isinstance(s["job_services"], list) or not all(
        isinstance(d, dict) and d.get("unit") in JOB_UNITS for d in s["job_services"]
    ):
        raise ValueError(f"job_services must be a list of {{unit: {'|'.join(JOB_UNITS)}, ...}}")
    if s["arch"] not in ("x86_64", "aarch64"):
        raise ValueError(f"arch must be x86_64 or aarch64, got {s['arch']!r}")
    if not isinstance(s["memory_only_numa_nodes"], list):
        raise ValueError("memory_only_numa_nodes must be a list of sizes in MiB")
    for key in ("kern_log_lines", "kern_log_extra"):
        if s[key] is not None and not (isinstance(s[key], list) and all(isinstance(x, str) for x in s[key])):
            raise ValueError(f"{key} must be a list of strings")
    return s


# ------------------------------------------------------------------ topology


def cpu_layout(s: Mapping[str, Any]) -> list[dict[str, int]]:
    """One entry per logical CPU: id, socket, core (id within the socket), thread, node."""
    sockets, cores, threads, nodes = s["sockets"], s["cores_per_socket"], s["threads_per_core"], s["numa_nodes"]
    physical = sockets * cores
    out = []
    for thread in range(threads):
        for socket in range(sockets):
            for core in range(cores):
                p = socket * cores + core
                out.append(
                    {
                        "id": thread * physical + p,
                        "socket": socket,
                        "core": core,
                        "thread": thread,
                        "node": p * nodes // physical,
                    }
                )
    return sorted(out, key=lambda c: c["id"])


def cpulist(ids) -> str:
    ids = sorted(set(ids))
    parts, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def parse_cpulist(text: str) -> list[int]:
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if "-" in item:
            a, b = item.split("-")
            out.extend(range(int(a), int(b) + 1))
        elif item:
            out.append(int(item))
    return out


def governor_of(s: Mapping[str, Any]) -> dict[int, str]:
    n = s["sockets"] * s["cores_per_socket"] * s["threads_per_core"]
    gov = {i: s["governor"] for i in range(n)}
    for cl, name in sorted(s["governors"].items()):
        for i in parse_cpulist(cl):
            if i in gov:
                gov[i] = name
    return gov


# ------------------------------------------------------------------ writers


class _Writer:
    def __init__(self, root: Path):
        self.root = root

    def __call__(self, path: str, text: str, mode: int = 0o644) -> None:
        dest = self.root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
        os.chmod(dest, mode)

    def link(self, path: str, target: str) -> None:
        dest = self.root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.is_symlink() and not dest.exists():
            os.symlink(target, dest)


def _kb(mib: int) -> int:
    return int(mib) * MIB_KB


def _limit(value: Any, unit_bytes: bool) -> str:
    if value is None or value == "unlimited":
        return "unlimited"
    return str(int(value) * 1024 if unit_bytes else int(value))


def write_cpus(w: _Writer, s: Mapping[str, Any], layout: list[dict[str, int]]) -> None:
    n = len(layout)
    siblings = s["cores_per_socket"] * s["threads_per_core"]
    blocks = []
    flags = (
        "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse "
        "sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl "
        "xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl vmx smx est "
        "tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand "
        "lahf_lm abm 3dnowprefetch avx512f avx512dq avx512_bf16 amx_bf16 amx_tile amx_int8"
    )
    for c in layout:
        apicid = c["socket"] * 128 + c["core"] * 2 + c["thread"]
        blocks.append(
            f"processor\t: {c['id']}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
            f"model name\t: {s['cpu_model']}\nstepping\t: 8\ncpu MHz\t\t: {s['cpu_mhz']:.3f}\n"
            f"cache size\t: 107520 KB\nphysical id\t: {c['socket']}\nsiblings\t: {siblings}\n"
            f"core id\t\t: {c['core']}\ncpu cores\t: {s['cores_per_socket']}\napicid\t\t: {apicid}\n"
            f"fpu\t\t: yes\nflags\t\t: {flags}\nbogomips\t: 4000.00\n"
            "address sizes\t: 46 bits physical, 57 bits virtual\npower management:\n"
        )
    if s["arch"] == "aarch64":  # arm64 prints MIDR fields, no model name, no topology (arch/arm64/kernel/cpuinfo.c)
        features = (
            "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop "
            "sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes "
            "svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh bti"
        )
        blocks = [
            f"processor\t: {c['id']}\nBogoMIPS\t: 2000.00\nFeatures\t: {features}\n"
            f"CPU implementer\t: {s['arm_implementer']}\nCPU architecture: 8\nCPU variant\t: 0x0\n"
            f"CPU part\t: {s['arm_part']}\nCPU revision\t: 0\n"
            for c in layout
        ]
        midr = (int(s["arm_implementer"], 16) << 24) | (0xF << 16) | (int(s["arm_part"], 16) << 4)
        for c in layout:
            w(f"/sys/devices/system/cpu/cpu{c['id']}/regs/identification/midr_el1", f"0x{midr:016x}\n")
    w("/proc/cpuinfo", "\n".join(blocks) + "\n")
    everything = f"0-{n - 1}\n" if n > 1 else "0\n"
    for name in ("online", "possible", "present"):
        w("/sys/devices/system/cpu/" + name, everything)
    w("/sys/devices/system/cpu/offline", "\n")

    by_core: dict[tuple[int, int], list[int]] = {}
    for c in layout:
        by_core.setdefault((c["socket"], c["core"]), []).append(c["id"])
    governors = governor_of(s)
    available = "performance powersave" if s["scaling_driver"] == "intel_pstate" else " ".join(ACPI_GOVERNORS)
    for c in layout:
        base = f"/sys/devices/system/cpu/cpu{c['id']}/"
        w(base + "topology/physical_package_id", f"{c['socket']}\n")
        w(base + "topology/core_id", f"{c['core']}\n")
        w(base + "topology/thread_siblings_list", cpulist(by_core[(c["socket"], c["core"])]) + "\n")
        if s["cpufreq"]:
            freq = base + "cpufreq/"
            w(freq + "scaling_governor", governors[c["id"]] + "\n")
            w(freq + "scaling_driver", f"{s['scaling_driver']}\n")
            w(freq + "scaling_available_governors", available + "\n")
            w(freq + "scaling_min_freq", f"{s['freq_min_mhz'] * 1000}\n")
            w(freq + "scaling_max_freq", f"{s['freq_max_mhz'] * 1000}\n")
            w(freq + "scaling_cur_freq", f"{s['freq_cur_mhz'] * 1000}\n")
            w(freq + "cpuinfo_min_freq", "800000\n")
            w(freq + "cpuinfo_max_freq", "3800000\n")
            if s["scaling_driver"] in ("intel_pstate", "amd-pstate-epp"):
                epp = s["epp"] or ("performance" if governors[c["id"]] == "performance" else "balance_performance")
                w(freq + "energy_performance_preference", epp + "\n")
    if s["cpufreq"] and s["boost"] is not None:
        if s["scaling_driver"] == "intel_pstate":
            w("/sys/devices/system/cpu/intel_pstate/no_turbo", "0\n" if s["boost"] else "1\n")
            w("/sys/devices/system/cpu/intel_pstate/status", "active\n")
        else:
            w("/sys/devices/system/cpu/cpufreq/boost", "1\n" if s["boost"] else "0\n")


def write_memory(w: _Writer, s: Mapping[str, Any], layout: list[dict[str, int]]) -> None:
    total, avail = _kb(s["mem_total_mib"]), _kb(s["mem_available_mib"])
    free = avail * 95 // 100
    swap_total, swap_free = _kb(s["swap_total_mib"]), _kb(s["swap_total_mib"] - s["swap_used_mib"])
    huge_kb = s["hugepages_total"] * s["hugepage_size_kb"]
    rows = [
        ("MemTotal", total),
        ("MemFree", free),
        ("MemAvailable", avail),
        ("Buffers", 1843200),
        ("Cached", avail - free),
        ("SwapCached", min(_kb(s["swap_used_mib"]), 65536)),
        ("Active", 8388608),
        ("Inactive", 4194304),
        ("SwapTotal", swap_total),
        ("SwapFree", swap_free),
        ("Dirty", 512),
        ("Shmem", 262144),
        ("Mlocked", 0),
        ("CommitLimit", total // 2 + swap_total),
        ("Committed_AS", 25165824),
        ("AnonHugePages", 0),
    ]
    text = "".join(f"{k + ':':<16}{v:>10} kB\n" for k, v in rows)
    text += (
        f"HugePages_Total:  {s['hugepages_total']:>6}\nHugePages_Free:   {s['hugepages_free']:>6}\n"
        "HugePages_Rsvd:        0\nHugePages_Surp:        0\n"
        f"Hugepagesize:   {s['hugepage_size_kb']:>10} kB\nHugetlb:        {huge_kb:>10} kB\n"
    )
    w("/proc/meminfo", text)

    nodes = s["numa_nodes"]
    for node in range(nodes):
        ids = [c["id"] for c in layout if c["node"] == node]
        base = f"/sys/devices/system/node/node{node}/"
        w(base + "cpulist", cpulist(ids) + "\n")
        ntotal, nfree = total // nodes, free // nodes
        w(
            base + "meminfo",
            f"Node {node} MemTotal:       {ntotal} kB\nNode {node} MemFree:        {nfree} kB\n"
            f"Node {node} MemUsed:        {ntotal - nfree} kB\n",
        )
    every = f"0-{nodes - 1}\n" if nodes > 1 else "0\n"
    for name in ("online", "possible", "has_cpu", "has_memory"):
        w("/sys/devices/system/node/" + name, every)
    extra = [int(m) for m in s["memory_only_numa_nodes"]]
    for i, mib in enumerate(extra):  # NUMA nodes without CPUs (a coherent GPU's memory, MIG placeholders)
        base = f"/sys/devices/system/node/node{nodes + i}/"
        w(base + "cpulist", "\n")
        w(
            base + "meminfo",
            f"Node {nodes + i} MemTotal:       {_kb(mib)} kB\nNode {nodes + i} MemFree:        {_kb(mib)} kB\n"
            f"Node {nodes + i} MemUsed:        0 kB\n",
        )
    if extra:
        with_memory = list(range(nodes)) + [nodes + i for i, mib in enumerate(extra) if mib]
        w("/sys/devices/system/node/online", cpulist(range(nodes + len(extra))) + "\n")
        w("/sys/devices/system/node/possible", cpulist(range(nodes + len(extra))) + "\n")
        w("/sys/devices/system/node/has_memory", cpulist(with_memory) + "\n")

    vmstat = [
        ("nr_free_pages", free // 4),
        ("nr_anon_pages", 1048576),
        ("pgpgin", 123456789),
        ("pgpgout", 98765432),
        ("pswpin", s["pswpin"]),
        ("pswpout", s["pswpout"]),
        ("pgfault", 987654321),
        ("pgmajfault", 12345),
        ("thp_fault_alloc", 2048),
        ("numa_hit", 555555555),
        ("numa_miss", 0),
    ]
    w("/proc/vmstat", "".join(f"{k} {v}\n" for k, v in vmstat))
    if s["psi"]:
        some, full = float(s["psi_memory_some_avg10"]), float(s["psi_memory_full_avg10"])
        w(
            "/proc/pressure/memory",
            f"some avg10={some:.2f} avg60={some:.2f} avg300={some:.2f} total={int(some * 1e6)}\n"
            f"full avg10={full:.2f} avg60={full:.2f} avg300={full:.2f} total={int(full * 1e6)}\n",
        )

    huge = "/sys/kernel/mm/transparent_hugepage/"
    w(huge + "enabled", " ".join(f"[{v}]" if v == s["thp_enabled"] else v for v in THP_ENABLED) + "\n")
    w(huge + "defrag", " ".join(f"[{v}]" if v == s["thp_defrag"] else v for v in THP_DEFRAG) + "\n")
    for key in VM_KEYS:
        w("/proc/sys/vm/" + key, f"{s[key]}\n")
    w("/proc/sys/vm/nr_hugepages", f"{s['hugepages_total']}\n")
    if s["numa_balancing"] is not None:
        w("/proc/sys/kernel/numa_balancing", f"{s['numa_balancing']}\n")


def write_limits(w: _Writer, s: Mapping[str, Any]) -> None:
    soft = s["process_memlock_kb"]
    hard = soft if s["process_memlock_hard_kb"] is None else s["process_memlock_hard_kb"]
    rows = [
        ("Max cpu time", "unlimited", "unlimited", "seconds"),
        ("Max file size", "unlimited", "unlimited", "bytes"),
        ("Max data size", "unlimited", "unlimited", "bytes"),
        ("Max stack size", "8388608", "unlimited", "bytes"),
        ("Max core file size", "0", "unlimited", "bytes"),
        ("Max resident set", "unlimited", "unlimited", "bytes"),
        ("Max processes", "8255366", "8255366", "processes"),
        ("Max open files", "1048576", "1048576", "files"),
        ("Max locked memory", _limit(soft, True), _limit(hard, True), "bytes"),
        ("Max address space", "unlimited", "unlimited", "bytes"),
        ("Max file locks", "unlimited", "unlimited", "locks"),
        ("Max pending signals", "8255366", "8255366", "signals"),
        ("Max msgqueue size", "819200", "819200", "bytes"),
        ("Max nice priority", "0", "0", ""),
        ("Max realtime priority", "0", "0", ""),
        ("Max realtime timeout", "unlimited", "unlimited", "us"),
    ]
    w("/proc/self/limits", _limits_table(rows))
    caps = 0x000001FFFFFFFFFF if s["process_cap_ipc_lock"] else 0x000001FFFFFFFFFF & ~(1 << 14)
    if s["process_uid"] != 0 and not s["process_cap_ipc_lock"]:
        caps = 0
    uid = s["process_uid"]
    w(
        "/proc/self/status",
        f"Name:\tpython3\nUmask:\t0022\nState:\tR (running)\nTgid:\t4711\nPid:\t4711\nPPid:\t4700\n"
        f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
        f"CapInh:\t0000000000000000\nCapPrm:\t{caps:016x}\nCapEff:\t{caps:016x}\n"
        f"CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n",
    )
    w(
        "/etc/security/limits.conf",
        "# /etc/security/limits.conf\n#\n#<domain>      <type>  <item>         <value>\n#\n"
        "#*               soft    core            0\n#@student        hard    nproc           20\n"
        "#ftp             -       chroot          /ftp\n\n# End of file\n",
    )
    if s["memlock_kb"] is not None:
        value = _limit(s["memlock_kb"], False)
        w(
            "/etc/security/limits.d/90-gpu.conf",
            "# GPU jobs pin host memory for fast transfers (cudaHostAlloc, RDMA)\n"
            f"*    soft    memlock    {value}\n*    hard    memlock    {value}\n",
        )


def _proc_limits_text(memlock_soft: Any, memlock_hard: Any) -> str:
    rows = [
        ("Max cpu time", "unlimited", "unlimited", "seconds"),
        ("Max open files", "1048576", "1048576", "files"),
        ("Max locked memory", _limit(memlock_soft, True), _limit(memlock_hard, True), "bytes"),
        ("Max address space", "unlimited", "unlimited", "bytes"),
    ]
    return _limits_table(rows)


def _limits_table(rows: list[tuple[str, str, str, str]]) -> str:
    """/proc/<pid>/limits: the header line, then one row per limit, in the kernel's column widths."""
    return "".join(
        f"{a:<26}{b:<21}{c:<21}{d:<10}\n" for a, b, c, d in [("Limit", "Soft Limit", "Hard Limit", "Units")] + rows
    )


def _systemd_kb(value: str) -> Any:
    """KiB of a LimitMEMLOCK= value as the fixture writes them ("infinity", "64M", "8388608"); "unlimited"."""
    value = value.split(":")[0].strip()
    if value == "infinity":
        return "unlimited"
    units = {"K": 1, "M": 1024, "G": 1024 * 1024}
    if value[-1:].upper() in units:
        return int(value[:-1]) * units[value[-1].upper()]
    return int(value) // 1024


def write_job_services(w: _Writer, s: Mapping[str, Any]) -> None:
    if s["systemd_default_memlock"] is not None:
        w("/etc/systemd/system.conf", f"[Manager]\nDefaultLimitMEMLOCK={s['systemd_default_memlock']}\n")
    for svc in s["job_services"]:
        unit = svc["unit"]
        comm, pid, exec_start = JOB_UNITS[unit]
        lines = [f"[Unit]\nDescription={comm}\nAfter=network-online.target\n", "[Service]", f"ExecStart={exec_start}"]
        lines += ["Type=notify", "Delegate=yes", "KillMode=process", "LimitNPROC=infinity", "LimitCORE=infinity"]
        if svc.get("limit_memlock") is not None:
            lines.append(f"LimitMEMLOCK={svc['limit_memlock']}")
        w(
            f"{svc.get('unit_dir') or '/lib/systemd/system'}/{unit}",
            "\n".join(lines) + "\n\n[Install]\nWantedBy=multi-user.target\n",
        )
        limit = svc.get("limit_memlock")
        for name, text in sorted((svc.get("dropins") or {}).items()):
            w(f"/etc/systemd/system/{unit}.d/{name}", text)
            for line in text.splitlines():
                if line.strip().startswith("LimitMEMLOCK="):
                    limit = line.split("=", 1)[1].strip() or None
        if not svc.get("running", True):
            continue
        pid = int(svc.get("pid") or pid)
        memlock = svc.get("process_memlock_kb")
        if memlock is None:
            source = limit if limit is not None else s["systemd_default_memlock"]
            memlock = _systemd_kb(source) if source is not None else 8192
        w(f"/proc/{pid}/comm", comm + "\n")
        w(f"/proc/{pid}/status", f"Name:\t{comm}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\n")
        w(f"/proc/{pid}/limits", _proc_limits_text(memlock, memlock))


def write_processes(w: _Writer, s: Mapping[str, Any]) -> None:
    procs = [(PID_SYSTEMD, "systemd", "S (sleeping)"), (PID_SSHD, "sshd", "S (sleeping)")]
    if s["irqbalance"]:
        procs.append((PID_IRQBALANCE, "irqbalance", "S (sleeping)"))
    for pid, comm, state in procs:
        w(f"/proc/{pid}/comm", comm + "\n")
        w(
            f"/proc/{pid}/status",
            f"Name:\t{comm}\nUmask:\t0022\nState:\t{state}\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{0 if pid == 1 else 1}\n",
        )
    if s["irqbalance_installed"]:
        w("/usr/sbin/irqbalance", "", mode=0o755)


def irq_device(
    kind: str,
    pci: str,
    first_irq: int,
    count: int,
    name: str | None = None,
    numa_node: int = 0,
    affinity: Any = "all",
    hint: Any = None,
) -> dict[str, Any]:
    """An irq_devices entry with ``count`` consecutive IRQs from ``first_irq``."""
    return {
        "kind": kind,
        "pci": pci,
        "name": name,
        "numa_node": numa_node,
        "irqs": list(range(first_irq, first_irq + count)),
        "affinity": affinity,
        "hint": hint,
    }


def _cpumask(ids: list[int]) -> str:
    value = sum(1 << i for i in set(ids))
    words = max(1, (max(ids, default=0) // 32) + 1)
    return ",".join(f"{(value >> (32 * i)) & 0xFFFFFFFF:08x}" for i in reversed(range(words)))


def write_irqs(w: _Writer, s: Mapping[str, Any], layout: list[dict[str, int]]) -> None:
    everything = [c["id"] for c in layout]

    def cpus_of(form: Any, node: int) -> list[int]:
        if form == "all" or (form == "node" and node < 0):
            return everything
        if form == "node":
            return [c["id"] for c in layout if c["node"] == node]
        return parse_cpulist(str(form))

    for dev in s["irq_devices"]:
        node = int(dev.get("numa_node", 0))
        base = f"/sys/devices/pci0000:00/{dev['pci']}/"
        gpu = dev["kind"] == "gpu"
        w(base + "vendor", "0x10de\n" if gpu else "0x15b3\n")
        w(base + "class", "0x030200\n" if gpu else "0x020000\n")
        w(base + "numa_node", f"{node}\n")
        w.link(f"/sys/bus/pci/devices/{dev['pci']}", f"../../../devices/pci0000:00/{dev['pci']}")
        if not gpu and dev.get("name"):
            w.link(f"/sys/class/net/{dev['name']}/device", f"../../../devices/pci0000:00/{dev['pci']}")
        irqs = list(dev["irqs"])
        affinity, hint = dev.get("affinity", "all"), dev.get("hint")
        for i, irq in enumerate(irqs):
            w(f"{base}msi_irqs/{irq}", "msix\n")
            allowed = cpus_of(affinity[i] if isinstance(affinity, list) else affinity, node)
            w(f"/proc/irq/{irq}/smp_affinity_list", cpulist(allowed) + "\n")
            w(f"/proc/irq/{irq}/smp_affinity", _cpumask(allowed) + "\n")
            hinted = cpus_of(hint[i] if isinstance(hint, list) else hint, node) if hint is not None else []
            w(f"/proc/irq/{irq}/affinity_hint", _cpumask(hinted) + "\n")


def write_os(w: _Writer, s: Mapping[str, Any]) -> None:
    profile = OS_PROFILES[s["os"]]
    w("/etc/os-release", "".join('{}="{}"\n'.format(*kv) for kv in profile.items()))
    w("/etc/hostname", s["hostname"] + "\n")
    w("/proc/sys/kernel/hostname", s["hostname"] + "\n")
    w("/proc/sys/kernel/osrelease", s["kernel_release"] + "\n")
    w("/proc/sys/kernel/version", s["kernel_version"] + "\n")
    w(
        "/proc/version",
        "Linux version {} (buildd@lcy02-amd64-079) (x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0) 12.3.0, "
        "GNU ld 2.38) {}\n".format(s["kernel_release"], s["kernel_version"]),
    )


PID_FABRICMANAGER = 1533
NVIDIA_PCI_CLASSES = {"gpu": "0x030200", "vga": "0x030000", "nvswitch": "0x068000", "audio": "0x040300"}


def nvidia_gpus(addresses: list[str], device: str = "0x2330", driver: str | None = "nvidia") -> list[dict[str, Any]]:
    """nvidia_pci entries for GPUs (3D controllers) at ``addresses`` (sysfs form, "0000:18:00.0")."""
    return [{"address": a, "kind": "gpu", "device": device, "driver": driver, "physfn": None} for a in addresses]


def nvswitches(count: int = 4, device: str = "0x22a3", first_bus: int = 0x05) -> list[dict[str, Any]]:
    """nvidia_pci entries for an HGX baseboard's NVSwitches (H100: four, device 0x22a3)."""
    return [
        {
            "address": f"0000:{first_bus + i:02x}:00.0",
            "kind": "nvswitch",
            "device": device,
            "driver": "nvidia",
            "physfn": None,
        }
        for i in range(count)
    ]


PID_NVLSM, PID_IMEX = 1534, 1535


def vpd(id_string: str, fields: list[tuple[str, str]]) -> bytes:
    """PCI VPD bytes (PCI local bus specification, VPD format): an identifier string tag (0x82), a VPD-R tag (0x90)
    with the keyword fields and an RV checksum, the end tag (0x78)."""
    ident = id_string.encode()
    head = bytes([0x82, len(ident) & 0xFF, len(ident) >> 8]) + ident
    body = b"".join(k.encode() + bytes([len(v)]) + v.encode() for k, v in fields)
    size = len(body) + 4  # + "RV", its length byte and the checksum byte
    ro = bytes([0x90, size & 0xFF, size >> 8]) + body + b"RV\x01"
    checksum = (-sum(head + ro)) & 0xFF  # every byte up to and including the checksum sums to 0
    return head + ro + bytes([checksum, 0x78])


def nvswitch_bridge(bus: str = "c1", device: str = "0x1021") -> list[dict[str, Any]]:
    """mellanox_pci entries of an HGX B200 baseboard's ConnectX-7 bridge (synthetic, shaped as the fabric manager
    user guide describes it): two ports, each a full PF (.0, .2) and a limited PF (.1, .3) whose VPD carries the
    vendor-specific field SMDL=SW_MNG that marks the NVSwitch management functions."""
    out = []
    for fn in range(4):
        fields = [("PN", "FIXTURE-CX7-BRIDGE"), ("SN", f"MT0000X0000{fn}")]
        if fn % 2:
            fields.append(("V3", "SMDL=SW_MNG"))
        out.append({"address": f"0000:{bus}:00.{fn}", "device": device, "driver": "mlx5_core",
                    "vpd": vpd("NVIDIA ConnectX-7 baseboard bridge (gpufleet fixture)", fields).hex()})
    return out


def write_fabric_services(w: _Writer, s: Mapping[str, Any]) -> None:
    """Mellanox functions, NVLSM, IMEX, the host's addresses and uptime (issue 25: Blackwell and Grace)."""
    for dev in s["mellanox_pci"]:
        base = f"/sys/devices/pci0000:00/{dev['address']}"
        w(base + "/vendor", "0x15b3\n")
        w(base + "/class", "0x020700\n")
        w(base + "/device", (dev.get("device") or "0x1021") + "\n")
        if dev.get("driver"):
            w(f"/sys/bus/pci/drivers/{dev['driver']}/new_id", "", mode=0o200)
            w.link(base + "/driver", f"../../../bus/pci/drivers/{dev['driver']}")
        if dev.get("vpd") == "unreadable":
            (w.root / base.lstrip("/") / "vpd").mkdir(parents=True, exist_ok=True)
        elif dev.get("vpd") is not None:
            (w.root / base.lstrip("/") / "vpd").write_bytes(bytes.fromhex(dev["vpd"]))
        w.link(f"/sys/bus/pci/devices/{dev['address']}", f"../../../devices/pci0000:00/{dev['address']}")
    if s["nvlsm"]:
        w("/opt/nvidia/nvlsm/sbin/nvlsm", "", mode=0o755)
    if s["nvlsm_running"]:
        w(f"/proc/{PID_NVLSM}/comm", "nvlsm\n")
    imex = s["imex"]
    if imex is not None:
        w("/usr/bin/nvidia-imex", "", mode=0o755)
        if imex.get("config") is not None:
            w("/etc/nvidia-imex/config.cfg", imex["config"])
        if imex.get("nodes") is not None:
            w(imex.get("nodes_path") or "/etc/nvidia-imex/nodes_config.cfg", imex["nodes"])
        if imex.get("running"):
            w(f"/proc/{PID_IMEX}/comm", "nvidia-imex\n")
    if s["local_addresses"] is not None:
        lines = ["Main:", "  +-- 0.0.0.0/0 3 0 5"]
        for address in s["local_addresses"]:
            lines += [f"     |-- {address}", "        /32 host LOCAL"]
        w("/proc/net/fib_trie", "\n".join(lines) + "\n")
    if s["uptime_s"] is not None:
        w("/proc/uptime", f"{float(s['uptime_s']):.2f} {float(s['uptime_s']) * 3:.2f}\n")


def sxid_line(code: int, fatal: bool = True, pci: str = "0000:c2:00.0", switch: int = 0, text: str = "") -> str:
    """A kern.log line of an NVSwitch SXid, as the nvidia-nvswitch driver prints it."""
    kind = "Fatal" if fatal else "Non-fatal"
    return f"nvidia-nvswitch{switch}: SXid (PCI:{pci}): {code}, {kind}, {text or 'Link 28 LTSSM Fault Up'}"


def write_nvidia(w: _Writer, s: Mapping[str, Any]) -> None:
    if s["nvidia_kernel_module"]:
        flavour = "Open Kernel Module for x86_64" if s["nvidia_kernel_module_open"] else "x86_64 Kernel Module"
        w(
            "/proc/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX {flavour}  {s['nvidia_kernel_module']}  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Thu May 16 20:15:23 UTC 2024\n"
            "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
            mode=0o444,
        )
    if s["nvidia_library_version"]:
        lib = f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{s['nvidia_library_version']}"
        w(lib, "")
        w.link("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", lib.rsplit("/", 1)[1])
    for dev in s["nvidia_pci"]:
        base = f"/sys/devices/pci0000:00/{dev['address']}"
        w(base + "/vendor", "0x10de\n")
        w(base + "/class", NVIDIA_PCI_CLASSES[dev.get("kind", "gpu")] + "\n")
        w(base + "/device", (dev.get("device") or "0x2330") + "\n")
        if dev.get("driver"):
            w(f"/sys/bus/pci/drivers/{dev['driver']}/new_id", "", mode=0o200)
            w.link(base + "/driver", f"../../../bus/pci/drivers/{dev['driver']}")
        if dev.get("physfn"):
            w.link(base + "/physfn", f"../{dev['physfn']}")
        w.link(f"/sys/bus/pci/devices/{dev['address']}", f"../../../devices/pci0000:00/{dev['address']}")
    if s["fabricmanager"]:
        branch = str(s["fabricmanager"]).split(".")[0]
        w(
            "/usr/share/doc/nvidia-fabricmanager/changelog.Debian",
            f"nvidia-fabricmanager-{branch} ({s['fabricmanager']}-1) stable; urgency=low\n\n"
            "  * Automatically generated\n",
        )
    if s["fabricmanager_running"]:
        pid = PID_FABRICMANAGER
        w(f"/proc/{pid}/comm", "nv-fabricmanage\n")
        w(f"/proc/{pid}/status", f"Name:\tnv-fabricmanage\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t1\n")
    for entry in s["cuda_compat"]:
        w(f"/usr/local/cuda-{entry['cuda']}/compat/libcuda.so.{entry['driver']}", "")


def write_kern_log(w: _Writer, s: Mapping[str, Any]) -> None:
    if not s["kern_log"]:
        return
    lines = benign_kern_log(s) if s["kern_log_lines"] is None else list(s["kern_log_lines"])
    lines += list(s["kern_log_extra"] or [])
    w("/var/log/kern.log", "".join(line.rstrip("\n") + "\n" for line in lines), mode=0o640)


def build_root(path: str | os.PathLike, overrides: Mapping[str, Any] | None = None, replace: bool = False) -> Path:
    """Write a fixture host root at ``path`` and return it.

    ``path`` must not exist or be empty; with ``replace=True`` a root that this function built before (it holds
    the marker file) is removed first. Anything else there is never deleted.
    """
    s = settings(overrides)
    root = Path(path)
    if root.exists() and any(root.iterdir()):
        if replace and (root / MARKER).is_file():
            shutil.rmtree(root)
        else:
            raise FileExistsError(f"{root} is not empty (use replace=True for a root built by mkroot)")
    root.mkdir(parents=True, exist_ok=True)
    w = _Writer(root)
    layout = cpu_layout(s)
    write_cpus(w, s, layout)
    write_memory(w, s, layout)
    write_limits(w, s)
    write_processes(w, s)
    write_job_services(w, s)
    write_irqs(w, s, layout)
    write_nvidia(w, s)
    write_fabric_services(w, s)
    write_os(w, s)
    write_kern_log(w, s)
    (root / MARKER).write_text(
        json.dumps({"overrides": dict(overrides or {}), "settings": s}, indent=1, sort_keys=True) + "\n"
    )
    return root


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build a fixture host root for gpufleet.tuning.host_info.")
    parser.add_argument("path", nargs="?", help="directory to create (must be empty or absent)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override (JSON value)")
    parser.add_argument("--overrides", metavar="FILE", help="JSON object of overrides")
    parser.add_argument("--replace", action="store_true", help="replace a root mkroot built before")
    parser.add_argument("--list-keys", action="store_true", help="print the override keys and their defaults")
    parser.add_argument("--print-settings", action="store_true", help="print the effective settings as JSON")
    args = parser.parse_args(argv)
    if args.list_keys:
        for key in DEFAULTS:
            print(f"{key}={json.dumps(DEFAULTS[key])}")
        return 0
    if not args.path:
        parser.error("path is required")
    overrides: dict[str, Any] = {}
    if args.overrides:
        overrides.update(json.loads(Path(args.overrides).read_text()))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key] = _value(value)
    try:
        root = build_root(args.path, overrides, replace=args.replace)
    except (ValueError, FileExistsError) as exc:
        print(f"mkroot: {exc}", file=sys.stderr)
        return 2
    if args.print_settings:
        print(json.dumps(settings(overrides), indent=1, sort_keys=True))
    else:
        print(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
