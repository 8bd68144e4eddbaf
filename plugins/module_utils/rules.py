# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The rule catalog: one table that turns gathered facts into findings.

Every rule has an id (``GPU-PWR-001``), an area, a severity, a title, a rationale a fleet owner understands,
a pure check ``(facts, policy) -> result`` and a fix (role + tag, or manual advice). The audit module runs
them on the target; remediation roles, tags, toggles and tests use the same ids.

``facts`` is ``{"gpu": <gpu_info result>, "host": <host_info host>, "network": <nic_info network>,
"links": {"source": ..., "peers": [{site, rtt_ms, bandwidth_gbps}]}}``; any part may be missing, and a rule
whose facts are missing reports ``skip`` with the reason.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import decoders, links
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import AREAS, SEVERITIES

STATUSES = ("pass", "fail", "warn", "skip", "error")


class Rule:
    def __init__(self, rule_id, area, severity, title, rationale, check, role=None, manual=None):
        if area not in AREAS:
            raise ValueError("unknown area %r" % (area,))
        if severity not in SEVERITIES:
            raise ValueError("unknown severity %r" % (severity,))
        self.id = rule_id
        self.area = area
        self.severity = severity
        self.title = title
        self.rationale = rationale
        self.check = check
        self.fix = {"role": role, "tag": rule_id if role else None, "manual": manual}

    def describe(self):
        return {"id": self.id, "area": self.area, "severity": self.severity, "title": self.title,
                "rationale": self.rationale, "fix": dict(self.fix)}


def result(status, observed=None, expected=None, message="", items=None, severity=None):
    out = {"status": status, "observed": observed, "expected": expected, "message": message, "items": items or []}
    if severity:
        out["severity"] = severity
    return out


def skip(message):
    return result("skip", message=message)


# ---------------------------------------------------------------------------------------------- helpers


def _gpus(facts):
    gpu = facts.get("gpu") or {}
    if not (gpu.get("nvml") or {}).get("available"):
        return None
    return [g for g in gpu.get("gpus") or [] if not g.get("lost") and not g.get("error")]


def _host(facts, *path):
    value = facts.get("host")
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _net(facts, *path):
    value = facts.get("network")
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _get(d, *path):
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _indexes(gpus):
    return [g["index"] for g in gpus]


def _swapping(host, pol):
    """(swapping?, observed) from swap rates and memory pressure; swapping None when unknown."""
    mem = (host or {}).get("memory") or {}
    rin, rout = mem.get("swap_in_per_s"), mem.get("swap_out_per_s")
    psi = mem.get("psi_some_avg10")
    used = mem.get("swap_used_mib")
    observed = {"swap_in_per_s": rin, "swap_out_per_s": rout, "psi_some_avg10": psi, "swap_used_mib": used}
    verdicts = []
    if rin is not None and rout is not None:
        verdicts.append(rin + rout >= pol["memory"]["swap_rate_pages_per_s"])
    if psi is not None and used is not None:
        verdicts.append(used > 0 and psi >= pol["memory"]["psi_some_avg10"])
    if not verdicts:
        return None, observed
    return any(verdicts), observed


def _physical_up_nics(facts, pol):
    nics = _net(facts, "nics")
    if nics is None:
        return None
    wanted = pol["network"]["interfaces"]
    out = []
    for nic in nics:
        if not nic.get("present", True):
            continue
        if wanted is not None and nic.get("name") not in wanted:
            continue
        if wanted is None and not nic.get("physical", True):
            continue
        if (nic.get("operstate") or "up").lower() not in ("up", "unknown"):
            continue
        out.append(nic)
    return out


def _links(facts):
    return [p for p in (_get(facts, "links", "peers") or []) if p.get("rtt_ms")]


def _long_links(facts, pol):
    return [p for p in _links(facts) if p["rtt_ms"] >= pol["network"]["long_link_rtt_ms"]]


def _version_tuple(text):
    out = []
    for part in str(text).split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def _severity_rank(sev):
    return SEVERITIES.index(sev) if sev in SEVERITIES else len(SEVERITIES)


# ---------------------------------------------------------------------------------------------- memory


def check_gpu_memory_full_and_swapping(facts, pol):
    gpus = _gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    full = [g for g in gpus if _get(g, "memory", "used_pct") is not None
            and g["memory"]["used_pct"] >= pol["memory"]["gpu_full_pct"]]
    swapping, observed = _swapping(facts.get("host"), pol)
    observed["gpus_full"] = _indexes(full)
    observed["max_gpu_memory_pct"] = max([g["memory"]["used_pct"] for g in gpus if _get(g, "memory", "used_pct")
                                          is not None] or [None]) if gpus else None
    expected = "GPU memory below %s%% or no host swapping" % pol["memory"]["gpu_full_pct"]
    if not full:
        return result("pass", observed, expected, "no GPU has its memory nearly full")
    if swapping is None:
        return result("warn", observed, expected,
                      "GPU(s) %s nearly full; host swap activity unknown" % observed["gpus_full"])
    if swapping:
        return result("fail", observed, expected,
                      "GPU(s) %s at >= %s%% memory while the host swaps: spills to host memory hit the disk"
                      % (observed["gpus_full"], pol["memory"]["gpu_full_pct"]),
                      items=[{"gpu": g["index"], "memory_used_pct": g["memory"]["used_pct"]} for g in full])
    return result("pass", observed, expected, "GPU memory is nearly full but the host does not swap")


def check_swap_activity(facts, pol):
    if not facts.get("host"):
        return skip("host facts not gathered")
    swapping, observed = _swapping(facts["host"], pol)
    expected = "< %s pages/s swapped and PSI some avg10 < %s" % (pol["memory"]["swap_rate_pages_per_s"],
                                                                 pol["memory"]["psi_some_avg10"])
    if swapping is None:
        return skip("swap rates and memory pressure not available")
    if swapping:
        return result("fail", observed, expected, "the host is swapping")
    return result("pass", observed, expected, "no swap activity")


def check_swappiness(facts, pol):
    value = _host(facts, "vm", "swappiness")
    if value is None:
        return skip("vm.swappiness not readable")
    # Without swap no anonymous page can be swapped out, whatever vm.swappiness says (most cloud GPU VMs have none;
    # kernel Documentation/admin-guide/sysctl/vm.rst: swappiness weighs swapping against page-cache reclaim).
    limit = pol["memory"]["max_swappiness"]
    if _host(facts, "memory", "swap_total_mib") == 0:
        return result("pass", {"swappiness": value, "swap_total_mib": 0}, "<= %d where swap exists" % limit,
                      "no swap configured: vm.swappiness (%d) has no effect" % value)
    limit = pol["memory"]["max_swappiness"]
    status = "fail" if value > limit else "pass"
    return result(status, value, "<= %d" % limit, "vm.swappiness is %d" % value)


def check_thp(facts, pol):
    # Kernel Documentation/admin-guide/mm/transhuge.rst: defrag "always" makes an allocation that wants a huge page
    # stall in direct reclaim and compaction; "madvise" (RHEL's default, with enabled=always) does so only for
    # regions that asked. The stalls come from defrag, not from enabled.
    mode, defrag = _host(facts, "thp", "enabled"), _host(facts, "thp", "defrag")
    if mode is None and defrag is None:
        return skip("transparent hugepage settings not readable")
    allowed = {"enabled": pol["memory"]["thp_enabled"], "defrag": pol["memory"]["thp_defrag"]}
    observed = {"enabled": mode, "defrag": defrag}
    bad = [k for k in ("enabled", "defrag") if observed[k] is not None and observed[k] not in allowed[k]]
    if bad:
        return result("fail", observed, allowed, "transparent hugepages: %s"
                      % ", ".join("%s=%s" % (k, observed[k]) for k in bad))
    return result("pass", observed, allowed, "transparent hugepages: enabled=%s, defrag=%s" % (mode, defrag))


def _memlock_ok(value_kb, required_kb):
    if value_kb is None:  # unlimited
        return True
    return required_kb is not None and value_kb >= required_kb


def check_memlock(facts, pol):
    memlock = _host(facts, "memlock")
    if memlock is None:
        return skip("memlock limits not readable")
    required = pol["memory"]["min_memlock_kb"]
    configured = memlock.get("configured") or []
    soft = [c for c in configured if c.get("type") in ("soft", "-")]
    configured_ok = any(_memlock_ok(c.get("value_kb"), required) for c in soft)
    process_ok = "process_soft_kb" in memlock and _memlock_ok(memlock.get("process_soft_kb"), required)
    observed = {"process_soft_kb": memlock.get("process_soft_kb"), "process_hard_kb": memlock.get("process_hard_kb"),
                "configured": configured}
    expected = "unlimited" if required is None else ">= %d KiB" % required
    if configured_ok or process_ok:
        return result("pass", observed, expected, "memlock limit allows pinned GPU memory")
    return result("fail", observed, expected,
                  "memlock limit too low for pinned (page-locked) host memory used by CUDA, NCCL and RDMA")


def check_overcommit(facts, pol):
    value = _host(facts, "vm", "overcommit_memory")
    if value is None:
        return skip("vm.overcommit_memory not readable")
    allowed = pol["memory"]["overcommit_memory"]
    status = "pass" if value in allowed else "fail"
    return result(status, value, allowed, "vm.overcommit_memory is %d" % value)


# ---------------------------------------------------------------------------------------------- cpu


def check_governor(facts, pol):
    governors = _host(facts, "cpu", "governors")
    if governors is None:
        return skip("CPU facts not gathered")
    if not governors:
        return skip("no cpufreq governor exposed (virtual machine or cpufreq disabled)")
    wanted = pol["cpu"]["governor"]
    others = {g: cpus for g, cpus in governors.items() if g != wanted}
    if others:
        return result("fail", governors, "%s on every CPU" % wanted,
                      "CPUs not on %s: %s" % (wanted, "; ".join("%s: %s" % kv for kv in sorted(others.items()))))
    return result("pass", governors, "%s on every CPU" % wanted, "every CPU uses %s" % wanted)


def check_cores_per_gpu(facts, pol):
    gpus = _gpus(facts)
    cores = _host(facts, "cpu", "cores")
    if not gpus:
        return skip("no NVIDIA GPUs could be read")
    if not cores:
        return skip("CPU core count not available")
    ratio = round(float(cores) / len(gpus), 1)
    minimum = pol["cpu"]["min_cores_per_gpu"]
    status = "fail" if ratio < minimum else "pass"
    return result(status, {"cores": cores, "gpus": len(gpus), "cores_per_gpu": ratio}, ">= %d cores per GPU" % minimum,
                  "%s physical cores per GPU" % ratio)


def check_numa_locality(facts, pol):
    gpus = _gpus(facts)
    nodes = _host(facts, "numa", "nodes")
    if not gpus:
        return skip("no NVIDIA GPUs could be read")
    if not nodes:
        return skip("NUMA topology not available")
    node_cpus = {}
    for node in nodes:
        try:
            node_cpus[node["id"]] = set(decoders.parse_cpulist(node.get("cpus") or ""))
        except ValueError:
            continue
    items = []
    for g in gpus:
        node, affinity = g.get("numa_node"), g.get("cpu_affinity")
        if node is None or not affinity or node not in node_cpus:
            continue
        cpus = set(decoders.parse_cpulist(affinity))
        if not cpus <= node_cpus[node]:
            items.append({"gpu": g["index"], "numa_node": node, "cpu_affinity": affinity,
                          "problem": "CPU affinity reaches outside the GPU's NUMA node"})
    fabric = []
    for nic in _net(facts, "nics") or []:
        if nic.get("present", True) and (nic.get("speed_mbps") or 0) >= pol["cpu"]["fabric_nic_min_mbps"] \
                and nic.get("numa_node") is not None:
            fabric.append(nic)
    nic_nodes = {n["numa_node"] for n in fabric}
    gpu_nodes = {g["numa_node"] for g in gpus if g.get("numa_node") is not None}
    if len(node_cpus) > 1 and fabric:
        for node in sorted(gpu_nodes - nic_nodes):
            items.append({"numa_node": node, "gpus": [g["index"] for g in gpus if g.get("numa_node") == node],
                          "problem": "no fabric NIC on this NUMA node (NICs on %s)" % sorted(nic_nodes)})
    observed = {"gpu_nodes": sorted(gpu_nodes), "fabric_nic_nodes": sorted(nic_nodes)}
    if items:
        return result("fail", observed, "GPU affinity, GPU and fabric NIC on the same NUMA node",
                      "%d NUMA locality problem(s)" % len(items), items=items)
    return result("pass", observed, "GPU affinity, GPU and fabric NIC on the same NUMA node",
                  "GPUs, their CPUs and fabric NICs are NUMA-local")


def check_numa_balancing(facts, pol):
    value = _host(facts, "numa", "balancing")
    if value is None:
        return skip("kernel.numa_balancing not readable")
    allowed = pol["cpu"]["numa_balancing"]
    status = "fail" if value and not allowed else "pass"
    return result(status, value, allowed, "automatic NUMA balancing is %s" % ("on" if value else "off"))


def pinned_summary(pinned):
    """"ens1f0 (IRQs 120-123), 0000:18:00.0 (IRQ 200)": hand-pinned IRQs grouped by device, for messages."""
    by_device = {}
    for item in pinned or []:
        by_device.setdefault(item.get("device"), []).append(int(item["irq"]))
    parts = []
    for device in sorted(by_device, key=str):
        irqs = by_device[device]
        parts.append("%s (IRQ%s %s)" % (device, "s" if len(irqs) > 1 else "", decoders.cpus_to_cpulist(irqs)))
    return ", ".join(parts)


def check_irqbalance(facts, pol):
    irq = _host(facts, "irqbalance")
    if irq is None:
        return skip("irqbalance state not gathered")
    wanted = pol["cpu"]["irqbalance"]
    state = "running" if irq.get("running") else "stopped"
    if wanted == "any" or state == wanted:
        return result("pass", state, wanted, "irqbalance is %s" % state)
    pinned = _host(facts, "irq", "pinned") or []
    if wanted == "running" and pinned:
        # Pinning NIC and GPU interrupts by hand is the other way to spread them (the rationale says so), and
        # irqbalance would move them: a deliberate choice, kept.
        return result("pass", {"state": state, "pinned": len(pinned)}, wanted,
                      "irqbalance is stopped; IRQs pinned by hand: %s" % pinned_summary(pinned), items=pinned)
    return result("fail", {"state": state, "installed": irq.get("installed")}, wanted, "irqbalance is %s" % state)


# ---------------------------------------------------------------------------------------------- network


def check_mtu(facts, pol):
    nics = _physical_up_nics(facts, pol)
    if nics is None:
        return skip("NIC facts not gathered")
    if not nics:
        return skip("no physical NIC is up")
    minimum = pol["network"]["min_mtu"]
    low = [{"nic": n["name"], "mtu": n.get("mtu")} for n in nics if n.get("mtu") is not None and n["mtu"] < minimum]
    observed = {n["name"]: n.get("mtu") for n in nics}
    if low:
        return result("fail", observed, ">= %d" % minimum, "MTU below %d on %s" % (minimum, [i["nic"] for i in low]),
                      items=low)
    return result("pass", observed, ">= %d" % minimum, "MTU is at least %d" % minimum)


def check_rings(facts, pol):
    nics = _physical_up_nics(facts, pol)
    if nics is None:
        return skip("NIC facts not gathered")
    frac = pol["network"]["ring_min_fraction"]
    items, observed = [], {}
    for n in nics:
        rings = n.get("rings") or {}
        if rings.get("rx_max") is None and rings.get("tx_max") is None:
            continue
        observed[n["name"]] = rings
        for side in ("rx", "tx"):
            cur, mx = rings.get(side), rings.get(side + "_max")
            if cur is not None and mx and cur < mx * frac:
                items.append({"nic": n["name"], "ring": side, "current": cur, "max": mx})
    if not observed:
        return skip("no NIC reports ring sizes")
    expected = ">= %d%% of the hardware maximum" % int(frac * 100)
    if items:
        return result("fail", observed, expected, "small NIC rings drop packets in bursts: %s"
                      % ", ".join("%s %s %d/%d" % (i["nic"], i["ring"], i["current"], i["max"]) for i in items),
                      items=items)
    return result("pass", observed, expected, "NIC rings are sized near their maximum")


def check_offloads(facts, pol):
    nics = _physical_up_nics(facts, pol)
    if nics is None:
        return skip("NIC facts not gathered")
    wanted = pol["network"]["offloads"]
    items, observed = [], {}
    for n in nics:
        offloads = n.get("offloads")
        if not offloads:
            continue
        fixed = set(n.get("offloads_fixed") or [])
        off = [f for f in wanted if offloads.get(f) is False and f not in fixed]
        observed[n["name"]] = {f: offloads.get(f) for f in wanted if f in offloads}
        if off:
            items.append({"nic": n["name"], "off": off})
    if not observed:
        return skip("no NIC reports offloads")
    if items:
        return result("fail", observed, {f: True for f in wanted},
                      "offloads off: %s" % "; ".join("%s: %s" % (i["nic"], ",".join(i["off"])) for i in items),
                      items=items)
    return result("pass", observed, {f: True for f in wanted}, "offloads are on")


def _bdp_bytes(link, pol):
    return int(pol["network"]["buffer_factor"] * link["rtt_ms"] / 1000.0 * link["bandwidth_gbps"] * 1e9 / 8)


def check_tcp_buffers(facts, pol):
    tcp = _net(facts, "tcp")
    links = [p for p in _links(facts) if p.get("bandwidth_gbps")]
    if not links:
        return skip("no long-haul links declared or measured for this host's site")
    if tcp is None or tcp.get("rmem") is None or tcp.get("wmem") is None:
        return skip("tcp_rmem/tcp_wmem not readable")
    biggest = max(links, key=lambda p: _bdp_bytes(p, pol))
    needed = min(_bdp_bytes(biggest, pol), pol["network"]["max_buffer_bytes"])
    observed = {"tcp_rmem_max": tcp["rmem"][2], "tcp_wmem_max": tcp["wmem"][2],
                "link": {"site": biggest.get("site"), "rtt_ms": biggest["rtt_ms"],
                         "bandwidth_gbps": biggest["bandwidth_gbps"]}}
    expected = {"tcp_rmem_max": ">= %d" % needed, "tcp_wmem_max": ">= %d" % needed}
    low = [k for k in ("tcp_rmem_max", "tcp_wmem_max") if observed[k] < needed]
    if low:
        return result("fail", observed, expected,
                      "%s below %s x bandwidth-delay product (%d bytes) of the %s ms link to %s"
                      % (", ".join(low), pol["network"]["buffer_factor"], needed, biggest["rtt_ms"],
                         biggest.get("site")))
    return result("pass", observed, expected, "TCP buffers cover the bandwidth-delay product")


def check_congestion_control(facts, pol):
    long_links = _long_links(facts, pol)
    if not long_links:
        return skip("no long links (>= %s ms)" % pol["network"]["long_link_rtt_ms"])
    tcp = _net(facts, "tcp")
    if tcp is None or tcp.get("congestion_control") is None:
        return skip("tcp_congestion_control not readable")
    wanted = pol["network"]["congestion_control"]
    current = tcp["congestion_control"]
    available = tcp.get("available_congestion_control") or []
    observed = {"congestion_control": current, "available": available,
                "longest_rtt_ms": max(p["rtt_ms"] for p in long_links)}
    if pol["network"].get("congestion_control_scope") == "routes":
        return _check_route_congctl(facts, pol, observed, wanted)
    if current == wanted:
        return result("pass", observed, wanted, "%s is in use" % wanted)
    if wanted in available:
        return result("fail", observed, wanted,
                      "%s on %s ms links: loss-based control collapses under loss; %s is available"
                      % (current, observed["longest_rtt_ms"], wanted))
    return result("warn", observed, wanted,
                  "%s on long links and the kernel does not offer %s (load tcp_%s)" % (current, wanted, wanted))


def _check_route_congctl(facts, pol, observed, wanted):
    """Scope routes: the routes to the long-haul peers' prefixes carry the congestion control (ip-route(8) congctl);
    the host default is the owner's."""
    prefixes = links.classify(pol, facts.get("links"))[2]
    routes = _net(facts, "routes")
    observed = dict(observed, scope="routes", routes=routes)
    expected = {"congctl": wanted, "prefixes": prefixes}
    if not prefixes:
        return result("fail", observed, expected,
                      "congestion_control_scope is routes but no prefix is declared for the long links "
                      "(sites.SITE.links.PEER.prefixes)")
    if routes is None:
        return skip("routes not read")
    missing = [p for p in prefixes if routes.get(p) != wanted]
    if not missing:
        return result("pass", observed, expected, "%s on the routes to %s" % (wanted, ", ".join(prefixes)))
    status = "fail" if wanted in observed["available"] else "warn"
    why = "" if status == "fail" else " (the kernel does not offer it: load tcp_%s)" % wanted
    return result(status, observed, expected, "routes to %s do not use %s%s" % (", ".join(missing), wanted, why))


def check_mtu_probing(facts, pol):
    if not _long_links(facts, pol):
        return skip("no long links (>= %s ms)" % pol["network"]["long_link_rtt_ms"])
    value = _net(facts, "tcp", "mtu_probing")
    if value is None:
        return skip("tcp_mtu_probing not readable")
    status = "pass" if value >= 1 else "fail"
    return result(status, value, ">= 1", "tcp_mtu_probing is %d" % value)


def check_slow_start_after_idle(facts, pol):
    if not _long_links(facts, pol):
        return skip("no long links (>= %s ms)" % pol["network"]["long_link_rtt_ms"])
    value = _net(facts, "tcp", "slow_start_after_idle")
    if value is None:
        return skip("tcp_slow_start_after_idle not readable")
    status = "fail" if value else "pass"
    return result(status, value, 0, "tcp_slow_start_after_idle is %d" % value)


# ---------------------------------------------------------------------------------------------- power


def _per_gpu(facts, predicate, describe, expected, ok_message, bad_message):
    """Fail with one item per GPU where predicate(gpu) is True; skip GPUs where it returns None."""
    gpus = _gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    known = [(g, predicate(g)) for g in gpus]
    known = [(g, v) for g, v in known if v is not None]
    if not known:
        return skip("the GPUs do not report this")
    bad = [g for g, v in known if v]
    observed = {str(g["index"]): describe(g) for g, _value in known}
    if bad:
        return result("fail", observed, expected, "GPU(s) %s: %s" % (_indexes(bad), bad_message),
                      items=[dict(gpu=g["index"], **_as_dict(describe(g))) for g in bad])
    return result("pass", observed, expected, ok_message)


def _as_dict(value):
    return value if isinstance(value, dict) else {"value": value}


def check_persistence(facts, pol):
    return _per_gpu(
        facts,
        lambda g: None if g.get("persistence_mode") is None else not g["persistence_mode"],
        lambda g: g.get("persistence_mode"), True, "persistence mode is on", "persistence mode off")


def _limit_floor(g, pol):
    default = _get(g, "power", "default_limit_w")
    return None if default is None else default * pol["power"]["min_power_limit_pct"] / 100.0


def declared_cap_w(g, pol):
    """The power cap the policy declares for this GPU in watts (power.limit_w, or power.limit_pct of the default),
    clamped to the GPU's min/max limits as NVML enforces them; None when no cap is declared or the GPU does not
    report what it needs. gpu_runtime sets exactly this value (gpu_settings clamps the same way)."""
    power = pol["power"]
    if power.get("limit_w") is not None:
        cap = float(power["limit_w"])
    elif power.get("limit_pct") is not None:
        default = _get(g, "power", "default_limit_w")
        if default is None:
            return None
        cap = default * power["limit_pct"] / 100.0
    else:
        return None
    low, high = _get(g, "power", "min_limit_w"), _get(g, "power", "max_limit_w")
    if low is not None:
        cap = max(cap, low)
    if high is not None:
        cap = min(cap, high)
    return cap


def _declared_text(pol):
    power = pol["power"]
    if power.get("limit_w") is not None:
        return "%s W" % power["limit_w"]
    return "%s%% of the default limit" % power["limit_pct"]


def check_power_limit(facts, pol):
    power = pol["power"]
    if power.get("limit_w") is None and power.get("limit_pct") is None:
        def bad(g):
            floor, limit = _limit_floor(g, pol), _get(g, "power", "limit_w")
            return None if floor is None or limit is None else limit < floor - 0.5

        return _per_gpu(
            facts, bad,
            lambda g: {"limit_w": _get(g, "power", "limit_w"), "default_limit_w": _get(g, "power", "default_limit_w")},
            ">= %s%% of the default limit" % power["min_power_limit_pct"], "power limits are at policy",
            "power limit below %s%% of the default (no cap declared in power.limit_w or power.limit_pct)"
            % power["min_power_limit_pct"])

    # A declared cap is an owner's decision (a rack's power budget): the limit must be exactly that, neither
    # below (the GPUs lose throughput for nothing) nor above (the budget is broken).
    gpus = _gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    observed, items = {}, []
    for g in gpus:
        cap, limit = declared_cap_w(g, pol), _get(g, "power", "limit_w")
        if cap is None or limit is None:
            continue
        observed[str(g["index"])] = {"limit_w": limit, "declared_cap_w": round(cap, 1)}
        if abs(limit - cap) > 0.5:
            items.append({"gpu": g["index"], "limit_w": limit, "declared_cap_w": round(cap, 1),
                          "problem": "above the declared cap" if limit > cap else "below the declared cap"})
    if not observed:
        return skip("the GPUs do not report this")
    expected = "the declared cap, %s (clamped to each GPU's min/max limit)" % _declared_text(pol)
    if items:
        above = [i["gpu"] for i in items if i["problem"] == "above the declared cap"]
        below = [i["gpu"] for i in items if i["problem"] == "below the declared cap"]
        parts = (["GPU(s) %s above the declared cap" % above] if above else []) + \
                (["GPU(s) %s below the declared cap" % below] if below else [])
        return result("fail", observed, expected, "power limit differs from the declared cap %s: %s"
                      % (_declared_text(pol), "; ".join(parts)), items=items)
    return result("pass", observed, expected, "power limits are at the declared cap %s" % _declared_text(pol))


# NVML (nvmlDeviceGetCurrentClocksEventReasons): SW power cap means the clocks are held to stay under the current
# power limit - what every fully loaded GPU shows, and not a fault. Thermal slowdown, HW slowdown and the power brake
# are. Azure's node health checks exempt SW_POWER_CAP the same way (azurehpc-health-checks, azure_gpu_clock_throttling).
POWER_CAP_REASON = "sw_power_cap"


def check_throttling(facts, pol):
    gpus = _gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    known = [g for g in gpus if g.get("clock_event_reasons") is not None]
    if not known:
        return skip("the GPUs do not report clock event reasons")
    observed = {str(g["index"]): g["clock_event_reasons"].get("throttling") for g in known}
    items, capped = [], []
    for g in known:
        reasons = g["clock_event_reasons"].get("throttling") or []
        trouble = [r for r in reasons if r != POWER_CAP_REASON]
        if trouble:
            items.append({"gpu": g["index"], "reasons": trouble})
        elif POWER_CAP_REASON in reasons:
            capped.append(g["index"])
    if items:
        detail = "; ".join("%d: %s" % (i["gpu"], ",".join(i["reasons"])) for i in items)
        return result("fail", observed, [], "GPU(s) %s: clocks held down for heat or by the hardware: %s"
                      % ([i["gpu"] for i in items], detail), items=items)
    if capped:
        return result("warn", observed, [], "GPU(s) %s: clocks held at the power limit (sw_power_cap): normal under "
                      "full load; only a limit capped below policy is a problem (GPU-PWR-002)" % capped,
                      items=[{"gpu": i, "reasons": [POWER_CAP_REASON]} for i in capped], severity="info")
    return result("pass", observed, [], "no thermal or hardware slowdown")


def check_temperature(facts, pol):
    margin = pol["power"]["temp_margin_c"]

    def bad(g):
        temp, slow = _get(g, "temperature", "gpu"), _get(g, "temperature", "slowdown")
        return None if temp is None or slow is None else temp >= slow - margin

    return _per_gpu(
        facts, bad,
        lambda g: {"temperature_c": _get(g, "temperature", "gpu"), "slowdown_c": _get(g, "temperature", "slowdown")},
        "more than %d C below the slowdown threshold" % margin, "temperatures are well below slowdown",
        "within %d C of the slowdown temperature" % margin)


def check_pcie_link(facts, pol):
    gpus = _gpus(facts)
    if gpus is None:
        return skip("no NVIDIA GPUs could be read")
    busy_pct = pol["power"]["busy_util_pct"]
    items, idle_down, observed = [], [], {}
    for g in gpus:
        p = g.get("pcie") or {}
        down = decoders.pcie_downtrained(p.get("gen_current"), p.get("width_current"), p.get("gen_max"),
                                         p.get("width_max"))
        if down is None:
            continue
        util = _get(g, "utilization", "gpu_pct")
        observed[str(g["index"])] = {"link": decoders.pcie_link(p["gen_current"], p["width_current"]),
                                     "max": decoders.pcie_link(p["gen_max"], p["width_max"]), "utilization_pct": util}
        if not down:
            continue
        if util is None or util < busy_pct:
            idle_down.append(g["index"])
            continue
        items.append({"gpu": g["index"], "link": observed[str(g["index"])]["link"],
                      "max": observed[str(g["index"])]["max"], "utilization_pct": util})
    if not observed:
        return skip("the GPUs do not report their PCIe link")
    expected = "maximum generation and width while busy (>= %d%% utilization)" % busy_pct
    if items:
        return result("fail", observed, expected, "busy GPU(s) %s run below their PCIe maximum"
                      % [i["gpu"] for i in items], items=items)
    note = " (idle GPU(s) %s trained down, which is normal)" % idle_down if idle_down else ""
    return result("pass", observed, expected, "busy GPUs run at full PCIe link" + note)


def check_ecc_mode(facts, pol):
    if not pol["power"]["ecc"]:
        return skip("policy does not require ECC")
    return _per_gpu(facts, lambda g: None if _get(g, "ecc", "current") is None else not g["ecc"]["current"],
                    lambda g: _get(g, "ecc", "current"), True, "ECC is on", "ECC off")


def check_ecc_pending(facts, pol):
    def bad(g):
        cur, pend = _get(g, "ecc", "current"), _get(g, "ecc", "pending")
        return None if cur is None or pend is None else cur != pend

    return _per_gpu(facts, bad, lambda g: {"current": _get(g, "ecc", "current"), "pending": _get(g, "ecc", "pending")},
                    "pending == current", "no ECC mode change is waiting for a reboot",
                    "ECC mode change pending a reboot or GPU reset")


# ---------------------------------------------------------------------------------------------- health


def check_remapped_rows(facts, pol):
    def bad(g):
        rows = g.get("remapped_rows")
        return None if rows is None else bool(rows.get("failure") or rows.get("pending"))

    res = _per_gpu(facts, bad, lambda g: g.get("remapped_rows"), {"failure": False, "pending": False},
                   "no row-remapping failure or pending remap", "row remapping")
    if res["status"] == "fail" and not any(i.get("failure") for i in res["items"]):
        res["severity"] = "high"  # pending only: a GPU reset or reboot applies the remap
        res["message"] += ": row remap pending, reset the GPU to apply it"
    elif res["status"] == "fail":
        res["message"] += ": row remapping failed, the GPU needs service"
    return res


def check_lost_gpus(facts, pol):
    gpu = facts.get("gpu") or {}
    if not (gpu.get("nvml") or {}).get("available"):
        return skip("no NVIDIA GPUs could be read")
    lost = [g["index"] for g in gpu.get("gpus") or [] if g.get("lost") or g.get("error")]
    if lost:
        return result("fail", {"lost": lost}, {"lost": []}, "GPU(s) %s fell off the bus or cannot be opened" % lost)
    return result("pass", {"lost": []}, {"lost": []}, "every GPU answers")


def _log_unreadable(log):
    """Why the kernel log could not be scanned, or None when it was."""
    if log is None:
        return "kernel log not gathered"
    if log.get("source") in (None, "none") or (log.get("error") and not log.get("lines_scanned")):
        return "kernel log not readable%s" % (": %s" % log["error"] if log.get("error") else "")
    return None


def check_xid(facts, pol):
    log = _host(facts, "kernel_log")
    if _log_unreadable(log):
        return skip(_log_unreadable(log))
    floor = _severity_rank(pol["health"]["xid_min_severity"])
    events = [x for x in log.get("xid") or [] if _severity_rank(x.get("severity")) <= floor]
    observed = {"lines_scanned": log.get("lines_scanned"),
                "xid": [{"code": x["code"], "count": x.get("count"), "meaning": x.get("meaning")} for x in events]}
    if not events:
        return result("pass", observed, "no Xid events", "no Xid events in the window")
    worst = min(events, key=lambda x: _severity_rank(x.get("severity")))
    return result("fail", observed, "no Xid events",
                  "Xid %s in the kernel log (%s)" % (", ".join(str(x["code"]) for x in events), worst.get("meaning")),
                  items=events, severity=worst.get("severity") if worst.get("severity") in SEVERITIES else None)


def check_aer(facts, pol):
    log = _host(facts, "kernel_log")
    if _log_unreadable(log):
        return skip(_log_unreadable(log))
    aer = log.get("aer") or {}
    observed = {k: aer.get(k, 0) for k in ("corrected", "uncorrected", "fatal")}
    limit = pol["health"]["aer_corrected_max"]
    expected = {"uncorrected": 0, "fatal": 0, "corrected": "<= %d" % limit}
    if observed["fatal"] or observed["uncorrected"]:
        return result("fail", observed, expected, "uncorrected PCIe errors: %s" % (aer.get("last") or ""),
                      severity="critical" if observed["fatal"] else None)
    if observed["corrected"] > limit:
        return result("warn", observed, expected, "%d corrected PCIe errors (a marginal link or riser)"
                      % observed["corrected"])
    return result("pass", observed, expected, "no PCIe AER errors of concern")


# ---------------------------------------------------------------------------------------------- software


def _driver(facts):
    return (facts.get("gpu") or {}).get("driver") or {}


def check_driver_version(facts, pol):
    version = _driver(facts).get("version")
    if not version:
        return skip("driver version not available")
    minimum = pol["software"]["driver_min_version"]
    branch = pol["software"]["driver_branch"]
    problems = []
    if minimum and _version_tuple(version) < _version_tuple(minimum):
        problems.append("older than %s" % minimum)
    actual_branch = decoders.driver_branch(version)
    if branch is not None and actual_branch != branch:
        problems.append("outside pinned branch %s" % branch)
    expected = {"min_version": minimum, "branch": branch}
    if problems:
        return result("fail", version, expected, "driver %s is %s" % (version, " and ".join(problems)))
    return result("pass", version, expected, "driver %s meets policy" % version)


def check_cuda_toolkit(facts, pol):
    drv = _driver(facts)
    supported = drv.get("cuda_driver_version")
    toolkits = drv.get("cuda_toolkits")
    if not supported:
        return skip("the driver's CUDA version is not available")
    if not toolkits:
        return skip("no CUDA toolkit installed under /usr/local")
    too_new = [t for t in toolkits if _version_tuple(t["version"])[:2] > _version_tuple(supported)[:2]]
    observed = {"driver_cuda": supported, "toolkits": [t["version"] for t in toolkits]}
    if too_new:
        return result("fail", observed, "toolkits <= CUDA %s" % supported,
                      "CUDA toolkit(s) %s are newer than the driver supports (CUDA %s): kernels built with them may "
                      "fail to load or fall back to slow paths" % ([t["version"] for t in too_new], supported),
                      items=too_new)
    return result("pass", observed, "toolkits <= CUDA %s" % supported, "toolkits match the driver")


def check_kernel_module(facts, pol):
    drv = _driver(facts)
    user, kmod = drv.get("version"), drv.get("kernel_module_version")
    if not user or not kmod:
        return skip("driver or kernel module version not available")
    observed = {"driver": user, "kernel_module": kmod}
    if user != kmod:
        return result("fail", observed, "equal", "kernel module %s and user-space driver %s differ (reboot or reload "
                      "the module after a driver upgrade)" % (kmod, user))
    return result("pass", observed, "equal", "kernel module matches the driver")


def check_fabricmanager(facts, pol):
    drv = _driver(facts)
    user, fm = drv.get("version"), drv.get("fabricmanager_version")
    if not fm:
        return skip("nvidia-fabricmanager not installed")
    if not user:
        return skip("driver version not available")
    observed = {"driver": user, "fabricmanager": fm}
    if fm != user:
        return result("fail", observed, "equal", "fabric manager %s does not match driver %s: it refuses to start and "
                      "NVSwitch systems cannot use their GPUs" % (fm, user))
    return result("pass", observed, "equal", "fabric manager matches the driver")


# ---------------------------------------------------------------------------------------------- catalog

_SWAP_FIX = "Leave GPU memory headroom (smaller batch or model shards) and stop host swapping: lower " \
            "vm.swappiness (role host_tuning, tag HOST-MEM-002), add RAM or move co-located jobs."

RULES = (
    Rule("GPU-MEM-001", "memory", "critical", "GPU memory nearly full while the host swaps",
         "When GPU memory is nearly full, frameworks spill to pinned host memory; if the host is swapping at the "
         "same time those spills go to disk and training or inference slows by orders of magnitude.",
         check_gpu_memory_full_and_swapping, manual=_SWAP_FIX),
    Rule("HOST-MEM-001", "memory", "high", "Host is swapping",
         "A GPU server that swaps stalls data loaders and CUDA host allocations; the GPUs wait for the disk.",
         check_swap_activity, manual=_SWAP_FIX),
    Rule("HOST-MEM-002", "memory", "medium", "vm.swappiness too high",
         "A high swappiness lets the kernel swap out data-loader memory to keep page cache, which causes stalls "
         "under memory pressure.", check_swappiness, role="host_tuning"),
    Rule("HOST-MEM-003", "memory", "medium", "Transparent hugepage defrag set to always",
         "THP defrag 'always' makes every allocation that wants a huge page stall in direct reclaim and compaction "
         "(kernel admin-guide/mm/transhuge), adding latency spikes to pinned-memory and data-loader allocations; "
         "'madvise' (RHEL's default, with enabled=always) keeps the benefit where asked for.",
         check_thp, role="host_tuning"),
    Rule("HOST-MEM-004", "memory", "high", "memlock limit too low for pinned memory",
         "CUDA, NCCL and RDMA pin (page-lock) host memory; a low memlock limit makes them fall back to pageable "
         "copies or fail to register buffers.", check_memlock, role="host_tuning"),
    Rule("HOST-MEM-005", "memory", "medium", "Strict memory overcommit",
         "vm.overcommit_memory=2 refuses the large virtual reservations CUDA makes at start-up, so jobs fail with "
         "out-of-memory errors while RAM is free.", check_overcommit, role="host_tuning"),
    Rule("HOST-CPU-001", "cpu", "high", "CPU governor is not performance",
         "Power-saving governors lower CPU clocks between bursts; kernel launches, data loading and NCCL progress "
         "threads then wait for the CPU and the GPUs idle.", check_governor, role="host_tuning"),
    Rule("HOST-CPU-002", "cpu", "medium", "Too few CPU cores per GPU",
         "Each GPU needs CPU cores for data loading, augmentation and launch threads; with too few, the GPUs "
         "starve.", check_cores_per_gpu,
         manual="Choose an instance or server with more cores per GPU, or move preprocessing off the node."),
    Rule("GPU-NUMA-001", "cpu", "medium", "GPU, its CPUs and its NIC on different NUMA nodes",
         "Traffic between a GPU and CPUs or NICs on another socket crosses the inter-socket link, halving "
         "bandwidth and adding latency to every copy and RDMA transfer.", check_numa_locality,
         manual="Check BIOS NUMA settings and PCIe slot placement; bind jobs with numactl or your scheduler's "
                "topology awareness."),
    Rule("HOST-CPU-003", "cpu", "medium", "Automatic NUMA balancing is on",
         "NUMA balancing unmaps and migrates pages of long-running processes, causing latency spikes and "
         "migrating pinned buffers' neighbours; GPU servers bind memory explicitly instead.",
         check_numa_balancing, role="host_tuning"),
    Rule("HOST-CPU-004", "cpu", "low", "irqbalance state differs from policy",
         "Without irqbalance (or explicit IRQ pinning) all NIC and NVMe interrupts land on one CPU, which then "
         "limits network and storage throughput.", check_irqbalance, role="host_tuning"),
    Rule("NET-MTU-001", "network", "medium", "MTU below policy",
         "A small MTU multiplies per-packet overhead; fabrics built for jumbo frames lose throughput and CPU.",
         check_mtu, role="network_tuning"),
    Rule("NET-RING-001", "network", "medium", "NIC rings far below their maximum",
         "Small receive and transmit rings overflow during bursts, and every drop halves a long-haul TCP flow's "
         "window.", check_rings, role="network_tuning"),
    Rule("NET-OFFL-001", "network", "medium", "NIC offloads turned off",
         "Without segmentation, receive and checksum offloads the CPU processes every packet, capping throughput "
         "and stealing cycles from data loading.", check_offloads, role="network_tuning"),
    Rule("NET-TCP-001", "network", "high", "TCP buffers below 4x the bandwidth-delay product",
         "A TCP flow can carry at most one window per round trip; on 150-250 ms links default buffers cap a "
         "stream at a few tens of Mbit/s whatever the link speed. The kernel advertises only about half of "
         "tcp_rmem as window and, under loss, out-of-order data holds part of it, so the buffer needs about "
         "4 bandwidth-delay products (2x: 350 Mbit/s, 4x: 545 Mbit/s on 180 ms, 1 Gbit/s, 0.1 % loss).",
         check_tcp_buffers, role="network_tuning"),
    Rule("NET-TCP-002", "network", "high", "Congestion control is not BBR on long links",
         "Loss-based congestion control (cubic) collapses on long lossy paths: 0.1 % loss at 180 ms cuts it to a "
         "few percent of the link; BBR keeps the pipe full. BBR can be harsh on shallow shared bottlenecks, so "
         "policy can limit it to long inter-site links.", check_congestion_control, role="network_tuning"),
    Rule("NET-TCP-003", "network", "low", "TCP MTU probing off",
         "Paths across providers often black-hole large packets; MTU probing lets TCP recover instead of stalling.",
         check_mtu_probing, role="network_tuning"),
    Rule("NET-TCP-004", "network", "medium", "TCP slow start after idle on long links",
         "Restarting slow start after every idle period throws away the window a long-haul transfer built, so "
         "bursty checkpoint and dataset transfers never reach full speed.", check_slow_start_after_idle,
         role="network_tuning"),
    Rule("GPU-PWR-001", "power", "high", "Persistence mode off",
         "Without persistence mode the driver tears down GPU state when no process uses it; every job start pays "
         "seconds of initialisation and settings such as power limits can be lost.", check_persistence,
         role="gpu_runtime"),
    Rule("GPU-PWR-002", "power", "high", "Power limit not at policy",
         "A capped power limit lowers clocks under load; an A100 capped at 250 W loses a large share of its "
         "throughput. A cap the policy declares (power.limit_w or power.limit_pct, e.g. a rack's power budget) "
         "is kept exactly: above it breaks the budget, below it loses throughput for nothing.",
         check_power_limit, role="gpu_runtime"),
    Rule("GPU-PWR-003", "power", "high", "GPU slowed down by heat or the hardware",
         "Clock event reasons show the GPU slowing down for heat (thermal slowdown) or by a hardware signal "
         "(HW slowdown, power brake): the work runs slower than paid for. Clocks held at the power limit "
         "(SW power cap) are normal under full load and reported apart, as info.", check_throttling,
         manual="Check airflow, inlet temperature and power supply; a capped power limit is GPU-PWR-002's fix "
                "(role gpu_runtime, tag GPU-PWR-002)."),
    Rule("GPU-THM-001", "power", "high", "GPU temperature near its slowdown threshold",
         "Within a few degrees of the slowdown threshold the GPU will soon throttle hard; cooling is marginal.",
         check_temperature, manual="Check fans, airflow, blanking panels and inlet temperature."),
    Rule("GPU-PCI-001", "power", "medium", "PCIe link below maximum while busy",
         "A busy GPU on a degraded PCIe link (lower generation or width) moves data at a fraction of the speed; "
         "idle GPUs lower their link speed on purpose and are not flagged.", check_pcie_link,
         manual="Reseat the GPU or riser, check the slot and BIOS PCIe settings."),
    Rule("GPU-ECC-001", "power", "medium", "ECC off",
         "Without ECC, memory bit flips silently corrupt results and can crash long jobs.", check_ecc_mode,
         role="gpu_runtime"),
    Rule("GPU-ECC-002", "power", "low", "ECC mode change pending a reboot",
         "An ECC mode change only takes effect after a reboot or GPU reset; until then the GPU runs with the old "
         "setting.", check_ecc_pending, role="gpu_runtime"),
    Rule("GPU-HLT-001", "health", "critical", "Row remapping failed or pending",
         "A pending row remap needs a GPU reset to take effect; a remapping failure means the memory has run out "
         "of spare rows and the GPU should be serviced.", check_remapped_rows,
         manual="Drain the node, reset the GPU; on a failure open an RMA."),
    Rule("GPU-HLT-002", "health", "critical", "GPU lost",
         "A GPU that fell off the bus (Xid 79) or cannot be opened is unusable until the node is reset.",
         check_lost_gpus, manual="Drain the node and reboot; repeated loss needs hardware service."),
    Rule("HOST-HLT-001", "health", "high", "NVIDIA Xid errors in the kernel log",
         "Xid events are the driver's error reports; the codes tell application faults from hardware faults "
         "that need a reset or service.", check_xid,
         manual="Look up each Xid in NVIDIA's Xid catalog; drain the node for hardware Xids (48, 63, 64, 74, 79, 95)."),
    Rule("HOST-HLT-002", "health", "medium", "PCIe AER errors in the kernel log",
         "Uncorrected PCIe errors crash GPU jobs; many corrected ones point at a marginal link, riser or slot.",
         check_aer, manual="Reseat GPUs and risers; check firmware and BIOS PCIe settings."),
    Rule("SW-DRV-001", "software", "high", "Driver below minimum or outside the pinned branch",
         "Old drivers miss fixes and performance work; a node outside the fleet's pinned branch behaves "
         "differently from the others.", check_driver_version, role="nvidia_driver"),
    Rule("SW-CUDA-001", "software", "high", "CUDA toolkit newer than the driver supports",
         "Code built with a newer CUDA toolkit than the driver supports can fail to load (PTX JIT errors) or "
         "fall back to slower paths.", check_cuda_toolkit, role="nvidia_driver",
         manual="Upgrade the driver to a branch that supports the toolkit, or install a matching toolkit."),
    Rule("SW-KMOD-001", "software", "critical", "Kernel module and driver versions differ",
         "After a driver upgrade without a reboot the old kernel module stays loaded; NVML and CUDA then fail with "
         "'driver/library version mismatch'.", check_kernel_module, role="nvidia_driver",
         manual="Reboot, or unload and reload the nvidia modules when no process uses the GPUs."),
    Rule("SW-FM-001", "software", "critical", "Fabric manager version differs from the driver",
         "nvidia-fabricmanager must match the driver exactly; otherwise it does not start and NVSwitch-based "
         "systems (HGX) cannot run multi-GPU jobs.", check_fabricmanager, role="nvidia_driver"),
)

BY_ID = dict((r.id, r) for r in RULES)


def catalog():
    return [r.describe() for r in RULES]


def evaluate(facts, policy, rules=RULES):
    """Run every rule; each finding carries the rule's metadata. A rule that raises becomes status 'error'."""
    findings = []
    min_rank = _severity_rank(policy.get("min_severity") or "info")
    overrides = policy.get("rules") or {}
    for rule in rules:
        conf = overrides.get(rule.id) or {}
        severity = conf.get("severity") or rule.severity
        base = {"rule": rule.id, "area": rule.area, "title": rule.title, "fix": dict(rule.fix)}
        if conf.get("enabled") is False:
            res = skip("disabled by policy (rules.%s.enabled: false)" % rule.id)
        elif _severity_rank(severity) > min_rank:
            res = skip("severity %s is below policy min_severity %s" % (severity, policy.get("min_severity")))
        else:
            try:
                res = rule.check(facts, policy)
            except Exception as exc:  # a rule bug must not hide the other findings
                res = result("error", message="%s: %s" % (type(exc).__name__, exc))
        if not conf.get("severity") and res.get("severity"):
            severity = res["severity"]
        res.pop("severity", None)
        base.update(res)
        base["severity"] = severity
        findings.append(base)
    return findings


def summarize(findings):
    """Counts by status, and by severity and area for fail/warn findings."""
    out = {"by_status": dict((s, 0) for s in STATUSES),
           "by_severity": dict((s, 0) for s in SEVERITIES),
           "by_area": dict((a, 0) for a in AREAS)}
    for f in findings:
        out["by_status"][f["status"]] = out["by_status"].get(f["status"], 0) + 1
        if f["status"] in ("fail", "warn"):
            out["by_severity"][f["severity"]] += 1
            out["by_area"][f["area"]] += 1
    return out
