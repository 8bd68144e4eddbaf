# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Rules of the RDMA fabric (area network): the InfiniBand and RoCE ports of /sys/class/infiniband
(``facts["rdma"]``, module_utils/rdma.py) - each up (NET-RDMA-001), at its rate (NET-RDMA-002), its error counters
still (NET-RDMA-003).

A multi-node job's collectives run at the pace of the slowest rail: one port down or trained at half its rate slows
every NCCL ring through the host, and a port whose link keeps recovering stalls them. The checks judge only what the
port itself reports; ports the policy excludes (``network.rdma.exclude``) are never judged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
from collections import Counter

from ansible_collections.gpufleet.tuning.plugins.module_utils.rdma import JUDGED
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import sources
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import Rule, result, skip

_EXCLUDE = "network.rdma.exclude"
_RATES = "network.rdma.expected_rate_gbps"


def _rdma_policy(pol):
    return (pol.get("network") or {}).get("rdma") or {}


def _excluded(port, globs):
    """The glob of ``network.rdma.exclude`` that matches the port (device, device/port or one of its netdevs)."""
    names = [port.get("device") or "", port.get("name") or ""] + list(port.get("netdevs") or [])
    for glob in globs or []:
        if any(fnmatch.fnmatchcase(name, glob) for name in names if name):
            return glob
    return None


def judged_ports(facts, pol):
    """(ports to judge, {port: why not judged}) or (None, why the rule skips)."""
    rdma = facts.get("rdma")
    if not isinstance(rdma, dict):
        return None, "RDMA facts not gathered"
    if not rdma.get("available"):
        return None, rdma.get("reason") or "no RDMA devices"
    ports = [p for p in rdma.get("ports") or [] if isinstance(p, dict)]
    if not ports:
        return None, rdma.get("reason") or "no RDMA ports"
    globs = _rdma_policy(pol).get("exclude")
    judged, skipped = [], {}
    for port in ports:
        glob = _excluded(port, globs)
        if glob:
            skipped[port["name"]] = "excluded (%s: %s)" % (_EXCLUDE, glob)
        else:
            judged.append(port)
    if not judged:
        return None, "every RDMA port is excluded (%s)" % _EXCLUDE
    return judged, skipped


def _is_ethernet(port):
    return (port.get("link_layer") or "").lower() == "ethernet"


# --- NET-RDMA-001: up ---------------------------------------------------------------------------------------------

def _why_down(port):
    """What an operator checks first for a port that is not ACTIVE + LinkUp."""
    state, phys = port.get("state"), port.get("phys_state")
    if _is_ethernet(port):
        netdev = (port.get("netdevs") or ["its netdev"])[0]
        return "%s is up but the port has no link (cable, transceiver, switch port, the bond's members)" % netdev
    if phys == "Disabled":
        return "the port is disabled (ibportstate/mlxlink enable, or the switch side disabled it)"
    if phys == "Polling":
        return "no physical link: cable unplugged or broken, transceiver failed, or the switch port down"
    if phys == "LinkUp" and state in ("INIT", "ARMED"):
        return "link up but not activated: no subnet manager has brought the port to ACTIVE (opensm/UFM)"
    if phys == "LinkErrorRecovery":
        return "the link is in error recovery (signal integrity: cable or transceiver)"
    return "not ACTIVE and LinkUp"


def check_ports_up(facts, pol):
    ports, skipped = judged_ports(facts, pol)
    if ports is None:
        return skip(skipped)
    observed, items, why = {}, [], []
    for port in ports:
        observed[port["name"]] = "%s / %s" % (port.get("state"), port.get("phys_state"))
        if _is_ethernet(port) and port.get("netdev_up") is False:
            skipped[port["name"]] = "%s administratively down" % (port.get("netdevs") or ["netdev"])[0]
            continue
        if port.get("state") == "ACTIVE" and port.get("phys_state") == "LinkUp":
            continue
        reason = _why_down(port)
        items.append({"nic": port["name"], "device": port["device"], "port": port["port"],
                      "state": port.get("state"), "phys_state": port.get("phys_state"),
                      "link_layer": port.get("link_layer"), "netdevs": port.get("netdevs") or [], "why": reason})
        why.append("%s %s/%s: %s" % (port["name"], port.get("state"), port.get("phys_state"), reason))
    for name, reason in skipped.items():
        observed[name] = reason
    expected = "every RDMA port ACTIVE / LinkUp (not judged: ports in %s, RoCE ports whose netdev is down)" % _EXCLUDE
    if items:
        return result("fail", observed, expected, "RDMA port(s) not up: " + "; ".join(why), items=items)
    judged = [p for p in ports if p["name"] not in skipped]
    if not judged:
        return skip("no RDMA port is expected up: " + "; ".join("%s %s" % kv for kv in sorted(skipped.items())))
    return result("pass", observed, expected, "%d RDMA port(s) ACTIVE / LinkUp" % len(judged))


# --- NET-RDMA-002: rate -------------------------------------------------------------------------------------------

def declared_rate(rates, port):
    """(Gb/s, key) that ``network.rdma.expected_rate_gbps`` declares for the port: device/port or device exactly,
    else the longest glob matching either (equal lengths: the first in sorted order). (None, None) when no key
    matches; (None, key) when the matching key is null (a host or group layer removing a broader one)."""
    names = [port["name"], port["device"]]
    for name in names:
        if name in rates:
            return rates[name], name
    matching = sorted((k for k in rates if any(fnmatch.fnmatchcase(n, k) for n in names)), key=lambda k: (-len(k), k))
    if not matching:
        return None, None
    return rates[matching[0]], matching[0]


def _majority(ports):
    """{link layer: (rate, count, of)}: the rate most of the host's ACTIVE ports of that link layer run at, where
    one rate is held by more ports than any other and by at least two."""
    out = {}
    by_layer = {}
    for port in ports:
        if port.get("state") == "ACTIVE" and port.get("rate_gbps"):
            by_layer.setdefault(port.get("link_layer") or "?", []).append(port["rate_gbps"])
    for layer, rates in by_layer.items():
        common = Counter(rates).most_common()
        if common[0][1] >= 2 and (len(common) == 1 or common[0][1] > common[1][1]):
            out[layer] = (common[0][0], common[0][1], len(rates))
    return out


def _gbps(value):
    return ("%g" % value) if value is not None else "?"


def check_port_rates(facts, pol):
    ports, skipped = judged_ports(facts, pol)
    if ports is None:
        return skip(skipped)
    rates = _rdma_policy(pol).get("expected_rate_gbps") or {}
    majority = _majority(ports)
    observed, expected, items, why, unknown = {}, {}, [], [], []
    for port in ports:
        if port.get("state") != "ACTIVE" or port.get("rate_gbps") is None:
            continue  # a port that is not up has no rate to judge (NET-RDMA-001 names it)
        name, rate = port["name"], port["rate_gbps"]
        observed[name] = port.get("rate") or "%s Gb/sec" % _gbps(rate)
        want, key = declared_rate(rates, port)  # a null key: as if nothing were declared for the port
        if want is not None:
            source = "%s.%s" % (_RATES, key)
        elif (port.get("link_layer") or "?") in majority:
            want, count, of = majority[port.get("link_layer") or "?"]
            source = "the host's %s ports: %d of %d at %s Gb/s" % (port.get("link_layer"), count, of, _gbps(want))
        else:
            unknown.append(name)
            continue
        expected[name] = ">= %s Gb/s (%s)" % (_gbps(want), source)
        if rate < want:
            items.append({"nic": name, "device": port["device"], "port": port["port"], "rate_gbps": rate,
                          "rate": port.get("rate"), "expected_gbps": want, "source": source})
            why.append("%s at %s Gb/s (%s), expected %s Gb/s (%s)" % (
                name, _gbps(rate), port.get("rate") or "?", _gbps(want), source))
    if not observed:
        return skip("no ACTIVE RDMA port reports a rate")
    if items:
        return result("fail", observed, expected, "RDMA port(s) below their rate, downtrained (width or speed): "
                      + "; ".join(why), items=items)
    if not expected:
        return skip("no expected rate for %s: declare %s (one port per link layer, or no majority rate)"
                    % (", ".join(unknown), _RATES))
    message = "%d RDMA port(s) at their expected rate" % len(expected)
    if unknown:
        message += "; no expected rate for %s (declare %s)" % (", ".join(unknown), _RATES)
    return result("pass", observed, expected, message)


# --- NET-RDMA-003: error counters ---------------------------------------------------------------------------------

def check_port_errors(facts, pol):
    ports, skipped = judged_ports(facts, pol)
    if ports is None:
        return skip(skipped)
    sampled = [p for p in ports if isinstance(p.get("deltas"), dict)]
    if not sampled:
        return skip("the RDMA port counters were read once (no sample window): no growth to judge")
    interval = (facts.get("rdma") or {}).get("interval_s")
    observed, items, why, blind = {}, [], [], []
    for port in sampled:
        name = port["name"]
        saturated = [c for c in port.get("saturated") or [] if c in JUDGED]
        grew = dict((c, d) for c, d in port["deltas"].items() if c in JUDGED and d and c not in saturated)
        totals = dict((c, v) for c, v in (port.get("counters") or {}).items() if c in JUDGED and v)
        observed[name] = {"grew": grew, "totals": totals, "saturated": saturated}
        if saturated:
            blind.append("%s %s" % (name, ", ".join(saturated)))
        if grew:
            items.append({"nic": name, "device": port["device"], "port": port["port"], "grew": grew,
                          "saturated": saturated})
            why.append("%s: %s" % (name, ", ".join("%s +%d" % kv for kv in sorted(grew.items()))))
    expected = "none of %s grows during the %s s sample window" % (", ".join(JUDGED), interval)
    note = ""
    if blind:
        note = ("; saturated, so blind to new errors until cleared (perfquery -R): %s" % "; ".join(blind))
    if items:
        severity = "high" if any("link_downed" in i["grew"] or "link_error_recovery" in i["grew"] for i in items) \
            else None
        return result("fail", observed, expected, "RDMA port error counters growing: " + "; ".join(why) + note,
                      items=items, severity=severity)
    if blind:
        return result("warn", observed, expected, "no error counter grew" + note, severity="low")
    return result("pass", observed, expected, "no error counter grew on %d RDMA port(s)" % len(sampled))


RULES = (
    Rule(
        "NET-RDMA-001",
        "network",
        "high",
        "RDMA port not ACTIVE / LinkUp",
        "Every InfiniBand or RoCE port of a GPU node carries a rail of the multi-node fabric: NCCL and MPI spread "
        "their rings over all of them, so a port that is DOWN (no cable, Polling; Disabled), or physically up but "
        "never activated by the subnet manager (INIT, ARMED), takes its GPUs off the fabric or forces their traffic "
        "onto the other rails. The kernel reports each port's logical state and physical state in "
        "/sys/class/infiniband; both must be ACTIVE and LinkUp. Ports the owner does not use are listed in "
        "network.rdma.exclude; a RoCE port whose netdev is administratively down is not judged.",
        check_ports_up,
        manual="Check the cable, transceiver and switch port (mlxlink -d <dev> -m; ibstat); a Disabled port: "
        "ibportstate <lid> <port> enable or the switch's port configuration; INIT/ARMED: start or fix the subnet "
        "manager (opensm, UFM). If the port is unused, add it to network.rdma.exclude.",
        policy_keys=(_EXCLUDE,),
        references=(sources.KERNEL_SYSFS_INFINIBAND, sources.AZURE_NHC_IB_RATE, sources.GPUD_INFINIBAND),
    ),
    Rule(
        "NET-RDMA-002",
        "network",
        "high",
        "RDMA port below its rate (downtrained)",
        "A port that trained at fewer lanes (2X instead of 4X) or a lower speed (HDR instead of NDR) is up but "
        "slow, and a collective runs at the pace of its slowest rail: one 200 Gb/s port among 400 Gb/s ones halves "
        "what the node's jobs get from the fabric. The rate each port must run at is declared per device, "
        "device/port or glob (network.rdma.expected_rate_gbps); where nothing is declared a port is held to the "
        "rate most of the host's ports of the same link layer run at (InfiniBand and a RoCE bond differ).",
        check_port_rates,
        manual="Reseat or replace the cable or transceiver, check the switch port's configured speed and width "
        "(mlxlink -d <dev> shows the negotiated and the enabled rates); declare the intended rate in "
        "network.rdma.expected_rate_gbps when the host's majority is not it.",
        policy_keys=(_EXCLUDE, _RATES),
        references=(sources.KERNEL_SYSFS_INFINIBAND, sources.AZURE_NHC_IB_RATE, sources.GPUD_INFINIBAND),
    ),
    Rule(
        "NET-RDMA-003",
        "network",
        "medium",
        "RDMA port error counters growing",
        "The port counters the InfiniBand specification defines for link health - link_downed, "
        "link_error_recovery, symbol_error, port_rcv_errors, local_link_integrity_errors, "
        "excessive_buffer_overrun_errors - are read twice, one audit sample window apart; a count left from "
        "earlier is history, a count that grows now is a link failing under the job (link_downed or "
        "link_error_recovery growing: a flapping link, high). These counters are 4 to 16 bits wide and stop at "
        "their maximum instead of wrapping: a saturated counter can no longer show new errors and is reported as "
        "a low warning, never judged as growing.",
        check_port_errors,
        manual="Check the cable and transceiver (mlxlink -d <dev> -c for the error and BER counters), the switch "
        "side of the link, and the kernel log for link flaps; after a repair clear the counters (perfquery -R).",
        policy_keys=(_EXCLUDE,),
        references=(sources.KERNEL_SYSFS_INFINIBAND, sources.KERNEL_IB_PMA_WIDTHS, sources.NVIDIA_IB_PORT_COUNTERS,
                    sources.NVIDIA_NVSENTINEL_LINK_COUNTERS, sources.AZURE_NHC_LINK_FLAPPING),
    ),
)
