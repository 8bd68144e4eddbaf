#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: route_congctl
short_description: Per-route TCP congestion control to the long-haul peers' networks
version_added: "0.2.0"
description:
  - >-
    Gives the routes to O(prefixes) a congestion control (C(ip route replace PREFIX ... congctl bbr), per-route
    congestion control since Linux 4.0, kernel commit 81164413ad09 "net - tcp - add per route congestion control"),
    so connections to the long-haul peers use it while every other connection keeps the host's default
    (C(net.ipv4.tcp_congestion_control)). See ip-route(8), C(congctl).
  - A prefix that has a route of its own (same destination, main table) keeps its gateway, device, metric and source;
    a prefix reached through a wider route (usually the default route) gets a route of its own with the gateway and
    device C(ip route get) picks for it today, so the path does not change - only the congestion control does.
  - Changes only routes whose congestion control differs. Check mode reports the commands it would run.
  - With O(rollback_run_id), each route is recorded before it changes (kind C(route) - the route as C(ip -j route show
    exact) printed it, or its absence), so M(gpufleet.tuning.rollback) re-creates it as it was or deletes the route
    this module created. Metrics C(ip -j route) does not print as plain numbers (rtt, rttvar, rto_min) and C(lock)
    flags are not carried over by the replace.
  - Persistence (O(persist)) - the kernel forgets routes at reboot and when a network manager reconfigures the
    link, so the exact commands are written to a oneshot systemd unit (C(gpufleet-route-congctl.service), ordered
    after C(network-online.target)) that replays them at boot. A network manager that later flushes routes it does
    not own (systemd-networkd with C(ManageForeignRoutes=yes) on restart) removes them until the unit or this
    module runs again; declare them in the network manager instead where that matters. The unit is written, not
    enabled - enable it with M(ansible.builtin.systemd_service) (the network_tuning role does).
author:
  - gpufleet contributors (@gpufleet)
options:
  persist:
    description: Write the commands to the boot unit.
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
  - gpufleet.tuning.route_congctl
"""

EXAMPLES = r"""
- name: BBR only towards the other regions; local traffic keeps cubic
  gpufleet.tuning.route_congctl:
    prefixes: [198.51.100.0/24, 2001:db8:100::/48]
    congestion_control: bbr
  become: true
"""

RETURN = r"""
routes:
  description: >-
    Per routed prefix, C(before) and C(after) congestion control (null - none set), the C(command), whether the
    prefix had a route of its own (C(own_route)) and whether it C(change)s.
  returned: always
  type: list
  elements: dict
commands:
  description: The C(ip route replace) commands run (or that would run in check mode).
  returned: always
  type: list
  elements: str
unrouted:
  description: Prefixes this host has no route to (left alone, with a warning), with the C(error).
  returned: always
  type: list
  elements: dict
unit:
  description: C(path) of the boot unit and whether it C(changed) (C(path) null when O(persist=false)).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback, route_congctl


def main():
    module = AnsibleModule(
        argument_spec=dict(
            persist=dict(type="bool", default=True),
            **route_congctl.ARGUMENT_SPEC,
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    rollback.check_params(module)
    networks = route_congctl.validate(module)
    ip_bin = module.get_bin_path("ip", required=True)
    job = route_congctl.RouteCongctl(module, networks, ip_bin)
    job.plan()
    job.apply()
    module.exit_json(**job.result())


if __name__ == "__main__":
    main()
