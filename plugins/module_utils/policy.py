# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The audit policy: every threshold the rules use, with its documented default, in one place.

Operators override it per group or host with the ``gpufleet_policy`` variable (a partial dict, merged
recursively over DEFAULTS) and per run with ``gpufleet audit --policy FILE``. ``validate`` rejects unknown
keys, wrong types and impossible values with the key's path in the message, before anything runs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import ipaddress
import re

SEVERITIES = ("critical", "high", "medium", "low", "info")
AREAS = ("memory", "cpu", "network", "power", "software", "health")

# key -> (default, type, doc). Nested dicts are sections. Types: int, float, number, bool, str, list, dict,
# "severity", "version", or a tuple of allowed values. None as a default means "not set" (rule skips that part).
SPEC = {
    "min_severity": ("info", "severity",
                     "Rules whose severity is below this are not evaluated (reported as skip)."),
    "rules": ({}, "dict",
              "Per-rule settings by id: {enabled: false} turns a rule off, {severity: low} re-grades it."),
    "site": (None, "str", "This host's site (usually set per inventory group), e.g. ap_southeast."),
    "sites": ({}, "dict",
              "Declared long-haul links per site: {SITE: {links: {PEER_SITE: {rtt_ms: 180, bandwidth_gbps: 1, "
              "prefixes: [CIDR, ...]}}}}; prefixes (optional) are the peer's networks, for per-route congestion "
              "control (network.congestion_control_scope: routes or follow)."),
    "peers": ([], "list",
              "Measured links: [{site: us_east, host: 198.51.100.7, port: 22, bandwidth_gbps: 1}] - the audit "
              "times a TCP connect to each and uses the measured RTT instead of a declared one."),
    "memory": {
        "gpu_full_pct": (95.0, "number", "A GPU whose memory use is at or above this percent counts as full."),
        "swap_rate_pages_per_s": (10.0, "number", "Swap-in plus swap-out pages per second that count as swapping."),
        "psi_some_avg10": (10.0, "number",
                           "Memory pressure (PSI some avg10, percent) that counts as swapping when swap is in use."),
        "max_swappiness": (10, "int", "Highest acceptable vm.swappiness on a GPU server."),
        "thp_enabled": (["always", "madvise", "never"], "list",
                        "Acceptable transparent hugepage modes (enabled); the stalls come from defrag, judged by "
                        "memory.thp_defrag."),
        "thp_defrag": (["madvise", "defer", "defer+madvise", "never"], "list",
                       "Acceptable transparent hugepage defrag modes: 'always' stalls allocations in direct reclaim "
                       "and compaction (kernel admin-guide/mm/transhuge)."),
        "min_memlock_kb": (None, "int",
                           "Lowest acceptable memlock limit for GPU users in KiB; null means unlimited is required."),
        "overcommit_memory": ([0, 1], "list", "Acceptable vm.overcommit_memory values (2 breaks CUDA allocations)."),
    },
    "cpu": {
        "governor": ("performance", "str", "Required CPU frequency governor."),
        "hwp_epp": (["performance", "balance_performance"], "list",
                    "Energy-performance preferences with which the powersave governor of a hardware-managed P-state "
                    "driver (intel_pstate, amd-pstate-epp: the distributions' default) is a low warning instead of "
                    "a failure; [] makes cpu.governor the only passing state."),
        "min_cpus_per_gpu": (12, "int",
                             "Fewest logical CPUs (vCPUs, hardware threads) per GPU for data loading and launch "
                             "threads. 12 is the least the big clouds' 8-GPU shapes give (Azure ND H100 v5: 96 vCPUs; "
                             "AWS p5.48xlarge 192, Google Cloud a3-highgpu-8g 208)."),
        "min_cores_per_gpu": (None, "int",
                              "Optional floor of physical CPU cores per GPU as well (null: not checked); clouds sell "
                              "vCPUs, so cpu.min_cpus_per_gpu is the one that applies everywhere."),
        "numa_balancing": (False, "bool", "Whether automatic NUMA balancing may be on."),
        "irqbalance": ("any", ("running", "stopped", "any"),
                       "Required irqbalance state; any leaves it to the owner. With running, NIC and GPU IRQs pinned "
                       "by hand (affinity narrower than the device's NUMA node) pass: irqbalance would move them."),
        "fabric_nic_min_mbps": (100000, "int",
                                "NICs at or above this speed (and InfiniBand ports) are GPU fabric NICs for the "
                                "NUMA locality check."),
    },
    "network": {
        "interfaces": (None, "list",
                       "NICs to audit (null: every physical NIC) and the only NICs network_tuning changes (null: "
                       "none; naming a NIC that carries the default route or the connection is consent to tune it)."),
        "mtu": ({}, "dict",
                "The MTU of the network each NIC is on, by name or glob: {eth0: 1460, 'ens1f*': 9000} (GCP VPC 1460, "
                "AWS 9001, VXLAN 1450). The NIC must have exactly it; network_tuning sets it on named NICs. The exact "
                "name wins, then the longest glob; null for a key removes a broader one (a host or group layer)."),
        "min_mtu": (None, "int",
                    "Lowest acceptable MTU on NICs that network.mtu does not cover (a jumbo-frame fabric: 9000); "
                    "null: none declared, only an MTU below the IPv6 minimum 1280 is flagged."),
        "offloads": (["tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload",
                      "rx-checksumming", "tx-checksumming", "scatter-gather"], "list",
                     "Offloads that must be on where the NIC can change them."),
        "long_link_rtt_ms": (50.0, "number", "Links at or above this RTT are long links."),
        "buffer_factor": (4.0, "number",
                          "TCP buffer maximum must be this many bandwidth-delay products (the kernel advertises about "
                          "half of it as window)."),
        "max_buffer_bytes": (268435456, "int", "Cap on the TCP buffer size the audit asks for (bytes)."),
        "congestion_control": ("bbr", "str", "Congestion control wanted on long links when the kernel offers it."),
        "congestion_control_scope": ("host", ("host", "routes", "follow"),
                                     "Where the long-link congestion control applies: host (tcp_congestion_control, "
                                     "every connection), routes (congctl on routes to the long-haul peers' "
                                     "prefixes, sites.SITE.links.PEER.prefixes, pinned to today's gateway; local "
                                     "traffic keeps the default) or follow (the same connections, through a table "
                                     "that follows the routing table: gateway changes, failover, ECMP)."),
        "default_bandwidth_gbps": (1.0, "number", "Bandwidth assumed for a measured link that does not declare one."),
        "rdma": {
            "expected_rate_gbps": ({}, "dict",
                                   "NET-RDMA-002: the rate each RDMA port must run at, in Gb/s, by device, "
                                   "device/port or glob: {'mlx5_*': 400, mlx5_bond_0: 200}. The exact name wins, "
                                   "then the longest glob; null for a key removes a broader one. A port no key "
                                   "covers is held to the rate most of the host's ports of its link layer run at."),
            "exclude": ([], "list",
                        "RDMA ports NET-RDMA-001..003 do not judge: globs matched against the device (mlx5_4), "
                        "device/port (mlx5_4/1) and the port's netdevs (ib4, bond0) - an unused second port, a "
                        "storage HCA watched elsewhere."),
        },
        "link_streams": (4, "int",
                         "Parallel TCP streams the long-haul transfers use: `gpufleet links` measures each declared "
                         "link with one stream and with this many (--streams overrides it)."),
        "link_min_pct": (50.0, "number",
                         "NET-LINK-001: a measured link delivering less than this percent of its declared bandwidth, "
                         "while the hosts' buffers allow it, is limited by the path or the provider."),
    },
    "power": {
        "min_power_limit_pct": (100.0, "number",
                                "Lowest acceptable power limit, in percent of the GPU's default, when no cap is "
                                "declared (limit_w, limit_pct)."),
        "limit_w": (None, "number",
                    "Declared power cap in watts (per group or host): the limit must be exactly this, clamped to "
                    "the GPU's min/max; null: no cap declared. At most one of limit_w and limit_pct."),
        "limit_pct": (None, "number",
                      "Declared power cap in percent of the GPU's default limit; null: no cap declared. At most one "
                      "of limit_w and limit_pct."),
        "temp_margin_c": (5, "int", "Flag GPUs within this many degrees of their slowdown temperature."),
        "busy_util_pct": (30, "int", "A GPU at or above this utilization is busy (for the PCIe link check)."),
        "ecc": (True, "bool", "Whether ECC must be on."),
    },
    "software": {
        "driver_min_version": ("535.0", "version", "Oldest acceptable driver version."),
        "driver_branch": (None, "int", "Pinned driver branch (e.g. 550); null means any branch."),
        "imex_per_job": (False, "bool",
                         "SW-IMEX-001: false: nvidia-imex runs as a host service across the NVLink domain or "
                         "partition (the IMEX guide's domain-wide and partition-wide models), so it must always run; "
                         "true: the job launcher starts it for each job (a Slurm prolog, as NVIDIA Mission Control "
                         "recommends, or the Kubernetes DRA driver's ComputeDomains), so only a running daemon's node "
                         "list is judged."),
    },
    "health": {
        "xid_min_severity": ("low", "severity", "Xid events below this severity are ignored."),
        "aer_corrected_max": (100, "int", "Corrected PCIe AER errors tolerated in the kernel log window."),
        "expected_gpu_count": (None, "int",
                               "GPUs this host should have (set per group or host); fewer usable GPUs in NVML is "
                               "critical (GPU-HLT-003). null: not checked, only GPUs on the PCI bus that NVML does "
                               "not list are."),
        "fabric_boot_grace_s": (600, "int",
                                "GPU-FAB-001: seconds after boot during which a GPU fabric still in training is only "
                                "a warning; later, with fabric manager (or NVLSM) not running where the host needs "
                                "it, it fails at high (the fabric never completes: cudaErrorSystemNotReady)."),
    },
    "probe": {
        "gpu_idle_pct": (50, "number",
                         "HOST-BAL-001: a GPU whose utilization, averaged over the probe's sample, is below this "
                         "percent is idle enough to be waiting for its input."),
        "cpu_saturated_pct": (90, "number",
                              "HOST-BAL-001: the CPUs a GPU process may run on count as saturated at or above this "
                              "busy percent over the sample (/proc/stat of those CPUs, or the process's own CPU "
                              "time spread over them)."),
        "far_numa_pct": (50, "number",
                         "HOST-BAL-002: a GPU process with at least this share of its CPU time (its threads by the "
                         "CPU they last ran on) off its GPU's NUMA node runs on the far node."),
    },
    "watch": {
        "interval_seconds": (300, "int",
                             "How often the on-host checker (role watch) runs; node_exporter serves its last "
                             "result in between."),
        "randomized_delay_seconds": (60, "int",
                                     "Random delay added to each timer run (systemd RandomizedDelaySec), so a fleet "
                                     "does not read its GPUs and call slurmctld in the same second."),
        "textfile_dir": ("/var/lib/prometheus/node-exporter", "str",
                         "The directory of node_exporter's textfile collector (the default of Debian's and "
                         "Ubuntu's prometheus-node-exporter); the checker writes gpufleet.prom there."),
        "textfile_owner": (None, "str",
                           "The one user besides root that may own and write watch.textfile_dir (a user name or "
                           "uid), where node_exporter's package makes that directory its user's; null: it must be "
                           "root's. The checker runs as root and refuses a directory any other user can write, or "
                           "a world-writable one (that user could redirect its write to another file)."),
        "state_file": ("/var/lib/gpufleet/watch-state.json", "str",
                       "The checker's last findings, to log what changed between runs."),
        "probe_seconds": (0, "number",
                          "Run the balance probe (HOST-BAL-001..004) for this many seconds in each watch run, so a "
                          "job starved by its CPUs shows up between audits; 0: not (the rules then skip)."),
        "problem_severity": ("critical", "severity",
                             "A finding failing at or above this severity is a problem: the node-problem-detector "
                             "plugin exits 1 and the checker's journal line names it. Slurm drains follow "
                             "watch.slurm.drain_severity and the drain rules only."),
        "slurm": {
            "drain": (False, "bool", "Drain this host's Slurm node on a problem (scontrol, reason 'gpufleet: ...')."),
            "resume": (False, "bool",
                       "Resume a node gpufleet drained once a complete run finds no problem; a node drained by "
                       "anyone else is never resumed."),
            "max_drained_fraction": (0.1, "number",
                                     "Circuit breaker: no drain while the other nodes of the node's partition that "
                                     "take no new jobs (drained, draining, down or failing, by anyone) are this "
                                     "fraction of it or more."),
            "min_available_nodes": (1, "int",
                                    "Circuit breaker: no drain that would leave fewer than this many nodes of the "
                                    "node's partition taking jobs. 1: gpufleet never drains a partition's last "
                                    "available node (that stops the partition; a person decides); 0: no floor."),
            "drain_severity": ("high", "severity",
                               "The drain rules (watch/drain.py: GPU lost or needing a reset, fatal Xid/SXid, "
                               "uncorrectable ECC, row-remap failure, pending retirement, NVLink down, fabric not "
                               "ready, GPU count short) drain the node when they fail at or above this severity; no "
                               "other rule ever drains."),
            "node_name": (None, "str", "This host's Slurm NodeName; null: the short host name."),
        },
    },
}


class PolicyError(ValueError):
    """A policy that cannot be used; the message names the key path. ``problems``: every problem found, one line
    each naming its key path (the message alone when it was raised for one); the message lists them all."""

    def __init__(self, message, problems=None):
        super().__init__(message)
        self.problems = list(problems) if problems else [message]


def _raise_all(problems):
    """PolicyError listing every problem: one alone is its own message; several, a count then one per line."""
    if len(problems) == 1:
        raise PolicyError(problems[0])
    if problems:
        lines = "\n".join("  " + p for p in problems)
        raise PolicyError("policy: %d problems:\n%s" % (len(problems), lines), problems)


def _defaults(spec):
    out = {}
    for key, value in spec.items():
        out[key] = _defaults(value) if isinstance(value, dict) else copy.deepcopy(value[0])
    return out


DEFAULTS = _defaults(SPEC)


def merge(base, override):
    """Recursive merge: dicts merge, everything else is replaced."""
    out = copy.deepcopy(base)
    for key, value in (override or {}).items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _version_ok(value):
    parts = str(value).split(".")
    return bool(parts) and all(p.isdigit() for p in parts)


def _type_problem(path, value, kind):
    """The problem with one value of a key of type ``kind`` (SPEC's types), or None."""
    if value is None:
        return None
    ok = True
    if isinstance(kind, tuple):
        if value not in kind:
            return "policy.%s: %r is not one of %s" % (path, value, ", ".join(map(str, kind)))
        return None
    if kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "str":
        ok = isinstance(value, str)
    elif kind == "list":
        ok = isinstance(value, list)
    elif kind == "dict":
        ok = isinstance(value, dict)
    elif kind == "severity":
        if value not in SEVERITIES:
            return "policy.%s: %r is not a severity (%s)" % (path, value, ", ".join(SEVERITIES))
    elif kind == "version":
        ok = _version_ok(value)
    if not ok:
        return "policy.%s: expected %s, got %r (%s)" % (path, kind, value, type(value).__name__)
    if kind in ("int", "number") and value < 0:
        return "policy.%s: must be >= 0, got %r" % (path, value)
    return None


def _validate_section(spec, data, prefix, problems):
    """``data`` without the keys that have a problem (each appended to ``problems``), so that the checks of the
    merged policy see well-typed values only."""
    if not isinstance(data, dict):
        problems.append("policy%s: expected a mapping, got %r" % ("." + prefix if prefix else "", data))
        return {}
    clean = {}
    for key, value in data.items():
        path = "%s.%s" % (prefix, key) if prefix else str(key)
        if key not in spec:
            problems.append("policy.%s: unknown key (known: %s)" % (path, ", ".join(sorted(spec))))
            continue
        entry = spec[key]
        if isinstance(entry, dict):
            section = _validate_section(entry, value, path, problems)
            if isinstance(value, dict):
                clean[key] = section
            continue
        problem = _type_problem(path, value, entry[1])
        if problem:
            problems.append(problem)
        else:
            clean[key] = value
    return clean


def _validate_prefixes(path, prefixes, problems):
    """A list of IPv4/IPv6 networks in CIDR notation (host bits zero), or null."""
    if prefixes is None:
        return
    if not isinstance(prefixes, list):
        problems.append("policy.%s: expected a list of CIDR networks, got %r" % (path, prefixes))
        return
    for i, prefix in enumerate(prefixes):
        try:
            if not isinstance(prefix, str):
                raise TypeError("not a string")
            ipaddress.ip_network(prefix)
        except (TypeError, ValueError) as exc:
            problems.append("policy.%s[%d]: %r is not a CIDR network such as 198.51.100.0/24 or 2001:db8::/32 (%s)"
                            % (path, i, prefix, exc))


def _validate_link(path, link, problems):
    if not isinstance(link, dict):
        problems.append("policy.%s: expected {rtt_ms, bandwidth_gbps, prefixes?}" % path)
        return
    for key in link:
        if key not in ("rtt_ms", "bandwidth_gbps", "prefixes"):
            problems.append("policy.%s.%s: unknown key (known: bandwidth_gbps, prefixes, rtt_ms)" % (path, key))
    _validate_prefixes(path + ".prefixes", link.get("prefixes"), problems)
    for key in ("rtt_ms", "bandwidth_gbps"):
        value = link.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            problems.append("policy.%s.%s: must be a number > 0, got %r" % (path, key, value))


def _validate_links(policy, problems):
    for site, conf in (policy.get("sites") or {}).items():
        if not isinstance(conf, dict):
            problems.append("policy.sites.%s: expected a mapping with 'links'" % site)
            continue
        for key in conf:
            if key != "links":
                problems.append("policy.sites.%s.%s: unknown key (known: links)" % (site, key))
        links = conf.get("links") or {}
        if not isinstance(links, dict):
            problems.append("policy.sites.%s.links: expected a mapping {PEER_SITE: {rtt_ms, bandwidth_gbps}}, got %r"
                            % (site, links))
            continue
        for peer, link in links.items():
            _validate_link("sites.%s.links.%s" % (site, peer), link, problems)
    for i, peer in enumerate(policy.get("peers") or []):
        path = "peers[%d]" % i
        if not isinstance(peer, dict) or not peer.get("host") or not peer.get("site"):
            problems.append("policy.%s: expected {site, host, port?, bandwidth_gbps?}" % path)
            continue
        for key in peer:
            if key not in ("site", "host", "port", "bandwidth_gbps"):
                problems.append("policy.%s.%s: unknown key (known: bandwidth_gbps, host, port, site)" % (path, key))
        port = peer.get("port", 22)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            problems.append("policy.%s.port: must be 1-65535, got %r" % (path, port))


def _validate_mtu(policy, problems):
    """network.mtu: {name or glob: MTU or null}; MTUs and network.min_mtu between 68 (IPv4 minimum) and 65535."""
    net = policy.get("network") or {}
    for key, value in (net.get("mtu") or {}).items():
        path = "network.mtu.%s" % key
        if not isinstance(key, str) or not key.strip():
            problems.append("policy.network.mtu: keys are interface names or globs (eth0, 'ens1f*'), got %r" % key)
            continue
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 68 <= value <= 65535:
            problems.append("policy.%s: an MTU is an integer from 68 to 65535 (or null), got %r" % (path, value))
    value = net.get("min_mtu")
    if value is not None and not 68 <= value <= 65535:
        problems.append("policy.network.min_mtu: an MTU is an integer from 68 to 65535 (or null), got %r" % value)


def _validate_rdma(policy, problems):
    """network.rdma: expected_rate_gbps {device, device/port or glob: Gb/s or null}, exclude [globs]."""
    rdma = (policy.get("network") or {}).get("rdma") or {}
    for key, value in (rdma.get("expected_rate_gbps") or {}).items():
        if not isinstance(key, str) or not key.strip():
            problems.append("policy.network.rdma.expected_rate_gbps: keys are RDMA devices, device/port or globs "
                            "(mlx5_0, 'mlx5_0/1', 'mlx5_*'), got %r" % (key,))
        elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                    or not 0 < value <= 3200):
            problems.append("policy.network.rdma.expected_rate_gbps.%s: a rate in Gb/s, a number > 0 and <= 3200 "
                            "(400 for NDR 4X, 200 for HDR 4X or a 2 x 100 GbE RoCE bond), or null, got %r"
                            % (key, value))
    for i, glob in enumerate(rdma.get("exclude") or []):
        if not isinstance(glob, str) or not glob.strip():
            problems.append("policy.network.rdma.exclude[%d]: a device, device/port or netdev name or glob "
                            "(mlx5_4, 'mlx5_4/1', 'mlx5_bond_*', bond0), got %r" % (i, glob))


def _validate_power(policy, problems):
    power = policy.get("power") or {}
    if power.get("limit_w") is not None and power.get("limit_pct") is not None:
        problems.append("policy.power.limit_w and policy.power.limit_pct: set at most one of them, got %r W and "
                        "%r %% (a later layer that switches kind sets the other to null)"
                        % (power["limit_w"], power["limit_pct"]))
    for key in ("limit_w", "limit_pct"):
        if power.get(key) is not None and power[key] <= 0:
            problems.append("policy.power.%s: must be a number > 0 (or null: no cap declared), got %r"
                            % (key, power[key]))


def _validate_rules(policy, known_rules, problems):
    for rule_id, conf in (policy.get("rules") or {}).items():
        path = "rules.%s" % rule_id
        if known_rules is not None and rule_id not in known_rules:
            problems.append("policy.%s: unknown rule id" % path)
            continue
        if not isinstance(conf, dict):
            problems.append("policy.%s: expected {enabled, severity}" % path)
            continue
        for key, value in conf.items():
            if key in ("enabled", "severity"):
                problem = _type_problem(path + "." + key, value, "bool" if key == "enabled" else "severity")
                if problem:
                    problems.append(problem)
            else:
                problems.append("policy.%s.%s: unknown key (known: enabled, severity)" % (path, key))


# Numbers for which 0 would silently turn a rule off (a buffer of 0 bytes always suffices...): they must be > 0,
# and the message says how to turn the rule off on purpose.
POSITIVE = {
    "network.buffer_factor": "NET-TCP-001",
    "network.max_buffer_bytes": "NET-TCP-001",
    "network.default_bandwidth_gbps": "NET-TCP-001",
    "network.link_min_pct": "NET-LINK-001",
    "cpu.min_cpus_per_gpu": "HOST-CPU-002",
    "power.min_power_limit_pct": "GPU-PWR-002",
}


def expand_dotted(overrides):
    """Accept the keys as `gpufleet policy` lists them: a top-level ``memory.max_swappiness: 5`` is
    ``memory: {max_swappiness: 5}``. Only a path through the policy's sections to one of its keys is expanded
    (site names, NIC names and rule ids inside a key's value keep their dots); a dotted key set next to the same
    key nested wins. Anything else raises PolicyError saying how to write it (every such key)."""
    problems = []
    out = _expand_dotted(overrides, problems)
    _raise_all(problems)
    return out


def _expand_dotted(overrides, problems):
    """expand_dotted, a dotted key that names no policy key appended to ``problems`` and left out."""
    if not isinstance(overrides, dict) or not any(isinstance(k, str) and "." in k for k in overrides):
        return overrides
    out = copy.deepcopy({k: v for k, v in overrides.items() if not (isinstance(k, str) and "." in k)})
    for key, value in overrides.items():
        if not (isinstance(key, str) and "." in key):
            continue
        parts = key.split(".")
        spec = SPEC
        for depth, part in enumerate(parts):
            entry = spec.get(part) if isinstance(spec, dict) else None
            last = depth == len(parts) - 1
            if entry is None or (last and isinstance(entry, dict)) or (not last and not isinstance(entry, dict)):
                nested = ": {".join(parts) + ": <value>" + "}" * (len(parts) - 1)
                problems.append("policy.%s: unknown key; a dotted key must name a policy key (`gpufleet policy` "
                                "lists them); to nest it, write %s" % (key, nested))
                break
            spec = entry
        else:
            target = out
            for part in parts[:-1]:
                if not isinstance(target.get(part), dict):
                    target[part] = {}
                target = target[part]
            target[parts[-1]] = copy.deepcopy(value)
    return out


def merge_layers(layers, names=None):
    """The policy layers (first to last; None skipped) merged, each with its dotted keys expanded first so that a
    later layer wins whichever way either writes a key. ``names`` label the layers in errors. Not validated."""
    merged = {}
    for i, layer in enumerate(layers):
        if layer is None:
            continue
        name = names[i] if names and i < len(names) else "layer %d" % i
        if not isinstance(layer, dict):
            raise PolicyError("%s must be a mapping, got %s" % (name, type(layer).__name__))
        try:
            merged = merge(merged, expand_dotted(layer))
        except PolicyError as exc:
            raise PolicyError("%s: %s" % (name, exc), ["%s: %s" % (name, p) for p in exc.problems]) from exc
    return merged


# The policy layers as the playbooks pass them to a module (option `policy`), first to last.
LAYERS = ("gpufleet_policy", "gpufleet_policy_group", "gpufleet_policy_host", "gpufleet_policy_overrides")


def from_option(layers, known_rules=None):
    """The validated policy from a module's `policy` option: one mapping, or the list of layers (LAYERS order)
    merged with each layer's dotted keys expanded. PolicyError names the key path (or the layer)."""
    if not isinstance(layers, (dict, list)):
        raise PolicyError("policy: expected a mapping or a list of mappings (the policy layers), got %s"
                          % type(layers).__name__)
    merged = merge_layers(layers, names=LAYERS) if isinstance(layers, list) else layers
    return validate(merged, known_rules=known_rules)


def _validate_positive(policy, problems):
    for path, rule in sorted(POSITIVE.items()):
        section, key = path.split(".")
        value = (policy.get(section) or {}).get(key)
        if value is not None and value <= 0:
            problems.append("policy.%s: must be > 0, got %r (it would turn %s off silently; to turn a rule off "
                            "write rules: {%s: {enabled: false}})" % (path, value, rule, rule))


def _validate_probe(policy, problems):
    for key, value in sorted((policy.get("probe") or {}).items()):
        if not 0 < value <= 100:
            problems.append("policy.probe.%s: must be a percent > 0 and <= 100, got %r" % (key, value))


def _validate_watch(policy, problems):
    watch = policy.get("watch") or {}
    if watch.get("interval_seconds", 1) < 10:
        problems.append("policy.watch.interval_seconds: must be >= 10, got %r (a check reads every GPU and "
                        "samples counters for about a second)" % watch["interval_seconds"])
    for key in ("textfile_dir", "state_file"):
        value = watch.get(key)
        if value is not None and not value.startswith("/"):
            problems.append("policy.watch.%s: must be an absolute path, got %r" % (key, value))
    owner = watch.get("textfile_owner")
    if owner is not None and not re.match(r"^([a-z_][a-z0-9_.-]{0,31}|[0-9]+)\Z", owner):
        problems.append("policy.watch.textfile_owner: must be a user name (lowercase letters, digits, _ . -) or a "
                        "uid, got %r" % owner)
    probe_seconds = watch.get("probe_seconds")
    if probe_seconds is not None and not 0 <= probe_seconds <= 30:
        problems.append("policy.watch.probe_seconds: must be 0 (off) to 30 seconds, got %r" % probe_seconds)
    floor = (watch.get("slurm") or {}).get("min_available_nodes")
    if isinstance(floor, int) and floor < 0:
        problems.append("policy.watch.slurm.min_available_nodes: must be >= 0, got %r (0: no floor)" % floor)
    fraction = (watch.get("slurm") or {}).get("max_drained_fraction")
    if fraction is not None and not 0 < fraction <= 1:
        problems.append("policy.watch.slurm.max_drained_fraction: must be > 0 and <= 1, got %r (to never drain, "
                        "set watch.slurm.drain: false)" % fraction)


def validate(overrides, known_rules=None):
    """Check a (partial) policy; raise PolicyError listing every problem, each naming its key path, what was given
    and what is allowed. Returns the merged policy. Keys may be nested (``memory: {max_swappiness: 5}``) or dotted
    at the top level (``memory.max_swappiness: 5``)."""
    if overrides is None:
        overrides = {}
    problems = []
    overrides = _expand_dotted(overrides, problems)
    policy = merge(DEFAULTS, _validate_section(SPEC, overrides, "", problems))
    for check in (_validate_positive, _validate_links, _validate_mtu, _validate_rdma, _validate_power,
                  _validate_watch, _validate_probe):
        check(policy, problems)
    _validate_rules(policy, known_rules, problems)
    _raise_all(problems)
    return policy


def documented(spec=None, prefix=""):
    """(path, default, doc) for every policy key, for the README and `gpufleet policy`."""
    spec = SPEC if spec is None else spec
    rows = []
    for key, entry in spec.items():
        path = "%s.%s" % (prefix, key) if prefix else key
        if isinstance(entry, dict):
            rows.extend(documented(entry, path))
        else:
            rows.append((path, entry[0], entry[2]))
    return rows
