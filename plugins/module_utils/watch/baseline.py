# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The hardware the watch saw at install, and what a later run no longer sees.

Without ``health.expected_gpu_count`` a GPU that is gone from the PCI bus after a reset or a reboot leaves NVML and
the bus agreeing on one GPU fewer, and GPU-HLT-003 passes; a node drained for it could be resumed with 7 GPUs. So
the checker records a baseline on its first complete run - the watch role runs it once at install - in
``watch-baseline.json`` next to its state file: the GPUs (count and PCI addresses), the NVSwitches (PCI functions and
the InfiniBand bridges through which Blackwell's are managed) and the RDMA ports that were up, with their rates.

Later runs are judged against it (``compare``): with no ``health.expected_gpu_count`` in the policy, the baseline's
GPU count is the expected count of GPU-HLT-003 (critical, on the watch's drain list); GPUs, NVSwitches and RDMA
ports missing or slower are logged (one journal line when the difference changes) and exported
(``gpufleet_watch_baseline*`` series). ``gpufleet-watch --record-baseline`` records it again after a deliberate
hardware change; removing the watch (``watch_state: absent``) removes it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpufleet.tuning.plugins.module_utils import pci as pci_bus
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import read_record, write_atomic

VERSION = 1
FILE_NAME = "watch-baseline.json"
# GPUs given away on purpose (bound for a VM) are not this host's; GPU-HLT-003 skips them alike.
_NOT_THIS_HOSTS = ("vfio-pci", "pci-stub")


def path_for(state_file):
    return os.path.join(os.path.dirname(state_file), FILE_NAME)


def _gpu_addresses(facts):
    """Sysfs addresses (0000:3b:00.0) of this host's GPUs: NVML's usable ones and the bus's NVIDIA GPUs."""
    gpu = facts.get("gpu") or {}
    out = set()
    if (gpu.get("nvml") or {}).get("available"):
        for g in gpu.get("gpus") or []:
            if not g.get("lost") and not g.get("error"):
                out.add(pci_bus.sysfs_address(g.get("pci_bus_id")))
    bus = gpu.get("pci") or {}
    if bus.get("available"):
        for f in bus.get("gpus") or []:
            if not f.get("virtual") and f.get("driver") not in _NOT_THIS_HOSTS:
                out.add(f.get("address"))
    return sorted(a for a in out if a)


def _usable_gpus(facts):
    gpu = facts.get("gpu") or {}
    if not (gpu.get("nvml") or {}).get("available"):
        return None
    return len([g for g in gpu.get("gpus") or [] if not g.get("lost") and not g.get("error")])


def _nvswitches(facts):
    bus = (facts.get("gpu") or {}).get("pci") or {}
    if not bus.get("available"):
        return None
    return len(bus.get("nvswitches") or []) + len(bus.get("nvswitch_bridges") or [])


def _rdma_ports(facts):
    """{"mlx5_0/1": rate_gbps} of the InfiniBand/RoCE ports that are ACTIVE."""
    ports = (facts.get("network") or {}).get("infiniband")
    if ports is None:
        return None
    return dict(("%s/%s" % (p.get("device"), p.get("port")), p.get("rate_gbps"))
                for p in ports if (p.get("state") or "").upper() == "ACTIVE")


def snapshot(facts):
    """What this run sees, in the baseline's shape (None where a part could not be read)."""
    return {"gpu_count": _usable_gpus(facts), "gpus": _gpu_addresses(facts), "nvswitches": _nvswitches(facts),
            "rdma_ports": _rdma_ports(facts)}


def record(facts, now, host):
    base = snapshot(facts)
    base.update({"version": VERSION, "recorded": now, "host": host})
    return base


def read(path):
    """The recorded baseline, or None (none recorded, unreadable, another version)."""
    return read_record(path, VERSION)


def write(path, base):
    write_atomic(path, json.dumps(base, indent=1, sort_keys=True) + "\n", mode=0o644)


def compare(base, facts):
    """What the baseline had that this run does not see: a sorted list of one-line differences."""
    if not base:
        return []
    now = snapshot(facts)
    out = []
    if now["gpu_count"] is not None and base.get("gpu_count") is not None and now["gpu_count"] < base["gpu_count"]:
        out.append("%d usable GPU(s), %d at install" % (now["gpu_count"], base["gpu_count"]))
    if now["gpu_count"] is not None:
        for address in sorted(set(base.get("gpus") or []) - set(now["gpus"])):
            out.append("GPU %s missing (on the PCI bus and usable at install)" % address)
    if now["nvswitches"] is not None and (base.get("nvswitches") or 0) > now["nvswitches"]:
        out.append("%d NVSwitch(es), %d at install" % (now["nvswitches"], base["nvswitches"]))
    if now["rdma_ports"] is not None:
        for port, rate in sorted((base.get("rdma_ports") or {}).items()):
            if port not in now["rdma_ports"]:
                out.append("RDMA port %s not active (active at %s Gb/s at install)" % (port, rate))
            elif rate and (now["rdma_ports"][port] or 0) < rate:
                out.append("RDMA port %s at %s Gb/s, %s Gb/s at install" % (port, now["rdma_ports"][port], rate))
    return out


def expected_gpu_count(policy, base):
    """The policy with health.expected_gpu_count from the baseline where the policy leaves it unset (a copy)."""
    if not base or base.get("gpu_count") is None or policy["health"].get("expected_gpu_count") is not None:
        return policy
    out = dict(policy)
    out["health"] = dict(policy["health"], expected_gpu_count=int(base["gpu_count"]))
    return out


def summary(base):
    """One line: what the baseline holds."""
    if not base:
        return "no baseline recorded"
    ports = base.get("rdma_ports")
    return "%s GPU(s), %s NVSwitch(es), %s active RDMA port(s)" % (
        base.get("gpu_count"), base.get("nvswitches"), len(ports) if ports is not None else "unknown")
