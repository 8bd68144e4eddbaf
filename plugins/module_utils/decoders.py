# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Pure decoders for values NVML and the kernel hand back as numbers or bitmasks.

Nothing here touches the host: every function maps a value to a value, so the rule
catalog, the modules and the tests share one interpretation.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# nvmlClocksEventReason* bits (nvml.h); the same bits were called ClocksThrottleReason* before driver 535.
CLOCK_EVENT_REASONS = (
    (0x0000000000000001, "gpu_idle"),
    (0x0000000000000002, "applications_clocks_setting"),
    (0x0000000000000004, "sw_power_cap"),
    (0x0000000000000008, "hw_slowdown"),
    (0x0000000000000010, "sync_boost"),
    (0x0000000000000020, "sw_thermal_slowdown"),
    (0x0000000000000040, "hw_thermal_slowdown"),
    (0x0000000000000080, "hw_power_brake_slowdown"),
    (0x0000000000000100, "display_clock_setting"),
)

# Reasons that mean the GPU runs slower than it could because of power or heat.
THROTTLE_REASONS = frozenset((
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
))

ARCHITECTURES = {
    2: "kepler",
    3: "maxwell",
    4: "pascal",
    5: "volta",
    6: "turing",
    7: "ampere",
    8: "ada",
    9: "hopper",
    10: "blackwell",
    13: "rubin",
}

COMPUTE_MODES = {
    0: "default",
    1: "exclusive_thread",
    2: "prohibited",
    3: "exclusive_process",
}


def decode_clock_event_reasons(mask):
    """Return the names of the set bits of an NVML clock event (throttle) reasons mask.

    Bits NVML may add later are kept as ``unknown_0x...`` rather than dropped.
    """
    if mask is None:
        return None
    mask = int(mask)
    if mask < 0:
        raise ValueError("clock event reasons mask must be >= 0, got %d" % mask)
    names = []
    known = 0
    for bit, name in CLOCK_EVENT_REASONS:
        known |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append("unknown_0x%x" % bit)
            rest &= ~bit
        bit <<= 1
    return names


def throttling_reasons(names):
    """The subset of decoded reasons that are power or thermal throttling."""
    if names is None:
        return None
    return [n for n in names if n in THROTTLE_REASONS]


def cuda_version_string(value):
    """NVML encodes CUDA versions as major*1000 + minor*10 (12040 -> "12.4")."""
    if value is None:
        return None
    value = int(value)
    if value <= 0:
        raise ValueError("CUDA version must be a positive integer, got %d" % value)
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def architecture_name(value):
    if value is None:
        return None
    return ARCHITECTURES.get(int(value), "unknown_%d" % int(value))


def compute_mode_name(value):
    if value is None:
        return None
    return COMPUTE_MODES.get(int(value), "unknown_%d" % int(value))


def mask_words_to_cpus(words, word_bits=64):
    """CPU ids set in an array of bitmask words (NVML cpu affinity: unsigned long[], word 0 = CPUs 0..63)."""
    cpus = []
    for i, word in enumerate(words):
        word = int(word)
        bit = 0
        while word:
            if word & 1:
                cpus.append(i * word_bits + bit)
            word >>= 1
            bit += 1
    return cpus


def cpus_to_cpulist(cpus):
    """[0, 1, 2, 5, 7, 8] -> "0-2,5,7-8" (the kernel's cpulist format)."""
    cpus = sorted(set(int(c) for c in cpus))
    parts = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        parts.append(str(cpus[i]) if i == j else "%d-%d" % (cpus[i], cpus[j]))
        i = j + 1
    return ",".join(parts)


def to_int(text):
    """int of a sysfs/procfs value ("10\\n" -> 10); None when absent or not a number."""
    if text is None:
        return None
    try:
        return int(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


_CPULIST_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def parse_cpulist(text):
    """Parse the kernel's cpulist format ("0-3,8,10-15:2") into a sorted list of CPU ids.

    Raises ValueError on anything else, naming the offending item.
    """
    if text is None:
        return None
    text = text.strip()
    if not text:
        return []
    cpus = set()
    for item in text.split(","):
        item = item.strip()
        m = _CPULIST_ITEM.match(item)
        if not m:
            raise ValueError("invalid cpulist item %r in %r" % (item, text))
        start = int(m.group(1))
        end = int(m.group(2)) if m.group(2) is not None else start
        step = int(m.group(3)) if m.group(3) is not None else 1
        if end < start or step < 1:
            raise ValueError("invalid cpulist range %r in %r" % (item, text))
        cpus.update(range(start, end + 1, step))
    return sorted(cpus)


def pcie_link(gen, width):
    """Human form of a PCIe link, e.g. (4, 16) -> "Gen4 x16"; None when either part is unknown."""
    if gen is None or width is None:
        return None
    return "Gen%d x%d" % (int(gen), int(width))


def pcie_downtrained(gen_current, width_current, gen_max, width_max):
    """True when the link runs below its maximum generation or width; None when unknown.

    An idle GPU lowers its link generation to save power: callers decide whether the GPU was busy.
    """
    if None in (gen_current, width_current, gen_max, width_max):
        return None
    return int(gen_current) < int(gen_max) or int(width_current) < int(width_max)


_KMOD_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def parse_kernel_module_version(text):
    """Version from /proc/driver/nvidia/version or /sys/module/nvidia/version; None when absent."""
    if not text:
        return None
    m = _KMOD_VERSION.search(text)
    if m:
        return m.group(1)
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    if re.match(r"^\d+\.\d+(?:\.\d+)?$", first):
        return first
    return None


def driver_branch(version):
    """"550.90.07" -> 550; None when not a driver version."""
    if not version:
        return None
    m = re.match(r"^(\d+)\.", str(version))
    return int(m.group(1)) if m else None
