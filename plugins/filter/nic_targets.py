# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: nic_targets
short_description: What M(gpufleet.tuning.nic_settings) should set on one NIC, field by field
version_added: "0.2.0"
description:
  - Takes a NIC as M(gpufleet.tuning.nic_info) reports it and returns the C(mtu), C(offloads) and C(rings)
    arguments for M(gpufleet.tuning.nic_settings), each only when it should be passed.
  - MTU - an explicit O(mtu) is set as given; otherwise what NET-MTU-001 judges, by the audit's own function
    (rules.network.mtu_expectation) - the MTU O(mtu_policy) declares for the NIC's name or glob is set exactly
    (raised or lowered to the network's MTU), else the NIC is raised to O(min_mtu) when below it and never lowered;
    with neither declared the MTU is left alone (the audit then flags only an MTU below 1280, and only the
    operator knows the network's MTU). Offloads - only features the NIC has and can change.
  - Rings - C(max) or a number per side, only on a NIC whose receive-ring drop counters NET-RING-001 flags
    (rules.network.ring_drops - growing between the two readings, or counted since the driver loaded), unless
    O(rings_only_with_drops=false) makes it a sizing choice.
  - Fields in O(apply) get their target. Fields in O(keep) (enabled, but not selected by the run's tags) are
    passed only where the NIC already has the target, so the call changes nothing on them and the boot-time
    persistence that nic_settings writes still carries them (it writes all the fields of one call to one file).
  - Fields in neither are left out.
options:
  _input:
    description: The NIC (an element of C(nic_info)'s C(network.nics)).
    type: dict
    required: true
  mtu:
    description: Explicit MTU (a user's variable); null to use O(min_mtu).
    type: int
  mtu_policy:
    description: The policy's C(network.mtu) (name or glob to MTU).
    type: dict
  min_mtu:
    description: The policy's C(network.min_mtu) (null - none).
    type: int
  offloads:
    description: Feature (ethtool -k long name) to wanted state.
    type: dict
  offloads_known_only:
    description: Drop features the NIC does not have or cannot change (true for the policy's list).
    type: bool
    default: true
  rings:
    description: C(rx), C(tx) to C(max) or a number.
    type: dict
  rings_only_with_drops:
    description: Pass rings only for a NIC with ring-drop evidence (what NET-RING-001 flags).
    type: bool
    default: true
  apply:
    description: Fields to set (C(mtu), C(offloads), C(rings)).
    type: list
    elements: str
  keep:
    description: Fields to pass only where already at target.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: One NIC's settings
  gpufleet.tuning.nic_settings: "{{ {'name': nic.name} | combine(nic | gpufleet.tuning.nic_targets(min_mtu=9000,
    offloads={'generic-receive-offload': true}, apply=['mtu', 'offloads'])) }}"
"""

RETURN = r"""
_value:
  description: A dict with some of C(mtu), C(offloads), C(rings).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.network import mtu_expectation, ring_drops

FIELDS = ("mtu", "offloads", "rings")


def _mtu(nic, mtu, mtu_policy, min_mtu):
    current = nic.get("mtu")
    if mtu is not None:
        return int(mtu)
    exp = mtu_expectation({"mtu": mtu_policy or {}, "min_mtu": min_mtu}, nic["name"])
    if exp["kind"] == "exact":
        return exp["value"]  # the network's MTU: set exactly, as NET-MTU-001 judges it
    if exp["kind"] == "min" and (current is None or int(current) <= exp["value"]):
        return exp["value"]
    return None  # above the fabric's floor (never lowered), or nothing declared: not ours to choose


def _offloads(nic, offloads, known_only):
    current = nic.get("offloads") or {}
    fixed = set(nic.get("offloads_fixed") or [])
    out = {}
    for feature, value in (offloads or {}).items():
        if known_only and (feature not in current or feature in fixed):
            continue
        out[str(feature)] = bool(value)
    return out


def _rings(nic, rings):
    current = nic.get("rings") or {}
    out = {}
    for side, value in (rings or {}).items():
        if side not in ("rx", "tx"):
            raise AnsibleFilterError("nic_targets: rings.%s: unknown side (allowed: rx, tx)" % side)
        out[side] = value
    return out, current


def nic_targets(
    nic,
    mtu=None,
    min_mtu=None,
    offloads=None,
    offloads_known_only=True,
    rings=None,
    apply=None,
    keep=None,
    mtu_policy=None,
    rings_only_with_drops=True,
):
    if not isinstance(nic, dict) or not nic.get("name"):
        raise AnsibleFilterError("nic_targets: expected a NIC from nic_info (a dict with a name), got %r" % (nic,))
    apply, keep = list(apply or []), list(keep or [])
    for field in apply + keep:
        if field not in FIELDS:
            raise AnsibleFilterError("nic_targets: unknown field %r (allowed: %s)" % (field, ", ".join(FIELDS)))
    out = {}
    if "mtu" in apply or "mtu" in keep:
        target = _mtu(nic, mtu, mtu_policy, min_mtu)
        if target is not None and ("mtu" in apply or nic.get("mtu") == target):
            out["mtu"] = target
    if "offloads" in apply or "offloads" in keep:
        target = _offloads(nic, offloads, offloads_known_only)
        if "offloads" not in apply:
            current = nic.get("offloads") or {}
            target = {k: v for k, v in target.items() if current.get(k) == v}
        if target:
            out["offloads"] = target
    if "rings" in apply or "rings" in keep:
        target, current = _rings(nic, rings)
        evidence = ring_drops(nic)
        # No ring drops: NET-RING-001 does not flag this NIC, so its rings are not changed (passed only where they
        # already are at the target, so the persistence file keeps them).
        unflagged = rings_only_with_drops and (evidence is None or evidence["status"] == "pass")
        if "rings" not in apply or unflagged:
            kept = {}
            for side, value in target.items():
                want = current.get(side + "_max") if value == "max" else value
                if want is not None and current.get(side) is not None and int(current[side]) == int(want):
                    kept[side] = value
            target = kept
        if target:
            out["rings"] = target
    return out


class FilterModule:
    def filters(self):
        return {"nic_targets": nic_targets}
