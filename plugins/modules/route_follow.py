#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: route_follow
short_description: TCP congestion control to the long-haul peers' networks that follows the routing table
version_added: "0.2.0"
description:
  - >-
    Connections to O(prefixes) use O(congestion_control) (per-route C(congctl), Linux 4.0) while every other
    connection keeps the host's default, without pinning a route - the main table is never changed. Each prefix gets
    a policy rule (C(ip rule add to PREFIX lookup TABLE pref PRIORITY), just before the main table's rule, after the
    owner's policy rules) into a table of gpufleet's own (O(table)), which holds for each prefix a copy of the main
    table's route the kernel would use for it (the longest covering route - usually the default route - with its
    gateway, ECMP nexthops or nexthop object, device, scope, source and metrics, and any more specific main-table
    route inside the prefix) with C(congctl) added.
  - The copies are made now and kept in line by C(gpufleet-route-follow.service), written by this module, which runs
    C(route_follow.py watch) (from O(lib_dir), installed by the network_tuning role) - C(ip monitor route rule),
    re-deriving the copies after every route or rule change and every 5 minutes - so a new gateway, a failover or a
    changed ECMP set reaches the peers' connections at once. When the service stops, C(route_follow.py clear)
    removes the rules and empties the table, and the peers' traffic follows the main table with the default.
  - A network manager that removes rules and routes it does not own when it restarts (systemd-networkd's
    C(ManageForeignRoutingPolicyRules) and C(ManageForeignRoutes)) gets them back from the service at once - the
    removal is itself a route event.
  - A prefix the main table has no route for gets its rule only (lookups fall through to the main table), with a
    warning. Policy rules of the owner's with a priority below O(priority) that match the peers take precedence; the
    audit (NET-TCP-002 with scope follow) judges the route the kernel really uses (C(ip route get)).
  - With O(rollback_run_id), the table (kind C(route_table)) and the config and unit files are recorded before they
    change, so M(gpufleet.tuning.rollback) stops the service, removes the rules and the table's routes and the files.
  - The unit is written, not enabled or started - the network_tuning role does both.
author:
  - gpufleet contributors (@gpufleet)
options:
  table:
    description: The routing table of gpufleet's own (a table id the host does not use otherwise).
    type: int
    default: 7250
  priority:
    description: Priority of the policy rules (below the main table's 32766, above the owner's rules).
    type: int
    default: 32765
  config_path:
    description: The service's configuration (JSON - prefixes, congestion control, table, priority).
    type: path
    default: /etc/gpufleet/route-follow.json
  lib_dir:
    description: Directory holding C(route_follow.py) and C(routes.py) on the host (the unit's program).
    type: path
    default: /usr/local/lib/gpufleet
  python:
    description: The Python 3 interpreter the unit runs the program with.
    type: path
    default: /usr/bin/python3
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
  - gpufleet.tuning.route_congctl
"""

EXAMPLES = r"""
- name: BBR towards the other regions, following the routing table; local traffic keeps cubic
  gpufleet.tuning.route_follow:
    prefixes: [198.51.100.0/24, 2001:db8:100::/48]
    congestion_control: bbr
  become: true
"""

RETURN = r"""
commands:
  description: The C(ip rule) and C(ip route) commands run (or that would run in check mode).
  returned: always
  type: list
  elements: str
unrouted:
  description: Prefixes the main table has no route for (their rule only, with a warning).
  returned: always
  type: list
  elements: str
table:
  description: The table of gpufleet's own.
  returned: always
  type: int
files:
  description: The files written (or that would be) - the config and the unit.
  returned: always
  type: list
  elements: str
unit:
  description: C(path) of the unit and whether it C(changed).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback, route_congctl


def main():
    module = AnsibleModule(
        argument_spec=dict(
            table=dict(type="int", default=7250),
            priority=dict(type="int", default=32765),
            config_path=dict(type="path", default="/etc/gpufleet/route-follow.json"),
            lib_dir=dict(type="path", default="/usr/local/lib/gpufleet"),
            python=dict(type="path", default="/usr/bin/python3"),
            **route_congctl.ARGUMENT_SPEC,
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    rollback.check_params(module)
    p = module.params
    if not 1 <= p["table"] < 2**32 or p["table"] in (253, 254, 255):
        module.fail_json(msg="table: %s is not allowed: give 1 to 4294967295 except 253-255 (default, main, "
                         "local)" % p["table"])  # fmt: skip
    if not 1 <= p["priority"] <= 32765:
        module.fail_json(msg="priority: %s is not allowed: give 1 to 32765 (before the main table's rule)"
                         % p["priority"])  # fmt: skip
    networks = route_congctl.validate(module)
    job = route_congctl.RouteFollow(module, networks, module.get_bin_path("ip", required=True))
    job.plan()
    job.apply()
    module.exit_json(**job.result())


if __name__ == "__main__":
    main()
