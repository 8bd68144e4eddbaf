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
  - MTU - an explicit O(mtu) is set as given; otherwise the NIC is raised to O(min_mtu) when below it and never
    lowered (the NET-MTU-001 threshold). Offloads - only features the NIC has and can change. Rings - C(max) or a
    number per side.
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
  min_mtu:
    description: The policy's C(network.min_mtu).
    type: int
    default: 1500
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

FIELDS = ("mtu", "offloads", "rings")


def _mtu(nic, mtu, min_mtu):
    current = nic.get("mtu")
    if mtu is not None:
        return int(mtu)
    if current is None or int(current) <= int(min_mtu):
        return int(min_mtu)
    return None  # above the policy's minimum: never lowered, not ours


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
    nic, mtu=None, min_mtu=1500, offloads=None, offloads_known_only=True, rings=None, apply=None, keep=None
):
    if not isinstance(nic, dict) or not nic.get("name"):
        raise AnsibleFilterError("nic_targets: expected a NIC from nic_info (a dict with a name), got %r" % (nic,))
    apply, keep = list(apply or []), list(keep or [])
    for field in apply + keep:
        if field not in FIELDS:
            raise AnsibleFilterError("nic_targets: unknown field %r (allowed: %s)" % (field, ", ".join(FIELDS)))
    out = {}
    if "mtu" in apply or "mtu" in keep:
        target = _mtu(nic, mtu, min_mtu)
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
        if "rings" not in apply:
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
