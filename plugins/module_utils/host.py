# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The state of the host around the GPUs: CPU and governors, NUMA, memory and swap pressure,
VM sysctls, transparent huge pages, memlock limits (memlock.py), irqbalance, the active TuneD profile and NIC/GPU IRQ
affinity, kernel, OS and the kernel log (read and scanned by kernel_log.py).

Every file is read through HostFS, so a fixture tree (as the tests use) or a mounted
image can stand in for the host. Commands (dmesg, journalctl) run only through the ``run``
callable the module hands in: ``run(argv_list) -> (rc, stdout, stderr)``.

Parsers are small pure functions of text; ``collect`` wires them to the files. A value that
cannot be read is ``None`` and its dotted name is a key of ``unsupported`` with the reason.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import time

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders
from ansible_collections.gpufleet.tuning.plugins.module_utils import kernel_log as klog
from ansible_collections.gpufleet.tuning.plugins.module_utils import memlock
from ansible_collections.gpufleet.tuning.plugins.module_utils.decoders import to_int

CPU_SYS = "/sys/devices/system/cpu"
NODE_SYS = "/sys/devices/system/node"
VM_KEYS = ("swappiness", "overcommit_memory", "overcommit_ratio", "min_free_kbytes", "zone_reclaim_mode",
           "max_map_count")


# ---------------------------------------------------------------- pure parsers

def parse_cpuinfo(text):
    """/proc/cpuinfo -> one dict per processor block (keys as printed, values stripped)."""
    blocks, cur = [], {}
    for line in (text or "").splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
                cur = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            cur[key.strip()] = value.strip()
    if cur:
        blocks.append(cur)
    return [b for b in blocks if "processor" in b] or blocks


# Arm CPUs: /proc/cpuinfo on arm64 has no "model name", only the MIDR fields "CPU implementer" and "CPU part"
# (arch/arm64/kernel/cpuinfo.c). Names as util-linux lscpu prints them (sys-utils/lscpu-arm.c).
ARM_IMPLEMENTERS = {0x41: "ARM", 0x4E: "NVIDIA", 0x48: "HiSilicon", 0x46: "Fujitsu", 0xC0: "Ampere", 0x61: "Apple"}
ARM_PARTS = {
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD49): "Neoverse-N2",
    (0x41, 0xD4F): "Neoverse-V2",  # NVIDIA Grace (GH200, GB200)
    (0x41, 0xD84): "Neoverse-V3",
    (0x41, 0xD8E): "Neoverse-N3",
    (0xC0, 0xAC3): "Ampere-1",
    (0xC0, 0xAC4): "Ampere-1a",
}


def _hex(text):
    try:
        return int(str(text).strip(), 16)
    except (TypeError, ValueError):
        return None


def arm_cpu_model(implementer, part):
    """ "ARM Neoverse-V2" for implementer 0x41, part 0xd4f; the raw ids when the part is not in the table."""
    imp, prt = _hex(implementer), _hex(part)
    if imp is None or prt is None:
        return None
    vendor = ARM_IMPLEMENTERS.get(imp, "implementer 0x%02x" % imp)
    return "%s %s" % (vendor, ARM_PARTS.get((imp, prt), "part 0x%03x" % prt))


def cpu_model(blocks):
    for block in blocks:
        for key in ("model name", "Model name", "cpu model", "cpu"):
            if block.get(key):
                return block[key]
    for block in blocks:
        model = arm_cpu_model(block.get("CPU implementer"), block.get("CPU part"))
        if model:
            return model
    return None


def parse_meminfo(text):
    """/proc/meminfo or a node's meminfo -> {key: value} (kB for sized fields, counts for HugePages_*)."""
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key.startswith("Node "):  # "Node 0 MemTotal"
            key = key.split(None, 2)[-1]
        number = to_int(value)
        if number is not None:
            out[key] = number
    return out


def parse_vmstat(text):
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = int(parts[1])
            except ValueError:
                pass
    return out


def parse_psi(text):
    """/proc/pressure/* -> {"some": {"avg10": float, ...}, "full": {...}}."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if not parts or parts[0] not in ("some", "full"):
            continue
        values = {}
        for item in parts[1:]:
            key, sep, value = item.partition("=")
            if sep:
                try:
                    values[key] = float(value)
                except ValueError:
                    pass
        out[parts[0]] = values
    return out


_BRACKET = re.compile(r"\[([^\]]+)\]")


def parse_bracketed(text):
    """The selected word of a sysfs choice file: "always [madvise] never" -> "madvise"."""
    if text is None:
        return None
    m = _BRACKET.search(text)
    if m:
        return m.group(1).strip()
    words = text.split()
    return words[0] if len(words) == 1 else None


def parse_os_release(text):
    out = {}
    for line in (text or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if not sep or key.startswith("#"):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


_PROC_VERSION = re.compile(r"^Linux version (\S+)")


def parse_proc_version(text):
    """(release, version) from /proc/version: version is the "#115-Ubuntu SMP ..." part (uname -v)."""
    if not text:
        return None, None
    text = text.strip()
    m = _PROC_VERSION.match(text)
    release = m.group(1) if m else None
    hash_at = text.find(" #")
    version = text[hash_at + 1:] if hash_at >= 0 else None
    return release, version


def swap_rates(before, after, seconds):
    """(swap_in, swap_out) pages per second between two /proc/vmstat readings."""
    if not seconds or seconds <= 0:
        return None, None
    rates = []
    for key in ("pswpin", "pswpout"):
        if key not in before or key not in after:
            rates.append(None)
        else:
            rates.append(round(max(0, after[key] - before[key]) / float(seconds), 2))
    return rates[0], rates[1]


def kib_to_mib(value):
    return None if value is None else value // 1024


# ---------------------------------------------------------------- readers (through HostFS)

def _cpu_ids(fs, blocks):
    cpus = None
    text = fs.read(CPU_SYS + "/online")
    if text and text.strip():
        try:
            cpus = decoders.parse_cpulist(text)
        except ValueError:
            cpus = None
    if cpus is None:
        ids = [to_int(b.get("processor")) for b in blocks]
        cpus = sorted(i for i in ids if i is not None)
    return cpus


def read_cpu(fs, unsupported):
    blocks = parse_cpuinfo(fs.read("/proc/cpuinfo", limit=16 * 1024 * 1024))
    cpus = _cpu_ids(fs, blocks)
    cpu = {"model": cpu_model(blocks), "sockets": None, "cores": None, "threads": len(cpus) or None}
    if cpu["model"] is None and cpus:  # arm64: MIDR_EL1 in sysfs (Documentation/arch/arm64/cpu-feature-registers)
        midr = _hex(fs.read("%s/cpu%d/regs/identification/midr_el1" % (CPU_SYS, cpus[0])))
        if midr is not None:
            cpu["model"] = arm_cpu_model("%x" % ((midr >> 24) & 0xFF), "%x" % ((midr >> 4) & 0xFFF))
    if cpu["model"] is None:
        unsupported["cpu.model"] = "no model name (x86) or CPU implementer/part (arm64) in /proc/cpuinfo or sysfs"
    if not cpus:
        unsupported["cpu.threads"] = "no online CPUs in %s/online or /proc/cpuinfo" % CPU_SYS

    packages, cores = set(), set()
    for n in cpus:
        base = "%s/cpu%d/topology/" % (CPU_SYS, n)
        pkg, core = to_int(fs.read(base + "physical_package_id")), to_int(fs.read(base + "core_id"))
        if pkg is not None and core is not None:
            packages.add(pkg)
            cores.add((pkg, core))
    if not packages:  # no sysfs topology: /proc/cpuinfo "physical id" / "core id" (x86)
        for b in blocks:
            pkg, core = to_int(b.get("physical id")), to_int(b.get("core id"))
            if pkg is not None and core is not None:
                packages.add(pkg)
                cores.add((pkg, core))
    if packages:
        cpu["sockets"], cpu["cores"] = len(packages), len(cores)
    else:
        unsupported["cpu.sockets"] = unsupported["cpu.cores"] = "no CPU topology in sysfs or /proc/cpuinfo"

    governors, epps, mins, maxs, curs = {}, {}, [], [], []
    setspeeds, below_max, userspace_unread = [], [], []
    driver = None
    for n in cpus:
        base = "%s/cpu%d/cpufreq/" % (CPU_SYS, n)
        gov = fs.read(base + "scaling_governor")
        if gov is None:
            continue
        governors.setdefault(gov.strip(), []).append(n)
        if gov.strip() == "userspace":
            # The userspace governor holds the frequency written to scaling_setspeed (admin-guide/pm/cpufreq).
            speed, top = to_int(fs.read(base + "scaling_setspeed")), to_int(fs.read(base + "scaling_max_freq"))
            if speed is None or top is None:
                userspace_unread.append(n)
            else:
                setspeeds.append(speed)
                if speed < top:
                    below_max.append(n)
        # Hardware-managed P-states (intel_pstate / amd-pstate active mode): the energy-performance preference
        # steers the hardware's choice (kernel admin-guide/pm/intel_pstate, amd-pstate).
        epp = (fs.read(base + "energy_performance_preference") or "").strip()
        if epp:
            epps.setdefault(epp, []).append(n)
        if driver is None:
            driver = (fs.read(base + "scaling_driver") or "").strip() or None
        for name, bucket in (("scaling_min_freq", mins), ("scaling_max_freq", maxs), ("scaling_cur_freq", curs)):
            value = to_int(fs.read(base + name))
            if value is not None:
                bucket.append(value)
    cpu["governors"] = dict((g, decoders.cpus_to_cpulist(ids)) for g, ids in sorted(governors.items()))
    cpu["scaling_driver"] = driver
    cpu["epp"] = dict((e, decoders.cpus_to_cpulist(ids)) for e, ids in sorted(epps.items()))
    cpu["userspace"] = None
    if "userspace" in governors:
        if userspace_unread:
            unsupported["cpu.userspace"] = "no scaling_setspeed or scaling_max_freq on CPUs %s" % (
                decoders.cpus_to_cpulist(userspace_unread)
            )
        else:
            cpu["userspace"] = {
                "setspeed_mhz": {"min": min(setspeeds) // 1000, "max": max(setspeeds) // 1000},
                "below_max": decoders.cpus_to_cpulist(below_max),
            }
    if not governors:
        unsupported["cpu.governors"] = "no cpufreq under %s/cpu*/cpufreq (VM, or no cpufreq driver)" % CPU_SYS
        unsupported["cpu.scaling_driver"] = unsupported["cpu.governors"]
    if not curs:  # VMs without cpufreq still show a clock in /proc/cpuinfo
        mhz = []
        for b in blocks:
            try:
                mhz.append(float(b["cpu MHz"]) * 1000)
            except (KeyError, ValueError):
                pass
        curs = mhz
    cpu["freq_mhz"] = {
        "min": min(mins) // 1000 if mins else None,
        "max": max(maxs) // 1000 if maxs else None,
        "current_avg": int(round(sum(curs) / len(curs) / 1000.0)) if curs else None,
    }
    for key, values in (("min", mins), ("max", maxs), ("current_avg", curs)):
        if not values:
            unsupported["cpu.freq_mhz." + key] = "no cpufreq scaling_*_freq"
    cpu["boost"] = read_boost(fs, cpus[0] if cpus else 0)
    if cpu["boost"] is None:
        unsupported["cpu.boost"] = "no intel_pstate/no_turbo or cpufreq boost file"
    return cpu


def read_boost(fs, first_cpu=0):
    no_turbo = to_int(fs.read(CPU_SYS + "/intel_pstate/no_turbo"))
    if no_turbo is not None:
        return no_turbo == 0
    for path in (CPU_SYS + "/cpufreq/boost", "%s/cpu%d/cpufreq/boost" % (CPU_SYS, first_cpu)):
        boost = to_int(fs.read(path))
        if boost is not None:
            return boost != 0
    return None


def _node_id(path):
    m = re.search(r"node(\d+)$", path)
    return int(m.group(1)) if m else None


def read_numa(fs, unsupported):
    nodes = []
    paths = [p for p in fs.glob(NODE_SYS + "/node*") if _node_id(p) is not None]
    for path in sorted(paths, key=_node_id):
        cpulist = fs.read(path + "/cpulist")
        try:
            cpus = decoders.cpus_to_cpulist(decoders.parse_cpulist(cpulist)) if cpulist is not None else None
        except ValueError:
            cpus = None
        mem = parse_meminfo(fs.read(path + "/meminfo"))
        nodes.append({
            "id": _node_id(path),
            "cpus": cpus,
            "memory_total_mib": kib_to_mib(mem.get("MemTotal")),
            "memory_free_mib": kib_to_mib(mem.get("MemFree")),
        })
    if not nodes:
        unsupported["numa.nodes"] = "no %s/node* (kernel without NUMA)" % NODE_SYS
    balancing = to_int(fs.read("/proc/sys/kernel/numa_balancing"))
    if balancing is None:
        unsupported["numa.balancing"] = "no /proc/sys/kernel/numa_balancing"
    return {"nodes": nodes, "balancing": None if balancing is None else balancing != 0}


def read_memory(fs, unsupported, meminfo):
    swap_total, swap_free = meminfo.get("SwapTotal"), meminfo.get("SwapFree")
    memory = {
        "total_mib": kib_to_mib(meminfo.get("MemTotal")),
        "available_mib": kib_to_mib(meminfo.get("MemAvailable")),
        "swap_total_mib": kib_to_mib(swap_total),
        "swap_used_mib": None if swap_total is None or swap_free is None else (swap_total - swap_free) // 1024,
        "swap_in_per_s": None,  # filled in by collect() after the sample
        "swap_out_per_s": None,
        "sample_seconds": 0.0,
    }
    for key, source in (("total_mib", "MemTotal"), ("available_mib", "MemAvailable"),
                        ("swap_total_mib", "SwapTotal"), ("swap_used_mib", "SwapFree")):
        if memory[key] is None:
            unsupported["memory." + key] = "no %s in /proc/meminfo" % source
    psi = parse_psi(fs.read("/proc/pressure/memory"))
    memory["psi_some_avg10"] = psi.get("some", {}).get("avg10")
    memory["psi_full_avg10"] = psi.get("full", {}).get("avg10")
    for key in ("some", "full"):
        if memory["psi_%s_avg10" % key] is None:
            unsupported["memory.psi_%s_avg10" % key] = "no /proc/pressure/memory (kernel without PSI, or psi=0)"
    return memory


def read_vm(fs, unsupported):
    vm = {}
    for key in VM_KEYS:
        vm[key] = to_int(fs.read("/proc/sys/vm/" + key))
        if vm[key] is None:
            unsupported["vm." + key] = "no /proc/sys/vm/" + key
    return vm


def read_thp(fs, unsupported):
    base = "/sys/kernel/mm/transparent_hugepage/"
    thp = {"enabled": parse_bracketed(fs.read(base + "enabled")), "defrag": parse_bracketed(fs.read(base + "defrag"))}
    for key in thp:
        if thp[key] is None:
            unsupported["thp." + key] = "no " + base + key
    return thp


def read_hugepages(unsupported, meminfo):
    if "HugePages_Total" not in meminfo:
        unsupported["hugepages"] = "no HugePages_* in /proc/meminfo (kernel without hugetlbfs)"
    return {
        "total": meminfo.get("HugePages_Total", 0),
        "free": meminfo.get("HugePages_Free", 0),
        "size_kb": meminfo.get("Hugepagesize", 0),
    }


def read_irqbalance(fs):
    installed = fs.exists("/usr/sbin/irqbalance") or fs.exists("/usr/bin/irqbalance")
    running = False
    for path in fs.glob("/proc/[0-9]*/comm"):
        if (fs.read(path) or "").strip() == "irqbalance":
            running = True
            break
    return {"installed": installed, "running": running}


def read_tuned(fs):
    """The active TuneD profile (``/etc/tuned/active_profile``, which tuned-adm writes and ``tuned-adm off`` empties):
    ``{"profile": name}``, the name None when TuneD has no profile active. A TuneD profile sets the CPU governor and
    sysctls itself, so host_tuning leaves the governor to it (HOST-CPU-001)."""
    return {"profile": (fs.read("/etc/tuned/active_profile") or "").strip() or None}


def parse_cpumask(text):
    """CPU ids of a kernel cpumask ("00000000,0000000f" -> [0, 1, 2, 3]: comma-separated 32-bit hex words, most
    significant first, as /proc/irq/<n>/affinity_hint prints it); None when it is not a mask."""
    words = (text or "").strip().replace(",", "")
    if not words:
        return None
    try:
        value = int(words, 16)
    except ValueError:
        return None
    cpus, bit = [], 0
    while value:
        if value & 1:
            cpus.append(bit)
        value >>= 1
        bit += 1
    return cpus


PCI_DEVICES = "/sys/bus/pci/devices"
NVIDIA_PCI_VENDOR = "0x10de"


def irq_devices(fs):
    """The NICs and NVIDIA GPUs whose interrupts matter: (name, sysfs device path, kind).

    NICs: every /sys/class/net/<nic>/device (a PCI function; virtual interfaces have none). GPUs: PCI functions of
    vendor 0x10de with class 0x03xxxx (display or 3D controller), so NVSwitches (0x0680) and the GPUs' audio
    functions (0x0403) are left out.
    """
    out = []
    for path in fs.glob("/sys/class/net/*/device"):
        out.append((path.split("/")[-2], path, "nic"))
    for path in fs.glob(PCI_DEVICES + "/*"):
        vendor = (fs.read(path + "/vendor") or "").strip().lower()
        pci_class = (fs.read(path + "/class") or "").strip().lower()
        if vendor == NVIDIA_PCI_VENDOR and pci_class.startswith("0x03"):
            out.append((os.path.basename(path), path, "gpu"))
    return out


def read_irq(fs, unsupported):
    """Interrupt affinity of the NICs' and GPUs' MSI/MSI-X vectors, and which of them are pinned by hand.

    A device's vectors are the files of its sysfs ``msi_irqs`` directory (kernel ABI, sysfs-bus-pci); each one's
    allowed CPUs are ``/proc/irq/<n>/smp_affinity_list`` (Documentation/core-api/irq/irq-affinity.rst). A vector is
    pinned by hand when its CPUs do not cover the CPUs of the device's NUMA node (``numa_node`` -1 or absent: every
    online CPU), unless the driver chose that mask itself (it equals ``/proc/irq/<n>/affinity_hint``). While
    irqbalance runs, narrow masks are usually its own work: rule HOST-CPU-004 and the host_tuning role look at
    ``pinned`` only when irqbalance is stopped.
    """
    online = None
    text = fs.read(CPU_SYS + "/online")
    if text and text.strip():
        try:
            online = set(decoders.parse_cpulist(text))
        except ValueError:
            online = None
    node_cpus = {}
    seen, pinned = set(), []
    info = {"devices": 0, "irqs": 0, "pinned": pinned, "driver_set": 0, "unreadable": 0}
    for name, path, _kind in irq_devices(fs):
        irqs = []
        for irq_path in fs.glob(path + "/msi_irqs/*"):
            number = os.path.basename(irq_path)
            if number.isdigit() and int(number) not in seen:
                irqs.append(int(number))
        if not irqs:
            continue
        info["devices"] += 1
        node = to_int(fs.read(path + "/numa_node"))
        if node is not None and node >= 0 and node not in node_cpus:
            cpulist = fs.read("%s/node%d/cpulist" % (NODE_SYS, node))
            try:
                node_cpus[node] = set(decoders.parse_cpulist(cpulist)) if cpulist and cpulist.strip() else None
            except ValueError:
                node_cpus[node] = None
        local = node_cpus.get(node) if node is not None and node >= 0 else None
        local = local or online
        for irq in sorted(irqs):
            seen.add(irq)
            info["irqs"] += 1
            text = fs.read("/proc/irq/%d/smp_affinity_list" % irq)
            try:
                allowed = set(decoders.parse_cpulist(text)) if text and text.strip() else None
            except ValueError:
                allowed = None
            if allowed is None or local is None:
                info["unreadable"] += 1
                continue
            if local <= allowed:
                continue
            hint = parse_cpumask(fs.read("/proc/irq/%d/affinity_hint" % irq))
            if hint and set(hint) == allowed:
                info["driver_set"] += 1
                continue
            pinned.append({"irq": irq, "device": name, "cpus": decoders.cpus_to_cpulist(allowed),
                           "numa_node": node if node is not None and node >= 0 else None})
    if info["unreadable"]:
        unsupported["irq.pinned"] = ("%d of %d NIC/GPU IRQs: no readable /proc/irq/<n>/smp_affinity_list or CPU list"
                                     % (info["unreadable"], info["irqs"]))
    return info


def read_kernel(fs, unsupported):
    release = (fs.read("/proc/sys/kernel/osrelease") or "").strip() or None
    version = (fs.read("/proc/sys/kernel/version") or "").strip() or None
    v_release, v_version = parse_proc_version(fs.read("/proc/version"))
    kernel = {"release": release or v_release, "version": version or v_version}
    for key in kernel:
        if kernel[key] is None:
            unsupported["kernel." + key] = "no /proc/sys/kernel/os%s or /proc/version" % key
    return kernel


def read_os(fs, unsupported):
    data = parse_os_release(fs.read("/etc/os-release") or fs.read("/usr/lib/os-release"))
    if not data:
        unsupported["os"] = "no /etc/os-release or /usr/lib/os-release"
    return {"id": data.get("ID"), "version_id": data.get("VERSION_ID"), "pretty_name": data.get("PRETTY_NAME")}


# ---------------------------------------------------------------- everything

def collect(fs, run=None, sample_seconds=1.0, kernel_log="auto", kernel_log_lines=5000, kernel_log_since_hours=24,
            kernel_log_file=klog.DEFAULT_KERNEL_LOG_FILE, clock=time.monotonic, sleep=time.sleep, now=None,
            meanwhile=None):
    """The ``host`` dict of the host_info module.

    /proc/vmstat is read first and again after everything else, at least ``sample_seconds`` later, so the
    swap rates cost only the time the other reads did not already take. ``meanwhile`` (a callable, e.g. the
    audit's GPU and NIC reads) runs inside the sample too, right after the first read.
    """
    unsupported = {}
    started = clock()
    vmstat_before = parse_vmstat(fs.read("/proc/vmstat")) if sample_seconds > 0 else {}
    if meanwhile is not None:
        meanwhile()

    meminfo = parse_meminfo(fs.read("/proc/meminfo"))
    host = {
        "cpu": read_cpu(fs, unsupported),
        "numa": read_numa(fs, unsupported),
        "memory": read_memory(fs, unsupported, meminfo),
        "vm": read_vm(fs, unsupported),
        "thp": read_thp(fs, unsupported),
        "hugepages": read_hugepages(unsupported, meminfo),
        "memlock": memlock.read_memlock(fs, unsupported),
        "irqbalance": read_irqbalance(fs),
        "tuned": read_tuned(fs),
        "irq": read_irq(fs, unsupported),
        "kernel": read_kernel(fs, unsupported),
        "os": read_os(fs, unsupported),
        "kernel_log": klog.read_kernel_log(fs, run, kernel_log, kernel_log_file, kernel_log_lines,
                                           kernel_log_since_hours, now),
    }

    memory = host["memory"]
    if sample_seconds > 0:
        rest = sample_seconds - (clock() - started)
        if rest > 0:
            sleep(rest)
        elapsed = clock() - started
        vmstat_after = parse_vmstat(fs.read("/proc/vmstat"))
        memory["swap_in_per_s"], memory["swap_out_per_s"] = swap_rates(vmstat_before, vmstat_after, elapsed)
        memory["sample_seconds"] = round(elapsed, 3)
        for key in ("swap_in_per_s", "swap_out_per_s"):
            if memory[key] is None:
                unsupported["memory." + key] = "no pswpin/pswpout in /proc/vmstat"
    else:
        memory["swap_in_per_s"] = memory["swap_out_per_s"] = None
        memory["sample_seconds"] = 0.0
        unsupported["memory.swap_in_per_s"] = unsupported["memory.swap_out_per_s"] = "sampling off (sample_seconds=0)"
    host["unsupported"] = unsupported
    return host
