#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sysfs_settings
short_description: Set sysfs attributes (CPU governor, transparent hugepages) now and record them for boot
version_added: "0.1.0"
description:
  - Writes each C(settings) value to every sysfs file its path pattern matches, when the current value differs.
  - Reads bracketed choices the way the kernel shows them (C(always [madvise] never) is C(madvise)).
  - Records the settings in C(config_file) (JSON) so the C(gpufleet-sysfs) boot unit installed by the
    M(gpufleet.tuning.host_tuning) role re-applies them; sysfs values do not survive a reboot.
  - A file that cannot be written here (read-only C(/sys) in a container) is reported under C(not_settable).
author:
  - gpufleet contributors (@gpufleet)
options:
  settings:
    description:
      - Sysfs path patterns (globs under C(/sys)) and the value each matching file must hold.
    type: dict
    required: true
  config_file:
    description: JSON file the boot unit reads; empty to not record anything.
    type: path
    default: /etc/gpufleet/sysfs.json
  root:
    description: Root of the file system (a mounted image or test tree).
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
"""

EXAMPLES = r"""
- name: Performance governor and THP madvise
  gpufleet.tuning.sysfs_settings:
    settings:
      /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor: performance
      /sys/kernel/mm/transparent_hugepage/enabled: madvise
  become: true
"""

RETURN = r"""
files:
  description: Per sysfs file C(before), C(after) and C(changed).
  returned: always
  type: dict
not_settable:
  description: Files that could not be written here, with the reason.
  returned: always
  type: dict
unmatched:
  description: Patterns that matched no file on this host (for example no cpufreq in a VM).
  returned: always
  type: list
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback, sysfs_settings


def main():
    module = AnsibleModule(
        argument_spec=dict(
            settings=dict(type="dict", required=True),
            config_file=dict(type="path", default="/etc/gpufleet/sysfs.json"),
            root=dict(type="path", default="/"),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    settings = sysfs_settings.validate(module)
    rollback.check_params(module)
    job = sysfs_settings.SysfsSettings(module, settings)
    job.plan()
    job.apply()
    module.exit_json(**job.result())


if __name__ == "__main__":
    main()
