#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
# This file only documents the local_guard action plugin (plugins/action/local_guard.py), which runs on the
# controller.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: local_guard
short_description: Refuse to change the controller unless the inventory says it is meant
version_added: "0.2.0"
description:
  - The first task of every gpufleet playbook that changes hosts (C(remediate.yml), C(rollback.yml),
    C(watch.yml), C(prereqs.yml), C(execution_node.yml)). It fails a host that is the machine Ansible runs on,
    unless the inventory sets C(gpufleet_allow_local_changes=true) for it.
  - A host is the controller when the task reaches it over the local connection (C(ansible_connection=local) in
    the inventory, C(connection=local) on the play, C(-c local) on the command line, the implicit localhost) or at
    a loopback address (C(localhost), 127.0.0.0/8, C(::1)). The connection Ansible really uses for the task is
    judged, not only the inventory's variable.
  - Without it, C(ansible-playbook playbooks/remediate.yml) without C(-i) would use C(ansible.cfg)'s inventory,
    localhost, and tune the controller.
  - C(gpufleet_allow_local_changes) accepts V(true) or V(false) (also yes/no, on/off, 1/0); any other value fails
    the host with a message naming the variable.
  - Tasks delegated to localhost later in the play (reports, downloads into the controller's cache) are not
    affected; only the host the play changes is judged.
  - Runs on the controller only; nothing is sent to the host.
author:
  - gpufleet contributors (@gpufleet)
options: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
attributes:
  check_mode:
    details: It refuses in check mode too, so that a preview shows the refusal the real run would meet.
notes:
  - C(gpufleet remediate) and C(gpufleet rollback) make the same check before any host is touched and exit 3.
  - Give the task C(any_errors_fatal=true) so that an inventory naming the controller by accident stops the play
    before anything changes on any host, and C(tags=[always]) so that C(--tags) cannot skip it.
"""

EXAMPLES = r"""
- name: Refuse to change the controller unless the inventory marks it (gpufleet_allow_local_changes)
  gpufleet.tuning.local_guard:
  any_errors_fatal: true
  tags: [always]

# In a lab inventory whose simulated hosts run on this machine:
# all:
#   vars:
#     ansible_connection: local
#     gpufleet_allow_local_changes: true
"""

RETURN = r"""
connection:
  description: The connection plugin the task uses for the host.
  returned: always
  type: str
  sample: local
address:
  description: The address Ansible connects to (C(ansible_host), else the inventory name).
  returned: always
  type: str
  sample: gpu01.example.com
local:
  description: Whether the host is the controller (local connection or a loopback address).
  returned: always
  type: bool
allowed:
  description: Whether the host may be changed (not the controller, or marked with C(gpufleet_allow_local_changes)).
  returned: always
  type: bool
"""
