# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: tcp_buffer_bytes
short_description: TCP buffer size for a host's long-haul links (factor x bandwidth-delay product, capped)
version_added: "0.1.0"
description:
  - Takes a list of links (C(rtt_ms), C(bandwidth_gbps)) and returns C(factor) times the largest bandwidth-delay
    product in bytes, at most C(cap) and at least C(floor); 0 when there is no link.
  - The same sizing rule NET-TCP-001 audits, so the role fixes exactly what the audit asks for.
options:
  _input:
    description: The links, each with C(rtt_ms) and C(bandwidth_gbps).
    type: list
    elements: dict
    required: true
  factor:
    description: Multiple of the bandwidth-delay product.
    type: float
    default: 4.0
  cap:
    description: Largest size returned (bytes).
    type: int
    default: 268435456
  floor:
    description: Smallest size returned when there is a link (bytes).
    type: int
    default: 6291456
"""

EXAMPLES = r"""
- name: Resolve the host's links as the audit does
  gpufleet.tuning.links_info:
    policy: "{{ gpufleet_policy }}"
  register: links

- name: Size buffers for the links the network rules judge
  ansible.builtin.set_fact:
    buffer: "{{ links.sized | gpufleet.tuning.tcp_buffer_bytes(4.0, 268435456) }}"
"""

RETURN = r"""
_value:
  description: Bytes.
  type: int
"""

from ansible.errors import AnsibleFilterError


def _links(value):
    if isinstance(value, list):
        return value
    raise AnsibleFilterError("tcp_buffer_bytes: expected a list of links, got %s" % type(value).__name__)


def tcp_buffer_bytes(value, factor=4.0, cap=268435456, floor=6291456):
    sizes = []
    for link in _links(value):
        try:
            rtt, bw = float(link["rtt_ms"]), float(link["bandwidth_gbps"])
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleFilterError(
                "tcp_buffer_bytes: a link needs numeric rtt_ms and bandwidth_gbps (%s)" % exc
            ) from exc
        if rtt <= 0 or bw <= 0:
            raise AnsibleFilterError("tcp_buffer_bytes: rtt_ms and bandwidth_gbps must be > 0")
        sizes.append(int(factor * rtt / 1000.0 * bw * 1e9 / 8))
    if not sizes:
        return 0
    return int(max(floor, min(max(sizes), cap)))


class FilterModule:
    def filters(self):
        return {"tcp_buffer_bytes": tcp_buffer_bytes}
