#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sysctl_settings
short_description: Set kernel parameters now and at boot through one gpufleet drop-in file, reporting who else sets them
version_added: "0.1.0"
description:
  - Writes C(settings) to a drop-in file owned by gpufleet (the whole file is managed) and applies them to the
    running kernel.
  - Before writing, reports every other sysctl file that sets the same keys, whether a later file overrides
    gpufleet's value at boot (for example C(/etc/sysctl.d/99-sysctl.conf)), and the active TuneD profile's
    sysctls.
  - Inside a network namespace or container some keys are global or read-only (C(net.core.rmem_max)); those are
    written to the file but reported under C(not_settable) with "must be set on the host" instead of failing.
author:
  - gpufleet contributors (@gpufleet)
options:
  settings:
    description: 'Kernel parameters and values, e.g. C({net.ipv4.tcp_rmem: "4096 131072 268435456"}).'
    type: dict
    required: true
  file:
    description: The drop-in file gpufleet owns.
    type: path
    default: /etc/sysctl.d/60-gpufleet.conf
  apply:
    description: Also set the values in the running kernel (C(/proc/sys)).
    type: bool
    default: true
  root:
    description: Root of the file system for C(/proc/sys) and the sysctl files (a mounted image or test tree).
    type: path
    default: /
  at_least:
    description:
      - Keys of C(settings) whose values are minimums. Where the running kernel already has a larger number (field
        by field, e.g. the maximum of C(net.ipv4.tcp_rmem)), that number is kept, in the kernel and in the file,
        instead of being lowered. Every key listed must be in C(settings).
    type: list
    elements: str
    default: []
  at_most:
    description:
      - Keys of C(settings) whose values are maximums (the mirror of O(at_least)). Where the running kernel already
        has a smaller number (an owner's C(vm.swappiness) 1 against a wanted 10), that number is kept, in the kernel
        and in the file, instead of being raised. Every key listed must be in C(settings), and not in O(at_least).
    type: list
    elements: str
    default: []
    version_added: "0.2.0"
  header:
    description: Comment written at the top of the file.
    type: str
    default: "Managed by gpufleet (gpufleet.tuning). Local changes will be overwritten."
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
notes:
  - Boot order follows systemd-sysctl and C(sysctl --system); the last file setting a key wins.
"""

EXAMPLES = r"""
- name: Host memory settings for GPU servers
  gpufleet.tuning.sysctl_settings:
    file: /etc/sysctl.d/60-gpufleet.conf
    settings:
      vm.swappiness: 10
      kernel.numa_balancing: 0
  become: true
  register: sysctl

- name: Show conflicts
  ansible.builtin.debug:
    var: sysctl.overridden
"""

RETURN = r"""
file:
  description: C(path) and whether its content C(changed).
  returned: always
  type: dict
runtime:
  description: Per key C(before), C(after) and C(changed) in the running kernel.
  returned: always
  type: dict
not_settable:
  description: Keys that cannot be set here, with the reason (for example read-only in a network namespace).
  returned: always
  type: dict
others:
  description: Per key, other sysctl files that set it, with their values.
  returned: always
  type: dict
overridden:
  description: Keys whose boot value comes from a later file with a different value (C(by), C(value)).
  returned: always
  type: dict
tuned:
  description: Active TuneD profile and the keys it sets that gpufleet also sets (null without TuneD).
  returned: always
  type: dict
kept:
  description: >-
    Keys of C(at_least) where the running value was larger, and of C(at_most) where it was smaller, with C(wanted),
    C(running) and C(kept).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback, sysctl


def main():
    module = AnsibleModule(
        argument_spec=dict(
            settings=dict(type="dict", required=True),
            file=dict(type="path", default="/etc/sysctl.d/60-gpufleet.conf"),
            apply=dict(type="bool", default=True),
            root=dict(type="path", default="/"),
            at_least=dict(type="list", elements="str", default=[]),
            at_most=dict(type="list", elements="str", default=[]),
            header=dict(type="str", default=sysctl.DEFAULT_HEADER),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    job = sysctl.SysctlSettings(module, sysctl.validate(module))
    job.plan()
    rollback.check_params(module)
    job.apply()
    module.exit_json(**job.result())


if __name__ == "__main__":
    main()
